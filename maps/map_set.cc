// File: maps/map_set.cc
#include "maps/map_set.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_format.h"
#include "maps/map_algorithms.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

// The region was formatted by the CLI from the bundle it compiled; the hook
// builds its MapSet from the bundle it loaded. They must be the same maps.
absl::Status SameMaps(absl::Span<const MapSpec> specs, const MapsRegion& region) {
  if (specs.size() != region.size()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the session segment describes %d maps, the probe bundle has %d: the segment was made "
        "for another bundle",
        region.size(), specs.size()));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const MapSpec& a = specs[i];
    const MapSpec& b = region.map(i).spec;
    if (a.name != b.name || a.type != b.type || a.key_size != b.key_size ||
        a.value_size != b.value_size || a.max_entries != b.max_entries || a.flags != b.flags ||
        a.map_extra != b.map_extra) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "map %d differs between the probe bundle ('%s', %s, key %d, value %d, %d entries) and "
          "the session segment ('%s', %s, key %d, value %d, %d entries)",
          i, a.name, MapTypeName(a.type), a.key_size, a.value_size, a.max_entries, b.name,
          MapTypeName(b.type), b.key_size, b.value_size, b.max_entries));
    }
  }
  return absl::OkStatus();
}

}  // namespace

MapSet::MapSet(MapSet&& other) noexcept
    : memory_(std::exchange(other.memory_, nullptr)),
      region_(std::exchange(other.region_, nullptr)),
      maps_(std::move(other.maps_)),
      table_(std::move(other.table_)),
      descriptors_(std::move(other.descriptors_)),
      rings_(std::move(other.rings_)),
      rings_host_(std::exchange(other.rings_host_, nullptr)),
      has_rings_(std::exchange(other.has_rings_, false)),
      mirrors_(std::move(other.mirrors_)),
      staging_(std::move(other.staging_)),
      site_blocks_(std::move(other.site_blocks_)),
      range_areas_(std::move(other.range_areas_)) {
  other.maps_.clear();
  other.table_.clear();
  other.descriptors_.clear();
  other.site_blocks_.clear();
  other.range_areas_.clear();
}

MapSet& MapSet::operator=(MapSet&& other) noexcept {
  if (this != &other) {
    memory_ = std::exchange(other.memory_, nullptr);
    region_ = std::exchange(other.region_, nullptr);
    maps_ = std::move(other.maps_);
    table_ = std::move(other.table_);
    descriptors_ = std::move(other.descriptors_);
    rings_ = std::move(other.rings_);
    rings_host_ = std::exchange(other.rings_host_, nullptr);
    has_rings_ = std::exchange(other.has_rings_, false);
    mirrors_ = std::move(other.mirrors_);
    staging_ = std::move(other.staging_);
    site_blocks_ = std::move(other.site_blocks_);
    range_areas_ = std::move(other.range_areas_);
    other.maps_.clear();
    other.table_.clear();
    other.descriptors_.clear();
    other.site_blocks_.clear();
    other.range_areas_.clear();
  }
  return *this;
}

MapSet::~MapSet() = default;

