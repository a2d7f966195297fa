#!/usr/bin/env bash
# libFuzzer campaigns over the parsers of untrusted bytes, built with clang-19,
# AddressSanitizer and UndefinedBehaviorSanitizer (CUPROBE_BUILD_FUZZERS,
# CUPROBE_SANITIZE=address;undefined) in their own build folder. Each target
# starts from its committed seed corpus (copied: the seeds stay as they are)
# and runs a fixed number of executions on one core; any crash, leak or
# sanitizer report fails the target and leaves the input under the output
# folder. The log of every campaign, with the compiler and flags, goes to
# OUT/summary.txt (docs/RELIABILITY.md quotes it).
#
#   scripts/fuzz.sh [TARGET...]     targets: image ptx bpf_object bundle maps_region segment
#                                            ring_pump trace_records
#                                   (default: all)
#   CUPROBE_FUZZ_RUNS=1000000       executions per target (default 1,000,000)
#   CUPROBE_FUZZ_DIR=build/fuzz     build folder; CUPROBE_FUZZ_OUT=build/fuzz/campaigns
#   CUPROBE_BUILD_DIR=build         the main build, whose probe objects seed bpf_object/bundle
#
# Example: CUPROBE_FUZZ_RUNS=100000 scripts/fuzz.sh segment bundle
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
  -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
build="${CUPROBE_FUZZ_DIR:-$root/build/fuzz}"
main="${CUPROBE_BUILD_DIR:-$root/build}"
out="${CUPROBE_FUZZ_OUT:-$build/campaigns}"
runs="${CUPROBE_FUZZ_RUNS:-1000000}"
all=(image ptx bpf_object bundle maps_region segment ring_pump trace_records oneliner)
targets=("${@:-${all[@]}}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz: unknown target '$t' (one of: ${all[*]})" >&2; exit 64; }
done
command -v clang++-19 >/dev/null || { echo "fuzz: clang++-19 is needed (apt install clang-19)" >&2; exit 1; }

echo "fuzz: configuring $build (clang-19, address;undefined, libFuzzer)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
      -DCUPROBE_BUILD_FUZZERS=ON "-DCUPROBE_SANITIZE=address;undefined" >/dev/null
bins=()
for t in "${targets[@]}"; do bins+=("${t}_fuzz"); done
[[ " ${targets[*]} " == *" maps_region "* ]] && bins+=(cuprobe_maps_region_seeds)
echo "fuzz: building ${bins[*]}"
cmake --build "$build" -j "$(nproc)" --target "${bins[@]}"

seeds_of() {  # target -> seed folders
  case $1 in
    image) echo "$root/tests/corpus/image" ;;
    ptx) echo "$root/tests/corpus/ptx $root/tests/ptx_rewriter/golden" ;;
    # Plus the reference probes' objects and bundles of the main build
    # (tests/compiler: clang-19 and `cuprobe compile`), when it has them.
    bpf_object) echo "$root/tests/corpus/bpf_object $main/tests/compiler/corpus/bpf_object" ;;
    bundle) echo "$root/tests/corpus/bundle $main/tests/compiler/corpus/bundle" ;;
    maps_region) echo "$build/tests/fuzz/maps_region_seeds" ;;
    segment) echo "$root/tests/corpus/segment" ;;
    ring_pump) echo "$root/tests/corpus/ring_pump" ;;
    trace_records) echo "$root/tests/corpus/trace_records" ;;
  esac
}
mkdir -p "$out"
summary="$out/summary.txt"
{
  echo "== $(date -u +%FT%TZ) commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "== $(clang++-19 --version | head -1); -fsanitize=fuzzer,address,undefined" \
       "-fno-sanitize-recover=all; $runs executions per target, one core each"
} >> "$summary"
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
fails=0
for t in "${targets[@]}"; do
  work="$out/$t"
  rm -rf "$work/corpus"
  mkdir -p "$work/corpus" "$work/artifacts"
  for s in $(seeds_of "$t"); do
    [[ -d "$s" ]] && find "$s" -maxdepth 1 -type f -exec cp -t "$work/corpus" {} +
  done
  start=$(date +%s)
  extra=()
  [[ $t == ptx && -f "$root/tests/fuzz/ptx.dict" ]] && extra+=("-dict=$root/tests/fuzz/ptx.dict")
  if "$build/bin/${t}_fuzz" "$work/corpus" -runs="$runs" -rss_limit_mb=4096 -timeout=60 \
       "${extra[@]}" -artifact_prefix="$work/artifacts/" > "$work/log.txt" 2>&1; then
    verdict="ok  "
  else
    verdict="FAIL"
    fails=$((fails + 1))
  fi
  secs=$(( $(date +%s) - start ))
  done_line=$(grep -E "^Done [0-9]+ runs" "$work/log.txt" | tail -1 || true)
  line="$verdict $t: ${done_line:-no 'Done' line (see $work/log.txt)}; $secs s;" 
  line+=" $(ls "$work/corpus" | wc -l) corpus units; artifacts: $(ls "$work/artifacts" | wc -l)"
  echo "fuzz: $line"
  echo "$line" >> "$summary"
  [[ $verdict == FAIL ]] && grep -E "ERROR: |runtime error|SUMMARY|deadly" "$work/log.txt" | head -10
done
[[ $fails -eq 0 ]] || { echo "fuzz: $fails target(s) failed; inputs under $out/*/artifacts"; exit 1; }
echo "fuzz: all clean ($summary)"
