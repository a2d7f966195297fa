// File: maps/maps_region.cc
#include "maps/maps_region.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/time/clock.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "support/proc_stat.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

constexpr uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Reads a field of memory another process may write exactly once, so the
// value checked is the value used.
template <typename T>
T LoadOnce(const T& field) {
  return *static_cast<const volatile T*>(&field);
}

// ---- TypeDescription serialization ----------------------------------------

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void PutString(std::vector<uint8_t>& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

class Reader {
 public:
  explicit Reader(absl::Span<const uint8_t> bytes) : bytes_(bytes) {}
  absl::StatusOr<uint32_t> U32(std::string_view what) {
    if (bytes_.size() - pos_ < 4) {
      return absl::DataLossError(
          absl::StrFormat("type description truncated reading %s at byte %d", what, pos_));
    }
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(bytes_[pos_ + i]) << (8 * i);
    pos_ += 4;
    return v;
  }
  absl::StatusOr<std::string> String(std::string_view what) {
    CUPROBE_ASSIGN_OR_RETURN(uint32_t n, U32(what));
    if (n > bytes_.size() - pos_) {
      return absl::DataLossError(absl::StrFormat(
          "type description: %s of %d bytes at byte %d runs past its %d bytes", what, n, pos_,
          bytes_.size()));
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  bool done() const { return pos_ == bytes_.size(); }
  size_t pos() const { return pos_; }

 private:
  absl::Span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

// ---- Layout planning ---------------------------------------------------------

struct Plan {
  std::vector<MapGeometry> geometries;
  std::vector<uint8_t> strings;
  struct Strings {
    uint64_t name_offset, key_offset, value_offset;
    uint32_t name_size, key_size, value_size;
  };
  std::vector<Strings> string_refs;
  uint64_t entries_offset = 0;
  uint64_t strings_offset = 0;
  std::vector<uint64_t> snapshot_offsets;
  std::vector<uint64_t> ring_offsets;
  uint64_t rings_offset = 0;
  uint64_t rings_size = 0;
  uint64_t total = 0;
};

absl::Status ValidateName(std::string_view name, size_t index) {
  if (name.empty() || name.size() > kMaxMapNameSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "map %d has a name of %d bytes; names have 1 to %d bytes", index, name.size(),
        kMaxMapNameSize));
  }
  for (char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "map %d: its name contains the control character 0x%02x", index,
          static_cast<unsigned char>(c)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Plan> MakePlan(absl::Span<const MapSpec> specs) {
  if (specs.size() > kMaxMaps) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d maps; a session holds at most %d", specs.size(), kMaxMaps));
  }
  Plan plan;
  std::set<std::string_view> names;
  for (size_t i = 0; i < specs.size(); ++i) {
    const MapSpec& spec = specs[i];
    CUPROBE_RETURN_IF_ERROR(ValidateName(spec.name, i));
    if (!names.insert(spec.name).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("two maps are named '%s'; map names must be unique", spec.name));
    }
    CUPROBE_ASSIGN_OR_RETURN(MapGeometry g, ComputeMapGeometry(spec));
    plan.geometries.push_back(g);
    Plan::Strings refs;
    refs.name_offset = plan.strings.size();
    refs.name_size = static_cast<uint32_t>(spec.name.size());
    plan.strings.insert(plan.strings.end(), spec.name.begin(), spec.name.end());
    std::vector<uint8_t> key = SerializeTypeDescription(spec.key_type);
    std::vector<uint8_t> value = SerializeTypeDescription(spec.value_type);
    refs.key_offset = plan.strings.size();
    refs.key_size = static_cast<uint32_t>(key.size());
    plan.strings.insert(plan.strings.end(), key.begin(), key.end());
    refs.value_offset = plan.strings.size();
    refs.value_size = static_cast<uint32_t>(value.size());
    plan.strings.insert(plan.strings.end(), value.begin(), value.end());
    plan.string_refs.push_back(refs);
  }
  plan.entries_offset = sizeof(MapsRegionHeader);
  plan.strings_offset = RoundUp(plan.entries_offset + specs.size() * sizeof(MapEntry), 64);
  uint64_t at = RoundUp(plan.strings_offset + plan.strings.size(), 64);
  for (const MapGeometry& g : plan.geometries) {
    plan.snapshot_offsets.push_back(at);
    at = RoundUp(at + g.snapshot_bytes(), 64);
  }
  at = RoundUp(at, kRingAlignment);
  plan.rings_offset = at;
  for (const MapGeometry& g : plan.geometries) {
    if (g.type == CUPROBE_MAP_RINGBUF) {
      plan.ring_offsets.push_back(at);
      at = RoundUp(at + MapRing::BlockBytes(g.ring_bytes), kRingAlignment);
    } else {
      plan.ring_offsets.push_back(0);
    }
  }
  plan.rings_size = at - plan.rings_offset;
  plan.total = RoundUp(at, kRingAlignment);
  return plan;
}

// ---- Attach's checks -----------------------------------------------------------

// The region's areas (offset, end, what), each checked against the region's
// bounds as it is added and, once all are known, for overlaps.
class AreaList {
 public:
  explicit AreaList(uint64_t size) : size_(size) {}

  absl::Status Add(uint64_t offset, uint64_t bytes, uint64_t align, std::string what) {
    if (offset % align != 0 || offset > size_ || bytes > size_ - offset) {
      return absl::DataLossError(absl::StrFormat(
          "maps region: %s at offset %d (%d bytes) is misaligned or outside the %d-byte region",
          what, offset, bytes, size_));
    }
    if (bytes > 0) areas_.emplace_back(offset, offset + bytes, std::move(what));
    return absl::OkStatus();
  }

  absl::Status CheckNoOverlap() {
    std::sort(areas_.begin(), areas_.end());
    for (size_t i = 1; i < areas_.size(); ++i) {
      if (std::get<0>(areas_[i]) < std::get<1>(areas_[i - 1])) {
        return absl::DataLossError(absl::StrFormat("maps region: %s overlaps %s",
                                                   std::get<2>(areas_[i]),
                                                   std::get<2>(areas_[i - 1])));
      }
    }
    return absl::OkStatus();
  }

 private:
  uint64_t size_;
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> areas_;
};

// Magic, versions, sizes and map count of the header of a region of `size`
// bytes; returns the map count.
absl::StatusOr<uint32_t> CheckRegionHeader(const MapsRegionHeader& h, uint64_t size) {
  const uint64_t magic = LoadOnce(h.magic);
  if (magic != kMapsRegionMagic) {
    return absl::DataLossError(absl::StrFormat(
        "maps region: bad magic 0x%016x (expected 0x%016x)", magic, kMapsRegionMagic));
  }
  const uint32_t version = LoadOnce(h.version);
  if (version != kMapsRegionVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "maps region version %d, this build understands %d (mixing cuprobe builds?)", version,
        kMapsRegionVersion));
  }
  const uint32_t desc_version = LoadOnce(h.desc_version);
  if (desc_version != CUPROBE_MAP_DESC_VERSION) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "maps region holds snapshots of map descriptor version %d, this build understands %d",
        desc_version, CUPROBE_MAP_DESC_VERSION));
  }
  if (LoadOnce(h.header_size) != sizeof(MapsRegionHeader) ||
      LoadOnce(h.entry_size) != sizeof(MapEntry)) {
    return absl::DataLossError(absl::StrFormat(
        "maps region: header_size %d / entry_size %d, version %d has %d / %d",
        LoadOnce(h.header_size), LoadOnce(h.entry_size), kMapsRegionVersion,
        sizeof(MapsRegionHeader), sizeof(MapEntry)));
  }
  const uint64_t region_size = LoadOnce(h.region_size);
  if (region_size != size) {
    return absl::DataLossError(absl::StrFormat(
        "maps region: header says %d bytes, the segment gives it %d", region_size, size));
  }
  const uint32_t count = LoadOnce(h.map_count);
  if (count > kMaxMaps) {
    return absl::DataLossError(
        absl::StrFormat("maps region: map_count %d exceeds the limit of %d", count, kMaxMaps));
  }
  return count;
}

