// File: maps/map_snapshot.h
//
// MapSnapshot: one consistent copy of a map (control + image, probe/map_desc.h)
// with typed access for readers: lookup by key, iteration, counters. Lookups
// in a HASH snapshot run the same probing code as the GPU
// (maps/map_algorithms.h) over the copy.
//
//   CUPROBE_ASSIGN_OR_RETURN(SnapshotBytes bytes, region.ReadSnapshot(i));
//   MapSnapshot snap(region.map(i), std::move(bytes));
//   uint64_t key = 42;
//   if (auto v = snap.Lookup(AsBytes(key))) ...
//   snap.ForEach([](absl::Span<const uint8_t> key, uint64_t id,
//                   absl::Span<const uint8_t> value) { ... });
#ifndef CUPROBE_MAPS_MAP_SNAPSHOT_H_
#define CUPROBE_MAPS_MAP_SNAPSHOT_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "probe/map_desc.h"
#include "maps/maps_region.h"

namespace cuprobe {

template <typename T>
absl::Span<const uint8_t> AsBytes(const T& value) {
  return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(&value), sizeof(T));
}

class MapSnapshot {
 public:
  // `bytes.bytes` must hold info.geometry.snapshot_bytes() bytes (as
  // MapsRegion::ReadSnapshot and MapSet::ReadSnapshot return).
  MapSnapshot(MapInfo info, SnapshotBytes bytes);

  [[nodiscard]] const MapInfo& info() const { return info_; }
  [[nodiscard]] const MapSpec& spec() const { return info_.spec; }
  [[nodiscard]] uint64_t generation() const { return bytes_.generation; }
  [[nodiscard]] uint64_t publish_ns() const { return bytes_.publish_ns; }
  [[nodiscard]] const cuprobe_map_control& control() const { return control_; }

  // The value of `key` (key_size bytes; for PER* maps, of (key, id)), or
  // nullopt (absent, out of range, wrong key size, ring buffer).
  [[nodiscard]] std::optional<absl::Span<const uint8_t>> Lookup(absl::Span<const uint8_t> key,
                                                                uint64_t id = 0) const;

  // Every entry in index / slot order: ARRAY and histograms every index (key
  // = u32), HASH the live keys, PER* the (key, id) pairs whose value is not
  // all zero. Nothing for ring buffers.
  void ForEach(absl::FunctionRef<void(absl::Span<const uint8_t> key, uint64_t id,
                                      absl::Span<const uint8_t> value)>
                   fn) const;

  // Histograms: the bucket counts (max_entries of them); empty otherwise.
  [[nodiscard]] std::vector<uint64_t> Buckets() const;

  // Entries ForEach would visit.
  [[nodiscard]] uint64_t CountEntries() const;

 private:
  MapInfo info_;
  SnapshotBytes bytes_;
  cuprobe_map_control control_{};
  cuprobe_map_desc desc_{};  // over bytes_, for the shared algorithms
};

}  // namespace cuprobe

#endif  // CUPROBE_MAPS_MAP_SNAPSHOT_H_
