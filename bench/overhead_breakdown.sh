#!/usr/bin/env bash
# Where the cost of `cuprobe trace` goes on the launch-bound loop: each
# configuration switches one part off (CUPROBE_DIAG is a diagnostic switch of
# the hook, not a user setting). Rounds are interleaved; ratios are against
# the native run of this same call.
#
#   bench/overhead_breakdown.sh [RESULTS_DIR]
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init breakdown.tsv "${1:-}"
rounds="${CUPROBE_BENCH_ROUNDS:-3}"
launches="${CUPROBE_BENCH_LAUNCHES:-100000}"
loop="$build/bench/launch_loop"

trace() { echo "$cuprobe" trace --format json -o "$tmp/t" "$@" --; }

for ((r = 0; r < rounds; r++)); do
  bench_case native -- "$loop" "$launches"
  bench_case all -- $(trace) "$loop" "$launches"
  bench_case all.no_launch_records CUPROBE_DIAG=no-launch-records -- $(trace) "$loop" "$launches"
  bench_case all.no_kernel_records CUPROBE_DIAG=no-kernel-records -- $(trace) "$loop" "$launches"
  bench_case all.no_timestamps CUPROBE_DIAG=no-timestamps -- $(trace) "$loop" "$launches"
  bench_case launches -- $(trace --trace launches) "$loop" "$launches"
  bench_case kernels -- $(trace --trace kernels) "$loop" "$launches"
  bench_case kernels.no_kernel_records CUPROBE_DIAG=no-kernel-records -- $(trace --trace kernels) "$loop" "$launches"
  # Kernels timed by CUPTI's serialized kernel activity, which does not
  # instrument kernels (the launch loop uses one stream: nothing to overlap).
  bench_case all.serial_kernels CUPROBE_DIAG=serial-kernels -- $(trace) "$loop" "$launches"
  bench_case kernels.serial_kernels CUPROBE_DIAG=serial-kernels -- $(trace --trace kernels) "$loop" "$launches"
  # Launch records from CUPTI's API activity for the launch calls
  # instead of launch callbacks (CUPROBE_LAUNCH_TIMES=activity).
  bench_case all.launch_activity CUPROBE_LAUNCH_TIMES=activity -- $(trace) "$loop" "$launches"
  bench_case standalone.all -- env CUDA_INJECTION64_PATH="$build/lib/libcuprobe_hook.so" CUPROBE_OUTPUT="$tmp/s.json" "$loop" "$launches"
done
bench_table configuration
