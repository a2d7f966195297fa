// File: maps/maps_region.h
//
// The maps region of the session segment (layout version 2): what readers in
// other processes see of the probes' maps. The CLI formats it at
// Session::Create from the bundle's map specs; the hook's watcher publishes
// snapshots of the device maps into it; ring buffers live in it (the hook
// cuMemHostRegister()s the rings area so GPU producers write there
// directly); readers list maps, copy consistent snapshots and consume rings.
//
//   region offset 0          MapsRegionHeader (256 bytes)
//   entries_offset           MapEntry[map_count] (256 bytes each)
//   strings_offset           names and serialized key/value TypeDescriptions
//   entry.snapshot_offset    per map: control + image (probe/map_layout.h), 64-aligned
//   rings_offset             per RINGBUF map: cuprobe_ring_host + data, 4096-aligned
//
// Like the segment header, everything is offsets (relative to the region),
// fixed-width and pinned by static_asserts; Attach trusts nothing: every
// offset, size and string is checked against the region's real size, the
// specs must be valid (ComputeMapGeometry) and agree with the sizes recorded,
// and no two areas may overlap. Bump kMapsRegionVersion on any change to
// this layout; the format of the ring records inside it (probe/map_desc.h)
// is versioned by the segment's layout version, which the hook and the CLI
// both check.
//
// Snapshot consistency (a seqlock per map): the writer makes `seq` odd,
// copies, makes it even and bumps `generation`; a reader copies between two
// equal even reads of `seq`. A reader therefore never sees a half-written
// snapshot; what one snapshot holds is one device-to-host copy (see
// docs/MAPS.md for what that means while kernels run).
//
//   CUPROBE_ASSIGN_OR_RETURN(MapsRegion maps, MapsRegion::Attach(base, size, false));
//   for (size_t i = 0; i < maps.size(); ++i) {
//     CUPROBE_ASSIGN_OR_RETURN(SnapshotBytes snap, maps.ReadSnapshot(i));
//   }
#ifndef CUPROBE_MAPS_MAPS_REGION_H_
#define CUPROBE_MAPS_MAPS_REGION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "probe/map_layout.h"
#include "maps/map_ring.h"
#include "probe/bundle.h"

