#!/usr/bin/env bash
# Probe overhead on the GPU (issue 7's targets): each reference probe under
# `cuprobe run` against the uninstrumented run of the same workload, measured
# in this one call with rounds interleaved. Times are the GPU time of the
# timed kernel loop (CUDA events inside bench/probe_workload).
#
#   bench/probe_bench.sh [RESULTS_DIR]
#   CUPROBE_BENCH_ONLY=patch bench/probe_bench.sh   # the patch backend's rows alone
#   CUPROBE_BENCH_ONLY=ptx bench/probe_bench.sh     # the PTX backend's rows alone
#   CUPROBE_BENCH_CASES='native|addr_hist' bench/probe_bench.sh   # cases by name (bash regex)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init probes.tsv "${1:-}"
rounds="${CUPROBE_BENCH_ROUNDS:-5}"
work="$build/bench/probe_workload"

ptx_rows=1 patch_rows=1
[[ "${CUPROBE_BENCH_ONLY:-}" == patch ]] && ptx_rows=0
[[ "${CUPROBE_BENCH_ONLY:-}" == ptx ]] && patch_rows=0
for ((r = 0; r < rounds * ptx_rows; r++)); do
  for w in "vec_add 16777216 50" "matmul 2048 10"; do
    set -- $w
    bench_case "$1.native" -- "$work" "$@"
    # The same with the hook attached but no probe: what CUPTI's presence costs.
    bench_case "$1.traced" -- "$cuprobe" trace --trace launches -o "$tmp/t" --format json -- "$work" "$@"
    # Address-reading probes (issue 39): addr_hist (a linear histogram of
    # each global access's page), mem_regions (the region histogram of
    # samples/mem_trace) and the one-liner `mem:* { @a = hist(addr); }`.
    # addr_trace: every global access in an event in the ring (the full
    # trace), an event per group of a warp's consecutive lanes;
    # addr_trace_lanes: an event per lane.
    for p in empty threadhist kernel_trace mem_trace addr_hist mem_regions ol_addr_hist \
             addr_trace addr_trace_lanes; do
      bench_case "$1.$p" -- "$cuprobe" run --quiet --trace launches -p "$build/probes/$p.cpb" \
        -o "$tmp/r" --format json -- "$work" "$@"
      # The full trace's delivered and dropped events, for its row.
      [[ $p == addr_trace* ]] && sed -n "s/^@accesses: /bench: $1 $p: /p" "$tmp/r.maps.txt" >&2
    done
    # kernel_trace with the device ring whose producers check the head first
    # (CUPROBE_RING_DATA=device; maps/map_set.h), against the default, whose
    # producers reserve first.
    bench_case "$1.kernel_trace_check_first" CUPROBE_RING_DATA=device -- "$cuprobe" run \
      --quiet --trace launches -p "$build/probes/kernel_trace.cpb" -o "$tmp/r" --format json \
      -- "$work" "$@"
    # addr_hist with its probe called, not inlined (CUPROBE_INLINE=0), and
    # with its probe placed after each access (CUPROBE_MEM_PROBE_AFTER=1).
    bench_case "$1.addr_hist_called" CUPROBE_INLINE=0 -- "$cuprobe" run --quiet \
      --trace launches -p "$build/probes/addr_hist.cpb" -o "$tmp/r" --format json -- "$work" "$@"
    bench_case "$1.addr_hist_after" CUPROBE_MEM_PROBE_AFTER=1 -- "$cuprobe" run --quiet \
      --trace launches -p "$build/probes/addr_hist.cpb" -o "$tmp/r" --format json -- "$work" "$@"
    # addr_hist and mem_regions with their warp-uniform adds (the first lane
    # adds for the warp) called from every lane instead (compiled with
    # CUPROBE_UNIFORM_ADDS=0: samples/CMakeLists.txt).
    for p in addr_hist mem_regions; do
      bench_case "$1.${p}_grouped" -- "$cuprobe" run --quiet --trace launches \
        -p "$build/probes/${p}_grouped.cpb" -o "$tmp/r" --format json -- "$work" "$@"
    done
    # kernel_trace split into its parts (issue 39): every record dropped at
    # the SM's hint (what a block pays without writing), and records
    # committed at GPU rather than system scope.
    for v in drop_always gpu_commit; do
      bench_case "$1.kernel_trace_$v" -- "$cuprobe" run --quiet --trace launches \
        -p "$build/probes/kernel_trace_$v.cpb" -o "$tmp/r" --format json -- "$work" "$@"
    done
    # addr_hist split into its parts: the site reading the address
    # (addr_touch), and one hot ARRAY counter added at every access
    # (mem_count called per access: the warp grouping and one atomic per
    # warp, no address).
    bench_case "$1.addr_touch" -- "$cuprobe" run --quiet --trace launches \
      -p "$build/probes/addr_touch.cpb" -o "$tmp/r" --format json -- "$work" "$@"
    # mem_trace, threadhist and mem_count with every site calling its probe
    # (no site or thread-range counters).
    for p in mem_trace threadhist mem_count; do
      bench_case "$1.${p}_calls" CUPROBE_SITE_COUNTERS=0 -- "$cuprobe" run --quiet \
        --trace launches -p "$build/probes/$p.cpb" -o "$tmp/r" --format json -- "$work" "$@"
    done
  done
