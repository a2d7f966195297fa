#!/usr/bin/env bash
# Runs the command of every sample README on this machine's GPU and keeps
# what each printed, so the READMEs can show real output. Probes come from
# the build's bundles (BUILD/probes/*.cpb: the GPU machine has no clang).
#
#   scripts/sample-outputs.sh [OUT_DIR]          (default: sample-outputs)
#   CUPROBE_BUILD_DIR=.device/build scripts/sample-outputs.sh "$OUT"
#   scripts/sample-outputs.sh --help
#
# Each sample gets OUT_DIR/<name>.txt: the command line, then its stdout and
# stderr as the terminal shows them, then its exit status. Files the command
# writes (-o PREFIX) land in OUT_DIR too. A sample that fails is reported and
# the others still run; the exit status counts the failures.
set -uo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${CUPROBE_BUILD_DIR:-$root/build}" && pwd)"
out="${1:-sample-outputs}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cli="$build/bin/cuprobe"
probes="$build/probes"
bin="$build/samples"
[[ -x "$cli" ]] || { echo "sample-outputs: no $cli (build first)" >&2; exit 2; }

failures=0
sample() {  # sample NAME CUPROBE-ARGS...
  local name=$1
  shift
  local log="$out/$name.txt"
  echo "sample-outputs: $name"
  {
    echo "\$ cuprobe $*"
    (cd "$out" && "$cli" "$@" 2>&1)
    echo "[exit $?]"
  } > "$log"
  if ! tail -1 "$log" | grep -q '^\[exit 0\]$'; then
    echo "sample-outputs: $name failed (see $log)" >&2
    failures=$((failures + 1))
  fi
}

sample threadhist run -p "$probes/threadhist.cpb" -- "$bin/vec_add" 1048576 10
sample kernel_trace run -p "$probes/kernel_trace.cpb" --events json -- "$bin/vec_add" 65536 3
sample mem_trace run -p "$probes/mem_trace.cpb" -k 'matmul*' -- "$bin/matmul" 1024 10
sample mem_regions run -p "$probes/mem_regions.cpb" -- "$bin/vec_add" 1048576 3
sample cudagraph run -p "$probes/cudagraph.cpb" -- "$bin/cudagraph" 65536 20
sample arglogger run -p "$probes/arglogger.cpb" -o args -- "$bin/arglogger" 4096 3
sample cuda_counter run -p "$probes/cuda_counter.cpb" -o counter -- "$bin/vec_add" 1048576 10
sample kernelretsnoop run -p "$probes/kernelretsnoop.cpb" --events json --quiet -o retsnoop \
    -- "$bin/vec_add" 32768 3
sample threadscheduling run -p "$probes/threadscheduling.cpb" -o sched \
    -- "$bin/threadscheduling" 528 10
sample warp_occupancy run -p "$probes/warp_occupancy.cpb" -o occ -- "$bin/matmul" 512 3
sample divergence run -p "$probes/divergence.cpb" -o div -- "$bin/divergence" 4096 10
sample coalescing run -p "$probes/coalescing.cpb" -o coal -- "$bin/directly_run" 4 64 3 7 1000 4
sample directly_run run -p "$probes/directly_run.cpb" -o direct -- "$bin/directly_run" 4 64 3 7 1000
sample launchlate trace -o late --format table,json -- "$bin/vec_add" 1048576 100
echo "sample-outputs: $failures failed; outputs in $out"
exit "$failures"