// Where the header says the entries, strings and rings are (copied once).
struct RegionLayout {
  uint64_t entries_offset;
  uint64_t strings_offset;
  uint64_t strings_size;
  uint64_t rings_offset;
  uint64_t rings_size;
};

// The header's areas, each within the region of `size` bytes (added to
// `areas`); the rings area also page-aligned.
absl::StatusOr<RegionLayout> ReadRegionLayout(const MapsRegionHeader& h, uint64_t size,
                                              uint32_t count, AreaList& areas) {
  RegionLayout layout;
  CUPROBE_RETURN_IF_ERROR(areas.Add(0, sizeof(MapsRegionHeader), 1, "the header"));
  layout.entries_offset = LoadOnce(h.entries_offset);
  CUPROBE_RETURN_IF_ERROR(
      areas.Add(layout.entries_offset, uint64_t{count} * sizeof(MapEntry), 64, "the map entries"));
  layout.strings_offset = LoadOnce(h.strings_offset);
  layout.strings_size = LoadOnce(h.strings_size);
  CUPROBE_RETURN_IF_ERROR(areas.Add(layout.strings_offset, layout.strings_size, 1, "the strings"));
  layout.rings_offset = LoadOnce(h.rings_offset);
  layout.rings_size = LoadOnce(h.rings_size);
  if (layout.rings_offset % kRingAlignment != 0 || layout.rings_offset > size ||
      layout.rings_size > size - layout.rings_offset) {
    return absl::DataLossError(absl::StrFormat(
        "maps region: rings area at %d (%d bytes) is misaligned or outside the %d-byte region",
        layout.rings_offset, layout.rings_size, size));
  }
  return layout;
}