done

# Issue 6's per-thread map: the exit probe's PERTHREAD add on an empty
# kernel against the hand-written per_thread_add kernel (4M threads each).
for ((r = 0; r < rounds * ptx_rows; r++)); do
  bench_case per_thread.hand_written -- "$work" per_thread_add 4194304 50
  bench_case per_thread.touch -- "$work" touch 4194304 50
  bench_case per_thread.probe -- "$cuprobe" run --quiet --trace launches \
    -p "$build/probes/perthread_add.cpb" -o "$tmp/r" --format json -- "$work" touch 4194304 50
done

# The patch backend (Compute Sanitizer): on cuBLAS sgemm (PyTorch, SASS
# only; issue 36's targets) and on vec_add, whose PTX the ptx rows above
# rewrite, so the two backends compare on one kernel.
if (( patch_rows )) && python3 -c 'import torch' 2>/dev/null; then
  for ((r = 0; r < rounds; r++)); do
    sgemm=(python3 "$root/bench/sgemm_loop.py" --n 4096 --iters 50)
    bench_case sgemm.native -- "${sgemm[@]}"
    # threadhist with -k '*': its sections name vec_add. cp.async copies
    # (CUPROBE_PATCH_ASYNC_COPIES=1) in a row of their own.
    bench_case sgemm.patch.mem_trace_async_copies CUPROBE_PATCH_ASYNC_COPIES=1 -- "$cuprobe" run \
      --quiet --backend patch --trace launches -p "$build/probes/mem_trace.cpb" -o "$tmp/r" \
      --format json -- "${sgemm[@]}"
    # mem_trace with its probe called at every access instead of counted
    # per access class (site counters: docs/REWRITER.md).
    bench_case sgemm.patch.mem_trace_called CUPROBE_SITE_COUNTERS=0 -- "$cuprobe" run \
      --quiet --backend patch --trace launches -p "$build/probes/mem_trace.cpb" -o "$tmp/r" \
      --format json -- "${sgemm[@]}"
    for p in empty count_entries threadhist mem_empty mem_count mem_trace addr_hist; do
      bench_case "sgemm.patch.$p" -- "$cuprobe" run --quiet --backend patch --trace launches \
        -p "$build/probes/$p.cpb" -k '*' -o "$tmp/r" --format json -- "${sgemm[@]}"
    done
  done
fi
for ((r = 0; r < rounds * patch_rows; r++)); do
  (( ptx_rows )) || bench_case vec_add.native -- "$work" vec_add 16777216 50
  for p in empty threadhist mem_trace; do
    bench_case "vec_add.patch.$p" -- "$cuprobe" run --quiet --backend patch --trace launches \
      -p "$build/probes/$p.cpb" -o "$tmp/r" --format json -- "$work" vec_add 16777216 50
  done
  # Block entry and exit patched, the adapters returning at once (the probe
  # selects `touch`, a kernel of the same module, not vec_add): the floor
  # of anything the patch backend does per block, a kernel timer included.
  bench_case vec_add.patch.unselected -- "$cuprobe" run --quiet --backend patch \
    --trace launches -p "$build/probes/empty.cpb" -k touch -o "$tmp/r" --format json -- \
    "$work" vec_add 16777216 50
done

python3 - "$tsv" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, s = line.split("\t")
    rows[name].append(float(s))
targets = {"empty": 1.03, "threadhist": 1.10, "kernel_trace": 1.15, "mem_trace": 1.5,
           "addr_hist": None, "mem_regions": None, "ol_addr_hist": None, "addr_touch": None,
           "addr_trace": None, "addr_trace_lanes": None}