absl::StatusOr<MapSet> MapSet::Create(absl::Span<const MapSpec> specs, DeviceMemory* memory,
                                      MapsRegion* region, RingData ring_placement) {
  if (memory == nullptr) return absl::InvalidArgumentError("MapSet needs device memory");
  if (region != nullptr) CUPROBE_RETURN_IF_ERROR(SameMaps(specs, *region));
  MapSet set;
  set.memory_ = memory;
  set.region_ = region;
  bool has_ring = false;
  for (const MapSpec& spec : specs) {
    CUPROBE_ASSIGN_OR_RETURN(MapGeometry g, ComputeMapGeometry(spec));
    has_ring |= g.type == CUPROBE_MAP_RINGBUF;
    set.maps_.push_back(Map{spec, g, 0});
  }
  // From here on a failure must give back what was taken.
  auto fail = [&set](absl::Status status) {
    (void)set.Release();
    return status;
  };
  uint64_t rings_device = 0;
  absl::Span<uint8_t> rings_area;
  set.has_rings_ = has_ring;
  const bool speculative = ring_placement == RingData::kDeviceSpeculative;
  const bool mirrored = speculative || ring_placement == RingData::kDeviceMirrored;
  if (has_ring && region == nullptr) {
    return absl::FailedPreconditionError(
        "ring buffer maps live in the session segment: MapSet needs its maps region");
  }
  if (has_ring && !mirrored) {
    rings_area = region->RingsArea();
    absl::StatusOr<uint64_t> mapped = memory->MapHost(rings_area.data(), rings_area.size());
    if (!mapped.ok()) return mapped.status();
    rings_device = *mapped;
    set.rings_host_ = rings_area.data();
  }
  for (size_t i = 0; i < set.maps_.size(); ++i) {
    Map& m = set.maps_[i];
    absl::StatusOr<uint64_t> base = memory->Allocate(m.geometry.allocation_bytes);
    if (!base.ok()) {
      return fail(absl::Status(base.status().code(),
                               absl::StrFormat("allocating %d bytes of device memory for map "
                                               "'%s': %s",
                                               m.geometry.allocation_bytes, m.spec.name,
                                               base.status().message())));
    }
    m.base = *base;
    uint64_t ring_data = 0, ring_host = 0;
    set.mirrors_.emplace_back(std::nullopt);
    if (m.geometry.type == CUPROBE_MAP_RINGBUF) {
      absl::StatusOr<MapRing> ring = region->Ring(i);
      if (!ring.ok()) return fail(ring.status());
      if (mirrored) {
        // The device copy: the ring's host block as it is now (its tail
        // included), then zeroed data: twice the capacity for producers
        // that reserve first (map_desc.h).
        const uint64_t capacity = ring->capacity();
        const uint64_t area = speculative ? 2 * capacity : capacity;
        const uint64_t shadow_bytes = MapRing::BlockBytes(area);
        absl::StatusOr<uint64_t> shadow = memory->Allocate(shadow_bytes);
        if (!shadow.ok()) {
          return fail(absl::Status(
              shadow.status().code(),
              absl::StrFormat("allocating %d bytes of device memory for ring '%s': %s",
                              shadow_bytes, m.spec.name, shadow.status().message())));
        }
        RingMirror& mirror = set.mirrors_.back().emplace();
        mirror.shadow = *shadow;
        mirror.area = area;
        // The device copy starts empty at 0; in the rings area the pump is
        // a new producer (records a gone one left are read first).
        mirror.host_head = ring->ResumePosition();
        mirror.staging.assign(area, 0);
        if (absl::Status s = memory->Zero(*shadow, shadow_bytes); !s.ok()) return fail(s);
        cuprobe_ring_host header;
        std::memcpy(&header, ring->host(), sizeof(header));
        header.tail = 0;
        header.resume_at = 0;
        if (absl::Status s = memory->CopyToDevice(*shadow, &header, sizeof(header)); !s.ok()) {
          return fail(s);
        }
        ring_host = *shadow;
      } else {
        // The device sees the rings area at rings_device: same offsets.
        ring_host = rings_device + (reinterpret_cast<uintptr_t>(ring->host()) -
                                    reinterpret_cast<uintptr_t>(rings_area.data()));
      }
      ring_data = ring_host + CUPROBE_RING_HOST_SIZE;
      set.rings_.emplace_back(*std::move(ring));
    } else {
      set.rings_.emplace_back(std::nullopt);
    }
    cuprobe_map_desc desc = MakeMapDesc(m.geometry, m.base, ring_data, ring_host);
    if (speculative && m.geometry.type == CUPROBE_MAP_RINGBUF) {
      desc.flags |= CUPROBE_MAP_F_RING_SPECULATIVE;
      desc.slot_mask = 2 * m.geometry.ring_bytes - 1;  // the data area
    }
    if (absl::Status s = memory->CopyToDevice(m.base, &desc, sizeof(desc)); !s.ok()) {
      return fail(s);
    }
    if (absl::Status s = set.Initialize(i); !s.ok()) return fail(s);
    set.table_.push_back(m.base);
    const auto* bytes = reinterpret_cast<const uint8_t*>(&desc);
    set.descriptors_.insert(set.descriptors_.end(), bytes, bytes + sizeof(desc));
  }
  return set;
}