// Bytes [offset, offset + bytes) of the strings area: map `map`'s `what`.
absl::StatusOr<absl::Span<const uint8_t>> StringAt(absl::Span<const uint8_t> strings,
                                                   uint64_t offset, uint32_t bytes,
                                                   std::string_view what, size_t map) {
  if (offset > strings.size() || bytes > strings.size() - offset) {
    return absl::DataLossError(absl::StrFormat(
        "maps region: map %d's %s (offset %d, %d bytes) lies outside the %d-byte strings area",
        map, what, offset, bytes, strings.size()));
  }
  return strings.subspan(offset, bytes);
}

// Entry `i`'s spec (sizes, its name, unique in `names`, and its key and
// value types) and the geometry the spec gives.
absl::StatusOr<MapInfo> ReadMapSpec(const MapEntry& e, uint32_t i,
                                    absl::Span<const uint8_t> strings,
                                    std::set<std::string>& names) {
  MapInfo info;
  MapSpec& spec = info.spec;
  spec.type = LoadOnce(e.type);
  spec.flags = LoadOnce(e.flags);
  spec.key_size = LoadOnce(e.key_size);
  spec.value_size = LoadOnce(e.value_size);
  spec.max_entries = LoadOnce(e.max_entries);
  spec.map_extra = LoadOnce(e.map_extra);
  CUPROBE_ASSIGN_OR_RETURN(
      absl::Span<const uint8_t> name,
      StringAt(strings, LoadOnce(e.name_offset), LoadOnce(e.name_size), "name", i));
  spec.name.assign(name.begin(), name.end());
  if (absl::Status s = ValidateName(spec.name, i); !s.ok()) {
    return absl::DataLossError(absl::StrCat("maps region: ", s.message()));
  }
  if (!names.insert(spec.name).second) {
    return absl::DataLossError(
        absl::StrFormat("maps region: two maps are named '%s'", spec.name));
  }
  CUPROBE_ASSIGN_OR_RETURN(
      absl::Span<const uint8_t> key_bytes,
      StringAt(strings, LoadOnce(e.key_type_offset), LoadOnce(e.key_type_size), "key type", i));
  CUPROBE_ASSIGN_OR_RETURN(absl::Span<const uint8_t> value_bytes,
                           StringAt(strings, LoadOnce(e.value_type_offset),
                                    LoadOnce(e.value_type_size), "value type", i));
  absl::StatusOr<TypeDescription> key_type = ParseTypeDescription(key_bytes);
  absl::StatusOr<TypeDescription> value_type = ParseTypeDescription(value_bytes);
  if (!key_type.ok() || !value_type.ok()) {
    const absl::Status& bad = key_type.ok() ? value_type.status() : key_type.status();
    return absl::DataLossError(
        absl::StrFormat("maps region: map '%s': %s", spec.name, bad.message()));
  }
  spec.key_type = *std::move(key_type);
  spec.value_type = *std::move(value_type);
  absl::StatusOr<MapGeometry> g = ComputeMapGeometry(spec);
  if (!g.ok()) {
    return absl::DataLossError(absl::StrCat("maps region: ", g.status().message()));
  }
  info.geometry = *g;
  return info;
}

