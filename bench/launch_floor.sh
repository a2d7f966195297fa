#!/usr/bin/env bash
# On the GPU machine: what recording every launch costs the launch loop,
# against the floor CUPTI sets for any tracer built on its callbacks.
#
#   bench/launch_floor.sh [RESULTS_DIR]
#
# In one call, rounds interleaved (CUPROBE_BENCH_ROUNDS, default 5), each
# against its own native run:
#  - the floor, outside the hook (bench/experiments/launch_activity.cu):
#    a CUPTI subscriber with no callback enabled (`subscribed`), launch
#    callbacks that only count (`callbacks_empty`), and ones that take a
#    timestamp at ENTER and EXIT (`callbacks_only`);
#  - the hook with `--trace launches`: as shipped; callbacks that only count
#    (CUPROBE_DIAG=no-launch-records); no timestamps (no-timestamps); a
#    capture range never opened (callbacks fire, no record passes the range
#    check); and `cuprobe run` with the empty probe (no late attach).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init launch_floor.tsv "${1:-}"
rounds="${CUPROBE_BENCH_ROUNDS:-5}"
launches="${CUPROBE_BENCH_LAUNCHES:-100000}"
loop="$build/bench/launch_loop"
exe="$tmp/launch_activity"
bench_build_launch_activity "$exe" || exit 1

# (bench_case runs its command through env: an array, not a function.)
trace=("$cuprobe" trace --trace launches --format json -o "$tmp/t")
for ((r = 0; r < rounds; r++)); do
  for mode in native subscribed callbacks_empty callbacks_only; do
    bench_case "floor.$mode" -- "$exe" time "$mode" "$launches"
  done
  bench_case hook.native -- "$loop" "$launches"
  bench_case hook.launches -- "${trace[@]}" -- "$loop" "$launches"
  bench_case hook.launches_no_records CUPROBE_DIAG=no-launch-records -- "${trace[@]}" -- "$loop" "$launches"
  bench_case hook.launches_no_timestamps CUPROBE_DIAG=no-timestamps -- "${trace[@]}" -- "$loop" "$launches"
  bench_case hook.launches_range_none -- "${trace[@]}" -c cudaProfilerApi -- "$loop" "$launches"
  bench_case hook.run_empty_probe -- "$cuprobe" run --quiet --trace launches \
    -p "$build/probes/empty.cpb" --format json -o "$tmp/r" -- "$loop" "$launches"
done
"${trace[@]}" -- "$loop" "$launches" > /dev/null 2>&1
bench_recorded "--trace launches" "$tmp/t.json"
bench_empty_probe_instruments "$loop"
bench_table "launch loop (${launches} launches)"
