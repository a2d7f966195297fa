#!/usr/bin/env bash
# trace-kernels.sh: the kernel summary and a Perfetto timeline of a CUDA
# program, through `cuprobe trace`. See --help.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: scripts/trace-kernels.sh [-o PREFIX] [--] program [args...]

Runs the program under `cuprobe trace` and writes
  PREFIX.txt         kernel, launch, memcpy and memset summaries (also printed on stderr)
  PREFIX.json        the same as JSON
  PREFIX.trace.json  the timeline: open it in https://ui.perfetto.dev
PREFIX defaults to ./cuprobe-trace. The program's stdout is left alone.

The CLI is taken from $CUPROBE_BUILD_DIR/bin/cuprobe (default: build/ of this repository).

example:
  scripts/trace-kernels.sh -o vec_add -- build/samples/vec_add 1048576 100
USAGE
}

prefix='cuprobe-trace'
while (($#)); do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    -o) [[ $# -ge 2 ]] || { usage >&2; exit 64; }; prefix=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
(($#)) || { usage >&2; exit 64; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CUPROBE_BUILD_DIR:-$root/build}"
cuprobe="$build/bin/cuprobe"
[[ -x "$cuprobe" ]] || { echo "trace-kernels: no $cuprobe (build it, or set CUPROBE_BUILD_DIR)" >&2; exit 2; }

status=0
"$cuprobe" trace -o "$prefix" --format table,json,chrome -- "$@" || status=$?
echo "trace-kernels: timeline in $prefix.trace.json (open it in https://ui.perfetto.dev)" >&2
exit "$status"
