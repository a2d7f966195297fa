#!/usr/bin/env bash
# The host and the GPU updating one map, live: runs the gpu_shared_map
# workload under `cuprobe run` in three phases and, between phases, sets the
# epoch the probe reads on the GPU with `cuprobe maps --set` from this
# (separate) process. Prints the program's output, what `cuprobe maps` saw
# after each write, and the final maps.
#
#   samples/gpu_shared_map/run.sh [-h] [BUILD_DIR]     (default: $CUPROBE_BUILD_DIR or build)
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-${CUPROBE_BUILD_DIR:-$root/build}}"
cuprobe="$build/bin/cuprobe"
probe="$build/probes/gpu_shared_map.cpb"
app="$build/samples/gpu_shared_map"
for f in "$cuprobe" "$probe" "$app"; do
  [[ -e "$f" ]] || { echo "run.sh: $f is missing (build first: cmake --build build)" >&2; exit 1; }
done
work="$(mktemp -d)"
run=""
cleanup() {
  exec 3>&- 2>/dev/null || true
  [[ -n "$run" ]] && kill "$run" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
mkfifo "$work/go"
"$cuprobe" run -p "$probe" --quiet -o "$work/shared" -- "$app" 3 10 64 1 \
  < "$work/go" > "$work/out" &
run=$!
exec 3> "$work/go"  # the program's stdin: one line per phase
wait_for() {
  local deadline=$((SECONDS + 60))
  until grep -q "$1" "$work/out"; do
    if ! kill -0 "$run" 2>/dev/null || ((SECONDS > deadline)); then
      echo "run.sh: the program stopped before '$1'" >&2
      cat "$work/out" >&2
      exit 1
    fi
    sleep 0.05
  done
}
wait_for "phase 0 done"
pid="$(sed -n 's/^gpu_shared_map: pid //p' "$work/out")"
for epoch in 1 2; do
  echo "== cuprobe maps --set 'shared[0]=$epoch' $pid"
  "$cuprobe" maps --set "shared[0]=$epoch" --map shared "$pid"
  echo >&3
  wait_for "phase $epoch done"
done
exec 3>&-
rc=0
wait "$run" || rc=$?
run=""
echo "== the program's output"
cat "$work/out"
echo "== final maps"
cat "$work/shared.maps.txt"
exit "$rc"
