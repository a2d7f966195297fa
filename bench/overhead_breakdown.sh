#!/usr/bin/env bash
# Where the cost of `cuprobe trace` goes on the launch-bound loop: each
# configuration switches one part off (CUPROBE_DIAG is a diagnostic switch of
# the hook, not a user setting). Rounds are interleaved; ratios are against
# the native run of this same call.
#
#   bench/overhead_breakdown.sh [RESULTS_DIR]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CUPROBE_BUILD_DIR:-$root/build}"
results="${1:-${OUT:-$root/bench-results}}"
mkdir -p "$results"
rounds="${CUPROBE_BENCH_ROUNDS:-3}"
launches="${CUPROBE_BENCH_LAUNCHES:-100000}"
tsv="$results/breakdown.tsv"
: > "$tsv"
cuprobe="$build/bin/cuprobe"
loop="$build/bench/launch_loop"
tmp="$(mktemp -d)"

case_() {  # name, env..., --, command...
  local name=$1; shift
  local envs=()
  while [[ "$1" != "--" ]]; do envs+=("$1"); shift; done
  shift
  timeout 300 env "${envs[@]}" "$@" >/dev/null 2>"$tmp/err"
  local s; s=$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' "$tmp/err" | tail -1)
  if [[ -n "$s" ]]; then printf '%s\t%s\n' "$name" "$s" >> "$tsv"; else
    echo "breakdown: $name failed: $(tail -3 "$tmp/err")" >&2; fi
}
trace() { echo "$cuprobe" trace --format json -o "$tmp/t" "$@" --; }

for ((r = 0; r < rounds; r++)); do
  case_ native X=1 -- "$loop" "$launches"
  case_ all X=1 -- $(trace) "$loop" "$launches"
  case_ all.no_launch_records CUPROBE_DIAG=no-launch-records -- $(trace) "$loop" "$launches"
  case_ all.no_kernel_records CUPROBE_DIAG=no-kernel-records -- $(trace) "$loop" "$launches"
  case_ all.no_timestamps CUPROBE_DIAG=no-timestamps -- $(trace) "$loop" "$launches"
  case_ launches X=1 -- $(trace --trace launches) "$loop" "$launches"
  case_ kernels X=1 -- $(trace --trace kernels) "$loop" "$launches"
  case_ kernels.no_kernel_records CUPROBE_DIAG=no-kernel-records -- $(trace --trace kernels) "$loop" "$launches"
  case_ standalone.all X=1 -- env CUDA_INJECTION64_PATH="$build/lib/libcuprobe_hook.so" CUPROBE_OUTPUT="$tmp/s.json" "$loop" "$launches"
done
python3 - "$tsv" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, s = line.split("\t")
    rows[name].append(float(s))
b = statistics.median(rows["native"])
print("| configuration | runs | median s | ratio vs native |")
print("| --- | --- | --- | --- |")
for name in rows:
    m = statistics.median(rows[name])
    print("| %s | %d | %.4f | %.3f |" % (name, len(rows[name]), m, m / b))
PY
rm -rf "$tmp"
