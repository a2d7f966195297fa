// File: maps/map_ring.h
//
// MapRing: the host consumer of a RINGBUF map. The ring lives in host memory
// that the GPU reaches through cuMemHostRegister (the session segment's maps
// region): a struct cuprobe_ring_host (probe/map_desc.h) followed by the data.
// GPU producers reserve space against device-memory cursors and commit each
// record with a system-scope release store of its header
// (maps/map_algorithms.h); this class reads committed records in order,
// hands each body to a callback, zeroes what it consumed and advances the
// tail the producers check.
//
//   MapRing::Format(block, capacity);                 // creator, zeroed memory
//   CUPROBE_ASSIGN_OR_RETURN(MapRing ring, MapRing::Attach(block, capacity, true));
//   ring.Consume([](absl::Span<const uint8_t> body) { ... });
//   if (!ring.status().ok()) ...                      // corrupt: stopped for good
//
// Hazards:
//  - Exactly one consumer at a time, in one process (like RecordRing).
//  - A producer that reserved a record and never submits it (a killed
//    kernel) stalls the consumer there; later records wait behind it.
//  - The memory is shared and so untrusted: every header is checked (a
//    committed record must fit before the end of the data; a PAD must end
//    exactly there); a bad one stops consumption with DATA_LOSS.
#ifndef CUPROBE_MAPS_MAP_RING_H_
#define CUPROBE_MAPS_MAP_RING_H_

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "probe/map_desc.h"

namespace cuprobe {

// The counters of a ring as the consumer sees them.
struct MapRingStats {
  uint64_t capacity = 0;
  uint64_t tail = 0;          // bytes consumed so far
  uint64_t delivered = 0;     // records handed to a callback
  uint64_t discarded = 0;     // discarded records skipped
  // From the hook's last publish (0 before it): producer-side counters.
  uint64_t head = 0;          // bytes reserved so far
  uint64_t reserved = 0;      // records reserved
  uint64_t dropped = 0;       // records refused for lack of space
  uint64_t dropped_bytes = 0;
  uint64_t publish_count = 0;
};

class MapRing {
 public:
  // Block = struct cuprobe_ring_host + `capacity` data bytes.
  static constexpr uint64_t BlockBytes(uint64_t capacity) {
    return CUPROBE_RING_HOST_SIZE + capacity;
  }

  // Writes the control block over zero-filled memory (fresh shm is).
  static void Format(void* block, uint64_t capacity);

  // Validates magic, capacity (a power of two, as recorded) and the tail's
  // alignment. A read-only view reads stats only; Consume fails on it.
  [[nodiscard]] static absl::StatusOr<MapRing> Attach(void* block, uint64_t capacity,
                                                      bool writable);

  MapRing(MapRing&&) noexcept;
  MapRing& operator=(MapRing&&) noexcept;
  MapRing(const MapRing&) = delete;
  MapRing& operator=(const MapRing&) = delete;

  // Calls fn for each committed record in order (discarded and pad records
  // are skipped), up to max_records; returns how many it delivered. `body`
  // points into the ring and is valid only during the call.
  size_t Consume(absl::FunctionRef<void(absl::Span<const uint8_t> body)> fn,
                 size_t max_records = SIZE_MAX);

  [[nodiscard]] const absl::Status& status() const { return status_; }
  [[nodiscard]] MapRingStats Stats() const;
  [[nodiscard]] uint64_t capacity() const { return capacity_; }

  // For the hook's watcher: copies a device control block's ring counters
  // into the published fields.
  void Publish(const cuprobe_map_control& control);

  // For a producer that replaces one that is gone (maps made again from a
  // snapshot; the old producer's kernels must be over: its context
  // destroyed, its process dead): where it starts. When the ring is
  // drained (the tail is the last published head and the data is all
  // zero), the consumer's tail; otherwise the old producer may have left
  // records unconsumed or unfinished (killed mid-kernel, or kernels that
  // ran on after its last publish), and the new one starts a whole
  // capacity past the tail, with resume_at set so that the consumer reads
  // what was committed and skips the rest (cuprobe_ring_host). Writable
  // views only; returns the tail for others.
  uint64_t ResumePosition();

  // Where the GPU's descriptor points (host addresses; the hook translates).
  [[nodiscard]] cuprobe_ring_host* host() const { return host_; }
  [[nodiscard]] uint8_t* data() const { return data_; }

 private:
  MapRing(cuprobe_ring_host* host, uint8_t* data, uint64_t capacity, bool writable)
      : host_(host), data_(data), capacity_(capacity), writable_(writable) {}
  void Corrupt(uint64_t position, uint32_t word, const char* why);

  cuprobe_ring_host* host_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;  // validated copy
  bool writable_ = false;
  absl::Status status_;
};

}  // namespace cuprobe

#endif  // CUPROBE_MAPS_MAP_RING_H_
