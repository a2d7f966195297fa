#!/usr/bin/env python3
"""Launch latency from the launchlate probe, joined to the trace by grid id.

  cuprobe run -p samples/launchlate/launchlate.bpf.c --events json -o late -- ./app
  python3 samples/launchlate/launchlate.py late

Reads PREFIX.trace.json (the timeline: launch calls and kernels, CUPTI's
clock) and PREFIX.events (the probe's launch_starts events: grid id and
%globaltimer at block (0,0,0)'s first instruction). Each event is matched to
the kernel with its grid id, and the kernel to its launch call by
correlation id. The GPU timer is calibrated onto CUPTI's clock by the median
of (CUPTI kernel start - block 0 start) over the matched launches; the
spread of that difference is printed, since it is what the probe sees that
CUPTI does not. Then, per kernel, the latency from the launch call on the
CPU to block 0's first instruction on the GPU, and a log2 histogram.

One process and one CUDA context per run (grid ids are unique within a
context, correlation ids within a process); kernels that graphs launched are
counted and left out, as in `cuprobe trace`'s latency table.
"""
import argparse
import json
import statistics
import sys


def die(message):
    print(f"launchlate.py: {message}", file=sys.stderr)
    sys.exit(1)


def load_trace(path):
    """Kernels by grid id, launch-call starts by correlation id (ns), and the
    grid ids of kernels that graphs launched (one call, many kernels: no
    latency of their own, as in cuprobe trace's table)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        origin = int(doc["otherData"]["origin_ns"])
        events = doc["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        die(f"{path}: not a cuprobe timeline ({e})")
    kernels, launches, graph_kernels = {}, {}, set()
    contexts, processes = {}, set()
    for e in events:
        if e.get("ph") != "X":
            continue
        args = e.get("args", {})
        start = origin + round(float(e["ts"]) * 1000)
        if e.get("cat") == "kernel" and "grid id" in args:
            grid = int(args["grid id"])
            # Grid ids are unique within a context only.
            context = args.get("context")
            if contexts.setdefault(grid, context) != context:
                die(f"{path}: grid id {grid} appears in contexts {contexts[grid]} and {context}; "
                    "launchlate.py reads runs with one CUDA context")
            if "graph id" in args or "graph node id" in args:
                graph_kernels.add(grid)
                continue
            kernels[grid] = (e["name"], start, int(args["correlation id"]))
        elif e.get("cat") == "cuda_api" and "correlation id" in args:
            processes.add(e.get("pid"))
            launches[int(args["correlation id"])] = start
    if len(processes) > 1:
        die(f"{path}: launch calls of {len(processes)} processes; launchlate.py reads runs of one "
            "process (correlation ids are per process)")
    return kernels, launches, graph_kernels


def load_events(path):
    """(grid id, block 0 start) of each launch_starts event."""
    starts = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    event = json.loads(line)
                except ValueError as e:
                    die(f"{path}:{number}: not a JSON event ({e}); run with --events json")
                if event.get("map") != "launch_starts":
                    continue
                fields = event["fields"]
                starts.append((int(fields["grid_id"]), int(fields["timestamp_ns"])))
    except OSError as e:
        die(f"{path}: {e}")
    return starts


def percentile(sorted_values, p):
    """Nearest rank."""
    rank = max(1, -(-len(sorted_values) * p // 100))
    return sorted_values[int(rank) - 1]


def log2_histogram(values):
    buckets = {}
    for v in values:
        b = max(v, 1).bit_length() - 1
        buckets[b] = buckets.get(b, 0) + 1
    peak = max(buckets.values())
    lines = []
    for b in range(min(buckets), max(buckets) + 1):
        n = buckets.get(b, 0)
        bar = "@" * round(52 * n / peak)
        lines.append(f"[{human(1 << b)}, {human(2 << b)})".ljust(20) + f"{n:6d} |{bar:<52}|")
    return lines


def human(v):
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if v >= size:
            return f"{v // size}{unit}"
    return str(v)


def main(argv):
    parser = argparse.ArgumentParser(
        description="Launch latency (CPU launch call -> block 0's first instruction) from the "
                    "launchlate probe's events and the trace, joined by grid id.",
        epilog="example: cuprobe run -p samples/launchlate/launchlate.bpf.c --events json "
               "-o late -- ./app && launchlate.py late")
    parser.add_argument("prefix", help="the -o PREFIX of the cuprobe run")
    args = parser.parse_args(argv)
    kernels, launches, graph_kernels = load_trace(args.prefix + ".trace.json")
    starts = load_events(args.prefix + ".events")
    if not starts:
        die(f"{args.prefix}.events has no launch_starts events (was the probe attached?)")

    matched = []  # (name, api start, CUPTI kernel start, block 0 start on the GPU timer)
    in_graphs = unmatched = 0
    for grid, gpu_start in starts:
        if grid in graph_kernels:
            in_graphs += 1
            continue
        kernel = kernels.get(grid)
        if kernel is None or kernel[2] not in launches:
            unmatched += 1
            continue
        name, cupti_start, correlation = kernel
        matched.append((name, launches[correlation], cupti_start, gpu_start))
    print(f"{len(starts)} launch events, {len(matched)} joined to their kernel and launch call"
          + (f", {in_graphs} of kernels graphs launched (left out)" if in_graphs else "")
          + (f", {unmatched} without a kernel in the trace (dropped records, or not traced)"
             if unmatched else ""))
    if not matched:
        die("nothing to report")

    offsets = sorted(c - g for _, _, c, g in matched)
    offset = offsets[len(offsets) // 2]
    residuals = sorted(g + offset - c for _, _, c, g in matched)
    print(f"\nGPU timer onto CUPTI's clock: {offset:+d} ns (median of CUPTI start - block 0 start)")
    print(f"block 0's first instruction after CUPTI's kernel start, calibrated (ns): "
          f"min {residuals[0]}, median {residuals[len(residuals) // 2]}, "
          f"p99 {percentile(residuals, 99)}, max {residuals[-1]}")

    by_name = {}
    latencies = []
    for name, api, _, gpu in matched:
        latency = max(0, gpu + offset - api)
        by_name.setdefault(name, []).append(latency)
        latencies.append(latency)
    print("\nCUDA launch latency (launch call on the CPU to block 0's first instruction on the GPU):\n")
    print(" Kernels  Avg (ns)  Med (ns)  Min (ns)  P99 (ns)  Max (ns)  Name")
    print(" -------  --------  --------  --------  --------  --------  ----")
    for name, values in sorted(by_name.items(), key=lambda kv: kv[0]):
        values.sort()
        print(f" {len(values):7d}  {statistics.fmean(values):8.1f}  {values[len(values) // 2]:8d}"
              f"  {values[0]:8d}  {percentile(values, 99):8d}  {values[-1]:8d}  {name}")
    print("\nCUDA launch latency histogram (ns, every launch):")
    for line in log2_histogram(latencies):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
