#!/usr/bin/env bash
# Probe overhead on the GPU (issue 7's targets): each reference probe under
# `cuprobe run` against the uninstrumented run of the same workload, measured
# in this one call with rounds interleaved. Times are the GPU time of the
# timed kernel loop (CUDA events inside bench/probe_workload).
#
#   bench/probe_bench.sh [RESULTS_DIR]
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init probes.tsv "${1:-}"
rounds="${CUPROBE_BENCH_ROUNDS:-5}"
work="$build/bench/probe_workload"

for ((r = 0; r < rounds; r++)); do
  for w in "vec_add 16777216 50" "matmul 2048 10"; do
    set -- $w
    bench_case "$1.native" -- "$work" "$@"
    # The same with the hook attached but no probe: what CUPTI's presence costs.
    bench_case "$1.traced" -- "$cuprobe" trace --trace launches -o "$tmp/t" --format json -- "$work" "$@"
    for p in empty threadhist kernel_trace mem_trace; do
      bench_case "$1.$p" -- "$cuprobe" run --quiet --trace launches -p "$build/probes/$p.cpb" \
        -o "$tmp/r" --format json -- "$work" "$@"
    done
    # mem_trace and threadhist with every site calling its probe (no site
    # or thread-range counters).
    for p in mem_trace threadhist; do
      bench_case "$1.${p}_calls" CUPROBE_SITE_COUNTERS=0 -- "$cuprobe" run --quiet \
        --trace launches -p "$build/probes/$p.cpb" -o "$tmp/r" --format json -- "$work" "$@"
    done
  done
done

python3 - "$tsv" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, s = line.split("\t")
    rows[name].append(float(s))
targets = {"empty": 1.03, "threadhist": 1.10, "kernel_trace": 1.15, "mem_trace": 1.5}
print("| workload | probe | runs | median GPU s | ratio vs native | target | met |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for w in ("vec_add", "matmul"):
    base = rows.get(w + ".native")
    if not base:
        continue
    b = statistics.median(base)
    print("| %s | native | %d | %.5f | 1.000 | | |" % (w, len(base), b))
    t = rows.get(w + ".traced")
    if t:
        print("| %s | (no probe: `trace --trace launches`) | %d | %.5f | %.3f | | |" %
              (w, len(t), statistics.median(t), statistics.median(t) / b))
    for p, t in targets.items():
        v = rows.get("%s.%s" % (w, p))
        if not v:
            continue
        m = statistics.median(v)
        print("| %s | %s | %d | %.5f | %.3f | <= %.2f | %s |" %
              (w, p, len(v), m, m / b, t, "yes" if m / b <= t else "**no**"))
    for p in ("mem_trace", "threadhist"):
        v = rows.get("%s.%s_calls" % (w, p))
        if v:
            print("| %s | %s, CUPROBE_SITE_COUNTERS=0 | %d | %.5f | %.3f | | |" %
                  (w, p, len(v), statistics.median(v), statistics.median(v) / b))
PY
