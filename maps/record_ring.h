// File: maps/record_ring.h
//
// RecordRing: a multi-producer, single-consumer ring of variable-size records
// (RecordHeader + body, probe/trace_records.h) over a RingControl block and a
// data area in any memory: the session segment (producers may be threads of
// several processes) or a heap buffer (HeapRecordRing, the hook's standalone
// mode). RecordRing itself is a view: it owns nothing in shared memory.
//
//   // Creator, once, on zero-filled memory:
//   RecordRing::Format(control, capacity);
//   // Everyone:
//   CUPROBE_ASSIGN_OR_RETURN(RecordRing ring, RecordRing::Attach(control, data, capacity));
//   // Producers (any thread, any process; never blocks, never allocates):
//   if (!ring.Write(uint16_t(RecordType::kKernel), &rec, sizeof(rec))) { /* dropped, counted */ }
//   // The one consumer:
//   ring.Drain([](uint16_t type, absl::Span<const uint8_t> body) { ... });
//   if (!ring.consumer_status().ok()) { /* corrupt ring: stop reading it */ }
//
// Protocol. A producer reserves [head, head + size) with a CAS on head,
// checked against tail (full: drop, count, return false; no waiting on the
// consumer). It writes the type/flags word and the body, then stores the
// header's size word last with release: a non-zero size word at the tail
// position is the commit. The consumer reads records in position order, stops
// at the first uncommitted one, zeroes what it consumed (so a stale header is
// never mistaken for a commit on the next lap) and advances tail with release.
//
// Hazards:
//  - A producer that dies between reserving and committing (killed process)
//    stalls the consumer at its record forever; records behind it stay in the
//    ring and new writes are dropped once it fills.
//  - The memory is shared with another process and so untrusted. The
//    consumer checks every size word it reads (non-zero, multiple of 8,
//    <= capacity, within head - tail) and never reads outside the data area;
//    a bad one makes Drain stop and consumer_status() return DATA_LOSS.
//  - Exactly one consumer at a time: two concurrent Drain calls (in one or
//    two processes) corrupt the ring.
//  - Bodies are delivered with their padding (size - 8 bytes, a multiple of
//    8, padding zeroed by the producer): records must carry their own length
//    where it matters (NameRecord.length).
#ifndef CUPROBE_MAPS_RECORD_RING_H_
#define CUPROBE_MAPS_RECORD_RING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "maps/segment_layout.h"

namespace cuprobe {

class RecordRing {
 public:
  // Capacity bounds: at least a few records; at most 1 TiB so that position
  // arithmetic (head + size) cannot overflow and a record's size fits its
  // 32-bit size word whenever it fits the ring.
  static constexpr uint64_t kMinCapacity = 256;
  static constexpr uint64_t kMaxCapacity = uint64_t{1} << 40;
  static constexpr uint64_t kMaxRecordSize = uint64_t{0xFFFFFFF8};

  // Initializes a control block for `capacity` data bytes: positions and
  // counters zero. The data area must be zero-filled (fresh shared memory
  // is); the three-argument overload zeroes it. Not concurrent with any user.
  static void Format(void* control, uint64_t capacity);
  static void Format(void* control, void* data, uint64_t capacity);

  // Validates and wraps a formatted ring. `control` and `data` must be
  // 8-aligned; capacity a multiple of 8 in [kMinCapacity, kMaxCapacity] and
  // equal to the one Format recorded. A read-only view (writable = false,
  // e.g. over a read-only mapping) can read counters only: Write drops
  // without counting and Drain fails.
  [[nodiscard]] static absl::StatusOr<RecordRing> Attach(void* control, void* data,
                                                         uint64_t capacity,
                                                         bool writable = true);

  // A moved-from ring is inert rather than dangling: Write returns false,
  // Drain returns 0, counters read 0 (teardown may move a Session away while
  // a late callback still holds a reference).
  RecordRing(RecordRing&& other) noexcept;
  RecordRing& operator=(RecordRing&& other) noexcept;
  RecordRing(const RecordRing&) = delete;
  RecordRing& operator=(const RecordRing&) = delete;

