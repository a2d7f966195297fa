// File: maps/map_reader.h
//
// MapReader: the host API for the probes' maps of a running (or finished)
// session, from any process of the same user. Lists maps with their specs
// and BTF types, looks up and iterates snapshots, asks the hook to clear a
// map, and consumes ring buffers through a callback.
//
//   CUPROBE_ASSIGN_OR_RETURN(MapReader reader, MapReader::Open("cuprobe-1000-42-..."));
//   for (const MapInfo& m : reader.maps()) std::cout << m.spec.name << "\n";
//   CUPROBE_ASSIGN_OR_RETURN(MapSnapshot counts, reader.Snapshot("counts"));
//   uint64_t key = 7;
//   if (auto v = counts.Lookup(AsBytes(key))) ...
//
//   // Rings and clears change the segment: open it writable. One consumer
//   // per ring at a time (see maps/map_ring.h).
//   CUPROBE_ASSIGN_OR_RETURN(MapReader rw, MapReader::Open(name, /*writable=*/true));
//   rw.ReadRing("events", [](absl::Span<const uint8_t> record) { ... });
//
// What a snapshot means (docs/MAPS.md): the hook's watcher publishes every
// map after kernels complete and every N ms; a snapshot is one consistent
// copy of that publication (never torn), generation() tells which.
#ifndef CUPROBE_MAPS_MAP_READER_H_
#define CUPROBE_MAPS_MAP_READER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "maps/map_ring.h"
#include "maps/map_snapshot.h"
#include "maps/maps_region.h"
#include "maps/segment.h"

namespace cuprobe {

class MapReader {
 public:
  // `name` is the segment name, with or without a "/dev/shm/" prefix.
  [[nodiscard]] static absl::StatusOr<MapReader> Open(std::string_view name,
                                                      bool writable = false);

  MapReader(MapReader&&) = default;
  MapReader& operator=(MapReader&&) = default;

  [[nodiscard]] const std::vector<MapInfo>& maps() const { return session_.maps().maps(); }
  // NOT_FOUND listing the session's maps.
  [[nodiscard]] absl::StatusOr<size_t> Find(std::string_view name) const;

  [[nodiscard]] absl::StatusOr<MapSnapshot> Snapshot(size_t i) const;
  [[nodiscard]] absl::StatusOr<MapSnapshot> Snapshot(std::string_view name) const;

  // The value of `key` in the latest snapshot of map `name` (nullopt: absent).
  [[nodiscard]] absl::StatusOr<std::optional<std::vector<uint8_t>>> Lookup(
      std::string_view name, absl::Span<const uint8_t> key, uint64_t id = 0) const;

  // Asks the hook to clear the map at its next publish (writable only).
  [[nodiscard]] absl::Status Clear(std::string_view name);

  // Writes `value` into entry `index` of ARRAY map `name` (writable only):
  // the hook applies it at its next publish; waits up to `wait` for that and
  // returns OK once the published snapshot holds it. DEADLINE_EXCEEDED when
  // no hook applied it in time (the write may still be applied later),
  // INVALID_ARGUMENT for a map, index or size the write cannot go to (also
  // when the hook refused it).
  [[nodiscard]] absl::Status Write(std::string_view name, uint32_t index,
                                   absl::Span<const uint8_t> value,
                                   absl::Duration wait = absl::Seconds(5));

  // Consumes up to max_records committed records of ring `name` (writable
  // only): fn sees each body; returns how many were delivered.
  [[nodiscard]] absl::StatusOr<size_t> ReadRing(
      std::string_view name, absl::FunctionRef<void(absl::Span<const uint8_t>)> fn,
      size_t max_records = SIZE_MAX);
  [[nodiscard]] absl::StatusOr<MapRingStats> RingStats(std::string_view name) const;

  [[nodiscard]] Session& session() { return session_; }
  [[nodiscard]] const Session& session() const { return session_; }
  [[nodiscard]] uint64_t publish_count() const { return session_.maps().publish_count(); }

 private:
  explicit MapReader(Session session);

  Session session_;
  std::vector<std::optional<MapRing>> rings_;  // attached on first use
};

}  // namespace cuprobe

#endif  // CUPROBE_MAPS_MAP_READER_H_
