// File: maps/map_snapshot.cc
#include "maps/map_snapshot.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "maps/map_algorithms.h"

namespace cuprobe {

MapSnapshot::MapSnapshot(MapInfo info, SnapshotBytes bytes)
    : info_(std::move(info)), bytes_(std::move(bytes)) {
  // A short copy (never from the readers of this library) reads as empty.
  if (bytes_.bytes.size() != info_.geometry.snapshot_bytes()) {
    bytes_.bytes.assign(info_.geometry.snapshot_bytes(), 0);
  }
  std::memcpy(&control_, bytes_.bytes.data(), sizeof(control_));
  desc_ = MakeSnapshotDesc(info_.geometry, bytes_.bytes.data());
}

std::optional<absl::Span<const uint8_t>> MapSnapshot::Lookup(absl::Span<const uint8_t> key,
                                                             uint64_t id) const {
  const MapGeometry& g = info_.geometry;
  if (g.type == CUPROBE_MAP_RINGBUF) return std::nullopt;
  // Histograms may be declared without a key: they are indexed by bucket.
  const uint32_t key_size = g.key_size == 0 ? 4 : g.key_size;
  if (key.size() != key_size) return std::nullopt;
  if (g.type == CUPROBE_MAP_HASH) {
    // The GPU's probe sequence, without its wait on PENDING slots: a copy
    // never changes, and a key caught being inserted is not there yet.
    const mapalgo::HashSlots s = mapalgo::Slots(&desc_);
    const uint64_t h = mapalgo::HashKey(key.data(), g.key_size);
    const uint32_t fp = static_cast<uint32_t>(h >> 34);
    uint64_t slot = h & s.mask;
    for (uint64_t probe = 0; probe <= s.mask; ++probe, slot = (slot + 1) & s.mask) {
      const uint32_t state = s.states[slot];
      if (state == CUPROBE_HASH_EMPTY) return std::nullopt;
      if ((state >> 2) != fp || !mapalgo::KeyEquals(s, slot, key.data())) continue;
      if ((state & 3u) != CUPROBE_HASH_LIVE) return std::nullopt;
      return absl::MakeConstSpan(s.values + slot * g.value_stride, g.value_size);
    }
    return std::nullopt;
  }
  uint32_t index;
  std::memcpy(&index, key.data(), 4);
  if (index >= g.max_entries || id >= g.id_slots) return std::nullopt;
  const uint64_t slot = uint64_t{index} * g.id_slots + id;
  return absl::MakeConstSpan(mapalgo::Ptr<const uint8_t>(desc_.values) + slot * g.value_stride,
                             g.value_size);
}

void MapSnapshot::ForEach(absl::FunctionRef<void(absl::Span<const uint8_t> key, uint64_t id,
                                                 absl::Span<const uint8_t> value)>
                              fn) const {
  const MapGeometry& g = info_.geometry;
  const auto* values = mapalgo::Ptr<const uint8_t>(desc_.values);
  switch (g.type) {
    case CUPROBE_MAP_RINGBUF:
      return;
    case CUPROBE_MAP_HASH: {
      const auto* states = mapalgo::Ptr<const uint32_t>(desc_.states);
      const auto* keys = mapalgo::Ptr<const uint8_t>(desc_.keys);
      for (uint64_t slot = 0; slot < g.slots; ++slot) {
        if ((states[slot] & 3u) != CUPROBE_HASH_LIVE) continue;
        fn(absl::MakeConstSpan(keys + slot * g.key_stride, g.key_size), 0,
           absl::MakeConstSpan(values + slot * g.value_stride, g.value_size));
      }
      return;
    }
    default:
      break;
  }
  const bool per_id = IsPerIdType(g.type);
  for (uint32_t index = 0; index < g.max_entries; ++index) {
    const auto key = absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(&index), 4);
    for (uint64_t id = 0; id < g.id_slots; ++id) {
      const uint8_t* value = values + (uint64_t{index} * g.id_slots + id) * g.value_stride;
      if (per_id && std::all_of(value, value + g.value_size, [](uint8_t b) { return b == 0; })) {
        continue;
      }
      fn(key, id, absl::MakeConstSpan(value, g.value_size));
    }
  }
}

std::vector<uint64_t> MapSnapshot::Buckets() const {
  const MapGeometry& g = info_.geometry;
  if (g.type != CUPROBE_MAP_HIST_LOG2 && g.type != CUPROBE_MAP_HIST_LINEAR) return {};
  std::vector<uint64_t> buckets(g.max_entries);
  std::memcpy(buckets.data(), mapalgo::Ptr<const uint8_t>(desc_.values), buckets.size() * 8);
  return buckets;
}

uint64_t MapSnapshot::CountEntries() const {
  uint64_t n = 0;
  ForEach([&](absl::Span<const uint8_t>, uint64_t, absl::Span<const uint8_t>) { ++n; });
  return n;
}

}  // namespace cuprobe
