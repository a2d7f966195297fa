#!/usr/bin/env bash
# Two builds of the hook side by side on the launch-bound loop: each round
# runs native, then every configuration with hook A and with hook B, so that
# both see the same host state (a launch-bound ratio moves with the host as
# much as with the code: compare two hooks only within one call, and only
# like this). The CLI is this build's; the hooks only have to read the same
# session layout.
#
#   bench/hook_ab.sh A.so B.so [RESULTS_DIR]
#   CUPROBE_BENCH_ROUNDS=9 bench/hook_ab.sh .device/before/libcuprobe_hook.so build/lib/libcuprobe_hook.so
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if [[ $# -lt 2 || ! -f "$1" || ! -f "$2" ]]; then
  echo "usage: bench/hook_ab.sh A.so B.so [RESULTS_DIR]" >&2
  exit 2
fi
hook_a=$(realpath "$1")
hook_b=$(realpath "$2")
bench_init hook_ab.tsv "${3:-}"
rounds="${CUPROBE_BENCH_ROUNDS:-7}"
launches="${CUPROBE_BENCH_LAUNCHES:-100000}"
loop="$build/bench/launch_loop"
for ((r = 0; r < rounds; r++)); do
  bench_case launch.native -- "$loop" "$launches"
  for side in a b; do
    hook=$hook_a
    [[ $side == b ]] && hook=$hook_b
    bench_case "launch.${side}_trace" CUPROBE_HOOK="$hook" -- "$cuprobe" trace --format json \
      -o "$tmp/t" -- "$loop" "$launches"
    bench_case "launch.${side}_launches" CUPROBE_HOOK="$hook" -- "$cuprobe" trace \
      --trace launches --format json -o "$tmp/t" -- "$loop" "$launches"
    bench_case "launch.${side}_range_none" CUPROBE_HOOK="$hook" -- "$cuprobe" trace \
      -c cudaProfilerApi --format json -o "$tmp/t" -- "$loop" "$launches"
    bench_case "launch.${side}_empty_probe" CUPROBE_HOOK="$hook" -- "$cuprobe" run --quiet \
      --trace launches -p "$build/probes/empty.cpb" --format json -o "$tmp/r" -- "$loop" "$launches"
  done
done
echo "hooks: a=$hook_a b=$hook_b"
bench_table "workload.configuration"
