// File: maps/map_reader.cc
#include "maps/map_reader.h"

#include <utility>

#include "absl/time/clock.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "support/status_macros.h"

namespace cuprobe {

MapReader::MapReader(Session session)
    : session_(std::move(session)), rings_(session_.maps().size()) {}

absl::StatusOr<MapReader> MapReader::Open(std::string_view name, bool writable) {
  absl::ConsumePrefix(&name, "/dev/shm/");
  CUPROBE_ASSIGN_OR_RETURN(Session session, Session::Open(name, writable));
  return MapReader(std::move(session));
}

absl::StatusOr<size_t> MapReader::Find(std::string_view name) const {
  if (std::optional<size_t> i = session_.maps().Find(name)) return *i;
  std::vector<std::string_view> names;
  for (const MapInfo& m : maps()) names.push_back(m.spec.name);
  return absl::NotFoundError(absl::StrFormat(
      "session '%s' has no map named '%s' (its maps: %s)", session_.name(), name,
      names.empty() ? "none" : absl::StrJoin(names, ", ")));
}

absl::StatusOr<MapSnapshot> MapReader::Snapshot(size_t i) const {
  if (i >= maps().size()) {
    return absl::OutOfRangeError(absl::StrFormat("session '%s' has %d maps, no map %d",
                                                 session_.name(), maps().size(), i));
  }
  CUPROBE_ASSIGN_OR_RETURN(SnapshotBytes bytes, session_.maps().ReadSnapshot(i));
  return MapSnapshot(maps()[i], std::move(bytes));
}

absl::StatusOr<MapSnapshot> MapReader::Snapshot(std::string_view name) const {
  CUPROBE_ASSIGN_OR_RETURN(size_t i, Find(name));
  return Snapshot(i);
}

absl::StatusOr<std::optional<std::vector<uint8_t>>> MapReader::Lookup(
    std::string_view name, absl::Span<const uint8_t> key, uint64_t id) const {
  CUPROBE_ASSIGN_OR_RETURN(MapSnapshot snapshot, Snapshot(name));
  const uint32_t key_size = snapshot.spec().key_size;
  if (snapshot.spec().type != CUPROBE_MAP_RINGBUF && key.size() != (key_size == 0 ? 4 : key_size)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "map '%s' has %d-byte keys, got %d bytes", name, key_size == 0 ? 4 : key_size,
        key.size()));
  }
  std::optional<absl::Span<const uint8_t>> value = snapshot.Lookup(key, id);
  if (!value.has_value()) return std::optional<std::vector<uint8_t>>();
  return std::optional<std::vector<uint8_t>>(std::vector<uint8_t>(value->begin(), value->end()));
}

absl::Status MapReader::Clear(std::string_view name) {
  CUPROBE_ASSIGN_OR_RETURN(size_t i, Find(name));
  return session_.maps().RequestClear(i);
}

absl::Status MapReader::Write(std::string_view name, uint32_t index,
                              absl::Span<const uint8_t> value, absl::Duration wait) {
  CUPROBE_ASSIGN_OR_RETURN(size_t i, Find(name));
  const absl::Time deadline = absl::Now() + wait;
  CUPROBE_ASSIGN_OR_RETURN(uint64_t seq, session_.maps().RequestWrite(i, index, value, wait));
  for (;;) {
    std::optional<HostWriteResult> result = session_.maps().WriteResult(i, seq);
    if (result.has_value()) {
      switch (*result) {
        case HostWriteResult::kApplied:
          return absl::OkStatus();
        case HostWriteResult::kFailed:
          return absl::InternalError(absl::StrFormat(
              "the hook could not write map '%s' index %d into device memory", name, index));
        default:
          return absl::InvalidArgumentError(absl::StrFormat(
              "the hook refused the write to map '%s' index %d (code %d)", name, index,
              static_cast<int>(*result)));
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "the write to map '%s' index %d was not applied within %s: the program's hook has "
          "not published its maps since (not started, or gone); it stays pending",
          name, index, absl::FormatDuration(wait)));
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
}

absl::StatusOr<size_t> MapReader::ReadRing(std::string_view name,
                                           absl::FunctionRef<void(absl::Span<const uint8_t>)> fn,
                                           size_t max_records) {
  CUPROBE_ASSIGN_OR_RETURN(size_t i, Find(name));
  if (!session_.writable()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "reading ring '%s' consumes it: open the session writable", name));
  }
  if (!rings_[i].has_value()) {
    CUPROBE_ASSIGN_OR_RETURN(MapRing ring, session_.maps().Ring(i));
    rings_[i].emplace(std::move(ring));
  }
  const size_t delivered = rings_[i]->Consume(fn, max_records);
  if (!rings_[i]->status().ok()) return rings_[i]->status();
  return delivered;
}

absl::StatusOr<MapRingStats> MapReader::RingStats(std::string_view name) const {
  CUPROBE_ASSIGN_OR_RETURN(size_t i, Find(name));
  CUPROBE_ASSIGN_OR_RETURN(MapRing ring, session_.maps().Ring(i));
  return ring.Stats();
}

}  // namespace cuprobe
