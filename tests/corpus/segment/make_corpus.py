#!/usr/bin/env python3
# File: tests/corpus/segment/make_corpus.py
#
# Writes the adversarial session-segment files of this folder and EXPECTED,
# the table segment_test's corpus test checks them against. Each .seg file
# is loaded into a POSIX shm object and opened with Session::Open. The layout
# below mirrors maps/segment_layout.h (layout version 5); the valid files are
# the proof that it does, since the test requires them to open and drain.
#
#   python3 tests/corpus/segment/make_corpus.py   # rewrites the files here
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

SEGMENT_MAGIC = 0x5345424F52505543  # "CUPROBES"
RING_MAGIC = 0x31474E4952525043     # "CPRRING1"
HEADER_SIZE = 1024
CONTROL_SIZE = 512
RING_OFFSET = 1024
CAPACITY = 256


def header(segment_size, layout_version=5, header_size=HEADER_SIZE, records_version=2,
           ring_offset=RING_OFFSET, ring_capacity=CAPACITY, state=1, magic=SEGMENT_MAGIC,
           hook_state=0, reason=b"", maps_offset=0, maps_size=0, bundle_offset=0, bundle_size=0,
           attach_owner=0, attach_request=0, attach_name=b""):
    h = bytearray(HEADER_SIZE)
    struct.pack_into("<QIIQIIQQQQ", h, 0, magic, layout_version, header_size, segment_size,
                     4242, records_version, ring_offset, ring_capacity, maps_offset, maps_size)
    struct.pack_into("<III", h, 64, 0, hook_state, state)  # hook_pid, hook_state, session_state
    h[224:224 + len(reason)] = reason
    struct.pack_into("<QQ", h, 480, bundle_offset, bundle_size)
    struct.pack_into("<IIQ", h, 496, attach_owner, 0, attach_request)
    h[512:512 + len(attach_name)] = attach_name
    return h


def control(capacity=CAPACITY, head=0, tail=0, written=0, magic=RING_MAGIC):
    c = bytearray(CONTROL_SIZE)
    struct.pack_into("<QQ", c, 0, magic, capacity)
    struct.pack_into("<Q", c, 64, head)
    struct.pack_into("<Q", c, 128, tail)
    struct.pack_into("<Q", c, 192, written)
    return c


def record(rtype, body):
    size = (8 + len(body) + 7) & ~7
    return struct.pack("<IHH", size, rtype, 0) + body + b"\0" * (size - 8 - len(body))


def segment(hdr_kwargs=None, ctl_kwargs=None, data=b"", capacity=CAPACITY, size=None):
    seg_size = RING_OFFSET + CONTROL_SIZE + capacity
    hk = dict(ring_capacity=capacity)
    hk.update(hdr_kwargs or {})
    ck = dict(capacity=capacity)
    ck.update(ctl_kwargs or {})
    ring = bytearray(capacity)
    ring[:len(data)] = data
    out = header(hk.pop("segment_size", seg_size), **hk) + control(**ck) + ring
    return bytes(out[:size] if size is not None else out)


NAME = record(1, struct.pack("<QII", 1, 5, 0) + b"hello")          # kName
PROCESS = record(6, struct.pack("<IIQQ", 4242, 0, 1000, 1))        # kProcess
GOOD = NAME + PROCESS
GOOD_CTL = dict(head=len(GOOD), written=2)


def wrapped():
    # One 48-byte record whose header sits 16 bytes before the end: its body
    # wraps to the start of the data area.
    rec = record(6, struct.pack("<IIQQ", 1, 0, 2, 3) + b"\x11" * 16)
    assert len(rec) == 48
    ring = bytearray(CAPACITY)
    start = CAPACITY - 16
    ring[start:] = rec[:16]
    ring[:32] = rec[16:]
    return segment(ctl_kwargs=dict(tail=start + CAPACITY, head=start + CAPACITY + 48, written=9),
                   data=bytes(ring))


def corrupt_second_record():
    data = bytearray(GOOD)
    struct.pack_into("<I", data, len(NAME), 12)  # size word of record 2
    return segment(ctl_kwargs=GOOD_CTL, data=bytes(data))


