#!/usr/bin/env bash
# Traces that scale: `cuprobe trace` of bench/launch_loop at growing launch
# counts. For each count: the loop's native time, then traced with the
# default formats (the summary and the streamed Perfetto timeline, both in
# bounded memory) and, up to CUPROBE_SCALE_CHROME_MAX launches (default
# 2M), with the Chrome JSON timeline instead. Prints a markdown table:
# launches, run, wall seconds, wall ratio to native, the loop's own
# seconds, seconds from the program's exit to cuprobe's exit (reports
# written), cuprobe's peak RSS (VmHWM, the CLI process alone), kernels in
# the report, timeline bytes per kernel (its launch included).
#
#   bench/scale.sh [COUNTS...]          (default: 1000000 10000000 50000000)
#   CUPROBE_BUILD_DIR=.device/build bench/scale.sh 2000000 20000000
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CUPROBE_BUILD_DIR:-$root/build}"
cuprobe="$build/bin/cuprobe"
loop="$build/bench/launch_loop"
chrome_max="${CUPROBE_SCALE_CHROME_MAX:-2000000}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
counts=("$@")
[[ ${#counts[@]} -gt 0 ]] || counts=(1000000 10000000 50000000)

now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

# run_case LABEL FORMATS N: prints one table row.
run_case() {
  local label=$1 formats=$2 n=$3 hwm=0 start end exited
  start=$(now)
  "$cuprobe" trace -o "$tmp/r" --format "$formats,json" -- "$loop" "$n" 2>"$tmp/err" &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    local kb; kb=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null)
    [[ -n "$kb" && "$kb" -gt "$hwm" ]] && hwm=$kb
    # The program's exit: its launch_loop line is printed.
    if [[ -z "${exited:-}" ]] && grep -q 'launch_loop: launches=' "$tmp/err" 2>/dev/null; then
      exited=$(now)
    fi
    sleep 0.1
  done
  wait "$pid"
  end=$(now)
  local loop_s kernels bytes="-" per="-"
  loop_s=$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' "$tmp/err" | tail -1)
  kernels=$(python3 -c "import json;print(json.load(open('$tmp/r.json'))['totals']['kernels'])" 2>/dev/null)
  for f in "$tmp/r.pftrace" "$tmp/r.trace.json"; do
    if [[ -f "$f" ]]; then
      bytes=$(stat -c %s "$f")
      per=$(( bytes / (kernels > 0 ? kernels : 1) ))
    fi
  done
  printf '| %s | %s | %s | %s | %s | %s | %d MB | %s | %s |\n' "$n" "$label" \
    "$(sub "$end" "$start")" "$(div "$(sub "$end" "$start")" "$native_wall")" "${loop_s:--}" \
    "$(sub "$end" "${exited:-$end}")" $((hwm / 1024)) "${kernels:--}" "$per"
  rm -f "$tmp"/r.*
}

echo "| launches | run | wall s | ratio | loop s | exit to report s | cuprobe peak RSS | kernels | timeline B/kernel |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for n in "${counts[@]}"; do
  start=$(now)
  timeout 600 "$loop" "$n" 2>"$tmp/err"
  native_wall=$(sub "$(now)" "$start")
  loop_s=$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' "$tmp/err" | tail -1)
  printf '| %s | native | %s | 1.00 | %s | - | - | - | - |\n' "$n" "$native_wall" "$loop_s"
  run_case "trace (table,perfetto: the default)" table,perfetto "$n"
  if (( n <= chrome_max )); then run_case "trace --format table,chrome" table,chrome "$n"; fi
done
