"""Flattens a `cuprobe trace --format json` summary into tab-separated lines
that C++ tests read without a JSON library:

    K <tab> instances <tab> demangled name
    L <tab> calls <tab> demangled name
    C <tab> count <tab> memcpy operation
    S <tab> count <tab> memset operation
    T <tab> key <tab> value            (totals and dropped counters)
"""
import json
import sys

with open(sys.argv[1]) as f:
    summary = json.load(f)
for k in summary["kernels"]:
    print("K\t%d\t%s" % (k["instances"], k["name"]))
for k in summary["launches"]:
    print("L\t%d\t%s" % (k["calls"], k["name"]))
for k in summary["memcpy"]:
    print("C\t%d\t%s" % (k["count"], k["operation"]))
for k in summary["memset"]:
    print("S\t%d\t%s" % (k["count"], k["operation"]))
for section in ("totals", "dropped"):
    for key, value in summary.get(section, {}).items():
        print("T\t%s\t%s" % (key, value))
