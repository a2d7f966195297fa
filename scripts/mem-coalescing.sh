#!/usr/bin/env bash
# mem-coalescing.sh: how well each kernel's global loads and stores use the
# 32-byte sectors they touch, with the coalescing probe
# (samples/coalescing/coalescing.bpf.c) through `cuprobe run`. See --help.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: scripts/mem-coalescing.sh [-k GLOB] [-o PREFIX] [--] program [args...]

Attaches the coalescing probe to every global (and generic) load, store and
atomic of the kernels matching GLOB (default '*') and prints, per kernel and
kind of access, the warp-level requests, the bytes they asked for, the
distinct 32-byte sectors they touched, and the efficiency: bytes / (32 x
sectors). 100% means each warp's lanes read neighbouring addresses; a low
figure means lanes scatter over many sectors (reorder the data, or make
neighbouring lanes read neighbouring addresses). The final maps are in
PREFIX.maps.txt (default: ./cuprobe-mem).

The CLI is taken from $CUPROBE_BUILD_DIR/bin/cuprobe (default: build/ of this
repository) and the probe from its probes/coalescing.cpb, or from the source.

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
probe="$build/probes/coalescing.cpb"
[[ -f "$probe" ]] || probe="$root/samples/coalescing/coalescing.bpf.c"

status=0
"$cuprobe" run -p "$probe" -k "$glob" --quiet -o "$prefix" -- "$@" || status=$?
[[ -f "$prefix.maps.txt" ]] || exit "$status"
# "  [id] name" lines, then "@requests[{kernel_id: K, kind: D}]: N",
# "@bytes[...]: B" and "@sectors[...]: S" lines: one row per (kernel, kind).
awk '
  /^  \[[0-9]+\] / { id = $1; gsub(/[\[\]]/, "", id); sub(/^  \[[0-9]+\] /, ""); name[id] = $0; next }
  /^@(requests|bytes|sectors)\[\{kernel_id: / {
    match($0, /kernel_id: [0-9]+/); k = substr($0, RSTART + 11, RLENGTH - 11)
    match($0, /kind: [0-9]+/); d = substr($0, RSTART + 6, RLENGTH - 6)
    v = $NF; key = k SUBSEP d; keys[key] = 1
    if ($0 ~ /^@requests/) req[key] = v; else if ($0 ~ /^@bytes/) byt[key] = v; else sec[key] = v
  }
  END {
    kinds[1] = "load"; kinds[2] = "store"; kinds[3] = "atomic"
    printf "%-40s %-7s %12s %14s %12s %10s\n", "kernel", "kind", "requests", "bytes", "sectors", "efficiency" > "/dev/stderr"
    for (key in keys) {
      split(key, p, SUBSEP)
      eff = sec[key] > 0 ? 100 * byt[key] / (32 * sec[key]) : 0
      printf "%-40s %-7s %12d %14d %12d %9.1f%%\n", substr(name[p[1]], 1, 40), kinds[p[2]], req[key], byt[key], sec[key], eff | "sort 1>&2"
    }
    close("sort 1>&2")
  }' "$prefix.maps.txt"
exit "$status"
