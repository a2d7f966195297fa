#!/usr/bin/env python3
# Writes the seed corpus of tests/fuzz/trace_records_fuzz.cc into this folder:
# sequences of trace records (probe/trace_records.h) in the input format the
# target's header describes (u16 type, u16 body length, body).
#
#   python3 tests/corpus/trace_records/make_seeds.py
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))
NAME, LAUNCH, KERNEL, MEMCPY, MEMSET, PROCESS, PROBE_KERNEL = 1, 2, 3, 4, 5, 6, 7
UNKNOWN_STREAM = (1 << 64) - 1
PID = 4242
BASE = 1_722_000_000_000_000_000


def rec(kind, body):
    return struct.pack("<HH", kind, len(body)) + body


def q(pid, local):  # ProcessQualifiedId
    return (pid << 32) | local


def name(name_id, text):
    b = text.encode()
    return rec(NAME, struct.pack("<QII", name_id, len(b), 0) + b)


def process(pid, name_id):
    return rec(PROCESS, struct.pack("<IIQQ", pid, 0, BASE, name_id))


def launch(corr, name_id, start, end, stream, api, result=0, grid=(1, 1, 1), block=(32, 1, 1),
           tid=PID):
    return rec(LAUNCH, struct.pack("<QQQQQII3I3IIHH", q(PID, corr), name_id, start, end, stream,
                                   PID, tid, *grid, *block, 0, api, result))


def kernel(corr, name_id, start, end, graph_node=0, graph_id=0, grid=(4, 1, 1)):
    return rec(KERNEL, struct.pack("<QQQQQIII3I3IIIIIIQ", q(PID, corr), name_id, start, end,
                                   graph_node, 0, 1, 7, *grid, 256, 1, 1, 0, 0, 16, graph_id, 0,
                                   corr))


def memcpy(corr, start, end, nbytes):
    return rec(MEMCPY, struct.pack("<QQQQIIIBBBB", q(PID, corr), start, end, nbytes, 0, 1, 7, 1, 1,
                                   3, 0))


def memset(corr, start, end, nbytes):
    return rec(MEMSET, struct.pack("<QQQQIIII", q(PID, corr), start, end, nbytes, 0, 1, 7, 0))


def seed(file_name, *records):
    with open(os.path.join(here, file_name + ".bin"), "wb") as f:
        f.write(b"".join(records))


VEC = q(PID, 1)
GRAPH_KERNEL = q(PID, 2)
names = name(VEC, "_Z7vec_addPKfS0_Pfi") + name(GRAPH_KERNEL, "_Z4bumpPii") + name(q(PID, 3), "app")

# Launch callbacks: named launches with a stream, their kernels, copies.
seed("callbacks", names, process(PID, q(PID, 3)),
     launch(1, VEC, BASE + 100, BASE + 200, 0x10, 1),
     kernel(1, VEC, BASE + 300, BASE + 900),
     launch(2, VEC, BASE + 1000, BASE + 1100, 0x10, 2, result=1),
     memcpy(3, BASE + 50, BASE + 90, 4096), memset(4, BASE + 95, BASE + 99, 1024))
# API activity: a runtime and a driver record of one call in both orders,
# kernels before and after their launches, a failed launch, a graph launch
# with its kernels, a call CUPTI did not time.
seed("activity", names,
     launch(10, 0, BASE + 110, BASE + 150, UNKNOWN_STREAM, 1),
     launch(10, 0, BASE + 100, BASE + 200, UNKNOWN_STREAM, 5),
     kernel(10, VEC, BASE + 300, BASE + 900),
     kernel(11, VEC, BASE + 1300, BASE + 1900),
     launch(11, 0, BASE + 1000, BASE + 1100, UNKNOWN_STREAM, 5),
     launch(11, 0, BASE + 1010, BASE + 1050, UNKNOWN_STREAM, 1),
     launch(12, 0, BASE + 2000, BASE + 2010, UNKNOWN_STREAM, 5, result=9),
     launch(13, 0, BASE + 3000, BASE + 3100, UNKNOWN_STREAM, 8),
     kernel(13, GRAPH_KERNEL, BASE + 3200, BASE + 3300, graph_node=5, graph_id=1),
     kernel(13, GRAPH_KERNEL, BASE + 3400, BASE + 3500, graph_node=6, graph_id=1),
     launch(14, 0, 0, 0, UNKNOWN_STREAM, 5),
     kernel(14, VEC, BASE + 4000, BASE + 4100))
# Odd values: an unknown API, end before start, a short body, an unknown type.
seed("odd", names,
     launch(20, VEC, BASE + 500, BASE + 100, 0x20, 99),
     kernel(20, 0, BASE + 900, BASE + 800),
     rec(LAUNCH, b"\x01\x02\x03"),
     rec(42, b"\x00" * 16),
     rec(NAME, struct.pack("<QII", 0, 1000, 0) + b"x"))
