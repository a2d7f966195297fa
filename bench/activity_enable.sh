#!/usr/bin/env bash
# When CUPTI's kernel activity is turned on: from the hook's start (before
# CUDA creates a context, the default), when the first context is created
# (CUPROBE_DIAG=activity-at-context), or mid-run by a capture range's start
# call (-c cudaProfilerApi with the timed loop in a range; and the same with
# the activity on from the start, CUPROBE_DIAG=capture-activity-on). Rounds
# interleaved; ratios against the uninstrumented run of the same call.
#
#   bench/activity_enable.sh [RESULTS_DIR]      (CUPROBE_BENCH_ROUNDS, default 7)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init activity_enable.tsv "${1:-}"
rounds="${CUPROBE_BENCH_ROUNDS:-7}"
launches="${CUPROBE_BENCH_LAUNCHES:-100000}"
loop="$build/bench/launch_loop"
torch_loop="$root/bench/torch_loop.py"
trace() { echo "$cuprobe" trace --format json -o "$tmp/$1"; }
have_torch=0
python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null && have_torch=1
for ((r = 0; r < rounds; r++)); do
  bench_case launch.native -- "$loop" "$launches"
  bench_case launch.from_start -- $(trace start) -- "$loop" "$launches"
  bench_case launch.at_context CUPROBE_DIAG=activity-at-context -- $(trace context) -- "$loop" "$launches"
  bench_case launch.range -- $(trace range) -c cudaProfilerApi -- "$loop" "$launches" range
  bench_case launch.range_from_start CUPROBE_DIAG=capture-activity-on -- $(trace range_on) -c cudaProfilerApi -- "$loop" "$launches" range
  if ((have_torch)); then
    bench_case torch.native -- python3 "$torch_loop"
    bench_case torch.from_start -- $(trace t) -- python3 "$torch_loop"
    bench_case torch.at_context CUPROBE_DIAG=activity-at-context -- $(trace t) -- python3 "$torch_loop"
    bench_case torch.range -- $(trace t) -c cudaProfilerApi -- python3 "$torch_loop" --range
    bench_case torch.range_from_start CUPROBE_DIAG=capture-activity-on -- $(trace t) -c cudaProfilerApi -- python3 "$torch_loop" --range
  fi
done
# Each way must still record every kernel (the last round's reports).
for t in start context range range_on; do bench_recorded "$t" "$tmp/$t.json"; done
bench_table "workload.activity on"
