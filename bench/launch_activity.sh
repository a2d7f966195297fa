#!/usr/bin/env bash
# On the GPU machine: which CUPTI records each way of launching leaves, and
# what each way of recording launches costs a launch-bound loop in isolation
# from the hook (bench/experiments/launch_activity.cu, built here with nvcc).
#
#   bench/launch_activity.sh [RESULTS_DIR]
#
# 1. `launch_activity count`: for <<<>>>, cudaLaunchKernel and cuLaunchKernel,
#    how many kernels a driver record, a runtime record, or both share the
#    correlation id with (launch_activity_count.txt); fails when a kernel has
#    no launch record.
# 2. `launch_activity time MODE`, rounds interleaved (CUPROBE_BENCH_ROUNDS,
#    default 5): native, kernels, api, callbacks, callbacks_only,
#    callbacks_empty, subscribed, api_only (CUPROBE_LAUNCH_MODES, a
#    space-separated list, picks others; native is always first).
#    Prints a markdown table of median seconds and ratios against native.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init launch_activity.tsv "${1:-}"
rounds="${CUPROBE_BENCH_ROUNDS:-5}"
exe="$tmp/launch_activity"
bench_build_launch_activity "$exe" || exit 1
timeout 120 "$exe" count | tee "$results/launch_activity_count.txt"
count_rc=${PIPESTATUS[0]}
modes=(native)
for mode in ${CUPROBE_LAUNCH_MODES:-kernels api callbacks callbacks_only callbacks_empty subscribed api_only}; do
  [[ "$mode" == native ]] || modes+=("$mode")
done
for ((r = 0; r < rounds; r++)); do
  for mode in "${modes[@]}"; do bench_case "$mode" -- "$exe" time "$mode"; done
done
bench_table "launch loop, recording launches by"
exit "$count_rc"
