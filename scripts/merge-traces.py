#!/usr/bin/env python3
"""Merge cuprobe timelines (PREFIX.trace.json) of several ranks or machines
into one Perfetto / chrome://tracing file.

  scripts/merge-traces.py -o job.trace.json rank0.trace.json rank1.trace.json
  scripts/merge-traces.py -o job.trace.json --label node1/r0 a.trace.json \\
                          --label node2/r1 b.trace.json

Each input becomes its own group of tracks: its processes are renumbered so
that no two inputs share a pid (every rank's GPU 0 is otherwise the same
track), their names start with the input's label (default: the file name
without .trace.json), flow ids are renumbered, and times are shifted onto the
earliest input's origin (otherData.origin_ns, the CUPTI clock: CLOCK_REALTIME
on Linux, so traces from several machines line up as well as their clocks
are synchronized, e.g. by NTP or PTP).
"""
import argparse
import json
import os
import sys


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"merge-traces: {path}: {e}")
    if isinstance(doc, list):
        return {"traceEvents": doc, "otherData": {}}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        sys.exit(f"merge-traces: {path}: not a Chrome trace (no traceEvents array)")
    return doc


def default_label(path):
    name = os.path.basename(path)
    for suffix in (".trace.json", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def main(argv):
    parser = argparse.ArgumentParser(
        description="Merge cuprobe timelines of several ranks or machines into one file.",
        epilog="example: merge-traces.py -o job.trace.json rank0.trace.json rank1.trace.json")
    parser.add_argument("-o", "--output", required=True, help="merged trace to write")
    parser.add_argument("--label", action="append", default=[],
                        help="label of the next input (in order; default: its file name)")
    parser.add_argument("inputs", nargs="+", help="PREFIX.trace.json files from cuprobe trace")
    args = parser.parse_args(argv)
    if len(args.label) > len(args.inputs):
        parser.error("more --label than inputs")

    docs = [load(p) for p in args.inputs]
    origins = []
    for path, doc in zip(args.inputs, docs):
        origin = doc.get("otherData", {}).get("origin_ns", "0")
        try:
            origins.append(int(origin))
        except (TypeError, ValueError):
            sys.exit(f"merge-traces: {path}: bad otherData.origin_ns {origin!r}")
    base = min(origins)

    merged = []
    next_pid = 1
    next_flow = 1
    dropped = 0
    for i, (path, doc) in enumerate(zip(args.inputs, docs)):
        label = args.label[i] if i < len(args.label) else default_label(path)
        shift_us = (origins[i] - base) / 1000.0
        pids = {}
        flows = {}

        def pid_of(old):
            nonlocal next_pid
            if old not in pids:
                pids[old] = next_pid
                next_pid += 1
            return pids[old]

        for event in doc["traceEvents"]:
            if not isinstance(event, dict):
                continue
            e = dict(event)
            if "pid" in e:
                e["pid"] = pid_of(e["pid"])
            if "ts" in e and isinstance(e["ts"], (int, float)):
                e["ts"] = round(e["ts"] + shift_us, 3)
            if e.get("ph") in ("s", "t", "f") and "id" in e:
                key = e["id"]
                if key not in flows:
                    flows[key] = next_flow
                    next_flow += 1
                e["id"] = flows[key]
            if e.get("ph") == "M" and e.get("name") == "process_name":
                args_ = dict(e.get("args", {}))
                args_["name"] = f"{label}: {args_.get('name', '')}"
                e["args"] = args_
            if e.get("ph") == "M" and e.get("name") == "process_sort_index":
                args_ = dict(e.get("args", {}))
                args_["sort_index"] = i * 1000 + int(args_.get("sort_index", 0))
                e["args"] = args_
            merged.append(e)
        # Inputs without process names still get their label.
        named = {e["pid"] for e in merged if e.get("ph") == "M" and e.get("name") == "process_name"}
        for new in pids.values():
            if new not in named:
                merged.append({"name": "process_name", "ph": "M", "pid": new, "tid": 0,
                               "args": {"name": label}})
        dropped += int(doc.get("otherData", {}).get("dropped_records", 0) or 0)

    out = {"traceEvents": merged, "displayTimeUnit": "ns",
           "otherData": {"generator": "cuprobe merge-traces", "origin_ns": str(base),
                         "inputs": args.inputs, "dropped_records": dropped}}
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(out, f, separators=(",", ":"))
            f.write("\n")
    except OSError as e:
        sys.exit(f"merge-traces: {args.output}: {e}")
    print(f"merge-traces: {len(merged)} events from {len(docs)} traces -> {args.output}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
