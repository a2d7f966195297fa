#!/bin/sh
# peak_rss.sh OUT_FILE COMMAND [ARGS...]: runs COMMAND, polls its peak
# resident set (VmHWM, kB; the process alone, not its children) every
# 50 ms, writes the largest seen to OUT_FILE and exits with COMMAND's code.
out=$1
shift
"$@" &
pid=$!
hwm=0
while kill -0 "$pid" 2>/dev/null; do
  kb=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  if [ -n "$kb" ] && [ "$kb" -gt "$hwm" ]; then hwm=$kb; fi
  sleep 0.05
done
wait "$pid"
rc=$?
echo "$hwm" > "$out"
exit "$rc"