absl::Status MapSet::Initialize(size_t i) {
  const Map& m = maps_[i];
  // Everything after the descriptor, a ring's hint lines included.
  CUPROBE_RETURN_IF_ERROR(memory_->Zero(m.base + CUPROBE_MAP_DESC_SIZE,
                                        m.geometry.allocation_bytes - CUPROBE_MAP_DESC_SIZE));
  const std::vector<uint8_t>& init = m.spec.initial_value;
  const uint32_t value_size = m.geometry.value_size;
  for (uint64_t offset = 0; offset < init.size(); offset += value_size) {
    const uint64_t n = std::min<uint64_t>(value_size, init.size() - offset);
    const uint64_t entry = offset / value_size;
    CUPROBE_RETURN_IF_ERROR(memory_->CopyToDevice(
        m.base + CUPROBE_MAP_IMAGE_OFFSET + entry * m.geometry.value_stride, init.data() + offset,
        n));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> MapSet::SeedFromRegion() {
  if (region_ == nullptr) return size_t{0};
  size_t seeded = 0;
  for (size_t i = 0; i < maps_.size(); ++i) {
    if (region_->generation(i) == 0) continue;
    CUPROBE_ASSIGN_OR_RETURN(SnapshotBytes snap, region_->ReadSnapshot(i));
    const uint64_t bytes = maps_[i].geometry.snapshot_bytes();
    if (snap.generation == 0) continue;
    if (snap.bytes.size() != bytes) {
      return absl::DataLossError(absl::StrFormat(
          "map '%s': its published snapshot holds %d bytes, the map %d", maps_[i].spec.name,
          snap.bytes.size(), bytes));
    }
    // A segment from elsewhere may hold half-done inserts: never seed one.
    SettleHashStates(maps_[i].geometry, snap.bytes.data());
    if (maps_[i].geometry.type == CUPROBE_MAP_RINGBUF && rings_[i].has_value()) {
      // The counters go on; the producer position comes from the ring
      // itself (MapRing::ResumePosition), never from the snapshot, which
      // may be older than what the last producer wrote.
      cuprobe_map_control control;
      std::memcpy(&control, snap.bytes.data(), sizeof(control));
      if (mirrors_[i].has_value()) {
        // The device ring starts empty at 0; the pump's place in the rings
        // area was taken by Create, where a new producer's would be.
        control.ring_head = control.ring_tail_cache = 0;
      } else {
        control.ring_head = rings_[i]->ResumePosition();
        control.ring_tail_cache = rings_[i]->Stats().tail;
      }
      control.ring_refresh_ns = 0;
      std::memcpy(snap.bytes.data(), &control, sizeof(control));
    }
    CUPROBE_RETURN_IF_ERROR(
        memory_->CopyToDevice(maps_[i].base + CUPROBE_MAP_DESC_SIZE, snap.bytes.data(), bytes));
    ++seeded;
  }
  return seeded;
}

absl::Status MapSet::CopyFolded(size_t i, std::vector<uint8_t>* out,
                                const SiteCountValues* counts) {
  const Map& m = maps_[i];
  out->resize(DeviceCopyBytes(m.geometry));
  CUPROBE_RETURN_IF_ERROR(
      memory_->CopyFromDevice(out->data(), m.base + CUPROBE_MAP_DESC_SIZE, out->size()));
  FoldMapImage(m.geometry, out->data());
  SettleHashStates(m.geometry, out->data());
  if (!site_blocks_.empty()) {
    if (counts != nullptr) {
      ApplySiteCounts(i, *counts, out->data());
    } else {
      CUPROBE_ASSIGN_OR_RETURN(auto read, SiteCounts());
      ApplySiteCounts(i, read, out->data());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> MapSet::AddSiteCounters(std::vector<SiteCounter> counters) {
  if (memory_ == nullptr) return absl::FailedPreconditionError("the maps were released");
  SiteBlock block;
  block.cleared.resize(counters.size());
  block.area.assign(counters.size(), -1);
  for (size_t c = 0; c < counters.size(); ++c) {
    const uint32_t ids = counters[c].thread_ids;
    for (const SiteAdd& a : counters[c].adds) {
      if (a.map >= maps_.size() || maps_[a.map].geometry.type == CUPROBE_MAP_RINGBUF) {
        return absl::InvalidArgumentError(
            absl::StrFormat("a site counter adds to map %d, which is not a counting map", a.map));
      }
      const MapGeometry& g = maps_[a.map].geometry;
      uint32_t key = 0;
      if (a.key.size() == sizeof(key)) std::memcpy(&key, a.key.data(), sizeof(key));
      const bool per_thread = g.type == CUPROBE_MAP_PERTHREAD;
      if (ids == 0 ? mapalgo::IsPerId(g.type)
                   : !per_thread || g.id_slots != ids || a.hist || a.key.size() != sizeof(key) ||
                         key >= g.max_entries || g.value_size < 8) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "a site counter adds to map %d (type %#x) as a %s counter, which it cannot be", a.map,
            g.type, ids == 0 ? "count" : "thread-range"));
      }
    }
    block.cleared[c].assign(counters[c].adds.size(), 0);
  }
  const uint64_t groups =
      (std::max<uint64_t>(counters.size(), 1) + CUPROBE_SITE_COUNTERS_PER_LINE - 1) /
      CUPROBE_SITE_COUNTERS_PER_LINE;
  const uint64_t bytes = groups * CUPROBE_SITE_COUNTER_GROUP_BYTES;
  CUPROBE_ASSIGN_OR_RETURN(block.base, memory_->Allocate(bytes));
  const size_t areas_before = range_areas_.size();
  auto give_back = [&] {  // what this call allocated
    for (size_t r = areas_before; r < range_areas_.size(); ++r) {
      (void)memory_->Free(range_areas_[r].base);
    }
    range_areas_.resize(areas_before);
    (void)memory_->Free(block.base);
  };
  if (absl::Status s = memory_->Zero(block.base, bytes); !s.ok()) {
    give_back();
    return s;
  }
  // Thread-range counters (abi.h): the counter's slot in shard 0 holds its
  // area's address; modules with the same counter share the area.
  for (size_t c = 0; c < counters.size(); ++c) {
    if (counters[c].thread_ids == 0) continue;
    int32_t r = -1;
    for (size_t k = 0; k < range_areas_.size(); ++k) {
      if (range_areas_[k].counter == counters[c]) r = static_cast<int32_t>(k);
    }
    if (r < 0) {
      const uint64_t area_bytes = (uint64_t{counters[c].thread_ids} + 3) * sizeof(uint64_t);
      absl::StatusOr<uint64_t> area = memory_->Allocate(area_bytes);
      if (!area.ok()) {
        give_back();
        return area.status();
      }
      range_areas_.push_back(RangeArea{counters[c], *area, {}});
      range_areas_.back().cleared.resize(counters[c].adds.size());
      r = static_cast<int32_t>(range_areas_.size() - 1);
      if (absl::Status s = memory_->Zero(*area, area_bytes); !s.ok()) {
        give_back();
        return s;
      }
    }
    block.area[c] = r;
    const uint64_t slot = c / CUPROBE_SITE_COUNTERS_PER_LINE * CUPROBE_SITE_COUNTER_GROUP_BYTES +
                          c % CUPROBE_SITE_COUNTERS_PER_LINE * sizeof(uint64_t);
    const uint64_t address = range_areas_[static_cast<size_t>(r)].base;
    if (absl::Status s = memory_->CopyToDevice(block.base + slot, &address, sizeof(address));
        !s.ok()) {
      give_back();
      return s;
    }
  }
  block.counters = std::move(counters);
  site_blocks_.push_back(std::move(block));
  return site_blocks_.back().base;
}

absl::StatusOr<MapSet::SiteCountValues> MapSet::SiteCounts(bool areas) {
  SiteCountValues values;
  std::vector<std::vector<uint64_t>>& counts = values.counts;
  counts.resize(site_blocks_.size());
  std::vector<uint64_t> shards;
  for (size_t b = 0; b < site_blocks_.size(); ++b) {
    const SiteBlock& block = site_blocks_[b];
    // Layout: include/cuprobe/abi.h, "Site counters".
    const size_t n = block.counters.size();
    const size_t groups = (n + CUPROBE_SITE_COUNTERS_PER_LINE - 1) / CUPROBE_SITE_COUNTERS_PER_LINE;
    shards.resize(groups * CUPROBE_SITE_COUNTER_GROUP_BYTES / sizeof(uint64_t));
    if (!shards.empty()) {
      CUPROBE_RETURN_IF_ERROR(
          memory_->CopyFromDevice(shards.data(), block.base, shards.size() * sizeof(uint64_t)));
    }
    counts[b].assign(n, 0);
    for (size_t c = 0; c < n; ++c) {
      if (block.area[c] >= 0) continue;  // its slot holds its area's address
      const size_t group = c / CUPROBE_SITE_COUNTERS_PER_LINE * CUPROBE_SITE_COUNTER_GROUP_BYTES / 8;
      for (uint32_t k = 0; k < CUPROBE_SITE_COUNTER_SHARDS; ++k) {
        counts[b][c] += shards[group + k * 16 + c % CUPROBE_SITE_COUNTERS_PER_LINE];
      }
    }
  }
  if (!areas) return values;
  // An area is copied up to its high water (the largest thread count it
  // recorded, capped at ids): a few words for small launches.
  values.areas.resize(range_areas_.size());
  for (size_t r = 0; r < range_areas_.size(); ++r) {
    uint64_t head[2] = {0, 0};  // errors, high water
    CUPROBE_RETURN_IF_ERROR(memory_->CopyFromDevice(head, range_areas_[r].base, sizeof(head)));
    const uint64_t high = std::min<uint64_t>(head[1], range_areas_[r].counter.thread_ids);
    std::vector<uint64_t>& area = values.areas[r];
    area.assign(high + 2, 0);
    area[0] = head[0];
    CUPROBE_RETURN_IF_ERROR(memory_->CopyFromDevice(
        area.data() + 1, range_areas_[r].base + 2 * sizeof(uint64_t), (high + 1) * sizeof(uint64_t)));
  }
  return values;
}

namespace {

// A thread-range counter's adds to one map (abi.h): `area` is errors, then
// launches[j] for j up to the high water, launches[j] = launches whose
// min(thread count, ids) was j; `since` the same at the map's last clear
// (empty: none). Id t gains delta for each launch with more than t threads.
void ApplyThreadRange(const cuprobe_map_desc& desc, const SiteAdd& add, uint32_t ids,
                      const std::vector<uint64_t>& area, const std::vector<uint64_t>& since,
                      cuprobe_map_control* control) {
  if (area.empty()) return;
  auto at = [&](size_t k) { return area[k] - (k < since.size() ? since[k] : 0); };
  control->errors += at(0);  // one refusal per thread past the map's ids
  uint64_t launches = 0;
  for (size_t k = 1; k < area.size(); ++k) launches += at(k);
  uint32_t key = 0;
  std::memcpy(&key, add.key.data(), std::min(add.key.size(), sizeof(key)));
  for (uint64_t t = 0; t < ids; ++t) {
    if (1 + t < area.size()) launches -= at(1 + t);  // launches with exactly t threads end here
    if (launches == 0) break;
    uint8_t* value = mapalgo::IndexedValueOf(&desc, CUPROBE_MAP_PERTHREAD, key, t);
    if (value == nullptr) break;
    uint64_t v = 0;
    std::memcpy(&v, value, sizeof(v));
    v += launches * add.delta;
    std::memcpy(value, &v, sizeof(v));
  }
}

}  // namespace

void MapSet::ApplySiteCounts(size_t i, const SiteCountValues& values, uint8_t* snapshot) const {
  const MapGeometry& g = maps_[i].geometry;
  const cuprobe_map_desc desc = MakeSnapshotDesc(g, snapshot);
  auto* control = reinterpret_cast<cuprobe_map_control*>(snapshot);
  const std::vector<std::vector<uint64_t>>& counts = values.counts;
  for (size_t b = 0; b < site_blocks_.size() && b < counts.size(); ++b) {
    const SiteBlock& block = site_blocks_[b];
    for (size_t c = 0; c < block.counters.size() && c < counts[b].size(); ++c) {
      const std::vector<SiteAdd>& adds = block.counters[c].adds;
      for (size_t a = 0; a < adds.size(); ++a) {
        const SiteAdd& add = adds[a];
        if (add.map != i) continue;
        if (block.area[c] >= 0) continue;  // below, once per area
        const uint64_t count = counts[b][c] - block.cleared[c][a];
        if (count == 0) continue;
        uint64_t* target = nullptr;
        if (add.hist) {
          uint64_t value = 0;
          std::memcpy(&value, add.key.data(), std::min<size_t>(add.key.size(), 8));
          target = mapalgo::HistTarget(&desc, value);
        } else if (add.key.size() >= g.key_size) {
          int64_t err = 0;
          target = mapalgo::MapAddTarget(&desc, add.key.data(), 0, &err);
        }
        if (target != nullptr) {
          *target += count * add.delta;
        } else {
          control->errors += count;  // as many refusals as the GPU would have counted
        }
      }
    }
  }
  for (size_t r = 0; r < range_areas_.size() && r < values.areas.size(); ++r) {
    const RangeArea& area = range_areas_[r];
    for (size_t a = 0; a < area.counter.adds.size(); ++a) {
      if (area.counter.adds[a].map != i) continue;
      ApplyThreadRange(desc, area.counter.adds[a], area.counter.thread_ids, values.areas[r],
                       area.cleared[a], control);
    }
  }
}

absl::Status MapSet::ClearMap(size_t i) {
  if (!site_blocks_.empty()) {
    CUPROBE_ASSIGN_OR_RETURN(auto counts, SiteCounts());
    for (size_t b = 0; b < site_blocks_.size(); ++b) {
      SiteBlock& block = site_blocks_[b];
      for (size_t c = 0; c < block.counters.size(); ++c) {
        for (size_t a = 0; a < block.counters[c].adds.size(); ++a) {
          if (block.counters[c].adds[a].map == i) block.cleared[c][a] = counts.counts[b][c];
        }
      }
    }
    for (size_t r = 0; r < range_areas_.size() && r < counts.areas.size(); ++r) {
      RangeArea& area = range_areas_[r];
      for (size_t a = 0; a < area.counter.adds.size(); ++a) {
        if (area.counter.adds[a].map == i) area.cleared[a] = counts.areas[r];
      }
    }
  }
  return Initialize(i);
}

HostWriteResult MapSet::ApplyHostWrite(size_t i, const HostWrite& write) {
  const Map& m = maps_[i];
  const MapGeometry& g = m.geometry;
  if (g.type != CUPROBE_MAP_ARRAY) return HostWriteResult::kNotAnArray;
  if (write.key >= g.max_entries) return HostWriteResult::kBadKey;
  if (write.value.size() != g.value_size) return HostWriteResult::kBadSize;
  // Counts kept by site counters for this entry start again from now: the
  // entry's value is what the host wrote, plus what comes after.
  if (!site_blocks_.empty()) {
    absl::StatusOr<SiteCountValues> counts = SiteCounts(/*areas=*/false);
    if (!counts.ok()) return HostWriteResult::kFailed;
    for (size_t b = 0; b < site_blocks_.size(); ++b) {
      SiteBlock& block = site_blocks_[b];
      for (size_t c = 0; c < block.counters.size(); ++c) {
        if (block.area[c] >= 0) continue;  // PERTHREAD maps take no host writes
        for (size_t a = 0; a < block.counters[c].adds.size(); ++a) {
          const SiteAdd& add = block.counters[c].adds[a];
          uint32_t key = 0;
          if (add.map != i || add.hist || add.key.size() < sizeof(key)) continue;
          std::memcpy(&key, add.key.data(), sizeof(key));
          if (key == write.key) block.cleared[c][a] = counts->counts[b][c];
        }
      }
    }
  }
  // The first value copy takes the bytes; an add-only map's other copies
  // of this entry are zeroed (their sum is the value).
  const uint64_t entry = m.base + CUPROBE_MAP_IMAGE_OFFSET + g.values_offset +
                         uint64_t{write.key} * g.value_stride;
  if (!memory_->CopyToDevice(entry, write.value.data(), write.value.size()).ok()) {
    return HostWriteResult::kFailed;
  }
  for (uint32_t shard = 1; shard < g.value_shards; ++shard) {
    if (!memory_->Zero(entry + uint64_t{shard} * g.shard_bytes, g.value_size).ok()) {
      return HostWriteResult::kFailed;
    }
  }
  return HostWriteResult::kApplied;
}

absl::Status MapSet::Clear(size_t i) {
  if (i >= maps_.size()) return absl::OutOfRangeError(absl::StrFormat("no map %d", i));
  if (maps_[i].geometry.type == CUPROBE_MAP_RINGBUF) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "map '%s' is a ring buffer: its records are consumed, not cleared", maps_[i].spec.name));
  }
  return ClearMap(i);
}

