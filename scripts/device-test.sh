#!/usr/bin/env bash
# Runs every GPU test, smoke test and (with --bench) benchmark on the GPU
# machine, from a build folder made on a build machine. Writes JUnit XML and
# logs to the results folder and prints a short summary. Every program runs
# under `timeout`, so a hang costs its own limit only.
#
#   scripts/device-test.sh [--bench] [--only REGEX] [RESULTS_DIR]
#                                          (default RESULTS_DIR: $OUT or ./device-results)
#
#   --only REGEX   run only the test binaries whose names match (bash regex),
#                  then the smoke test and the trace of vec_add as always.
#   The hook's settings pass through the environment, so a whole suite can
#   run under one, e.g. launch records from API activity:
#     CUPROBE_LAUNCH_TIMES=activity scripts/device-test.sh --only 'trace_test|samples_test'
#
# Through the device tool, with build/ carried:
#   run(command="scripts/device-test.sh", carry=["build"])
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench=0
only=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bench) bench=1; shift ;;
    --only)
      [[ $# -ge 2 ]] || { echo "device-test.sh: --only needs a regex" >&2; exit 2; }
      only="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "device-test.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
results="${1:-${OUT:-$root/device-results}}"
build="${CUPROBE_BUILD_DIR:-$root/build}"
export CUPROBE_BUILD_DIR="$build" CUPROBE_SOURCE_DIR="$root"
mkdir -p "$results/logs"
summary="$results/summary.txt"
: > "$summary"
fails=0

say() { echo "$*" | tee -a "$summary"; }

say "== device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
say "== host: $(uname -srm), $(nproc) cores; build: $build"
[[ -n "$only" ]] && say "== only test binaries matching: $only"
env | grep -E '^CUPROBE_' | grep -vE '^CUPROBE_(BUILD|SOURCE)_DIR=' | sort | sed 's/^/== env: /' | tee -a "$summary"

# 1. Every test binary (unit tests also run here: some have a with-driver path).
for t in "$build"/tests/*; do
  [[ -x "$t" && -f "$t" ]] || continue
  name=$(basename "$t")
  [[ -z "$only" || "$name" =~ $only ]] || continue
  timeout 600 "$t" --gtest_output="xml:$results/logs/$name.xml" > "$results/logs/$name.log" 2>&1
  rc=$?
  line=$(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$results/logs/$name.log" | tr '\n' ' ')
  skipped=$(grep -cE '^\[  SKIPPED \] .*\([0-9]+ ms\)' "$results/logs/$name.log")
  if [[ $rc -ne 0 ]]; then
    fails=$((fails + 1))
    say "FAIL $name (rc=$rc) $line"
    grep -E '^\[  FAILED  \]|Failure|error' "$results/logs/$name.log" | head -20 | tee -a "$summary"
  else
    say "ok   $name $line skipped=$skipped"
  fi
done

# 1b. cupti_hook/sanitizer_api.h against the real Compute Sanitizer headers
# (only the GPU machine has them).
san_inc=/usr/local/cuda/compute-sanitizer/include
if [[ -f "$san_inc/sanitizer.h" ]]; then
  if g++ -std=c++20 -I"$root" -I/usr/local/cuda/include -I/usr/local/cuda/extras/CUPTI/include \
       -I"$san_inc" \
       "$root/tests/gpu/sanitizer_layout_check.cc" -o "$results/logs/sanitizer_layout_check" \
       > "$results/logs/sanitizer_layout_check.log" 2>&1 \
     && "$results/logs/sanitizer_layout_check" >> "$results/logs/sanitizer_layout_check.log"; then
    say "ok   sanitizer_layout_check"
  else
    fails=$((fails + 1))
    say "FAIL sanitizer_layout_check"
    head -20 "$results/logs/sanitizer_layout_check.log" | tee -a "$summary"
  fi
fi

# 1c. Whether a Sanitizer driver-API callback can swap a module's image at
# the load's ENTER (what --backend auto needs to keep rewriting PTX kernels
# under the patch backend): a fact of the driver, reported, not asserted.
if [[ -f "$san_inc/sanitizer.h" ]]; then
  swap_src="$root/tests/gpu/sanitizer_image_swap.cc"
  san_lib="$(dirname "$san_inc")"
  if g++ -std=c++20 -shared -fPIC -DSWAP_INJECTION -I/usr/local/cuda/include \
       -I/usr/local/cuda/extras/CUPTI/include -I"$san_inc" "$swap_src" \
       -o "$results/logs/libsanitizer_swap.so" -L"$san_lib" -lsanitizer-public \
       -Wl,-rpath,"$san_lib" > "$results/logs/sanitizer_swap.log" 2>&1 \
     && g++ -std=c++20 -I/usr/local/cuda/include "$swap_src" -o "$results/logs/sanitizer_swap_app" \
       -L/usr/local/cuda/lib64/stubs -lcuda >> "$results/logs/sanitizer_swap.log" 2>&1 \
     && CUDA_INJECTION64_PATH="$results/logs/libsanitizer_swap.so" timeout 60 \
       "$results/logs/sanitizer_swap_app" > "$results/logs/sanitizer_swap.out" \
       2>> "$results/logs/sanitizer_swap.log"; then
    say "info sanitizer image swap at load ENTER (2 = swapped): $(cat "$results/logs/sanitizer_swap.out")"
  else
    fails=$((fails + 1))
    say "FAIL sanitizer image swap check"
    tail -20 "$results/logs/sanitizer_swap.log" | tee -a "$summary"
  fi
fi

# 2. Smoke: vec_add with and without the hook; output and exit code unchanged.
vec="$build/samples/vec_add"
hook="$build/lib/libcuprobe_hook.so"
timeout 120 "$vec" 1048576 10 > "$results/logs/native.out" 2> "$results/logs/native.err"
native_rc=$?
CUPROBE_LOG=info CUDA_INJECTION64_PATH="$hook" timeout 120 "$vec" 1048576 10 \
  > "$results/logs/hooked.out" 2> "$results/logs/hooked.err"
hooked_rc=$?
if [[ $native_rc -eq $hooked_rc ]] && cmp -s "$results/logs/native.out" "$results/logs/hooked.out" \
   && grep -q "hook ready" "$results/logs/hooked.err"; then
  say "ok   smoke: vec_add under the hook: rc=$hooked_rc, stdout identical"
else
  fails=$((fails + 1))
  say "FAIL smoke: native rc=$native_rc hooked rc=$hooked_rc"
fi
say "     app stdout: $(cat "$results/logs/hooked.out")"
say "     hook stderr: $(tr '\n' '|' < "$results/logs/hooked.err")"

# 3. The main job, if the CLI has `trace`.
if [[ -x "$build/bin/cuprobe" ]] && "$build/bin/cuprobe" trace --help >/dev/null 2>&1; then
  (cd "$results/logs" && timeout 300 "$build/bin/cuprobe" trace -o vec_add \
     --format table,json,csv,chrome -- "$vec" 1048576 100 > trace.out 2> trace.err)
  rc=$?
  if [[ $rc -eq 0 ]]; then say "ok   cuprobe trace vec_add"; else fails=$((fails + 1)); say "FAIL cuprobe trace vec_add rc=$rc"; fi
  sed -n '1,20p' "$results/logs/trace.err" | tee -a "$summary"
fi

# 4. Benchmarks.
if (( bench )) && [[ -x "$root/bench/run.sh" ]]; then
  timeout 540 "$root/bench/run.sh" "$results" 2>&1 | tee -a "$summary"
fi

say "== $fails failure(s)"
tar -C "$results" -czf "$results/logs.tar.gz" logs && rm -rf "$results/logs"
exit $(( fails > 0 ))
