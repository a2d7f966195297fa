#!/usr/bin/env bash
# hist-threads.sh: how many times each GPU thread left the selected kernels,
# with the threadhist probe (samples/threadhist/threadhist.bpf.c) through
# `cuprobe run`. See --help.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: scripts/hist-threads.sh [-k GLOB] [-o PREFIX] [--] program [args...]

Attaches the threadhist probe (one counter per GPU thread, added at every
kernel exit) to the kernels matching GLOB (default '*': every kernel with
PTX) and prints, at the end, the sum of the exits over the threads that ran,
with the least and most exits of one thread:
  @thread_exits[0]: sum 10485760 over 1048576 threads (min 10, max 10)
The final maps are also in PREFIX.maps.txt (default: ./cuprobe-threads).

The CLI is taken from $CUPROBE_BUILD_DIR/bin/cuprobe (default: build/ of this
repository) and the probe from its probes/threadhist.cpb, or from the source.

example:
  scripts/hist-threads.sh -k 'vec_add*' -- build/samples/vec_add 1048576 10
USAGE
}

glob='*'
prefix='cuprobe-threads'
while (($#)); do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    -k) [[ $# -ge 2 ]] || { usage >&2; exit 64; }; glob=$2; shift 2 ;;
    -o) [[ $# -ge 2 ]] || { usage >&2; exit 64; }; prefix=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
(($#)) || { usage >&2; exit 64; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CUPROBE_BUILD_DIR:-$root/build}"
cuprobe="$build/bin/cuprobe"
[[ -x "$cuprobe" ]] || { echo "hist-threads: no $cuprobe (build it, or set CUPROBE_BUILD_DIR)" >&2; exit 2; }
# The bundle needs no clang (GPU machines); the source needs clang-19.
probe="$build/probes/threadhist.cpb"
[[ -f "$probe" ]] || probe="$root/samples/threadhist/threadhist.bpf.c"

exec "$cuprobe" run -p "$probe" -k "$glob" --quiet -o "$prefix" -- "$@"
