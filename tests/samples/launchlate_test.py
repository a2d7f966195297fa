#!/usr/bin/env python3
"""ctest launchlate_script_test: samples/launchlate/launchlate.py on the golden
timeline (tests/report/golden/chrome_trace.json) and launch_starts events made
from it: block 0 starts 5 us before CUPTI's kernel start on the GPU timer
(one launch 7 ns later than the others), plus an event of a launch the trace
does not have. The latencies must equal CUPTI's kernel start minus the launch
call's start (plus the 7 ns), per kernel name."""
import json
import os
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
golden = os.path.join(root, "tests/report/golden/chrome_trace.json")
script = os.path.join(root, "samples/launchlate/launchlate.py")

with open(golden, encoding="utf-8") as f:
    trace = json.load(f)
origin = int(trace["otherData"]["origin_ns"])
launches, kernels = {}, []
for e in trace["traceEvents"]:
    if e.get("ph") != "X":
        continue
    start = origin + round(e["ts"] * 1000)
    if e["cat"] == "cuda_api":
        launches[e["args"]["correlation id"]] = start
    elif e["cat"] == "kernel":
        in_graph = "graph id" in e["args"] or "graph node id" in e["args"]
        kernels.append((e["name"], start, e["args"]["correlation id"], e["args"]["grid id"],
                        in_graph))
assert len(kernels) >= 10, kernels

graphs = sum(1 for k in kernels if k[4])
assert graphs >= 1, kernels
late_grid = kernels[3][3]
expected = {}
events = []
for name, start, correlation, grid, in_graph in kernels:
    extra = 7 if grid == late_grid else 0
    gpu = start - 5000 + extra
    events.append({"map": "launch_starts", "bytes": 24,
                   "fields": {"grid_id": grid, "timestamp_ns": gpu, "kernel_id": 0, "blocks": 1}})
    if not in_graph:
        expected.setdefault(name, []).append(start + extra - launches[correlation])
events.append({"map": "launch_starts", "bytes": 24,
               "fields": {"grid_id": 999999, "timestamp_ns": origin, "kernel_id": 0, "blocks": 1}})
events.append({"map": "other_ring", "bytes": 8, "fields": {"x": 1}})

with tempfile.TemporaryDirectory() as d:
    prefix = os.path.join(d, "late")
    with open(prefix + ".trace.json", "w", encoding="utf-8") as f:
        json.dump(trace, f)
    with open(prefix + ".events", "w", encoding="utf-8") as f:
        f.write("cuprobe: a status line the CLI may write\n")
        for e in events:
            f.write(json.dumps(e) + "\n")
    r = subprocess.run([sys.executable, script, prefix], capture_output=True, text=True)
    assert r.returncode == 0, r
    out = r.stdout
    n = len(kernels)
    assert (f"{n + 1} launch events, {n - graphs} joined to their kernel and launch call, "
            f"{graphs} of kernels graphs launched (left out), 1 without a kernel") in out, out
    assert "GPU timer onto CUPTI's clock: +5000 ns" in out, out
    assert "min 0, median 0, p99 7, max 7" in out, out
    for name, values in expected.items():
        values.sort()
        row = (f" {len(values):7d}  {sum(values) / len(values):8.1f}  {values[len(values) // 2]:8d}"
               f"  {values[0]:8d}")
        assert any(line.startswith(row) and line.endswith(name) for line in out.splitlines()), \
            (name, row, out)
    assert "histogram" in out, out

    # Bad input: one clear line naming the file, exit status 1.
    with open(prefix + ".events", "w", encoding="utf-8") as f:
        f.write("{not json\n")
    r = subprocess.run([sys.executable, script, prefix], capture_output=True, text=True)
    assert r.returncode == 1 and "late.events:1" in r.stderr and "--events json" in r.stderr, r
    r = subprocess.run([sys.executable, script, os.path.join(d, "missing")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "missing.trace.json" in r.stderr, r
    # Two contexts with the same grid id: refused, not silently mixed.
    two = json.loads(json.dumps(trace))
    kernel_slices = [e for e in two["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    kernel_slices[1]["args"]["grid id"] = kernel_slices[0]["args"]["grid id"]
    kernel_slices[1]["args"]["context"] = kernel_slices[0]["args"]["context"] + 1
    with open(prefix + ".trace.json", "w", encoding="utf-8") as f:
        json.dump(two, f)
    r = subprocess.run([sys.executable, script, prefix], capture_output=True, text=True)
    assert r.returncode == 1 and "one CUDA context" in r.stderr, r
print("launchlate_script_test: ok")