namespace cuprobe {

// "CPMAPS01" in memory.
inline constexpr uint64_t kMapsRegionMagic = 0x3130535041'4D5043ull;
inline constexpr uint32_t kMapsRegionVersion = 1;
inline constexpr uint32_t kMaxMaps = 4096;
inline constexpr uint32_t kMaxMapNameSize = 255;
inline constexpr uint64_t kRingAlignment = 4096;

struct MapsRegionHeader {
  // Written once by the creator (before the segment's session_state is
  // published); untrusted when read.
  uint64_t magic;           // kMapsRegionMagic
  uint32_t version;         // kMapsRegionVersion
  uint32_t header_size;     // sizeof(MapsRegionHeader)
  uint64_t region_size;     // bytes, equals the segment header's maps_size
  uint32_t map_count;
  uint32_t entry_size;      // sizeof(MapEntry)
  uint64_t entries_offset;
  uint64_t strings_offset;
  uint64_t strings_size;
  uint64_t rings_offset;    // the host-registered area (all ring blocks)
  uint64_t rings_size;
  uint32_t desc_version;    // CUPROBE_MAP_DESC_VERSION: the snapshot image format
  uint32_t reserved0;
  uint8_t reserved1[48];
  // Live (line 2): the hook's watcher.
  std::atomic<uint64_t> publish_count;    // publishes of all maps completed
  std::atomic<uint64_t> last_publish_ns;  // CLOCK_REALTIME of the last one
  uint8_t reserved2[112];
};
static_assert(sizeof(MapsRegionHeader) == 256);
static_assert(std::is_standard_layout_v<MapsRegionHeader>);
static_assert(offsetof(MapsRegionHeader, region_size) == 16);
static_assert(offsetof(MapsRegionHeader, entries_offset) == 32);
static_assert(offsetof(MapsRegionHeader, rings_offset) == 56);
static_assert(offsetof(MapsRegionHeader, desc_version) == 72);
static_assert(offsetof(MapsRegionHeader, publish_count) == 128);

struct MapEntry {
  // The spec (immutable).
  uint32_t type;
  uint32_t flags;
  uint32_t key_size;
  uint32_t value_size;
  uint32_t max_entries;
  uint32_t id_slots;           // PER*: ids per key (as computed by ComputeMapGeometry)
  uint64_t map_extra;
  uint64_t name_offset;        // strings-relative
  uint32_t name_size;
  uint32_t reserved0;
  uint64_t key_type_offset;    // strings-relative, a serialized TypeDescription
  uint32_t key_type_size;
  uint32_t reserved1;
  uint64_t value_type_offset;
  uint32_t value_type_size;
  uint32_t reserved2;
  uint64_t snapshot_offset;    // region-relative; control + image
  uint64_t snapshot_size;
  uint64_t ring_offset;        // region-relative ring block (RINGBUF), else 0
  uint64_t ring_size;          // data bytes (RINGBUF), else 0
  uint8_t reserved3[16];
  // Live (line 2).
  std::atomic<uint64_t> seq;             // seqlock: odd while the snapshot is written
  std::atomic<uint64_t> generation;      // snapshots completed
  std::atomic<uint64_t> publish_ns;      // CLOCK_REALTIME of the last one
  std::atomic<uint64_t> clear_requests;  // readers ask: clear the map
  std::atomic<uint64_t> clears_done;     // the hook: requests honoured so far
  // A host write into one ARRAY entry (MapsRegion::RequestWrite), one at a
  // time per map. A writer takes write_owner (its pid; a dead owner's is
  // taken over), waits until write_done == write_seq (nothing pending),
  // fills key, size and value, bumps write_seq (now pending) and gives
  // write_owner back. The hook applies a pending write at its next publish,
  // then stores write_seq into write_done and the outcome in write_result.
  // Formerly reserved4 (zero: nothing pending, no owner).
  std::atomic<uint64_t> write_seq;
  std::atomic<uint64_t> write_done;
  uint32_t write_key;
  uint32_t write_size;
  // The last write applied: (its write_seq's low 32 bits << 32) | HostWriteResult.
  std::atomic<uint64_t> write_result;
  std::atomic<uint32_t> write_owner;
  uint32_t reserved4;
  uint8_t write_value[48];
};
static_assert(sizeof(MapEntry) == 256);
static_assert(std::is_standard_layout_v<MapEntry>);
static_assert(offsetof(MapEntry, map_extra) == 24);
static_assert(offsetof(MapEntry, name_offset) == 32);
static_assert(offsetof(MapEntry, snapshot_offset) == 80);
static_assert(offsetof(MapEntry, ring_size) == 104);
static_assert(offsetof(MapEntry, seq) == 128);
static_assert(offsetof(MapEntry, clears_done) == 160);
static_assert(offsetof(MapEntry, write_seq) == 168);
static_assert(offsetof(MapEntry, write_owner) == 200);
static_assert(offsetof(MapEntry, write_value) == 208);
static_assert(offsetof(MapEntry, write_result) == 192);

// Bytes a host write may carry (an ARRAY value of at most this size).
inline constexpr uint32_t kHostWriteMaxValue = 48;
// What the hook did with a host write.
enum class HostWriteResult : int32_t {
  kApplied = 1,
  kNotAnArray = 2,     // only ARRAY maps take host writes
  kBadKey = 3,         // index >= max_entries
  kBadSize = 4,        // not the map's value size
  kFailed = 5,         // the device write failed
};
// A write waiting for the hook (MapsRegion::PendingWrite).
struct HostWrite {
  uint64_t seq = 0;
  uint32_t key = 0;
  std::vector<uint8_t> value;  // as the writer left it (the hook checks its size)
};

// One map as the region describes it (validated copies).
struct MapInfo {
  MapSpec spec;  // without initial_value
  MapGeometry geometry;
  uint64_t snapshot_offset = 0;
  uint64_t snapshot_size = 0;
  uint64_t ring_offset = 0;
  uint64_t ring_size = 0;
};

// A consistent copy of one map's snapshot area.
struct SnapshotBytes {
  std::vector<uint8_t> bytes;  // control (128 bytes) + image
  uint64_t generation = 0;     // 0: never published (bytes are the zero initial state)
  uint64_t publish_ns = 0;
};

class MapsRegion {
 public:
  // Bytes a region for `specs` takes (a multiple of kRingAlignment), or why
  // a spec is invalid.
  [[nodiscard]] static absl::StatusOr<uint64_t> RegionBytes(absl::Span<const MapSpec> specs);

  // Writes the region for `specs` into `size` zero-filled bytes at `base`
  // (kRingAlignment-aligned; size = RegionBytes(specs)), formats the rings.
  [[nodiscard]] static absl::Status Format(uint8_t* base, uint64_t size,
                                           absl::Span<const MapSpec> specs);

  // Validates a region someone else wrote (see above); DATA_LOSS names the
  // field and the map, FAILED_PRECONDITION a version this build does not
  // understand.
  [[nodiscard]] static absl::StatusOr<MapsRegion> Attach(uint8_t* base, uint64_t size,
                                                         bool writable);