// A ring's block: the size its spec gives, within the rings area (added to
// `areas`), and a ring that attaches.
absl::Status CheckRing(const MapInfo& info, uint8_t* base, const RegionLayout& layout,
                       AreaList& areas) {
  const std::string& name = info.spec.name;
  if (info.ring_size != info.geometry.ring_bytes) {
    return absl::DataLossError(
        absl::StrFormat("maps region: ring '%s' has %d data bytes, its spec says %d", name,
                        info.ring_size, info.geometry.ring_bytes));
  }
  if (info.ring_offset < layout.rings_offset ||
      info.ring_offset - layout.rings_offset > layout.rings_size ||
      MapRing::BlockBytes(info.ring_size) >
          layout.rings_size - (info.ring_offset - layout.rings_offset)) {
    return absl::DataLossError(absl::StrFormat(
        "maps region: ring '%s' at offset %d lies outside the rings area [%d, +%d)", name,
        info.ring_offset, layout.rings_offset, layout.rings_size));
  }
  CUPROBE_RETURN_IF_ERROR(areas.Add(info.ring_offset, MapRing::BlockBytes(info.ring_size),
                                    kRingAlignment, absl::StrCat("the ring of map '", name, "'")));
  absl::StatusOr<MapRing> ring =
      MapRing::Attach(base + info.ring_offset, info.ring_size, /*writable=*/false);
  if (!ring.ok()) {
    return absl::DataLossError(
        absl::StrFormat("maps region: ring '%s': %s", name, ring.status().message()));
  }
  return absl::OkStatus();
}

