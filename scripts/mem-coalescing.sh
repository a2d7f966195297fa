#!/usr/bin/env bash
# mem-coalescing.sh: global loads and stores per kernel, and the bytes they
# moved, with the mem_trace probe (samples/probes/mem_trace.bpf.c) through
# `cuprobe run`. See --help.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: scripts/mem-coalescing.sh [-k GLOB] [-o PREFIX] [--] program [args...]

Attaches the mem_trace probe to every global (and generic) load, store and
atomic of the kernels matching GLOB (default '*') and prints, per kernel and
kind of access, the number of accesses, the bytes they requested and the
mean access size. Thread accesses of 4 bytes or less are a sign that warps
may use few bytes of each 32-byte sector they touch (vectorize, or make
neighbouring lanes read neighbouring addresses). The final maps are in
PREFIX.maps.txt (default: ./cuprobe-mem).

The CLI is taken from $CUPROBE_BUILD_DIR/bin/cuprobe (default: build/ of this
repository) and the probe from its probes/mem_trace.cpb, or from the source.

example:
  scripts/mem-coalescing.sh -k 'matmul*' -- build/samples/matmul 512 3
USAGE
}

glob='*'
prefix='cuprobe-mem'
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
[[ -x "$cuprobe" ]] || { echo "mem-coalescing: no $cuprobe (build it, or set CUPROBE_BUILD_DIR)" >&2; exit 2; }
probe="$build/probes/mem_trace.cpb"
[[ -f "$probe" ]] || probe="$root/samples/probes/mem_trace.bpf.c"

status=0
"$cuprobe" run -p "$probe" -k "$glob" --quiet -o "$prefix" -- "$@" || status=$?
[[ -f "$prefix.maps.txt" ]] || exit "$status"
# "  [id] name" lines, then "@accesses[{kernel_id: K, kind: D}]: N" and
# "@bytes[...]: B" lines: one row per (kernel, kind).
awk '
  /^  \[[0-9]+\] / { id = $1; gsub(/[\[\]]/, "", id); sub(/^  \[[0-9]+\] /, ""); name[id] = $0; next }
  /^@(accesses|bytes)\[\{kernel_id: / {
    match($0, /kernel_id: [0-9]+/); k = substr($0, RSTART + 11, RLENGTH - 11)
    match($0, /kind: [0-9]+/); d = substr($0, RSTART + 6, RLENGTH - 6)
    v = $NF; key = k SUBSEP d; keys[key] = 1
    if ($0 ~ /^@accesses/) acc[key] = v; else byt[key] = v
  }
  END {
    kinds[1] = "load"; kinds[2] = "store"; kinds[3] = "atomic"
    printf "%-40s %-7s %14s %16s %10s\n", "kernel", "kind", "accesses", "bytes", "bytes/acc" > "/dev/stderr"
    for (key in keys) {
      split(key, p, SUBSEP)
      mean = acc[key] > 0 ? byt[key] / acc[key] : 0
      printf "%-40s %-7s %14d %16d %10.2f\n", substr(name[p[1]], 1, 40), kinds[p[2]], acc[key], byt[key], mean | "sort 1>&2"
    }
    close("sort 1>&2")
  }' "$prefix.maps.txt"
exit "$status"