MapInfo MapSet::InfoFor(size_t i) const {
  MapInfo info;
  if (region_ != nullptr) return region_->map(i);
  info.spec = maps_[i].spec;
  info.spec.initial_value.clear();
  info.geometry = maps_[i].geometry;
  info.snapshot_size = maps_[i].geometry.snapshot_bytes();
  return info;
}

absl::StatusOr<MapSnapshot> MapSet::ReadSnapshot(size_t i) {
  if (i >= maps_.size()) return absl::OutOfRangeError(absl::StrFormat("no map %d", i));
  SnapshotBytes bytes;
  CUPROBE_RETURN_IF_ERROR(CopyFolded(i, &bytes.bytes));
  bytes.bytes.resize(maps_[i].geometry.snapshot_bytes());
  return MapSnapshot(InfoFor(i), std::move(bytes));
}

absl::Status MapSet::Publish(uint64_t now_ns) {
  if (region_ == nullptr) return absl::OkStatus();
  CUPROBE_RETURN_IF_ERROR(PumpRings().status());
  // Host writes are applied now and acknowledged once the snapshot that
  // holds them is published (or the publish failed: never applied twice).
  struct Applied {
    size_t map;
    uint64_t seq;
    HostWriteResult result;
  };
  std::vector<Applied> applied;
  for (size_t i = 0; i < maps_.size(); ++i) {
    std::optional<HostWrite> write = region_->PendingWrite(i);
    if (write.has_value()) applied.push_back({i, write->seq, ApplyHostWrite(i, *write)});
  }
  absl::Status status = PublishSnapshots(now_ns);
  for (const Applied& a : applied) region_->AcknowledgeWrite(a.map, a.seq, a.result);
  return status;
}

