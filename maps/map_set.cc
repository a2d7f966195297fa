// File: maps/map_set.cc
#include "maps/map_set.h"

#include <cstring>
#include <utility>

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
      rings_(std::move(other.rings_)),
      rings_host_(std::exchange(other.rings_host_, nullptr)),
      staging_(std::move(other.staging_)) {
  other.maps_.clear();
  other.table_.clear();
}

MapSet& MapSet::operator=(MapSet&& other) noexcept {
  if (this != &other) {
    memory_ = std::exchange(other.memory_, nullptr);
    region_ = std::exchange(other.region_, nullptr);
    maps_ = std::move(other.maps_);
    table_ = std::move(other.table_);
    rings_ = std::move(other.rings_);
    rings_host_ = std::exchange(other.rings_host_, nullptr);
    staging_ = std::move(other.staging_);
    other.maps_.clear();
    other.table_.clear();
  }
  return *this;
}

MapSet::~MapSet() = default;

absl::StatusOr<MapSet> MapSet::Create(absl::Span<const MapSpec> specs, DeviceMemory* memory,
                                      MapsRegion* region) {
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
  if (has_ring) {
    if (region == nullptr) {
      return absl::FailedPreconditionError(
          "ring buffer maps live in the session segment: MapSet needs its maps region");
    }
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
    if (m.geometry.type == CUPROBE_MAP_RINGBUF) {
      absl::StatusOr<MapRing> ring = region->Ring(i);
      if (!ring.ok()) return fail(ring.status());
      // The device sees the rings area at rings_device: same offsets.
      ring_host = rings_device + (reinterpret_cast<uintptr_t>(ring->host()) -
                                  reinterpret_cast<uintptr_t>(rings_area.data()));
      ring_data = ring_host + CUPROBE_RING_HOST_SIZE;
      set.rings_.emplace_back(*std::move(ring));
    } else {
      set.rings_.emplace_back(std::nullopt);
    }
    const cuprobe_map_desc desc = MakeMapDesc(m.geometry, m.base, ring_data, ring_host);
    if (absl::Status s = memory->CopyToDevice(m.base, &desc, sizeof(desc)); !s.ok()) {
      return fail(s);
    }
    if (absl::Status s = set.Initialize(i); !s.ok()) return fail(s);
    set.table_.push_back(m.base);
  }
  return set;
}

absl::Status MapSet::Initialize(size_t i) {
  const Map& m = maps_[i];
  CUPROBE_RETURN_IF_ERROR(
      memory_->Zero(m.base + CUPROBE_MAP_DESC_SIZE, DeviceCopyBytes(m.geometry)));
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

absl::Status MapSet::CopyFolded(size_t i, std::vector<uint8_t>* out) {
  const Map& m = maps_[i];
  out->resize(DeviceCopyBytes(m.geometry));
  CUPROBE_RETURN_IF_ERROR(
      memory_->CopyFromDevice(out->data(), m.base + CUPROBE_MAP_DESC_SIZE, out->size()));
  FoldMapImage(m.geometry, out->data());
  return absl::OkStatus();
}

absl::Status MapSet::Clear(size_t i) {
  if (i >= maps_.size()) return absl::OutOfRangeError(absl::StrFormat("no map %d", i));
  if (maps_[i].geometry.type == CUPROBE_MAP_RINGBUF) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "map '%s' is a ring buffer: its records are consumed, not cleared", maps_[i].spec.name));
  }
  return Initialize(i);
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
  for (size_t i = 0; i < maps_.size(); ++i) {
    const Map& m = maps_[i];
    const uint64_t requests = region_->clear_requests(i);
    if (requests != region_->clears_done(i)) {
      if (m.geometry.type != CUPROBE_MAP_RINGBUF) CUPROBE_RETURN_IF_ERROR(Initialize(i));
      region_->AcknowledgeClear(i, requests);
    }
    // Copy to private memory first: a failed copy then publishes nothing,
    // and the seqlocked window (readers retry while it is open) is a memcpy.
    const uint64_t bytes = m.geometry.snapshot_bytes();
    CUPROBE_RETURN_IF_ERROR(CopyFolded(i, &staging_));
    uint8_t* dst = region_->BeginSnapshot(i);
    std::memcpy(dst, staging_.data(), bytes);
    region_->EndSnapshot(i, now_ns);
    if (m.geometry.type == CUPROBE_MAP_RINGBUF) {
      cuprobe_map_control control;
      std::memcpy(&control, staging_.data(), sizeof(control));
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
    if (rings_host_ != nullptr) {
      absl::Status s = memory_->UnmapHost(rings_host_);
      if (first.ok() && !s.ok()) first = s;
      rings_host_ = nullptr;
    }
  }
  maps_.clear();
  table_.clear();
  rings_.clear();
  return first;
}

}  // namespace cuprobe
