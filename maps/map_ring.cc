// File: maps/map_ring.cc
//
// MapRing (maps/map_ring.h): attaching to a RINGBUF map's host block, and
// consuming it: each header read as its producer committed it (word 0 or
// word 1), checked, the body handed on, the bytes zeroed, the tail moved.
#include "maps/map_ring.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"

namespace cuprobe {
namespace {

static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free);

std::atomic_ref<uint64_t> Atomic(uint64_t& v) { return std::atomic_ref<uint64_t>(v); }

template <typename T>
T LoadOnce(const T& field) {
  return *static_cast<const volatile T*>(&field);
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// A record's header as the consumer reads it: the committed word (length
// and flags, COMMIT clear when not committed yet), or, when `why` is not
// empty, a header with stray bits (`word`: the one to report).
struct HeaderRead {
  uint32_t word;
  std::string why;
};

HeaderRead ReadHeader(uint32_t* header) {
  // Acquire pairs with the producer's system-scope release of the header.
  uint32_t word = std::atomic_ref<uint32_t>(*header).load(std::memory_order_acquire);
  if ((word & CUPROBE_RING_COMMIT) == 0) {
    // A record begun by bpf_ringbuf_reserve is committed in word 1; its
    // length, in word 0, was written before that (map_desc.h).
    const uint32_t late = std::atomic_ref<uint32_t>(header[1]).load(std::memory_order_acquire);
    if ((late & CUPROBE_RING_COMMIT) != 0) {
      const uint32_t length = std::atomic_ref<uint32_t>(*header).load(std::memory_order_relaxed);
      if ((late & ~(CUPROBE_RING_COMMIT | CUPROBE_RING_DISCARD)) != 0 ||
          (length & ~CUPROBE_RING_LEN_MASK) != 0) {
        return HeaderRead{length, absl::StrFormat(
                                      "a reserved record's header has stray bits (word 1 0x%08x)",
                                      late)};
      }
      word = late | length;
    }
  } else if (const uint32_t late =
                 std::atomic_ref<uint32_t>(header[1]).load(std::memory_order_relaxed);
             late != 0) {
    // Committed in word 0 (bpf_ringbuf_output, pads): word 1 stays zero.
    return HeaderRead{
        word,
        absl::StrFormat("a record committed in word 0 has a non-zero word 1 (0x%08x)", late)};
  }
  return HeaderRead{word, std::string()};
}

// At an uncommitted header: when a producer that replaced a gone one
// resumes within a capacity of `tail` (resume_at), zeroes what lies before
// it, counts it abandoned and moves the tail there. False: nothing to skip.
bool SkipAbandoned(cuprobe_ring_host* host, uint8_t* data, uint64_t capacity, uint64_t& tail) {
  const uint64_t resume = Atomic(host->resume_at).load(std::memory_order_acquire);
  if (resume <= tail || resume - tail > capacity || (resume & 7) != 0) return false;
  const uint64_t skipped = resume - tail;
  for (uint64_t at = tail; at < resume;) {
    const uint64_t i = at & (capacity - 1);
    const uint64_t n = std::min(capacity - i, resume - at);
    std::memset(data + i, 0, n);
    at += n;
  }
  tail = resume;
  Atomic(host->abandoned).fetch_add(skipped, std::memory_order_relaxed);
  Atomic(host->tail).store(tail, std::memory_order_release);
  return true;
}

// What a committed record takes: `total` bytes of ring positions, `written`
// bytes of the data area from its index (a pad that wraps wrote nothing
// past the end). `why`: the header is corrupt.
struct RecordExtent {
  uint64_t total = 0;
  uint64_t written = 0;
  const char* why = nullptr;
};

// `room`: the data bytes from the record's index to the end of the area.
RecordExtent ExtentOf(uint32_t word, uint64_t room, uint64_t capacity) {
  const uint64_t length = word & CUPROBE_RING_LEN_MASK;
  RecordExtent e;
  if ((word & CUPROBE_RING_PAD) != 0) {
    // A pad reaches the end of the data or wraps past it (bytes reserved
    // across the end, abandoned: nothing was written after the header).
    e.total = CUPROBE_RING_HEADER_SIZE + length;
    if (e.total < room || e.total > capacity || (e.total & 7) != 0 ||
        (word & CUPROBE_RING_DISCARD) != 0) {
      e.why = "a pad record does not reach the end of the data";
    }
    e.written = room;
    return e;
  }
  e.total = (CUPROBE_RING_HEADER_SIZE + length + 7) & ~uint64_t{7};
  if (e.total > room) e.why = "a record runs past the end of the data";
  e.written = e.total;
  return e;
}

}  // namespace

void MapRing::Format(void* block, uint64_t capacity) {
  auto* host = static_cast<cuprobe_ring_host*>(block);
  std::memset(host, 0, sizeof(*host));
  host->capacity = capacity;
  Atomic(host->magic).store(CUPROBE_RING_HOST_MAGIC, std::memory_order_release);
}

absl::StatusOr<MapRing> MapRing::Attach(void* block, uint64_t capacity, bool writable) {
  if (block == nullptr || reinterpret_cast<uintptr_t>(block) % 64 != 0) {
    return absl::InvalidArgumentError("map ring: the block must be 64-byte aligned");
  }
  if (!IsPowerOfTwo(capacity)) {
    return absl::DataLossError(
        absl::StrFormat("map ring capacity %d is not a power of two", capacity));
  }
  auto* host = static_cast<cuprobe_ring_host*>(block);
  const uint64_t magic = Atomic(host->magic).load(std::memory_order_acquire);
  if (magic != CUPROBE_RING_HOST_MAGIC) {
    return absl::DataLossError(absl::StrFormat(
        "map ring is not formatted (magic 0x%016x, expected 0x%016x)", magic,
        CUPROBE_RING_HOST_MAGIC));
  }
  const uint64_t recorded = LoadOnce(host->capacity);
  if (recorded != capacity) {
    return absl::DataLossError(absl::StrFormat(
        "map ring control says capacity %d, the map says %d", recorded, capacity));
  }
  const uint64_t tail = Atomic(host->tail).load(std::memory_order_acquire);
  if (tail % 8 != 0) {
    return absl::DataLossError(absl::StrFormat("map ring tail %d is not 8-aligned", tail));
  }
  return MapRing(host, static_cast<uint8_t*>(block) + CUPROBE_RING_HOST_SIZE, capacity, writable);
}

MapRing::MapRing(MapRing&& other) noexcept
    : host_(std::exchange(other.host_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      writable_(std::exchange(other.writable_, false)),
      status_(std::move(other.status_)) {}

MapRing& MapRing::operator=(MapRing&& other) noexcept {
  if (this != &other) {
    host_ = std::exchange(other.host_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    writable_ = std::exchange(other.writable_, false);
    status_ = std::move(other.status_);
  }
  return *this;
}

void MapRing::Corrupt(uint64_t position, uint32_t word, const char* why) {
  status_ = absl::DataLossError(absl::StrFormat(
      "map ring is corrupt at position %d (data offset %d): %s (header 0x%08x, capacity %d); "
      "stopped reading it",
      position, position & (capacity_ - 1), why, word, capacity_));
}

size_t MapRing::Consume(absl::FunctionRef<void(absl::Span<const uint8_t>)> fn,
                        size_t max_records) {
  if (host_ == nullptr || !status_.ok()) return 0;
  if (!writable_) {
    status_ = absl::FailedPreconditionError(
        "a read-only view of a map ring cannot consume it (open the session writable)");
    return 0;
  }
  uint64_t tail = Atomic(host_->tail).load(std::memory_order_relaxed);
  size_t delivered = 0;
  uint64_t discarded = 0;
  uint64_t consumed = 0;
  while (delivered < max_records) {
    const uint64_t index = tail & (capacity_ - 1);
    auto* header = reinterpret_cast<uint32_t*>(data_ + index);
    const HeaderRead read = ReadHeader(header);
    if (!read.why.empty()) {
      Corrupt(tail, read.word, read.why.c_str());
      break;
    }
    const uint32_t word = read.word;
    if ((word & CUPROBE_RING_COMMIT) == 0) {
      // Not committed (or nothing there). Left by a producer that is gone,
      // when a new one resumes further on: skip to where it starts.
      if (SkipAbandoned(host_, data_, capacity_, tail)) continue;
      break;
    }
    const RecordExtent extent = ExtentOf(word, capacity_ - index, capacity_);
    if (extent.why != nullptr) {
      Corrupt(tail, word, extent.why);
      break;
    }
    if ((word & CUPROBE_RING_PAD) == 0) {
      if ((word & CUPROBE_RING_DISCARD) != 0) {
        ++discarded;
      } else {
        fn(absl::MakeConstSpan(data_ + index + CUPROBE_RING_HEADER_SIZE,
                               word & CUPROBE_RING_LEN_MASK));
        ++delivered;
      }
    }
    // Zero before publishing the new tail: producers reuse these bytes as
    // soon as they see it, and a stale header must never read as committed.
    std::memset(data_ + index + sizeof(uint32_t), 0, extent.written - sizeof(uint32_t));
    std::atomic_ref<uint32_t>(*header).store(0, std::memory_order_relaxed);
    tail += extent.total;
    // The tail is published every 64 records and at the end: GPU producers
    // read its cache line over the bus, and each write here takes the line
    // back from them.
    if ((++consumed & 63) == 0) Atomic(host_->tail).store(tail, std::memory_order_release);
  }
  Atomic(host_->tail).store(tail, std::memory_order_release);
  if (delivered > 0) Atomic(host_->delivered).fetch_add(delivered, std::memory_order_relaxed);
  if (discarded > 0) Atomic(host_->discarded).fetch_add(discarded, std::memory_order_relaxed);
  return delivered;
}

uint64_t MapRing::ResumePosition() {
  if (host_ == nullptr) return 0;
  const uint64_t tail = Atomic(host_->tail).load(std::memory_order_acquire);
  if (!writable_) return tail;
  const uint64_t head = Atomic(host_->published_head).load(std::memory_order_relaxed);
  // Drained: the last publish saw nothing after the tail, and no byte of the
  // data is set (the consumer zeroes what it consumed, so a record left by
  // a producer after its last publish would show).
  bool zero = true;
  for (uint64_t i = 0; zero && i < capacity_; i += 8) {
    uint64_t word;
    std::memcpy(&word, data_ + i, 8);
    zero = word == 0;
  }
  if (head == tail && zero) return tail;
  const uint64_t resume = tail + capacity_;
  Atomic(host_->resume_at).store(resume, std::memory_order_release);
  return resume;
}

MapRingStats MapRing::Stats() const {
  MapRingStats s;
  if (host_ == nullptr) return s;
  s.capacity = capacity_;
  s.tail = Atomic(host_->tail).load(std::memory_order_acquire);
  s.delivered = Atomic(host_->delivered).load(std::memory_order_relaxed);
  s.discarded = Atomic(host_->discarded).load(std::memory_order_relaxed);
  s.publish_count = Atomic(host_->publish_count).load(std::memory_order_acquire);
  s.head = Atomic(host_->published_head).load(std::memory_order_relaxed);
  s.reserved = Atomic(host_->published_reserved).load(std::memory_order_relaxed);
  s.dropped = Atomic(host_->published_dropped).load(std::memory_order_relaxed);
  s.dropped_bytes = Atomic(host_->published_dropped_bytes).load(std::memory_order_relaxed);
  return s;
}

void MapRing::Publish(const cuprobe_map_control& control) {
  if (host_ == nullptr || !writable_) return;
  Atomic(host_->published_head).store(control.ring_head, std::memory_order_relaxed);
  Atomic(host_->published_reserved).store(control.ring_reserved, std::memory_order_relaxed);
  Atomic(host_->published_dropped).store(control.ring_dropped, std::memory_order_relaxed);
  Atomic(host_->published_dropped_bytes)
      .store(control.ring_dropped_bytes, std::memory_order_relaxed);
  Atomic(host_->publish_count).fetch_add(1, std::memory_order_release);
}

}  // namespace cuprobe