// Entry e's ids, snapshot area and ring against info's geometry; fills
// info's offsets and adds its areas.
absl::Status CheckMapAreas(const MapEntry& e, uint8_t* base, const RegionLayout& layout,
                           AreaList& areas, MapInfo& info) {
  const MapSpec& spec = info.spec;
  const MapGeometry& g = info.geometry;
  if (LoadOnce(e.id_slots) != g.id_slots) {
    return absl::DataLossError(absl::StrFormat(
        "maps region: map '%s' records %d ids per key, its spec gives %d", spec.name,
        LoadOnce(e.id_slots), g.id_slots));
  }
  info.snapshot_offset = LoadOnce(e.snapshot_offset);
  info.snapshot_size = LoadOnce(e.snapshot_size);
  if (info.snapshot_size != g.snapshot_bytes()) {
    return absl::DataLossError(absl::StrFormat(
        "maps region: map '%s' has a %d-byte snapshot area, its spec needs %d", spec.name,
        info.snapshot_size, g.snapshot_bytes()));
  }
  CUPROBE_RETURN_IF_ERROR(areas.Add(info.snapshot_offset, info.snapshot_size, 64,
                                    absl::StrCat("the snapshot of map '", spec.name, "'")));
  info.ring_offset = LoadOnce(e.ring_offset);
  info.ring_size = LoadOnce(e.ring_size);
  if (spec.type == CUPROBE_MAP_RINGBUF) return CheckRing(info, base, layout, areas);
  if (info.ring_offset != 0 || info.ring_size != 0) {
    return absl::DataLossError(absl::StrFormat(
        "maps region: map '%s' is not a ring buffer but has a ring (offset %d, %d bytes)",
        spec.name, info.ring_offset, info.ring_size));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<uint8_t> SerializeTypeDescription(const TypeDescription& type) {
  std::vector<uint8_t> out;
  PutString(out, type.name);
  PutU32(out, type.size);
  PutU32(out, static_cast<uint32_t>(type.fields.size()));
  for (const TypeField& f : type.fields) {
    PutString(out, f.name);
    PutString(out, f.type);
    PutU32(out, f.offset);
    PutU32(out, f.size);
  }
  return out;
}

absl::StatusOr<TypeDescription> ParseTypeDescription(absl::Span<const uint8_t> bytes) {
  Reader r(bytes);
  TypeDescription type;
  CUPROBE_ASSIGN_OR_RETURN(type.name, r.String("the type name"));
  CUPROBE_ASSIGN_OR_RETURN(type.size, r.U32("the type size"));
  CUPROBE_ASSIGN_OR_RETURN(uint32_t count, r.U32("the field count"));
  // Each field takes at least 16 bytes: a lying count cannot make us
  // reserve more than the input could hold.
  if (count > bytes.size() / 16) {
    return absl::DataLossError(absl::StrFormat(
        "type description '%s' claims %d fields in %d bytes", type.name, count, bytes.size()));
  }
  type.fields.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    TypeField f;
    CUPROBE_ASSIGN_OR_RETURN(f.name, r.String("a field name"));
    CUPROBE_ASSIGN_OR_RETURN(f.type, r.String("a field type"));
    CUPROBE_ASSIGN_OR_RETURN(f.offset, r.U32("a field offset"));
    CUPROBE_ASSIGN_OR_RETURN(f.size, r.U32("a field size"));
    if (uint64_t{f.offset} + f.size > type.size) {
      return absl::DataLossError(absl::StrFormat(
          "type '%s': field '%s' at offset %d (%d bytes) lies outside the %d-byte type",
          type.name, f.name, f.offset, f.size, type.size));
    }
    type.fields.push_back(std::move(f));
  }
  if (!r.done()) {
    return absl::DataLossError(absl::StrFormat(
        "type description '%s' has %d trailing bytes", type.name, bytes.size() - r.pos()));
  }
  return type;
}

absl::StatusOr<uint64_t> MapsRegion::RegionBytes(absl::Span<const MapSpec> specs) {
  CUPROBE_ASSIGN_OR_RETURN(Plan plan, MakePlan(specs));
  return plan.total;
}

absl::Status MapsRegion::Format(uint8_t* base, uint64_t size, absl::Span<const MapSpec> specs) {
  CUPROBE_ASSIGN_OR_RETURN(Plan plan, MakePlan(specs));
  if (size != plan.total) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "maps region: %d bytes given, the maps need exactly %d", size, plan.total));
  }
  if (reinterpret_cast<uintptr_t>(base) % kRingAlignment != 0) {
    return absl::InvalidArgumentError("maps region: base must be 4096-byte aligned");
  }
  auto* h = new (base) MapsRegionHeader();
  h->magic = kMapsRegionMagic;
  h->version = kMapsRegionVersion;
  h->header_size = sizeof(MapsRegionHeader);
  h->region_size = size;
  h->map_count = static_cast<uint32_t>(specs.size());
  h->entry_size = sizeof(MapEntry);
  h->entries_offset = plan.entries_offset;
  h->strings_offset = plan.strings_offset;
  h->strings_size = plan.strings.size();
  h->rings_offset = plan.rings_offset;
  h->rings_size = plan.rings_size;
  h->desc_version = CUPROBE_MAP_DESC_VERSION;
  if (!plan.strings.empty()) {
    std::memcpy(base + plan.strings_offset, plan.strings.data(), plan.strings.size());
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const MapGeometry& g = plan.geometries[i];
    auto* e = new (base + plan.entries_offset + i * sizeof(MapEntry)) MapEntry();
    e->type = g.type;
    e->flags = g.flags;
    e->key_size = g.key_size;
    e->value_size = g.value_size;
    e->max_entries = g.max_entries;
    e->id_slots = g.id_slots;
    e->map_extra = g.map_extra;
    const Plan::Strings& refs = plan.string_refs[i];
    e->name_offset = refs.name_offset;
    e->name_size = refs.name_size;
    e->key_type_offset = refs.key_offset;
    e->key_type_size = refs.key_size;
    e->value_type_offset = refs.value_offset;
    e->value_type_size = refs.value_size;
    e->snapshot_offset = plan.snapshot_offsets[i];
    e->snapshot_size = g.snapshot_bytes();
    if (g.type == CUPROBE_MAP_RINGBUF) {
      e->ring_offset = plan.ring_offsets[i];
      e->ring_size = g.ring_bytes;
      MapRing::Format(base + e->ring_offset, g.ring_bytes);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<MapsRegion> MapsRegion::Attach(uint8_t* base, uint64_t size, bool writable) {
  if (base == nullptr || size < sizeof(MapsRegionHeader)) {
    return absl::DataLossError(absl::StrFormat(
        "maps region of %d bytes is smaller than its %d-byte header", size,
        sizeof(MapsRegionHeader)));
  }
  if (reinterpret_cast<uintptr_t>(base) % 64 != 0) {
    return absl::InvalidArgumentError("maps region: base must be 64-byte aligned");
  }
  const auto& h = *reinterpret_cast<const MapsRegionHeader*>(base);
  CUPROBE_ASSIGN_OR_RETURN(const uint32_t count, CheckRegionHeader(h, size));
  AreaList areas(size);
  CUPROBE_ASSIGN_OR_RETURN(const RegionLayout layout, ReadRegionLayout(h, size, count, areas));
  const absl::Span<const uint8_t> strings(base + layout.strings_offset, layout.strings_size);
  std::vector<MapInfo> maps;
  maps.reserve(count);
  std::set<std::string> names;
  for (uint32_t i = 0; i < count; ++i) {
    const auto& e = *reinterpret_cast<const MapEntry*>(base + layout.entries_offset +
                                                       uint64_t{i} * sizeof(MapEntry));
    CUPROBE_ASSIGN_OR_RETURN(MapInfo info, ReadMapSpec(e, i, strings, names));
    CUPROBE_RETURN_IF_ERROR(CheckMapAreas(e, base, layout, areas, info));
    maps.push_back(std::move(info));
  }
  CUPROBE_RETURN_IF_ERROR(areas.CheckNoOverlap());
  MapsRegion region(base, size, writable, std::move(maps), layout.rings_offset,
                    layout.rings_size);
  region.entries_offset_ = layout.entries_offset;
  return region;
}

MapEntry* MapsRegion::entry(size_t i) const {
  return reinterpret_cast<MapEntry*>(base_ + entries_offset_ + i * sizeof(MapEntry));
}

std::optional<size_t> MapsRegion::Find(std::string_view name) const {
  for (size_t i = 0; i < maps_.size(); ++i) {
    if (maps_[i].spec.name == name) return i;
  }
  return std::nullopt;
}

uint8_t* MapsRegion::BeginSnapshot(size_t i) {
  MapEntry* e = entry(i);
  const uint64_t s = e->seq.load(std::memory_order_relaxed);
  // A writer that died mid-copy left seq odd: stay odd.
  e->seq.store((s & 1) != 0 ? s + 2 : s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  return base_ + maps_[i].snapshot_offset;
}

void MapsRegion::EndSnapshot(size_t i, uint64_t now_ns) {
  MapEntry* e = entry(i);
  e->generation.store(e->generation.load(std::memory_order_relaxed) + 1,
                      std::memory_order_relaxed);
  e->publish_ns.store(now_ns, std::memory_order_relaxed);
  e->seq.store(e->seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

void MapsRegion::EndPublish(uint64_t now_ns) {
  if (base_ == nullptr) return;
  header()->last_publish_ns.store(now_ns, std::memory_order_relaxed);
  header()->publish_count.fetch_add(1, std::memory_order_release);
}

uint64_t MapsRegion::publish_count() const {
  return base_ == nullptr ? 0 : header()->publish_count.load(std::memory_order_acquire);
}

uint64_t MapsRegion::last_publish_ns() const {
  return base_ == nullptr ? 0 : header()->last_publish_ns.load(std::memory_order_relaxed);
}

uint64_t MapsRegion::generation(size_t i) const {
  return entry(i)->generation.load(std::memory_order_acquire);
}

absl::StatusOr<SnapshotBytes> MapsRegion::ReadSnapshot(size_t i, int max_attempts) const {
  const MapInfo& info = maps_[i];
  MapEntry* e = entry(i);
  SnapshotBytes out;
  out.bytes.resize(info.snapshot_size);
  bool always_writing = true;  // every attempt found the snapshot being written
  for (int attempt = 0; attempt < max_attempts; ++attempt) {
    const uint64_t before = e->seq.load(std::memory_order_acquire);
    if ((before & 1) != 0) {
      sched_yield();
      continue;
    }
    always_writing = false;
    // A racy copy by design (seqlock): validated by the second read of seq.
    std::memcpy(out.bytes.data(), base_ + info.snapshot_offset, info.snapshot_size);
    out.generation = e->generation.load(std::memory_order_relaxed);
    out.publish_ns = e->publish_ns.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e->seq.load(std::memory_order_relaxed) == before) return out;
  }
  if (always_writing) {
    // A writer that died mid-copy (the program killed by a signal while its
    // hook published) leaves seq odd until the next snapshot, if any.
    return absl::UnavailableError(absl::StrFormat(
        "map '%s': its snapshot is half-written (the program ended while the hook was "
        "publishing it, e.g. killed by a signal); its last values are lost",
        info.spec.name));
  }
  return absl::UnavailableError(absl::StrFormat(
      "map '%s': no consistent snapshot after %d attempts (the hook publishes continuously?)",
      info.spec.name, max_attempts));
}

absl::StatusOr<MapRing> MapsRegion::Ring(size_t i) const {
  const MapInfo& info = maps_[i];
  if (info.spec.type != CUPROBE_MAP_RINGBUF) {
    return absl::InvalidArgumentError(
        absl::StrFormat("map '%s' is a %s map, not a ring buffer", info.spec.name,
                        MapTypeName(info.spec.type)));
  }
  return MapRing::Attach(base_ + info.ring_offset, info.ring_size, writable_);
}

absl::Status MapsRegion::RequestClear(size_t i) {
  const MapInfo& info = maps_[i];
  if (!writable_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot clear map '%s': the session is open read-only", info.spec.name));
  }
  if (info.spec.type == CUPROBE_MAP_RINGBUF) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "map '%s' is a ring buffer: its records are consumed, not cleared", info.spec.name));
  }
  entry(i)->clear_requests.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> MapsRegion::RequestWrite(size_t i, uint32_t key,
                                                   absl::Span<const uint8_t> value,
                                                   absl::Duration wait) {
  const MapInfo& info = maps_[i];
  const std::string& name = info.spec.name;
  if (!writable_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot write map '%s': the session is open read-only", name));
  }
  if (info.spec.type != CUPROBE_MAP_ARRAY) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "map '%s' is a %s: only ARRAY maps take writes from the host", name,
        MapTypeName(info.spec.type)));
  }
  if (key >= info.spec.max_entries) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "map '%s' has %d entries: no index %d", name, info.spec.max_entries, key));
  }
  if (value.size() != info.spec.value_size || value.size() > kHostWriteMaxValue) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "map '%s' holds %d-byte values, the write has %d (host writes take at most %d bytes)",
        name, info.spec.value_size, value.size(), kHostWriteMaxValue));
  }
  MapEntry* e = entry(i);
  const absl::Time deadline = absl::Now() + wait;
  auto timed_out = [&](std::string_view what) {
    return absl::DeadlineExceededError(
        absl::StrFormat("map '%s': %s after %s", name, what, absl::FormatDuration(wait)));
  };
  // The mailbox's owner: this process, for the few stores below. A writer
  // that died holding it (SIGKILL) is replaced.
  const auto me = static_cast<uint32_t>(::getpid());
  for (uint32_t owner = 0;
       !e->write_owner.compare_exchange_strong(owner, me, std::memory_order_acq_rel);) {
    if (owner != 0 && owner != me && !ProcessAlive(owner)) {
      continue;  // retry the exchange from the dead (or zombie) owner's pid
    }
    if (absl::Now() >= deadline) return timed_out("another writer holds the mailbox");
    absl::SleepFor(absl::Milliseconds(1));
    owner = 0;
  }
  auto give_back = [&] { e->write_owner.store(0, std::memory_order_release); };
  // Nothing pending: the hook applied the last write.
  uint64_t seq = e->write_seq.load(std::memory_order_acquire);
  while (e->write_done.load(std::memory_order_acquire) != seq) {
    if (absl::Now() >= deadline) {
      give_back();
      return timed_out("an earlier write is still pending (is the program's hook publishing?)");
    }
    absl::SleepFor(absl::Milliseconds(1));
    seq = e->write_seq.load(std::memory_order_acquire);
  }
  e->write_key = key;
  e->write_size = static_cast<uint32_t>(value.size());
  std::memcpy(e->write_value, value.data(), value.size());
  e->write_seq.store(seq + 1, std::memory_order_release);
  give_back();
  return seq + 1;
}

