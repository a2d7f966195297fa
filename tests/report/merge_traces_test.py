#!/usr/bin/env python3
"""ctest merge_traces_test: scripts/merge-traces.py on two copies of the
golden timeline (tests/report/golden/chrome_trace.json), the second shifted
by 1 ms as a second rank would be."""
import json
import os
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
golden = os.path.join(root, "tests/report/golden/chrome_trace.json")
script = os.path.join(root, "scripts/merge-traces.py")

with open(golden, encoding="utf-8") as f:
    a = json.load(f)
b = json.loads(json.dumps(a))
b["otherData"]["origin_ns"] = str(int(a["otherData"]["origin_ns"]) + 1_000_000)

with tempfile.TemporaryDirectory() as d:
    pa, pb, out = (os.path.join(d, n) for n in ("r0.trace.json", "r1.trace.json", "m.json"))
    for p, doc in ((pa, a), (pb, b)):
        with open(p, "w", encoding="utf-8") as f:
            json.dump(doc, f)
    subprocess.run([sys.executable, script, "-o", out, "--label", "node1/r0", pa, pb], check=True)
    with open(out, encoding="utf-8") as f:
        m = json.load(f)

    # Bad input: one clear line and a non-zero exit.
    bad = os.path.join(d, "bad.json")
    with open(bad, "w") as f:
        f.write("{not json")
    r = subprocess.run([sys.executable, script, "-o", out, bad], capture_output=True, text=True)
    assert r.returncode != 0 and "bad.json" in r.stderr, r

ev = m["traceEvents"]
n = len(a["traceEvents"])
assert len(ev) == 2 * n, (len(ev), n)
first, second = ev[:n], ev[n:]
pids_a = {e["pid"] for e in first}
pids_b = {e["pid"] for e in second}
assert pids_a and pids_b and not (pids_a & pids_b), (pids_a, pids_b)
assert len(pids_a) == len({e["pid"] for e in a["traceEvents"]})
names = sorted(e["args"]["name"] for e in ev if e.get("name") == "process_name")
assert names == sorted(["node1/r0: vec_app", "node1/r0: GPU 0", "node1/r0: GPU 1",
                        "r1: vec_app", "r1: GPU 0", "r1: GPU 1"]), names
flows_a = {e["id"] for e in first if e.get("ph") in ("s", "f")}
flows_b = {e["id"] for e in second if e.get("ph") in ("s", "f")}
assert flows_a and not (flows_a & flows_b)
# Every flow still has its start and its end.
for flows, part in ((flows_a, first), (flows_b, second)):
    for fid in flows:
        phases = sorted(e["ph"] for e in part if e.get("id") == fid and e.get("ph") in ("s", "f"))
        assert phases == ["f", "s"], (fid, phases)
# The second rank's events are 1 ms (1000 us) later; the first's unchanged.
xa = [e for e in first if e.get("ph") == "X"]
xb = [e for e in second if e.get("ph") == "X"]
assert [e["ts"] for e in xa] == [e["ts"] for e in a["traceEvents"] if e.get("ph") == "X"]
assert all(abs(eb["ts"] - ea["ts"] - 1000.0) < 1e-6 for ea, eb in zip(xa, xb))
assert m["otherData"]["origin_ns"] == a["otherData"]["origin_ns"]
print("merge_traces_test: ok")
