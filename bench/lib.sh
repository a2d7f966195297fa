# Shared by the bench scripts (sourced): where things are, and one timed case.
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   bench_init NAME.tsv [RESULTS_DIR]     # sets root, build, results, tsv, tmp, cuprobe
#   bench_case NAME [VAR=value...] -- command...   # appends "NAME<TAB>seconds" to $tsv
#                                         # (only NAMEs matching CUPROBE_BENCH_CASES, a
#                                         # bash regex, when it is set)
#   bench_recorded LABEL REPORT.json [N]  # "bench: LABEL recorded X launches and Y kernels"
#   bench_build_launch_activity EXE       # nvcc-builds bench/experiments/launch_activity.cu
#   bench_empty_probe_instruments LOOP    # says whether the empty probe instruments LOOP's kernel
#   bench_table [FIRST_COLUMN_TITLE]      # markdown: median seconds, ratio vs native,
#                                         # and the ratios of each round against its own native
#
# A case's program prints "seconds=S" on stderr (launch_loop, probe_workload,
# torch_loop.py); a case that prints none is reported as failed, with the
# end of its stderr, and leaves no row.
bench_init() {
  root="$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd)"
  build="${CUPROBE_BUILD_DIR:-$root/build}"
  results="${2:-${OUT:-$root/bench-results}}"
  mkdir -p "$results"
  tsv="$results/$1"
  : > "$tsv"
  cuprobe="$build/bin/cuprobe"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
}

bench_case() {
  local name=$1; shift
  [[ -z "${CUPROBE_BENCH_CASES:-}" || "$name" =~ $CUPROBE_BENCH_CASES ]] || return 0
  local envs=()
  while [[ $# -gt 0 && "$1" != "--" ]]; do envs+=("$1"); shift; done
  [[ "${1:-}" == "--" ]] && shift
  timeout 300 env "${envs[@]}" "$@" >/dev/null 2>"$tmp/err"
  local s; s=$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' "$tmp/err" | tail -1)
  if [[ -n "$s" ]]; then printf '%s\t%s\n' "$name" "$s" >> "$tsv"; else
    echo "bench: $name failed: $(tail -3 "$tmp/err")" >&2; fi
}

# bench/experiments/launch_activity.cu, built with nvcc against CUPTI (it
# is not part of the CMake build: it links CUPTI itself, outside the hook).
# Fails, saying why, when it cannot be built.
bench_build_launch_activity() {
  local cupti=/usr/local/cuda/extras/CUPTI
  if ! timeout 180 nvcc -O2 -arch=sm_90 -I"$cupti/include" -o "$1" \
       "$root/bench/experiments/launch_activity.cu" -L"$cupti/lib64" -L/usr/local/cuda/lib64 \
       -Xlinker -rpath -Xlinker "$cupti/lib64:/usr/local/cuda/lib64" -lcuda -lcupti \
       > "$tmp/build.log" 2>&1; then
    echo "bench: cannot build launch_activity: $(tail -5 "$tmp/build.log")" >&2
    return 1
  fi
}

# A `cuprobe run -p empty.cpb` case measures instrumented launches only if
# the probe instrumented the loop's kernel: a separate 1,000-launch run says
# (`cuprobe run` lists the kernels it instrumented on stderr at the end).
bench_empty_probe_instruments() {
  "$cuprobe" run --trace launches -p "$build/probes/empty.cpb" --format json -o "$tmp/probe_check" \
    -- "$1" 1000 > "$tmp/probe_check.log" 2>&1
  if grep -q 'empty_kernel' "$tmp/probe_check.log"; then
    echo "bench: the empty probe instrumented empty_kernel"
  else
    echo "bench: the empty probe instrumented nothing: its row measures no instrumented launch" >&2
  fi
}

# A traced case that records nothing is cheap for the wrong reason: prints
# how many launches and kernels a `cuprobe trace --format json` report
# holds, and, with EXPECTED, whether both are exactly that many.
#   bench_recorded LABEL REPORT.json [EXPECTED]
bench_recorded() {
  python3 - "$2" "$1" "${3:-}" <<'PY' || echo "bench: no report from $1 ($2)" >&2
import json, sys
totals = json.load(open(sys.argv[1]))["totals"]
launches, kernels = totals.get("launches"), totals.get("kernels")
note = ""
if sys.argv[3] and not launches == kernels == int(sys.argv[3]):
    note = " (expected %s of each)" % sys.argv[3]
print("bench: %s recorded %s launches and %s kernels%s" % (sys.argv[2], launches, kernels, note))
PY
}

# Every case of $tsv, in first-seen order: runs, median seconds and the
# ratio against the native case of its group ("G.native" for a case named
# "G.X", when there is one), else against "native"; "-" without either.
# Rounds are interleaved, so round i of a case also gets the ratio against
# round i of its native: their median and range show what the machine's
# drift between rounds does to the first ratio (on a noisy day the medians'
# ratio and the paired one can differ by 0.1). "-" when a case has a round
# fewer than its native (a failed run leaves no row, so rounds cannot be
# paired).
bench_table() {
  python3 - "$tsv" "${1:-configuration}" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, s = line.split("\t")
    rows[name].append(float(s))
print("| %s | runs | median s | ratio vs native | paired: median | paired: range |" % sys.argv[2])
print("| --- | --- | --- | --- | --- | --- |")
for name, runs in rows.items():
    group = name.rsplit(".", 1)[0] + "." if "." in name else ""
    base = rows.get(group + "native") or rows.get("native")
    m = statistics.median(runs)
    ratio = "%.3f" % (m / statistics.median(base)) if base else "-"
    paired_median = paired_range = "-"
    if base and len(base) == len(runs):
        paired = [r / b for r, b in zip(runs, base)]
        paired_median = "%.3f" % statistics.median(paired)
        paired_range = "%.3f-%.3f" % (min(paired), max(paired))
    print("| %s | %d | %.4f | %s | %s | %s |" % (name, len(runs), m, ratio, paired_median,
                                                 paired_range))
PY
}