# Issue 39's targets, per workload where they differ.
workload_targets = {("vec_add", "kernel_trace"): 1.05,
                    ("vec_add", "addr_hist"): 2.0, ("matmul", "addr_hist"): 1.3,
                    ("vec_add", "mem_regions"): 2.0, ("matmul", "mem_regions"): 1.3,
                    ("vec_add", "ol_addr_hist"): 2.0, ("matmul", "ol_addr_hist"): 1.3,
                    ("vec_add", "addr_trace"): 5.0}
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
        t = workload_targets.get((w, p), t)
        print("| %s | %s | %d | %.5f | %.3f | %s | %s |" %
              (w, p, len(v), m, m / b, "<= %.2f" % t if t else "",
               ("yes" if m / b <= t else "**no**") if t else ""))
    for suffix, label in (("called", "CUPROBE_INLINE=0"), ("after", "CUPROBE_MEM_PROBE_AFTER=1")):
        v = rows.get("%s.addr_hist_%s" % (w, suffix))
        if v:
            m = statistics.median(v)
            print("| %s | addr_hist, %s | %d | %.5f | %.3f | | |" % (w, label, len(v), m, m / b))
    for p in ("addr_hist", "mem_regions"):
        v = rows.get("%s.%s_grouped" % (w, p))
        if v:
            m = statistics.median(v)
            print("| %s | %s, every lane calls (CUPROBE_UNIFORM_ADDS=0) | %d | %.5f | %.3f | | |" %
                  (w, p, len(v), m, m / b))
    for v_name, label in (("drop_always", "every record dropped (CUPROBE_DIAG_RING_DROP=always)"),
                          ("gpu_commit", "GPU-scope commit (CUPROBE_DIAG_RING_COMMIT=gpu)")):
        v = rows.get("%s.kernel_trace_%s" % (w, v_name))
        if v:
            m = statistics.median(v)
            print("| %s | kernel_trace, %s | %d | %.5f | %.3f | | |" % (w, label, len(v), m, m / b))
    v = rows.get("%s.kernel_trace_check_first" % w)
    if v:
        m = statistics.median(v)
        print("| %s | kernel_trace, CUPROBE_RING_DATA=device | %d | %.5f | %.3f | | |" %
              (w, len(v), m, m / b))
    for p in ("mem_trace", "threadhist", "mem_count"):
        v = rows.get("%s.%s_calls" % (w, p))
        if v:
            print("| %s | %s, CUPROBE_SITE_COUNTERS=0 | %d | %.5f | %.3f | | |" %
                  (w, p, len(v), statistics.median(v), statistics.median(v) / b))
hand = rows.get("per_thread.hand_written")
if hand:
    h = statistics.median(hand)
    print()
    print("| per-thread add, 4M threads x 50 launches | runs | median GPU s | ratio vs hand-written | target | met |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("| hand-written kernel (atomicAdd to its own counter) | %d | %.5f | 1.000 | | |" % (len(hand), h))
    for name, label in (("touch", "empty kernel, no probe"),
                        ("probe", "empty kernel + exit probe: PERTHREAD map_add")):
        v = rows.get("per_thread." + name)
        if v:
            m = statistics.median(v)
            tgt = name == "probe"
            print("| %s | %d | %.5f | %.3f | %s | %s |" % (label, len(v), m, m / h,
                  "<= 1.20" if tgt else "", ("yes" if m / h <= 1.2 else "**no**") if tgt else ""))
patch_targets = {"empty": 1.02, "count_entries": 1.02, "threadhist": 1.05, "mem_empty": None,
                 "mem_count": None, "mem_trace": 1.5, "addr_hist": 3.0,
                 "mem_trace_called": None, "mem_trace_async_copies": None, "unselected": None}
for w, label in (("sgemm", "cuBLAS sgemm 4096^2 fp32 x 50 (PyTorch)"),
                 ("vec_add", "vec_add 16M x 50")):
    base = rows.get(w + ".native")
    if not base or not any(k.startswith(w + ".patch.") for k in rows):
        continue
    b = statistics.median(base)
    print()
    print("| --backend patch: %s | runs | median GPU s | ratio vs native | target | met |" % label)
    print("| --- | --- | --- | --- | --- | --- |")
    print("| native | %d | %.5f | 1.000 | | |" % (len(base), b))
    for p, t in patch_targets.items():
        v = rows.get("%s.patch.%s" % (w, p))
        if not v:
            continue
        m = statistics.median(v)
        tgt = w == "sgemm" and t is not None
        print("| %s | %d | %.5f | %.3f | %s | %s |" % (p, len(v), m, m / b,
              "<= %.2f" % t if tgt else "", ("yes" if m / b <= t else "**no**") if tgt else ""))
PY