absl::Status MapSet::PublishSnapshots(uint64_t now_ns) {
  for (size_t i = 0; i < maps_.size(); ++i) {
    const uint64_t requests = region_->clear_requests(i);
    if (requests != region_->clears_done(i)) {
      if (maps_[i].geometry.type != CUPROBE_MAP_RINGBUF) CUPROBE_RETURN_IF_ERROR(ClearMap(i));
      region_->AcknowledgeClear(i, requests);
    }
  }
  SiteCountValues counts;
  if (!site_blocks_.empty()) {
    CUPROBE_ASSIGN_OR_RETURN(counts, SiteCounts());
  }
  for (size_t i = 0; i < maps_.size(); ++i) {
    const Map& m = maps_[i];
    // Copy to private memory first: a failed copy then publishes nothing,
    // and the seqlocked window (readers retry while it is open) is a memcpy.
    const uint64_t bytes = m.geometry.snapshot_bytes();
    CUPROBE_RETURN_IF_ERROR(CopyFolded(i, &staging_, &counts));
    uint8_t* dst = region_->BeginSnapshot(i);
    std::memcpy(dst, staging_.data(), bytes);
    region_->EndSnapshot(i, now_ns);
    if (m.geometry.type == CUPROBE_MAP_RINGBUF) {
      cuprobe_map_control control;
      std::memcpy(&control, staging_.data(), sizeof(control));
      if (mirrors_[i].has_value()) {
        // In the rings area's positions: what the pump placed there, plus
        // what waits on the device (records lie within a capacity of its
        // tail; a speculative ring's bytes past that are refused ones).
        control.ring_head =
            mirrors_[i]->host_head + std::min(control.ring_head - mirrors_[i]->position,
                                              rings_[i]->capacity());
      }
      if (rings_[i].has_value()) rings_[i]->Publish(control);
    }
  }
  region_->EndPublish(now_ns);
  return absl::OkStatus();
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
  uint64_t end = mirror.position;
  while (end < copied) {
    const uint64_t index = end & (area - 1);
    const RingRecord r = RingRecordAt(mirror.staging.data() + index);
    if (!r.committed) break;  // not committed yet
    if (r.stray || (!r.pad && (r.total > area - index || r.total > capacity)) ||
        r.total > area) {
      if (end > mirror.position) break;  // hand on what precedes it first
      mirror.broken = true;
      return absl::DataLossError(absl::StrFormat(
          "ring '%s': the record at device position %d has a bad header (0x%08x 0x%08x); "
          "its records stop there",
          maps_[i].spec.name, end, r.word0, r.word1));
    }
    // A record reaching past the head read above was committed after bytes
    // there were given back and taken again: the next pump reads it whole.
    if (end + r.total > copied) break;
    end += r.total;
  }
  if (end == mirror.position) return uint64_t{0};
  CUPROBE_RETURN_IF_ERROR(CopyRingRange(mirror, mirror.position, end, mirror.staging));

  // Each record goes to the rings area at the pump's own position there (a
  // producer of its own: the consumer frees that space, not the device's),
  // body first, commit word last with release order. A record that does
  // not fit before the end of the area is preceded by a pad; one that does
  // not fit before the consumer's tail waits on the device.
  uint8_t* data = ring.data();
  const uint64_t host_tail =
      std::atomic_ref<uint64_t>(ring.host()->tail).load(std::memory_order_acquire);
  auto publish = [&](uint64_t at, uint32_t w0, uint32_t w1, const uint8_t* body, uint64_t n) {
    if (n > 0) std::memcpy(data + at + CUPROBE_RING_HEADER_SIZE, body, n);
    auto* header = reinterpret_cast<uint32_t*>(data + at);
    if ((w0 & CUPROBE_RING_COMMIT) != 0) {
      std::atomic_ref<uint32_t>(header[1]).store(w1, std::memory_order_relaxed);
      std::atomic_ref<uint32_t>(header[0]).store(w0, std::memory_order_release);
    } else {
      std::atomic_ref<uint32_t>(header[0]).store(w0, std::memory_order_relaxed);
      std::atomic_ref<uint32_t>(header[1]).store(w1, std::memory_order_release);
    }
  };
  uint64_t published = 0;
  uint64_t at = mirror.position;
  while (at < end) {
    const uint8_t* src = mirror.staging.data() + (at & (area - 1));
    const RingRecord r = RingRecordAt(src);
    if (r.pad) {  // the device's own filler (or refused bytes): nothing to hand on
      at += r.total;
      continue;
    }
    const uint64_t total = r.total;
    const uint64_t host_index = mirror.host_head & (capacity - 1);
    const uint64_t room = capacity - host_index;
    if (total > room) {
      // The pad to the end of the area goes first, on its own (the record
      // and the pad together may be more than the area holds).
      if (mirror.host_head + room - host_tail > capacity) break;  // the consumer is behind
      publish(host_index, CUPROBE_RING_COMMIT | CUPROBE_RING_PAD |
                              static_cast<uint32_t>(room - CUPROBE_RING_HEADER_SIZE),
              0, nullptr, 0);
      mirror.host_head += room;
    }
    if (mirror.host_head + total - host_tail > capacity) break;  // the consumer is behind
    publish(mirror.host_head & (capacity - 1), r.word0, r.word1, src + CUPROBE_RING_HEADER_SIZE,
            total - CUPROBE_RING_HEADER_SIZE);
    mirror.host_head += total;
    at += total;
    ++published;
  }
  // What was handed on is zeroed on the device, then producers may reuse it.
  if (at > mirror.position) {
    CUPROBE_RETURN_IF_ERROR(
        ForRingSpans(area, mirror.position, at, [&](uint64_t index, uint64_t n) {
          return memory_->Zero(mirror.shadow + CUPROBE_RING_HOST_SIZE + index, n);
        }));
    CUPROBE_RETURN_IF_ERROR(memory_->CopyToDevice(
        mirror.shadow + offsetof(cuprobe_ring_host, tail), &at, sizeof(at)));
    mirror.position = at;
  }
  return published;
}

