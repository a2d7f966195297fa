#!/usr/bin/env bash
# Probe overhead on the GPU (issue 7's targets): each reference probe under
# `cuprobe run` against the uninstrumented run of the same workload, measured
# in this one call with rounds interleaved. Times are the GPU time of the
# timed kernel loop (CUDA events inside bench/probe_workload).
#
#   bench/probe_bench.sh [RESULTS_DIR]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CUPROBE_BUILD_DIR:-$root/build}"
results="${1:-${OUT:-$root/bench-results}}"
mkdir -p "$results"
rounds="${CUPROBE_BENCH_ROUNDS:-5}"
tsv="$results/probes.tsv"
: > "$tsv"
cuprobe="$build/bin/cuprobe"
work="$build/bench/probe_workload"
tmp="$(mktemp -d)"

one() {  # name, command...
  local name=$1; shift
  timeout 300 "$@" >/dev/null 2>"$tmp/err"
  local s; s=$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' "$tmp/err" | tail -1)
  if [[ -n "$s" ]]; then printf '%s\t%s\n' "$name" "$s" >> "$tsv"; else
    echo "probe_bench: $name failed: $(tail -3 "$tmp/err")" >&2; fi
}

for ((r = 0; r < rounds; r++)); do
  for w in "vec_add 16777216 50" "matmul 2048 10"; do
    set -- $w
    one "$1.native" "$work" "$@"
    for p in empty threadhist kernel_trace mem_trace; do
      one "$1.$p" "$cuprobe" run --quiet --trace launches -p "$build/probes/$p.cpb" \
        -o "$tmp/r" --format json -- "$work" "$@"
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
    for p, t in targets.items():
        v = rows.get("%s.%s" % (w, p))
        if not v:
            continue
        m = statistics.median(v)
        print("| %s | %s | %d | %.5f | %.3f | <= %.2f | %s |" %
              (w, p, len(v), m, m / b, t, "yes" if m / b <= t else "**no**"))
PY
rm -rf "$tmp"