  MapsRegion() = default;  // no maps
  MapsRegion(MapsRegion&&) = default;
  MapsRegion& operator=(MapsRegion&&) = default;

  [[nodiscard]] size_t size() const { return maps_.size(); }
  // The region's bytes (0 for a region without maps).
  [[nodiscard]] uint64_t bytes() const { return size_; }
  [[nodiscard]] const MapInfo& map(size_t i) const { return maps_[i]; }
  [[nodiscard]] const std::vector<MapInfo>& maps() const { return maps_; }
  [[nodiscard]] std::optional<size_t> Find(std::string_view name) const;
  [[nodiscard]] bool writable() const { return writable_; }

  // Writer side (the hook's watcher; one writer per map at a time).
  // BeginSnapshot returns where to copy map i's control + image
  // (snapshot_size bytes); EndSnapshot publishes it.
  [[nodiscard]] uint8_t* BeginSnapshot(size_t i);
  void EndSnapshot(size_t i, uint64_t now_ns);
  // After every map of one publish round.
  void EndPublish(uint64_t now_ns);
  [[nodiscard]] uint64_t publish_count() const;
  [[nodiscard]] uint64_t last_publish_ns() const;

  // Reader side. UNAVAILABLE when `max_attempts` copies all raced a writer.
  [[nodiscard]] absl::StatusOr<SnapshotBytes> ReadSnapshot(size_t i, int max_attempts = 100) const;
  [[nodiscard]] uint64_t generation(size_t i) const;

  // Host writes (ARRAY maps; see MapEntry::write_seq). RequestWrite waits up
  // to `wait` for an earlier write to be applied, then leaves this one
  // pending and returns its sequence number; WriteResult(i, seq) is empty
  // until the hook applied it. FAILED_PRECONDITION read-only,
  // INVALID_ARGUMENT not an ARRAY or a bad key or size, DEADLINE_EXCEEDED
  // when an earlier write stays pending (no hook publishing).
  [[nodiscard]] absl::StatusOr<uint64_t> RequestWrite(size_t i, uint32_t key,
                                                      absl::Span<const uint8_t> value,
                                                      absl::Duration wait);
  [[nodiscard]] std::optional<HostWriteResult> WriteResult(size_t i, uint64_t seq) const;
  // The hook's side: the pending write of map i, if any (copied; its size
  // is capped at kHostWriteMaxValue, never trusted further), and the
  // acknowledgement.
  [[nodiscard]] std::optional<HostWrite> PendingWrite(size_t i) const;
  void AcknowledgeWrite(size_t i, uint64_t seq, HostWriteResult result);

  // The ring of RINGBUF map i (a consumer if the region is writable).
  [[nodiscard]] absl::StatusOr<MapRing> Ring(size_t i) const;

  // Clearing across processes: a reader asks, the hook clears the device map
  // at its next publish and acknowledges. Needs a writable region.
  [[nodiscard]] absl::Status RequestClear(size_t i);
  [[nodiscard]] uint64_t clear_requests(size_t i) const;
  [[nodiscard]] uint64_t clears_done(size_t i) const;
  void AcknowledgeClear(size_t i, uint64_t requests);

  // The area holding every ring block (for cuMemHostRegister), or empty.
  [[nodiscard]] absl::Span<uint8_t> RingsArea() const;

 private:
  MapsRegion(uint8_t* base, uint64_t size, bool writable, std::vector<MapInfo> maps,
             uint64_t rings_offset, uint64_t rings_size)
      : base_(base),
        size_(size),
        writable_(writable),
        maps_(std::move(maps)),
        rings_offset_(rings_offset),
        rings_size_(rings_size) {}
  [[nodiscard]] MapsRegionHeader* header() const {
    return reinterpret_cast<MapsRegionHeader*>(base_);
  }
  [[nodiscard]] MapEntry* entry(size_t i) const;

  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  bool writable_ = false;
  std::vector<MapInfo> maps_;
  uint64_t entries_offset_ = 0;
  uint64_t rings_offset_ = 0;
  uint64_t rings_size_ = 0;
};

// The serialized form of a TypeDescription (in the strings area), exposed
// for tests and the fuzz target: u32 name length, name, u32 size, u32 field
// count, then per field u32 name length, name, u32 type length, type, u32
// offset, u32 size (little-endian).
[[nodiscard]] std::vector<uint8_t> SerializeTypeDescription(const TypeDescription& type);
[[nodiscard]] absl::StatusOr<TypeDescription> ParseTypeDescription(
    absl::Span<const uint8_t> bytes);

}  // namespace cuprobe

#endif  // CUPROBE_MAPS_MAPS_REGION_H_
