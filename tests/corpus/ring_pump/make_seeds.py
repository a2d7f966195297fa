#!/usr/bin/env python3
# Writes the seed corpus of tests/fuzz/ring_pump_fuzz.cc into this folder:
# device rings (4 KiB capacity; 8 KiB of data for producers that reserve
# first) in the input format the target's header describes.
#
#   python3 tests/corpus/ring_pump/make_seeds.py
import os
import struct

COMMIT, DISCARD, PAD = 0x80000000, 0x40000000, 0x20000000
here = os.path.dirname(os.path.abspath(__file__))


def record(body, flags=COMMIT, word1=0):
    n = len(body)
    total = (8 + n + 7) & ~7
    return struct.pack("<II", flags | n, word1) + body + bytes(total - 8 - n)


def reserved(body, committed=True, discard=False):  # bpf_ringbuf_reserve: commit in word 1
    w1 = (COMMIT if committed else 0) | (DISCARD if discard else 0)
    return record(body, flags=0, word1=w1)


def pad(total):
    return struct.pack("<II", COMMIT | PAD | (total - 8), 0)


def seed(name, speculative, data, head=None):
    if head is None:
        head = len(data)
    with open(os.path.join(here, name + ".bin"), "wb") as f:
        f.write(bytes([1 if speculative else 0]) + struct.pack("<H", head // 8) + data)


events = b"".join(record(struct.pack("<QQ", i, i * 7)) for i in range(3))
seed("three_records", False, events)
seed("three_records_speculative", True, events)
seed("reserved_submitted_and_discarded", False,
     reserved(b"a" * 24) + reserved(b"b" * 24, discard=True) + record(b"c" * 13))
seed("uncommitted_in_the_middle", False,
     record(b"x" * 16) + reserved(b"y" * 16, committed=False) + record(b"z" * 16))
# Records up to the end of the data, a pad across it, records from the start.
filler = b"".join(record(bytes([i]) * 120) for i in range(31))  # 31 x 128 bytes
tail_pad = pad(4096 - len(filler) + 64)
seed("pad_across_the_end", False, filler + tail_pad, head=len(filler) + 4096 - len(filler) + 64)
# Reserving first: records in the first half, refused bytes as pads after.
first = b"".join(record(bytes([i]) * 56) for i in range(64))  # 64 x 64 = 4096
seed("pads_in_the_second_half", True, first + pad(64) * 8)
seed("bad_length", False, struct.pack("<II", COMMIT | 0x1FFFFFF0, 0) + bytes(56))
seed("record_larger_than_the_ring", True, record(b"q" * 5000))
seed("head_past_everything", False, events, head=0xFFFF * 8)
seed("all_zero_with_a_head", True, bytes(256), head=256)
seed("stray_bits", False, struct.pack("<II", 0x7, 0x12345678) + events)
