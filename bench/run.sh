#!/usr/bin/env bash
# Benchmarks on the GPU machine: ratios against the uninstrumented run,
# measured side by side in this one call (rounds interleaved).
#
#   bench/run.sh [RESULTS_DIR]
#
#  1. launch_loop (100,000 empty-kernel launches): native, `cuprobe trace`
#     (everything; with the Perfetto timeline; --trace launches; --trace kernels; launch records from
#     API activity; --capture-range with the loop inside a range, and with
#     no range opened, CUPTI's activity off or on), `cuprobe run` with the
#     empty probe (instrumented kernels, launch callbacks, no CUPTI
#     activity), and CUPTI's own cupti_trace_injection sample (built here
#     from the toolkit).
#  2. torch_loop (PyTorch, launch-bound): native, torch.profiler, `cuprobe
#     trace`, and `cuprobe trace -c cudaProfilerApi` with the loop in a range.
# Writes bench.tsv and prints a markdown table of median seconds and ratios.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init bench.tsv "${1:-}"
rounds="${CUPROBE_BENCH_ROUNDS:-5}"
launches="${CUPROBE_BENCH_LAUNCHES:-100000}"
loop="$build/bench/launch_loop"

# CUPTI's injection sample, as DEVICE.md describes.
inj=""
src=/usr/local/cuda/extras/CUPTI/samples
if [[ -d "$src/cupti_trace_injection" ]]; then
  cp -r "$src" "$tmp/samples"
  (cd "$tmp/samples/cupti_trace_injection" && timeout 120 nvcc -Xcompiler -fPIC \
     -I/usr/local/cuda/include -I/usr/local/cuda/extras/CUPTI/include -I../common -shared \
     cupti_trace_injection.cpp -L/usr/local/cuda/lib64 -lcuda -lcupti \
     -o "$tmp/libcupti_trace_injection.so" >"$tmp/inj-build.log" 2>&1) && inj="$tmp/libcupti_trace_injection.so"
fi
[[ -n "$inj" ]] || echo "bench: cupti_trace_injection could not be built (see $tmp/inj-build.log)" >&2

run_case() { local name=$1; shift; bench_case "$name" -- "$@"; }

for ((r = 0; r < rounds; r++)); do
  run_case launch.native "$loop" "$launches"
  run_case launch.cuprobe "$cuprobe" trace --format json -o "$tmp/full" -- "$loop" "$launches"
  # With the streamed Perfetto timeline (the default formats' timeline).
  run_case launch.cuprobe_perfetto "$cuprobe" trace --format json,perfetto -o "$tmp/pf" -- "$loop" "$launches"
  # What each part costs: launch callbacks only, kernel activity only.
  run_case launch.cuprobe_launches "$cuprobe" trace --trace launches --format json -o "$tmp/t" -- "$loop" "$launches"
  run_case launch.cuprobe_kernels "$cuprobe" trace --trace kernels --format json -o "$tmp/t" -- "$loop" "$launches"
  # Launch records from API activity instead of callbacks.
  run_case launch.cuprobe_launch_activity env CUPROBE_LAUNCH_TIMES=activity "$cuprobe" trace --format json -o "$tmp/activity" -- "$loop" "$launches"
  # --capture-range cudaProfilerApi: the timed loop inside the range (the
  # range check on every record), and a run that never opens one (the
  # launch callbacks still fire; CUPTI's activity is off), also with the
  # activity left on the whole run (CUPROBE_DIAG=capture-activity-on).
  run_case launch.cuprobe_range "$cuprobe" trace -c cudaProfilerApi --format json -o "$tmp/range" -- "$loop" "$launches" range
  run_case launch.cuprobe_range_none "$cuprobe" trace -c cudaProfilerApi --format json -o "$tmp/t" -- "$loop" "$launches"
  run_case launch.cuprobe_range_none_activity_on env CUPROBE_DIAG=capture-activity-on "$cuprobe" trace -c cudaProfilerApi --format json -o "$tmp/t" -- "$loop" "$launches"
  # The loop's module instrumented when it loads (entry and exit probes
  # that do nothing), with launch callbacks and no CUPTI kernel activity:
  # the host's side of timing kernels by instrumentation instead of CUPTI.
  run_case launch.run_empty_probe "$cuprobe" run --quiet --trace launches -p "$build/probes/empty.cpb" --format json -o "$tmp/run" -- "$loop" "$launches"
  [[ -n "$inj" ]] && run_case launch.cupti_injection env CUDA_INJECTION64_PATH="$inj" "$loop" "$launches"
done
# A configuration that records nothing is cheap for the wrong reason: the
# last round's launch and kernel counts of the full traces (the range one
# must hold every timed launch: the one before the loop is outside it).
bench_recorded "full trace" "$tmp/full.json" $((launches + 1))
bench_recorded "activity trace" "$tmp/activity.json" $((launches + 1))
bench_recorded "range trace" "$tmp/range.json" "$launches"
bench_empty_probe_instruments "$loop"
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  for ((r = 0; r < rounds; r++)); do
    run_case torch.native python3 "$root/bench/torch_loop.py"
    run_case torch.profiler python3 "$root/bench/torch_loop.py" --profiler
    run_case torch.cuprobe "$cuprobe" trace --format json -o "$tmp/p" -- python3 "$root/bench/torch_loop.py"
    run_case torch.cuprobe_range "$cuprobe" trace -c cudaProfilerApi --format json -o "$tmp/p" -- python3 "$root/bench/torch_loop.py" --range
  done
fi

bench_table "workload.configuration"
