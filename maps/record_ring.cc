// File: maps/record_ring.cc
#include "maps/record_ring.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_format.h"

namespace cuprobe {
namespace {

constexpr size_t kTypeOffset = offsetof(RecordHeader, type);
constexpr size_t kFlagsOffset = offsetof(RecordHeader, flags);
static_assert(kTypeOffset == 4 && kFlagsOffset == 6);
static_assert(std::atomic_ref<uint32_t>::required_alignment <= 8);
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free);

// The size word of the header at data + index (index is a multiple of 8).
std::atomic_ref<uint32_t> SizeWord(uint8_t* data, uint64_t index) {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(data + index));
}

// Reads a field of memory another process may be writing exactly once, so a
// value checked is the value used (no compiler re-load between the two).
template <typename T>
T LoadOnce(const T& field) {
  return *static_cast<const volatile T*>(&field);
}

absl::Status ValidateCapacity(uint64_t capacity) {
  if (capacity % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("record ring capacity %d is not a multiple of 8", capacity));
  }
  if (capacity < RecordRing::kMinCapacity || capacity > RecordRing::kMaxCapacity) {
    return absl::InvalidArgumentError(
        absl::StrFormat("record ring capacity %d is outside [%d, %d]", capacity,
                        RecordRing::kMinCapacity, RecordRing::kMaxCapacity));
  }
  return absl::OkStatus();
}

}  // namespace

void RecordRing::Format(void* control, uint64_t capacity) {
  // Value-initialization zeroes the counters and padding.
  auto* c = new (control) RingControl();
  c->magic = kRingMagic;
  c->capacity = capacity;
}

void RecordRing::Format(void* control, void* data, uint64_t capacity) {
  std::memset(data, 0, capacity);
  Format(control, capacity);
}

absl::StatusOr<RecordRing> RecordRing::Attach(void* control, void* data, uint64_t capacity,
                                              bool writable) {
  if (control == nullptr || data == nullptr) {
    return absl::InvalidArgumentError("record ring: null control block or data area");
  }
  if (reinterpret_cast<uintptr_t>(control) % 8 != 0 || reinterpret_cast<uintptr_t>(data) % 8 != 0) {
    return absl::InvalidArgumentError("record ring: control block and data must be 8-aligned");
  }
  if (absl::Status s = ValidateCapacity(capacity); !s.ok()) return s;
  auto* c = static_cast<RingControl*>(control);
  const uint64_t magic = LoadOnce(c->magic);
  const uint64_t recorded = LoadOnce(c->capacity);
  if (magic != kRingMagic) {
    return absl::DataLossError(absl::StrFormat(
        "record ring control block is not formatted (magic 0x%016x, expected 0x%016x)", magic,
        kRingMagic));
  }
  if (recorded != capacity) {
    return absl::DataLossError(absl::StrFormat(
        "record ring control block says capacity %d, the segment says %d", recorded, capacity));
  }
  const uint64_t tail = c->tail.load(std::memory_order_acquire);
  const uint64_t head = c->head.load(std::memory_order_acquire);
  if (head - tail > capacity || head % 8 != 0 || tail % 8 != 0) {
    return absl::DataLossError(absl::StrFormat(
        "record ring cursors are inconsistent (head %d, tail %d, capacity %d)", head, tail,
        capacity));
  }
  return RecordRing(c, static_cast<uint8_t*>(data), capacity, writable);
}

