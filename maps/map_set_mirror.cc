// File: maps/map_set_mirror.cc
//
// MapSet's mirrored rings (RingData::kDeviceMirrored and
// kDeviceSpeculative, maps/map_set.h): the device copy Create makes of each
// ring, and the pump that moves the records committed there into the
// session's rings area, where the consumer (MapRing) reads them.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_format.h"
#include "maps/map_set.h"
#include "support/status_macros.h"

namespace cuprobe {

absl::StatusOr<uint64_t> MapSet::StartMirror(size_t i, MapRing& ring, bool speculative) {
  // The device copy: the ring's host block as it is now (its tail
  // included), then zeroed data: twice the capacity for producers
  // that reserve first (map_desc.h).
  const uint64_t capacity = ring.capacity();
  const uint64_t area = speculative ? 2 * capacity : capacity;
  const uint64_t shadow_bytes = MapRing::BlockBytes(area);
  absl::StatusOr<uint64_t> shadow = memory_->Allocate(shadow_bytes);
  if (!shadow.ok()) {
    return absl::Status(shadow.status().code(),
                        absl::StrFormat("allocating %d bytes of device memory for ring '%s': %s",
                                        shadow_bytes, maps_[i].spec.name,
                                        shadow.status().message()));
  }
  RingMirror& mirror = mirrors_[i].emplace();
  mirror.shadow = *shadow;
  mirror.area = area;
  // The device copy starts empty at 0; in the rings area the pump is
  // a new producer (records a gone one left are read first).
  mirror.host_head = ring.ResumePosition();
  mirror.staging.assign(area, 0);
  CUPROBE_RETURN_IF_ERROR(memory_->Zero(*shadow, shadow_bytes));
  cuprobe_ring_host header;
  std::memcpy(&header, ring.host(), sizeof(header));
  header.tail = 0;
  header.resume_at = 0;
  CUPROBE_RETURN_IF_ERROR(memory_->CopyToDevice(*shadow, &header, sizeof(header)));
  return *shadow;
}

absl::StatusOr<uint64_t> MapSet::PumpRings() {
  uint64_t published = 0;
  for (size_t i = 0; i < mirrors_.size(); ++i) {
    if (!mirrors_[i].has_value() || !rings_[i].has_value() || mirrors_[i]->shadow == 0) continue;
    CUPROBE_ASSIGN_OR_RETURN(uint64_t n, PumpRing(i, *mirrors_[i]));
    published += n;
  }
  return published;
}

namespace {

// Calls fn(index, bytes) for the pieces of ring positions [from, to) in a
// data area of `capacity` bytes (a power of two): two when they wrap.
absl::Status ForRingSpans(uint64_t capacity, uint64_t from, uint64_t to,
                          absl::FunctionRef<absl::Status(uint64_t, uint64_t)> fn) {
  for (uint64_t at = from; at < to;) {
    const uint64_t index = at & (capacity - 1);
    const uint64_t n = std::min(capacity - index, to - at);
    CUPROBE_RETURN_IF_ERROR(fn(index, n));
    at += n;
  }
  return absl::OkStatus();
}

// A record's header in a copy of ring data (map_desc.h): its two words,
// whether it is committed, and the ring bytes it takes (a pad's may wrap);
// `stray` when a committed header has bits the consumer rejects (MapRing:
// word 1 set beside a word-0 commit, flags beside a word-1 commit's length,
// a discarded or unaligned pad), so it is never handed on.
struct RingRecord {
  uint32_t word0, word1;
  bool committed, pad, stray;
  uint64_t total;
};

RingRecord RingRecordAt(const uint8_t* at) {
  RingRecord r;
  std::memcpy(&r.word0, at, 4);
  std::memcpy(&r.word1, at + 4, 4);
  uint32_t word = r.word0;
  r.stray = false;
  if ((r.word0 & CUPROBE_RING_COMMIT) == 0) {
    word = r.word1 | (r.word0 & CUPROBE_RING_LEN_MASK);
    r.stray = (r.word1 & ~(CUPROBE_RING_COMMIT | CUPROBE_RING_DISCARD)) != 0 ||
              (r.word0 & ~CUPROBE_RING_LEN_MASK) != 0;
  } else {
    r.stray = r.word1 != 0;
  }
  r.committed = (word & CUPROBE_RING_COMMIT) != 0;
  r.pad = (word & CUPROBE_RING_PAD) != 0;
  const uint64_t length = word & CUPROBE_RING_LEN_MASK;
  r.total = r.pad ? CUPROBE_RING_HEADER_SIZE + length
                  : (CUPROBE_RING_HEADER_SIZE + length + 7) & ~uint64_t{7};
  r.stray = r.stray || (r.pad && ((r.total & 7) != 0 || (word & CUPROBE_RING_DISCARD) != 0));
  return r;
}

// How far the committed records of a copy of device data go: `staging`
// holds device positions [from, copied) at their data-area offsets. `end`:
// past the last whole committed record. `bad`: the record at `from` has a
// header the pump must not hand on (a bad one further on just ends the
// scan: what precedes it is handed on first).
struct CommittedScan {
  uint64_t end;
  std::optional<RingRecord> bad;
};

CommittedScan ScanCommitted(const std::vector<uint8_t>& staging, uint64_t from, uint64_t copied,
                            uint64_t area, uint64_t capacity) {
  uint64_t end = from;
  while (end < copied) {
    const uint64_t index = end & (area - 1);
    const RingRecord r = RingRecordAt(staging.data() + index);
    if (!r.committed) break;  // not committed yet
    if (r.stray || (!r.pad && (r.total > area - index || r.total > capacity)) ||
        r.total > area) {
      if (end > from) break;  // hand on what precedes it first
      return CommittedScan{end, r};
    }
    // A record reaching past the head read above was committed after bytes
    // there were given back and taken again: the next pump reads it whole.
    if (end + r.total > copied) break;
    end += r.total;
  }
  return CommittedScan{end, std::nullopt};
}

// Writes a record into ring data at `at`: body first, then the header, the
// word that commits it last with release order.
void PublishRecord(uint8_t* data, uint64_t at, uint32_t w0, uint32_t w1, const uint8_t* body,
                   uint64_t n) {
  if (n > 0) std::memcpy(data + at + CUPROBE_RING_HEADER_SIZE, body, n);
  auto* header = reinterpret_cast<uint32_t*>(data + at);
  if ((w0 & CUPROBE_RING_COMMIT) != 0) {
    std::atomic_ref<uint32_t>(header[1]).store(w1, std::memory_order_relaxed);
    std::atomic_ref<uint32_t>(header[0]).store(w0, std::memory_order_release);
  } else {
    std::atomic_ref<uint32_t>(header[0]).store(w0, std::memory_order_relaxed);
    std::atomic_ref<uint32_t>(header[1]).store(w1, std::memory_order_release);
  }
}

// What HandOn moved: device positions up to `end`, `records` of them.
struct HandedOn {
  uint64_t end;
  uint64_t records;
};

// Moves the committed records of `staging` (device positions [from, to))
// into `ring`'s data at `host_head`, the pump's own position there (a
// producer of its own: the consumer frees that space, not the device's).
// Pads are skipped. A record that does not fit before the end of the area
// is preceded by a pad; one that does not fit before the consumer's tail
// waits on the device.
HandedOn HandOn(const std::vector<uint8_t>& staging, uint64_t from, uint64_t to, uint64_t area,
                MapRing& ring, uint64_t& host_head) {
  const uint64_t capacity = ring.capacity();
  uint8_t* data = ring.data();
  const uint64_t host_tail =
      std::atomic_ref<uint64_t>(ring.host()->tail).load(std::memory_order_acquire);
  uint64_t published = 0;
  uint64_t at = from;
  while (at < to) {
    const uint8_t* src = staging.data() + (at & (area - 1));
    const RingRecord r = RingRecordAt(src);
    if (r.pad) {  // the device's own filler (or refused bytes): nothing to hand on
      at += r.total;
      continue;
    }
    const uint64_t total = r.total;
    const uint64_t host_index = host_head & (capacity - 1);
    const uint64_t room = capacity - host_index;
    if (total > room) {
      // The pad to the end of the area goes first, on its own (the record
      // and the pad together may be more than the area holds).
      if (host_head + room - host_tail > capacity) break;  // the consumer is behind
      PublishRecord(data, host_index,
                    CUPROBE_RING_COMMIT | CUPROBE_RING_PAD |
                        static_cast<uint32_t>(room - CUPROBE_RING_HEADER_SIZE),
                    0, nullptr, 0);
      host_head += room;
    }
    if (host_head + total - host_tail > capacity) break;  // the consumer is behind
    PublishRecord(data, host_head & (capacity - 1), r.word0, r.word1,
                  src + CUPROBE_RING_HEADER_SIZE, total - CUPROBE_RING_HEADER_SIZE);
    host_head += total;
    at += total;
    ++published;
  }
  return HandedOn{at, published};
}

}  // namespace

absl::Status MapSet::CopyRingRange(const RingMirror& mirror, uint64_t from, uint64_t to,
                                   std::vector<uint8_t>& staging) {
  return ForRingSpans(mirror.area, from, to, [&](uint64_t index, uint64_t n) {
    return memory_->CopyFromDevice(staging.data() + index,
                                   mirror.shadow + CUPROBE_RING_HOST_SIZE + index, n);
  });
}

absl::StatusOr<uint64_t> MapSet::PumpRing(size_t i, RingMirror& mirror) {
  MapRing& ring = *rings_[i];
  const uint64_t capacity = ring.capacity();  // the rings area's
  const uint64_t area = mirror.area;          // the device data's (2 x capacity: speculative)
  uint64_t head = 0;
  CUPROBE_RETURN_IF_ERROR(memory_->CopyFromDevice(
      &head, maps_[i].base + CUPROBE_MAP_DESC_SIZE + offsetof(cuprobe_map_control, ring_head),
      sizeof(head)));
  if (mirror.broken || head <= mirror.position) return uint64_t{0};
  // Producers stay within the device data of the device tail, which is ours
  // (bytes past it are being given back).
  const uint64_t copied = std::min(head, mirror.position + area);
  // First copy: which records are committed. Their bodies were written
  // before their commit (release), so a second copy, made after the first
  // saw the commits, holds them whole: only that one is handed on.
  CUPROBE_RETURN_IF_ERROR(CopyRingRange(mirror, mirror.position, copied, mirror.staging));
  const CommittedScan scan = ScanCommitted(mirror.staging, mirror.position, copied, area, capacity);
  if (scan.bad.has_value()) {
    mirror.broken = true;
    return absl::DataLossError(absl::StrFormat(
        "ring '%s': the record at device position %d has a bad header (0x%08x 0x%08x); "
        "its records stop there",
        maps_[i].spec.name, mirror.position, scan.bad->word0, scan.bad->word1));
  }
  if (scan.end == mirror.position) return uint64_t{0};
  CUPROBE_RETURN_IF_ERROR(CopyRingRange(mirror, mirror.position, scan.end, mirror.staging));
  const HandedOn handed = HandOn(mirror.staging, mirror.position, scan.end, area, ring,
                                 mirror.host_head);
  // What was handed on is zeroed on the device, then producers may reuse it.
  uint64_t at = handed.end;
  if (at > mirror.position) {
    CUPROBE_RETURN_IF_ERROR(
        ForRingSpans(area, mirror.position, at, [&](uint64_t index, uint64_t n) {
          return memory_->Zero(mirror.shadow + CUPROBE_RING_HOST_SIZE + index, n);
        }));
    CUPROBE_RETURN_IF_ERROR(memory_->CopyToDevice(
        mirror.shadow + offsetof(cuprobe_ring_host, tail), &at, sizeof(at)));
    mirror.position = at;
  }
  return handed.records;
}

}  // namespace cuprobe