std::optional<HostWriteResult> MapsRegion::WriteResult(size_t i, uint64_t seq) const {
  const MapEntry* e = entry(i);
  if (e->write_done.load(std::memory_order_acquire) < seq) return std::nullopt;
  const uint64_t word = e->write_result.load(std::memory_order_acquire);
  // A later write's result replaced ours: ours was applied before it (the
  // writer checked type, index and size, the only reasons to refuse).
  if ((word >> 32) != (seq & 0xffffffffu)) return HostWriteResult::kApplied;
  return static_cast<HostWriteResult>(static_cast<int32_t>(word & 0xffffffffu));
}

std::optional<HostWrite> MapsRegion::PendingWrite(size_t i) const {
  const MapEntry* e = entry(i);
  const uint64_t seq = e->write_seq.load(std::memory_order_acquire);
  if (seq == e->write_done.load(std::memory_order_acquire)) return std::nullopt;
  HostWrite w;
  w.seq = seq;
  w.key = e->write_key;
  const uint32_t size = std::min(e->write_size, kHostWriteMaxValue);
  w.value.assign(e->write_value, e->write_value + size);
  return w;
}

void MapsRegion::AcknowledgeWrite(size_t i, uint64_t seq, HostWriteResult result) {
  MapEntry* e = entry(i);
  e->write_result.store(((seq & 0xffffffffu) << 32) | static_cast<uint32_t>(result),
                        std::memory_order_release);
  e->write_done.store(seq, std::memory_order_release);
}

uint64_t MapsRegion::clear_requests(size_t i) const {
  return entry(i)->clear_requests.load(std::memory_order_acquire);
}

uint64_t MapsRegion::clears_done(size_t i) const {
  return entry(i)->clears_done.load(std::memory_order_acquire);
}

void MapsRegion::AcknowledgeClear(size_t i, uint64_t requests) {
  entry(i)->clears_done.store(requests, std::memory_order_release);
}

absl::Span<uint8_t> MapsRegion::RingsArea() const {
  if (base_ == nullptr || rings_size_ == 0) return {};
  return absl::MakeSpan(base_ + rings_offset_, rings_size_);
}

}  // namespace cuprobe
