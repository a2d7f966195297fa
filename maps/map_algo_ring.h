// File: maps/map_algo_ring.h
//
// RINGBUF maps, the producer side (maps/map_algorithms.h includes this; the
// consumer is maps/map_ring.h): reserving bytes on the ring's head, the
// full-ring hints that keep a full ring from costing every SM, the
// speculative rings that the hook's pump consumes from device memory, and
// writing and committing records.
//
//   uint64_t body = mapalgo::RingReserve(d, size, /*flags=*/0);  // 0: dropped, counted
//   ...write the body...
//   mapalgo::RingFinishRecord(body, /*discard=*/false);
//
// Hazards:
//  - Ring records commit with a release store at *system* scope: the
//    consumer is a CPU reading host-mapped memory over the bus.
//  - A reserved record that is never finished stalls the consumer there.
#ifndef CUPROBE_MAPS_MAP_ALGO_RING_H_
#define CUPROBE_MAPS_MAP_ALGO_RING_H_

#include <stdint.h>

#include "maps/map_algo_desc.h"
#include "maps/map_algo_primitives.h"
#include "probe/map_desc.h"

namespace cuprobe::mapalgo {

// ---- RINGBUF ------------------------------------------------------------------
//
// Producers reserve on control.ring_head (device memory: atomics there cost
// nanoseconds, unlike host-mapped memory) with a fetch-and-add, and check
// the space against control.ring_tail_cache, reading the consumer's real
// tail over the bus only when the cache says the ring is full. A record
// never wraps: bytes
// reserved across the end of the data become one committed PAD record (it
// may wrap: the consumer skips it whole, and nothing is written past the
// end). The consumer (maps/map_ring.h) reads committed records in position
// order.

CUPROBE_HD uint64_t RingRecordSize(uint64_t body) {
  return (CUPROBE_RING_HEADER_SIZE + body + 7) & ~uint64_t{7};
}

// The record at `position` (reserved by RingReserveGroup): its header.
CUPROBE_HD uint32_t* RingHeaderAt(const cuprobe_map_desc* d, uint64_t position) {
  return Ptr<uint32_t>(DescField(d->ring_data) + (position & DescField(d->slot_mask)));
}

// Reservations are one fetch-and-add of a group's bytes on the head, taken
// only while the cached tail says they fit with a slack of capacity / 8 to
// spare; otherwise the consumer's tail is read (at most once a microsecond
// per ring on the GPU) and, if the ring is still that full, the group is
// dropped and counted. No CAS loop: under contention a CAS loop serializes
// its producers on the atomic's round trip (about a microsecond per record
// on an H200; a full ring then cost tens of milliseconds per launch).
// Producers that passed the check together overshoot the ring only if they
// hold more than the slack between them; an overshooting producer gives its
// bytes back with a CAS once no producer holds bytes after it (they are in
// the same situation, and the last one gives back first).
//   kRingGranted: [*position, *position + total) is this group's;
//   kRingPadded:  the bytes crossed the end of the data and became one pad
//                 record (the consumer skips it, wrap included): try again;
//   kRingFull:    nothing is held: drop.
enum RingFast : uint32_t { kRingFull = 0, kRingGranted = 1, kRingPadded = 2 };

// Whether this producer may read the consumer's tail over the bus now. A
// full ring would otherwise have every producer of every SM read host memory
// once per record: on the GPU, one read per microsecond is enough (the
// consumer frees space at the host's pace); the host always may.
CUPROBE_HD bool RingMayRefresh(const cuprobe_map_desc* d) {
#ifdef __CUDA_ARCH__
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  // One producer per window wins the CAS: the tail's cache line is written
  // by the consumer's CPU, so every read of it over the bus waits for that
  // line (hundreds of nanoseconds, one after another).
  uint64_t* next = &Control(d)->ring_refresh_ns;
  const uint64_t until = LoadRelaxed64(next);
  if (now < until) return false;
  return AtomicCas64(next, until, now + 1000) == until;
#else
  (void)d;
  return true;
#endif
}

// The consumer's tail (over the bus, from host memory).
CUPROBE_HD uint64_t RingConsumerTail(const cuprobe_map_desc* d) {
  return LoadAcquireSystem64(&Ptr<cuprobe_ring_host>(DescField(d->ring_host))->tail);
}

// On the GPU: whether this SM's producers were told, less than
// CUPROBE_RING_FULL_HINT_NS ago, that the ring is full; and telling them.
// Every producer of a full ring reading its control line, one L2 line that
// every SM hammers, cost more than the records it dropped; the hint lives in
// the SM's own hint line (map_desc.h), which no atomic evicts from its L1.
CUPROBE_HD bool RingFullHinted(const cuprobe_map_desc* d) {
#ifdef __CUDA_ARCH__
  const uint64_t* hint = ShardField(d, CUPROBE_MAP_SHARD_RING_FULL_UNTIL);
  if (hint == nullptr) return false;
  const uint64_t until = LoadRelaxed64(hint);
  if (until == 0) return false;
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now < until;
#else
  (void)d;
  return false;
#endif
}

// The hint lasts the SM's span (map_desc.h), which doubles each time up
// to CUPROBE_RING_FULL_HINT_MAX_NS; RingHintReset shortens it again.
CUPROBE_HD void RingHintFull(const cuprobe_map_desc* d) {
#ifdef __CUDA_ARCH__
  uint64_t* hint = ShardField(d, CUPROBE_MAP_SHARD_RING_FULL_UNTIL);
  if (hint == nullptr) return;
  uint64_t* span_field = ShardField(d, CUPROBE_MAP_SHARD_RING_FULL_SPAN);
  const uint64_t last = LoadRelaxed64(span_field);
  const uint64_t span = last < CUPROBE_RING_FULL_HINT_NS ? CUPROBE_RING_FULL_HINT_NS
                        : last >= CUPROBE_RING_FULL_HINT_MAX_NS / 2
                            ? CUPROBE_RING_FULL_HINT_MAX_NS
                            : 2 * last;
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  asm volatile("st.relaxed.gpu.b64 [%0], %1;" ::"l"(span_field), "l"(span) : "memory");
  asm volatile("st.relaxed.gpu.b64 [%0], %1;" ::"l"(hint), "l"(now + span) : "memory");
#else
  (void)d;
#endif
}

// After a reservation of this SM succeeded: the next full ring is hinted for
// the shortest span again (0: RingHintFull starts at CUPROBE_RING_FULL_HINT_NS;
// a store, which the producer does not wait for).
CUPROBE_HD void RingHintReset(const cuprobe_map_desc* d) {
#ifdef __CUDA_ARCH__
  uint64_t* span_field = ShardField(d, CUPROBE_MAP_SHARD_RING_FULL_SPAN);
  if (span_field == nullptr) return;
  asm volatile("st.relaxed.gpu.b64 [%0], %1;" ::"l"(span_field), "l"(uint64_t{0}) : "memory");
#else
  (void)d;
#endif
}

// Bytes [p, p + total) as one committed pad record (the consumer skips it
// whole; it may wrap, and nothing is written past its header).
CUPROBE_HD void RingWritePad(const cuprobe_map_desc* d, uint64_t p, uint64_t total) {
  StoreReleaseSystem32(RingHeaderAt(d, p),
                       CUPROBE_RING_COMMIT | CUPROBE_RING_PAD |
                           static_cast<uint32_t>(total - CUPROBE_RING_HEADER_SIZE));
}

// Granted bytes [p, p + total) in a data area of `area` bytes: the record's
// position, or (across the end of the area) a pad, after which the caller
// tries again.
CUPROBE_HD uint32_t RingGrant(const cuprobe_map_desc* d, uint64_t p, uint64_t total, uint64_t area,
                              uint64_t* position) {
  if ((p & (area - 1)) + total > area) {
    RingWritePad(d, p, total);
    return kRingPadded;
  }
  *position = p;
  return kRingGranted;
}

// The second half of RingReserveFast: `p` is what the fetch-and-add of
// `total` bytes on the head returned, `tail` the cached tail the producer
// checked before it. Also the end of the compiler's inline reservation
// (RingReserveAt), which makes the fetch-and-add itself.
CUPROBE_HD uint32_t RingAfterFetchAdd(const cuprobe_map_desc* d, uint64_t total, uint64_t p,
                                      uint64_t tail, uint64_t* position) {
  cuprobe_map_control* c = Control(d);
  const uint64_t capacity = DescField(d->slot_mask) + 1;
  for (;;) {
    if (p + total - tail <= capacity) return RingGrant(d, p, total, capacity, position);
    // Overshot by the cached tail: the consumer's real one (over the bus).
    // It never passes p, whose header is not committed.
    const uint64_t real = RingConsumerTail(d);
    if (real > tail && real <= p) {
      AtomicMax64(&c->ring_tail_cache, real);
      tail = real;
      continue;
    }
    if (AtomicCas64(&c->ring_head, p + total, p) == p + total) return kRingFull;
    Pause();  // producers after us are giving their bytes back
  }
}

// ---- Rings that reserve first (CUPROBE_MAP_F_RING_SPECULATIVE) -------------
//
// A ring in device memory that the hook's pump consumes (maps/map_set.h,
// RingData::kDeviceSpeculative): the consumer's tail is device memory on a
// line only the pump writes, so a producer reads the tail itself, and makes
// the fetch-and-add on the head without loading the head's line first (on
// an H200 that load, queued behind every SM's atomics on the line, was most
// of what a delivered record cost: docs/PERFORMANCE.md). Its data area is
// twice its capacity (map_desc.h). Bytes that end within a capacity of the
// tail are granted; bytes that end within two are free but not granted: the
// producer makes them a committed pad, which the pump skips, and drops its
// record. So no producer waits for others to give their bytes back, nor for
// the host. An SM whose last reservation found the ring full (its full-ring
// span is set) checks the head first, as RingReserveFast does, so a ring
// that stays full is not filled with pads.

CUPROBE_HD bool RingIsSpeculative(const cuprobe_map_desc* d) {
  return (DescField(d->flags) & CUPROBE_MAP_F_RING_SPECULATIVE) != 0;
}

// The bytes a ring holds: its data area's, or half of it for a
// speculative ring.
CUPROBE_HD uint64_t RingCapacity(const cuprobe_map_desc* d) {
  return (DescField(d->slot_mask) + 1) >> (RingIsSpeculative(d) ? 1 : 0);
}

// On the GPU: whether this SM's last reservation found the ring full (its
// full-ring span is set; RingHintReset clears it on a success).
CUPROBE_HD bool RingFoundFull(const cuprobe_map_desc* d) {
#ifdef __CUDA_ARCH__
  const uint64_t* span = ShardField(d, CUPROBE_MAP_SHARD_RING_FULL_SPAN);
  return span != nullptr && LoadRelaxed64(span) != 0;
#else
  (void)d;
  return false;
#endif
}

// The second half of a speculative reservation: `p` is what the
// fetch-and-add of `total` bytes on the head returned, `tail` the consumer's
// tail as read with it (a tail never passes p: p's bytes are not committed
// yet). Returns as RingAfterFetchAdd does.
CUPROBE_HD uint32_t RingAfterSpeculativeAdd(const cuprobe_map_desc* d, uint64_t total, uint64_t p,
                                            uint64_t tail, uint64_t* position) {
  const uint64_t area = DescField(d->slot_mask) + 1;
  const uint64_t capacity = area / 2;
  for (;;) {
    if (p + total - tail <= capacity) return RingGrant(d, p, total, area, position);
    const uint64_t real = RingConsumerTail(d);
    if (real > tail && real <= p) {
      tail = real;
      continue;
    }
    if (p + total - tail <= area) {
      RingWritePad(d, p, total);  // in the data area's free half
      RingHintFull(d);
      return kRingFull;
    }
    if (AtomicCas64(&Control(d)->ring_head, p + total, p) == p + total) {
      RingHintFull(d);
      return kRingFull;
    }
    Pause();  // producers after us give their bytes back, or leave bytes we may pad
  }
}

// RingReserveFast for a speculative ring.
CUPROBE_HD uint32_t RingReserveSpeculative(const cuprobe_map_desc* d, uint64_t total,
                                           uint64_t* position) {
  if (RingFullHinted(d)) return kRingFull;
  cuprobe_map_control* c = Control(d);
  const uint64_t capacity = RingCapacity(d);
  const uint64_t tail = RingConsumerTail(d);
  if (RingFoundFull(d) && LoadRelaxed64(&c->ring_head) + total - tail > capacity) {
    RingHintFull(d);
    return kRingFull;
  }
  return RingAfterSpeculativeAdd(d, total, AtomicAdd64(&c->ring_head, total), tail, position);
}

CUPROBE_HD uint32_t RingReserveFast(const cuprobe_map_desc* d, uint64_t total,
                                    uint64_t* position) {
  if (RingIsSpeculative(d)) return RingReserveSpeculative(d, total, position);
  if (RingFullHinted(d)) return kRingFull;
  cuprobe_map_control* c = Control(d);
  const uint64_t capacity = DescField(d->slot_mask) + 1;
  const uint64_t room = capacity - capacity / 8;
  uint64_t tail = LoadRelaxed64(&c->ring_tail_cache);
  const uint64_t head = LoadRelaxed64(&c->ring_head);
  if (head - tail > room - total) {
    bool full = !RingMayRefresh(d);
    if (!full) {
      const uint64_t real = RingConsumerTail(d);
      if (real <= tail || real > head) {
        full = true;
      } else {
        AtomicMax64(&c->ring_tail_cache, real);
        tail = real;
        full = head - tail > room - total;
      }
    }
    if (full) {
      RingHintFull(d);
      return kRingFull;
    }
  } else if (head - tail > capacity / 2 && RingMayRefresh(d)) {
    // Half full by the cached tail: one producer per microsecond refreshes
    // it ahead of time, so that while the consumer keeps up the cache never
    // says full (a full cache drops the producers that do not win the
    // refresh, though the ring has room).
    const uint64_t real = RingConsumerTail(d);
    if (real > tail && real <= head) {
      AtomicMax64(&c->ring_tail_cache, real);
      tail = real;
    }
  }
  return RingAfterFetchAdd(d, total, AtomicAdd64(&c->ring_head, total), tail, position);
}

// The end of a group's reservation: granted, it resets the SM's full-ring
// span and counts n records reserved (returns n); otherwise it counts n
// records and their bytes dropped (returns 0).
CUPROBE_HD uint32_t RingCountGroup(const cuprobe_map_desc* d, uint32_t fast, uint32_t n,
                                   uint64_t record_size) {
  cuprobe_map_control* c = Control(d);
  if (fast == kRingGranted) {
    RingHintReset(d);
    AddToCounter(d, CUPROBE_MAP_SHARD_RING_RESERVED, &c->ring_reserved, n);
    return n;
  }
  AddToCounter(d, CUPROBE_MAP_SHARD_RING_DROPPED, &c->ring_dropped, n);
  AddToCounter(d, CUPROBE_MAP_SHARD_RING_DROPPED_BYTES, &c->ring_dropped_bytes, n * record_size);
  return 0;
}

// Reserves `n` consecutive records of `record_size` bytes (a multiple of 8)
// for a group of producers, all or none: returns n with the byte position
// of the first, or 0 (the n records are counted as dropped). With n = 1
// this is the plain per-thread reserve.
CUPROBE_HD uint32_t RingReserveGroup(const cuprobe_map_desc* d, uint64_t record_size, uint32_t n,
                                     uint64_t* first_position) {
  const uint64_t capacity = RingCapacity(d);
  const uint64_t total = static_cast<uint64_t>(n) * record_size;
  uint32_t fast = kRingFull;
  // (A group's bytes may become one pad, whose length has 29 bits.)
  if (record_size != 0 && (record_size & 7) == 0 && total <= capacity - capacity / 8 &&
      total - CUPROBE_RING_HEADER_SIZE <= CUPROBE_RING_LEN_MASK) {
    fast = RingReserveFast(d, total, first_position);
    if (fast == kRingPadded) fast = RingReserveFast(d, total, first_position);
  }
  return RingCountGroup(d, fast, n, record_size);
}

CUPROBE_HD bool RingUsable(const cuprobe_map_desc* d) {
  return DescIs(d, CUPROBE_MAP_RINGBUF) && DescField(d->ring_data) != 0 &&
         DescField(d->ring_host) != 0;
}

// Copies the body and commits: one record of ringbuf_output.
CUPROBE_HD void RingWriteAndCommit(const cuprobe_map_desc* d, uint64_t position, const void* data,
                                   uint32_t size) {
  uint32_t* header = RingHeaderAt(d, position);
  auto* body = reinterpret_cast<uint8_t*>(header) + CUPROBE_RING_HEADER_SIZE;
  CopyToAligned(body, static_cast<const uint8_t*>(data), size);
  StoreReleaseSystem32(header, CUPROBE_RING_COMMIT | size);
}

// bpf_ringbuf_reserve's second half: writes the record's length (word 0,
// not committed: the consumer waits here) and returns its body's address.
CUPROBE_HD uint64_t RingBeginRecord(const cuprobe_map_desc* d, uint64_t position, uint32_t size) {
  uint32_t* header = RingHeaderAt(d, position);
  header[0] = size;
  return reinterpret_cast<uintptr_t>(header) + CUPROBE_RING_HEADER_SIZE;
}

// A reservation whose fetch-and-add the caller made: `p` is what it
// returned for `size` body bytes (one record, RingRecordSize(size) <=
// 3/8 of the data area: of the capacity, or 3/4 for a speculative ring),
// `tail` the cached tail the caller checked first (a speculative ring: the
// consumer's tail it read). Ends the reservation as RingReserve would (pad
// and retry, pad or give back refused bytes, count) and returns the body's
// address, or 0 (counted as dropped).
// The compiler's inline path for a lone producer (loader/compiler/lower_ring.cc):
// it reads the cursors from the descriptor's constant copy, so a block
// leader's successful reservation waits on one load of the head and the
// cached tail (and the refresh window over half full) and the atomic, not on
// the descriptor's loads and the helper's checks before them.
CUPROBE_HD uint64_t RingReserveAt(const cuprobe_map_desc* d, uint64_t size, uint64_t p,
                                  uint64_t tail) {
  const uint64_t record = RingRecordSize(size);
  uint64_t position = 0;
  uint32_t fast = RingIsSpeculative(d) ? RingAfterSpeculativeAdd(d, record, p, tail, &position)
                                       : RingAfterFetchAdd(d, record, p, tail, &position);
  if (fast == kRingPadded) fast = RingReserveFast(d, record, &position);
  if (RingCountGroup(d, fast, 1, record) == 0) return 0;
  return RingBeginRecord(d, position, static_cast<uint32_t>(size));
}

// bpf_ringbuf_submit / discard on a body address from RingBeginRecord:
// commits through the header's word 1 (map_desc.h), so the length need not
// be read back. On the GPU that read crossed the bus, about a microsecond
// that the producer's warp waited for every record.
CUPROBE_HD void RingFinishRecord(uint64_t body, bool discard) {
  auto* header = Ptr<uint32_t>(body - CUPROBE_RING_HEADER_SIZE);
  StoreReleaseSystem32(header + 1, CUPROBE_RING_COMMIT | (discard ? CUPROBE_RING_DISCARD : 0u));
}

// Host-side equivalents of the helpers (n = 1 groups), for tests and tools.
CUPROBE_HD int64_t RingOutput(const cuprobe_map_desc* d, const void* data, uint64_t size,
                              uint64_t flags) {
  if (!RingUsable(d) || (flags & ~uint64_t{3}) != 0) return kEINVAL;
  if (size > CUPROBE_RING_LEN_MASK || (size != 0 && data == nullptr)) return kEINVAL;
  uint64_t position = 0;
  if (RingReserveGroup(d, RingRecordSize(size), 1, &position) == 0) return kEAGAIN;
  RingWriteAndCommit(d, position, data, static_cast<uint32_t>(size));
  return 0;
}

CUPROBE_HD uint64_t RingReserve(const cuprobe_map_desc* d, uint64_t size, uint64_t flags) {
  if (!RingUsable(d) || flags != 0 || size > CUPROBE_RING_LEN_MASK) return 0;
  uint64_t position = 0;
  if (RingReserveGroup(d, RingRecordSize(size), 1, &position) == 0) return 0;
  return RingBeginRecord(d, position, static_cast<uint32_t>(size));
}

}  // namespace cuprobe::mapalgo

#endif  // CUPROBE_MAPS_MAP_ALGO_RING_H_