  // Producer. Appends one record: header + body + extra (e.g. NameRecord +
  // name bytes), zero-padded to a multiple of 8. Returns false if it does not
  // fit right now (counted in dropped/dropped_bytes). Lock-free,
  // allocation-free, async-signal-safe; safe from any thread of any process
  // that maps the ring.
  bool Write(uint16_t type, const void* body, uint32_t body_size, const void* extra = nullptr,
             uint32_t extra_size = 0);

  // Consumer (one at a time). Calls fn for each committed record in order,
  // up to max_records, and returns how many it consumed. `body` is the
  // record after its header (with padding); it may point into the ring and
  // is valid only during the call. Stops early at the first record not yet
  // committed, or at a corrupt header (then consumer_status() is DATA_LOSS
  // and every later Drain returns 0 at once). fn must not call Drain.
  size_t Drain(absl::FunctionRef<void(uint16_t type, absl::Span<const uint8_t> body)> fn,
               size_t max_records = SIZE_MAX);

  // OK, or why Drain stopped for good (corrupt ring, read-only view).
  [[nodiscard]] const absl::Status& consumer_status() const { return consumer_status_; }

  // Counters (shared: they include every producer of every process).
  [[nodiscard]] uint64_t written() const;
  [[nodiscard]] uint64_t dropped() const;
  [[nodiscard]] uint64_t dropped_bytes() const;
  // Bytes reserved or committed but not yet consumed (a snapshot).
  [[nodiscard]] uint64_t used_bytes() const;
  [[nodiscard]] uint64_t capacity() const { return capacity_; }
  [[nodiscard]] bool writable() const { return writable_; }

  // Record size for a body: round_up_8(8 + body + extra).
  [[nodiscard]] static constexpr uint64_t RecordSize(uint64_t body_size, uint64_t extra_size = 0) {
    return (sizeof(RecordHeader) + body_size + extra_size + 7) & ~uint64_t{7};
  }

 private:
  RecordRing(RingControl* control, uint8_t* data, uint64_t capacity, bool writable)
      : control_(control), data_(data), capacity_(capacity), writable_(writable) {}

  void CountDrop(uint64_t size);
  [[nodiscard]] uint64_t Wrap(uint64_t index) const;  // index < 2 * capacity
  // Both take a data index; CopyIn returns the index after what it copied.
  uint64_t CopyIn(uint64_t index, const void* src, uint64_t len);
  void ZeroRange(uint64_t index, uint64_t len);
  void MarkCorrupt(uint64_t pos, uint64_t size, uint64_t head, const char* why);

  RingControl* control_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;  // validated copy: never re-read from shared memory
  bool writable_ = false;
  absl::Status consumer_status_;
  std::vector<uint8_t> scratch_;  // consumer: split records copied out here
};

// A RecordRing with its own zeroed, cache-line-aligned heap memory.
//
//   CUPROBE_ASSIGN_OR_RETURN(HeapRecordRing heap, HeapRecordRing::Create(1 << 20));
//   heap.ring().Write(...);
class HeapRecordRing {
 public:
  [[nodiscard]] static absl::StatusOr<HeapRecordRing> Create(uint64_t capacity);

  HeapRecordRing(HeapRecordRing&&) = default;
  HeapRecordRing& operator=(HeapRecordRing&&) = default;

  [[nodiscard]] RecordRing& ring() { return ring_; }
  // The raw memory (control block, then data), for tests that corrupt it.
  [[nodiscard]] uint8_t* memory() { return memory_.get(); }

 private:
  struct AlignedDelete {
    void operator()(uint8_t* p) const;
  };
  HeapRecordRing(std::unique_ptr<uint8_t[], AlignedDelete> memory, RecordRing ring)
      : memory_(std::move(memory)), ring_(std::move(ring)) {}

  std::unique_ptr<uint8_t[], AlignedDelete> memory_;
  RecordRing ring_;
};

}  // namespace cuprobe

#endif  // CUPROBE_MAPS_RECORD_RING_H_