RecordRing::RecordRing(RecordRing&& other) noexcept
    : control_(std::exchange(other.control_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      writable_(std::exchange(other.writable_, false)),
      consumer_status_(std::move(other.consumer_status_)),
      scratch_(std::move(other.scratch_)) {}

RecordRing& RecordRing::operator=(RecordRing&& other) noexcept {
  if (this != &other) {
    control_ = std::exchange(other.control_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    writable_ = std::exchange(other.writable_, false);
    consumer_status_ = std::move(other.consumer_status_);
    scratch_ = std::move(other.scratch_);
  }
  return *this;
}

void RecordRing::CountDrop(uint64_t size) {
  control_->dropped.fetch_add(1, std::memory_order_relaxed);
  control_->dropped_bytes.fetch_add(size, std::memory_order_relaxed);
}

// Positions become data indices with one division per record; after that
// an index only moves forward by less than the capacity, so it wraps with a
// compare and subtract.
uint64_t RecordRing::Wrap(uint64_t index) const {
  return index >= capacity_ ? index - capacity_ : index;
}

uint64_t RecordRing::CopyIn(uint64_t index, const void* src, uint64_t len) {
  if (len == 0) return index;  // src may be null then; memcpy(_, nullptr, 0) is UB
  const uint64_t first = std::min(len, capacity_ - index);
  std::memcpy(data_ + index, src, first);
  if (first < len) std::memcpy(data_, static_cast<const uint8_t*>(src) + first, len - first);
  return Wrap(index + len);
}

void RecordRing::ZeroRange(uint64_t index, uint64_t len) {
  if (len == 0) return;
  const uint64_t first = std::min(len, capacity_ - index);
  std::memset(data_ + index, 0, first);
  if (first < len) std::memset(data_, 0, len - first);
}

bool RecordRing::Write(uint16_t type, const void* body, uint32_t body_size, const void* extra,
                       uint32_t extra_size) {
  // Computed in 64 bits: body_size + extra_size cannot overflow.
  const uint64_t size = RecordSize(body_size, extra_size);
  if (!writable_) return false;  // read-only mapping: cannot even count the drop
  if (size > capacity_ || size > kMaxRecordSize) {
    CountDrop(size);
    return false;
  }

  // Reserve [head, head + size). tail is loaded before head: every record
  // the consumer passed was reserved first, so a sane ring has head >= tail
  // here, and a stale head can never look "behind" tail. If the shared
  // cursors are insane (another process scribbled on them) we drop instead
  // of looping or writing at a misaligned index.
  uint64_t head;
  for (;;) {
    const uint64_t tail = control_->tail.load(std::memory_order_acquire);
    head = control_->head.load(std::memory_order_relaxed);
    const uint64_t used = head - tail;
    if (used > capacity_ || size > capacity_ - used || head % 8 != 0) {
      CountDrop(size);
      return false;
    }
    // Relaxed is enough: our bytes are published by the release store of
    // the size word below; the acquire load of tail above orders our writes
    // after the consumer's zeroing of this space.
    if (control_->head.compare_exchange_weak(head, head + size, std::memory_order_relaxed,
                                             std::memory_order_relaxed)) {
      break;
    }
  }

  // head and capacity are multiples of 8: the 8-byte header never wraps.
  const uint64_t index = head % capacity_;
  const uint16_t flags = 0;
  std::memcpy(data_ + index + kTypeOffset, &type, sizeof(type));
  std::memcpy(data_ + index + kFlagsOffset, &flags, sizeof(flags));
  uint64_t at = CopyIn(Wrap(index + sizeof(RecordHeader)), body, body_size);
  at = CopyIn(at, extra, extra_size);
  // Padding: normally already zero (the consumer zeroes what it consumed),
  // but the memory is shared, so do not leak whatever is there.
  const uint64_t unpadded = sizeof(RecordHeader) + uint64_t{body_size} + extra_size;
  ZeroRange(at, size - unpadded);
  // The commit: the consumer treats a non-zero size word as "complete".
  SizeWord(data_, index).store(static_cast<uint32_t>(size), std::memory_order_release);
  control_->written.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void RecordRing::MarkCorrupt(uint64_t pos, uint64_t size, uint64_t head, const char* why) {
  consumer_status_ = absl::DataLossError(absl::StrFormat(
      "record ring is corrupt at position %d (data offset %d): %s (size word %d, head %d, "
      "capacity %d); stopped reading it",
      pos, pos % capacity_, why, size, head, capacity_));
}

size_t RecordRing::Drain(
    absl::FunctionRef<void(uint16_t type, absl::Span<const uint8_t> body)> fn,
    size_t max_records) {
  if (!consumer_status_.ok() || control_ == nullptr) return 0;
  if (!writable_) {
    consumer_status_ = absl::FailedPreconditionError(
        "a read-only view of the record ring cannot drain it (open the segment writable)");
    return 0;
  }
  uint64_t tail = control_->tail.load(std::memory_order_acquire);
  if (tail % 8 != 0) {
    MarkCorrupt(tail, 0, control_->head.load(std::memory_order_relaxed), "tail is misaligned");
    return 0;
  }
  size_t consumed = 0;
  while (consumed < max_records) {
    const uint64_t index = tail % capacity_;
    // Acquire pairs with the producer's release: its type word and body are
    // visible once we see the size.
    const uint64_t size = SizeWord(data_, index).load(std::memory_order_acquire);
    if (size == 0) break;  // not committed yet (or nothing there)
    // Loaded after the size word, so it includes that record's reservation.
    const uint64_t head = control_->head.load(std::memory_order_acquire);
    const uint64_t available = head - tail;
    if (available > capacity_) {
      MarkCorrupt(tail, size, head, "head and tail are more than a capacity apart");
      break;
    }
    if (size < sizeof(RecordHeader) || size % 8 != 0 || size > capacity_ || size > available) {
      MarkCorrupt(tail, size, head, "bad record size");
      break;
    }
    uint16_t type;
    std::memcpy(&type, data_ + index + kTypeOffset, sizeof(type));
    const uint64_t body_len = size - sizeof(RecordHeader);
    const uint64_t body_index = (index + sizeof(RecordHeader)) % capacity_;
    absl::Span<const uint8_t> body;
    if (body_len <= capacity_ - body_index) {
      body = absl::MakeConstSpan(data_ + body_index, body_len);
    } else {
      // Split by the wrap: copy both halves out into one buffer.
      const uint64_t first = capacity_ - body_index;
      if (scratch_.size() < body_len) {
        try {
          scratch_.resize(body_len);
        } catch (const std::bad_alloc&) {
          consumer_status_ = absl::ResourceExhaustedError(
              absl::StrFormat("record ring: cannot allocate %d bytes for a record", body_len));
          break;
        }
      }
      std::memcpy(scratch_.data(), data_ + body_index, first);
      std::memcpy(scratch_.data() + first, data_, body_len - first);
      body = absl::MakeConstSpan(scratch_.data(), body_len);
    }
    fn(type, body);
    // Zero before publishing the new tail: a producer may reuse these bytes
    // as soon as it sees it, and a stale size word must never read as a
    // commit on the next lap.
    ZeroRange(index, size);
    tail += size;
    control_->tail.store(tail, std::memory_order_release);
    ++consumed;
  }
  return consumed;
}

uint64_t RecordRing::written() const {
  return control_ ? control_->written.load(std::memory_order_relaxed) : 0;
}
uint64_t RecordRing::dropped() const {
  return control_ ? control_->dropped.load(std::memory_order_relaxed) : 0;
}
uint64_t RecordRing::dropped_bytes() const {
  return control_ ? control_->dropped_bytes.load(std::memory_order_relaxed) : 0;
}
uint64_t RecordRing::used_bytes() const {
  if (control_ == nullptr) return 0;
  const uint64_t tail = control_->tail.load(std::memory_order_acquire);
  const uint64_t head = control_->head.load(std::memory_order_acquire);
  return head - tail;
}

void HeapRecordRing::AlignedDelete::operator()(uint8_t* p) const {
  ::operator delete[](p, std::align_val_t{64});
}

absl::StatusOr<HeapRecordRing> HeapRecordRing::Create(uint64_t capacity) {
  if (absl::Status s = ValidateCapacity(capacity); !s.ok()) return s;
  const uint64_t bytes = kRingControlSize + capacity;
  void* raw = ::operator new[](bytes, std::align_val_t{64}, std::nothrow);
  if (raw == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot allocate a %d-byte record ring", capacity));
  }
  std::unique_ptr<uint8_t[], AlignedDelete> memory(static_cast<uint8_t*>(raw));
  uint8_t* data = memory.get() + kRingControlSize;
  RecordRing::Format(memory.get(), data, capacity);
  absl::StatusOr<RecordRing> ring = RecordRing::Attach(memory.get(), data, capacity);
  if (!ring.ok()) return ring.status();
  return HeapRecordRing(std::move(memory), *std::move(ring));
}

}  // namespace cuprobe