absl::Status MapSet::Release() {
  absl::Status first;
  if (memory_ != nullptr) {
    for (Map& m : maps_) {
      if (m.base == 0) continue;
      absl::Status s = memory_->Free(m.base);
      if (first.ok() && !s.ok()) first = s;
      m.base = 0;
    }
    for (SiteBlock& block : site_blocks_) {
      absl::Status s = memory_->Free(block.base);
      if (first.ok() && !s.ok()) first = s;
    }
    for (RangeArea& area : range_areas_) {
      absl::Status s = memory_->Free(area.base);
      if (first.ok() && !s.ok()) first = s;
    }
    for (std::optional<RingMirror>& mirror : mirrors_) {
      if (!mirror.has_value() || mirror->shadow == 0) continue;
      absl::Status s = memory_->Free(mirror->shadow);
      if (first.ok() && !s.ok()) first = s;
      mirror->shadow = 0;
    }
    if (rings_host_ != nullptr) {
      absl::Status s = memory_->UnmapHost(rings_host_);
      if (first.ok() && !s.ok()) first = s;
      rings_host_ = nullptr;
    }
  }
  maps_.clear();
  table_.clear();
  descriptors_.clear();
  site_blocks_.clear();
  range_areas_.clear();
  rings_.clear();
  mirrors_.clear();
  return first;
}

}  // namespace cuprobe