def record_beyond_head():
    data = bytearray(GOOD)
    struct.pack_into("<I", data, 0, 200)
    return segment(ctl_kwargs=GOOD_CTL, data=bytes(data))


VALID_SIZE = RING_OFFSET + CONTROL_SIZE + CAPACITY
ELF = b"\x7fELF\x02\x01\x01\x00" + b"\0" * 8 + struct.pack("<HHI", 3, 62, 1)

# name, bytes, Open code, Open message part, [records drained, Drain code, Drain message part]
CASES = [
    ("valid_minimal.seg", segment(ctl_kwargs=GOOD_CTL, data=GOOD), "OK", "-", 2, "OK", "-"),
    ("valid_wrapped.seg", wrapped(), "OK", "-", 1, "OK", "-"),
    ("hook_reason_unterminated.seg",
     segment(hdr_kwargs=dict(state=4, hook_state=3, reason=b"A" * 256), ctl_kwargs=GOOD_CTL,
             data=GOOD), "OK", "-", 2, "OK", "-"),
    ("ring_corrupt_record.seg", corrupt_second_record(), "OK", "-", 1, "DATA_LOSS",
     "bad record size"),
    ("ring_record_beyond_head.seg", record_beyond_head(), "OK", "-", 0, "DATA_LOSS",
     "bad record size (size word 200, head 64"),
    ("empty.seg", b"", "UNAVAILABLE", "is empty"),
    ("tiny_garbage.seg", bytes((i * 37 + 11) & 0xFF for i in range(100)), "INVALID_ARGUMENT",
     "is not a cuprobe session (magic 0x"),
    ("truncated_header.seg", segment(ctl_kwargs=GOOD_CTL, data=GOOD, size=512), "DATA_LOSS",
     "truncated: 512 bytes"),
    ("elf_object.seg", ELF + b"\0" * (4096 - len(ELF)), "INVALID_ARGUMENT",
     "is not a cuprobe session (magic 0x00010102464c457f"),
    ("all_zero.seg", b"\0" * VALID_SIZE, "UNAVAILABLE", "not initialized yet"),
    ("not_ready.seg", segment(hdr_kwargs=dict(state=0)), "UNAVAILABLE", "not ready yet"),
    ("future_layout.seg", segment(hdr_kwargs=dict(layout_version=7)), "FAILED_PRECONDITION",
     "layout version 7, this build understands 5"),
    ("layout_version_1.seg", segment(hdr_kwargs=dict(layout_version=1)), "FAILED_PRECONDITION",
     "layout version 1, this build understands 5"),
    ("layout_version_3.seg", segment(hdr_kwargs=dict(layout_version=3)), "FAILED_PRECONDITION",
     "layout version 3, this build understands 5"),
    ("layout_version_4.seg", segment(hdr_kwargs=dict(layout_version=4)), "FAILED_PRECONDITION",
     "layout version 4, this build understands 5"),
    # An attach request whose name fills all 64 bytes (no NUL): the segment
    # opens, and the hook refuses the request (hook_test, segment_test).
    ("attach_name_unterminated.seg",
     segment(hdr_kwargs=dict(attach_owner=4242, attach_request=1, attach_name=b"B" * 64),
             ctl_kwargs=GOOD_CTL, data=GOOD), "OK", "-", 2, "OK", "-"),
    ("maps_offset_without_size.seg", segment(hdr_kwargs=dict(maps_offset=4096)), "DATA_LOSS",
     "maps_offset 4096 with an empty maps region"),
    ("maps_region_past_end.seg", segment(hdr_kwargs=dict(maps_offset=4096, maps_size=4096)),
     "DATA_LOSS", "maps region at offset 4096 (4096 bytes) is not a page-aligned range"),
    ("maps_region_misaligned.seg", segment(hdr_kwargs=dict(maps_offset=VALID_SIZE, maps_size=8)),
     "DATA_LOSS", "is not a page-aligned range"),
    ("valid_with_bundle.seg",
     segment(hdr_kwargs=dict(bundle_offset=VALID_SIZE, bundle_size=64,
                             segment_size=VALID_SIZE + 64), ctl_kwargs=GOOD_CTL, data=GOOD)
     + b"CPB!" + b"\0" * 60, "OK", "-", 2, "OK", "-"),
    ("bundle_offset_without_size.seg", segment(hdr_kwargs=dict(bundle_offset=VALID_SIZE)),
     "DATA_LOSS", "bundle_offset %d with an empty bundle" % VALID_SIZE),
    ("bundle_past_end.seg", segment(hdr_kwargs=dict(bundle_offset=VALID_SIZE, bundle_size=64)),
     "DATA_LOSS", "bundle at offset %d (64 bytes) is not a 64-byte-aligned range" % VALID_SIZE),
    ("bundle_in_ring.seg", segment(hdr_kwargs=dict(bundle_offset=RING_OFFSET, bundle_size=64)),
     "DATA_LOSS", "is not a 64-byte-aligned range between the end of the ring and maps"),
    ("bundle_size_huge.seg",
     segment(hdr_kwargs=dict(bundle_offset=VALID_SIZE - 64, bundle_size=0xFFFFFFFFFFFFFFC0)),
     "DATA_LOSS", "is not a 64-byte-aligned range"),
    ("records_version_1.seg", segment(hdr_kwargs=dict(records_version=1)), "FAILED_PRECONDITION",
     "trace records version 1, this build understands 2"),
    ("records_version_3.seg", segment(hdr_kwargs=dict(records_version=3)), "FAILED_PRECONDITION",
     "trace records version 3, this build understands 2"),
    ("header_size_lies.seg", segment(hdr_kwargs=dict(header_size=4096)), "DATA_LOSS",
     "header_size 4096"),
    ("segment_size_larger.seg", segment(hdr_kwargs=dict(segment_size=VALID_SIZE + 4096)),
     "DATA_LOSS", "header says segment_size %d, but the shared memory object is %d bytes"
     % (VALID_SIZE + 4096, VALID_SIZE)),
    ("segment_size_smaller.seg", segment(hdr_kwargs=dict(segment_size=1024)), "DATA_LOSS",
     "header says segment_size 1024"),
    ("ring_offset_past_end.seg", segment(hdr_kwargs=dict(ring_offset=VALID_SIZE + 64)),
     "DATA_LOSS", "leaves no room"),
    ("ring_offset_huge.seg", segment(hdr_kwargs=dict(ring_offset=0xFFFFFFFFFFFFFFC0)),
     "DATA_LOSS", "leaves no room"),
    ("ring_offset_misaligned.seg", segment(hdr_kwargs=dict(ring_offset=RING_OFFSET + 8)),
     "DATA_LOSS", "64-byte-aligned"),
    ("ring_offset_in_header.seg", segment(hdr_kwargs=dict(ring_offset=0)), "DATA_LOSS",
     "64-byte-aligned offset past"),
    ("ring_capacity_overflow.seg", segment(hdr_kwargs=dict(ring_capacity=0xFFFFFFFFFFFFFFF8)),
     "DATA_LOSS", "does not fit"),
    ("ring_capacity_too_small.seg", segment(capacity=8), "DATA_LOSS", "not a multiple of 8 in"),
    ("ring_capacity_odd.seg", segment(hdr_kwargs=dict(ring_capacity=CAPACITY - 4)), "DATA_LOSS",
     "not a multiple of 8 in"),
    ("unknown_state.seg", segment(hdr_kwargs=dict(state=99)), "DATA_LOSS",
     "unknown session state 99"),
    ("ring_unformatted.seg", segment(ctl_kwargs=dict(magic=0)), "DATA_LOSS", "not formatted"),
    ("ring_capacity_disagrees.seg", segment(ctl_kwargs=dict(capacity=512)), "DATA_LOSS",
     "says capacity 512"),
    ("ring_cursors_insane.seg", segment(ctl_kwargs=dict(head=64, tail=128)), "DATA_LOSS",
     "cursors are inconsistent"),
]


def main():
    for old in os.listdir(HERE):
        if old.endswith(".seg"):
            os.remove(os.path.join(HERE, old))
    lines = ["# file\topen code\topen message part\t[records drained\tdrain code\tdrain message part]",
             "# Generated by make_corpus.py; '-' means no message is checked."]
    for case in CASES:
        name, data = case[0], case[1]
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)
        lines.append("\t".join(str(x) for x in (name,) + tuple(case[2:])))
    with open(os.path.join(HERE, "EXPECTED"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
