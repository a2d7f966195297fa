// File: maps/map_set.cc
//
// MapSet (maps/map_set.h): creating the maps in device memory, seeding them
// from a published snapshot, clearing them, host writes, and publishing
// snapshots into the session's maps region. Site counters are in
// map_set_site_counters.cc; mirrored rings (their device copy and the pump)
// in map_set_mirror.cc.
#include "maps/map_set.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
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
  set.has_rings_ = has_ring;
  RingPlacement rings;
  rings.speculative = ring_placement == RingData::kDeviceSpeculative;
  rings.mirrored = rings.speculative || ring_placement == RingData::kDeviceMirrored;
  if (has_ring && region == nullptr) {
    return absl::FailedPreconditionError(
        "ring buffer maps live in the session segment: MapSet needs its maps region");
  }
  if (has_ring && !rings.mirrored) {
    rings.area = region->RingsArea();
    absl::StatusOr<uint64_t> mapped = memory->MapHost(rings.area.data(), rings.area.size());
    if (!mapped.ok()) return mapped.status();
    rings.device = *mapped;
    set.rings_host_ = rings.area.data();
  }
  // From here on a failure must give back what was taken.
  for (size_t i = 0; i < set.maps_.size(); ++i) {
    if (absl::Status s = set.CreateMap(i, rings); !s.ok()) {
      (void)set.Release();
      return s;
    }
  }
  return set;
}

absl::Status MapSet::CreateMap(size_t i, const RingPlacement& rings) {
  Map& m = maps_[i];
  absl::StatusOr<uint64_t> base = memory_->Allocate(m.geometry.allocation_bytes);
  if (!base.ok()) {
    return absl::Status(base.status().code(),
                        absl::StrFormat("allocating %d bytes of device memory for map '%s': %s",
                                        m.geometry.allocation_bytes, m.spec.name,
                                        base.status().message()));
  }
  m.base = *base;
  uint64_t ring_data = 0, ring_host = 0;
  mirrors_.emplace_back(std::nullopt);
  if (m.geometry.type == CUPROBE_MAP_RINGBUF) {
    CUPROBE_ASSIGN_OR_RETURN(MapRing ring, region_->Ring(i));
    if (rings.mirrored) {
      CUPROBE_ASSIGN_OR_RETURN(ring_host, StartMirror(i, ring, rings.speculative));
    } else {
      // The device sees the rings area at rings.device: same offsets.
      ring_host = rings.device + (reinterpret_cast<uintptr_t>(ring.host()) -
                                  reinterpret_cast<uintptr_t>(rings.area.data()));
    }
    ring_data = ring_host + CUPROBE_RING_HOST_SIZE;
    rings_.emplace_back(std::move(ring));
  } else {
    rings_.emplace_back(std::nullopt);
  }
  cuprobe_map_desc desc = MakeMapDesc(m.geometry, m.base, ring_data, ring_host);
  if (rings.speculative && m.geometry.type == CUPROBE_MAP_RINGBUF) {
    desc.flags |= CUPROBE_MAP_F_RING_SPECULATIVE;
    desc.slot_mask = 2 * m.geometry.ring_bytes - 1;  // the data area
  }
  CUPROBE_RETURN_IF_ERROR(memory_->CopyToDevice(m.base, &desc, sizeof(desc)));
  CUPROBE_RETURN_IF_ERROR(Initialize(i));
  table_.push_back(m.base);
  const auto* bytes = reinterpret_cast<const uint8_t*>(&desc);
  descriptors_.insert(descriptors_.end(), bytes, bytes + sizeof(desc));
  return absl::OkStatus();
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
      if (!block.owned) continue;
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
