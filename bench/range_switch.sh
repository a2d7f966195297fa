#!/usr/bin/env bash
# What opening and closing capture ranges costs. Under `-c cudaProfilerApi`
# the hook turns CUPTI's kernel, memcpy and memset activity on in a range's
# start call and off in its stop call (ranges back to back share one
# switch: capture_range.h); this measures that switching on a
# launch loop cut into ranges of K launches (`launch_loop N ranges:K`),
# against the same ranges with the activity on the whole run
# (CUPROBE_DIAG=capture-activity-on: no switching, records filtered), the
# same ranges switching at every stop even back to back
# (CUPROBE_DIAG=no-linger: what sharing one switch saves), one
# range around the loop, and a full trace. Rounds interleaved; ratios
# against the uninstrumented run (which makes the same start and stop
# calls) of the same call.
#
#   bench/range_switch.sh [RESULTS_DIR]   (CUPROBE_BENCH_ROUNDS, default 5;
#                                          CUPROBE_BENCH_RANGE_SIZES, default "100 1000")
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init range_switch.tsv "${1:-}"
rounds="${CUPROBE_BENCH_ROUNDS:-5}"
launches="${CUPROBE_BENCH_LAUNCHES:-100000}"
sizes="${CUPROBE_BENCH_RANGE_SIZES:-100 1000}"
loop="$build/bench/launch_loop"
trace() { echo "$cuprobe" trace --format json -o "$tmp/$1"; }
for ((r = 0; r < rounds; r++)); do
  for k in $sizes; do
    bench_case "k$k.native" -- "$loop" "$launches" "ranges:$k"
    bench_case "k$k.switched" -- $(trace "switched$k") -c cudaProfilerApi -- "$loop" "$launches" "ranges:$k"
    bench_case "k$k.activity_on" CUPROBE_DIAG=capture-activity-on -- $(trace "on$k") -c cudaProfilerApi -- "$loop" "$launches" "ranges:$k"
    bench_case "k$k.no_linger" CUPROBE_DIAG=no-linger -- $(trace "nolinger$k") -c cudaProfilerApi -- "$loop" "$launches" "ranges:$k"
    bench_case "k$k.full_trace" -- $(trace t) -- "$loop" "$launches" "ranges:$k"
  done
  bench_case one.native -- "$loop" "$launches" range
  bench_case one.switched -- $(trace one) -c cudaProfilerApi -- "$loop" "$launches" range
done
# Every timed launch is in a range (the one before the loop is not): each
# way must record all of them and their kernels (the last round's reports).
for t in one $(for k in $sizes; do echo "switched$k on$k nolinger$k"; done); do
  bench_recorded "$t" "$tmp/$t.json" "$launches"
done
bench_table "ranges of K launches.configuration"
