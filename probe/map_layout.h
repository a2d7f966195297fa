// File: probe/map_layout.h
//
// From a map's spec (probe/bundle.h MapSpec) to the sizes and the
// descriptor of its device allocation (probe/map_desc.h): the one place that
// knows the arithmetic, shared by the host runtime (MapSet), the segment's
// maps region (its snapshot areas have the size of control + image) and the
// readers (which rebuild a descriptor over a snapshot copy).
//
//   CUPROBE_ASSIGN_OR_RETURN(MapGeometry g, ComputeMapGeometry(spec));
//   uint64_t base = ...;  // g.allocation_bytes of device memory, 256-aligned
//   cuprobe_map_desc desc = MakeMapDesc(g, base, ring_data, ring_host);
//
// Add-only maps (MapSpec.flags & CUPROBE_MAP_F_ADD_ONLY) of type HASH,
// ARRAY or HIST_* get as many value copies as fit kValueShardBudget bytes,
// up to CUPROBE_MAP_MAX_VALUE_SHARDS (a power of two), each starting a
// whole number of 128-byte lines after the one before.
//
// Spec rules (BPF's where BPF has the type; each violation is an
// INVALID_ARGUMENT that names the map and says what to change):
//   ARRAY        key_size 4, value_size >= 1, max_entries >= 1;
//                initial_value (global data) at most max_entries * value_size
//   HASH         key_size in [1, kMaxHashKeySize], value_size >= 1
//   PER*         key_size 4, value_size >= 1; map_extra low 32 bits: ids per
//                key (0: kDefaultPerThreadIds / PerWarp / PerSm)
//   HIST_LOG2    key_size 4 (or 0), value_size 8, max_entries in [1, 65]
//   HIST_LINEAR  key_size 4 (or 0), value_size 8, max_entries >= 3,
//                step (map_extra high 32 bits) >= 1
//   RINGBUF      key_size 0, value_size 0, max_entries = data bytes, a power
//                of two in [kMinRingBytes, kMaxRingBytes]
// and every allocation at most kMaxMapBytes.
#ifndef CUPROBE_PROBE_MAP_LAYOUT_H_
#define CUPROBE_PROBE_MAP_LAYOUT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "probe/map_desc.h"
#include "probe/bundle.h"

namespace cuprobe {

inline constexpr uint32_t kMaxHashKeySize = 512;
inline constexpr uint32_t kMaxValueSize = 1u << 20;
inline constexpr uint32_t kMaxHashEntries = 1u << 26;
inline constexpr uint32_t kDefaultPerThreadIds = 1u << 20;
inline constexpr uint32_t kDefaultPerWarpIds = 1u << 15;
inline constexpr uint32_t kDefaultPerSmIds = 1024;
inline constexpr uint64_t kMinRingBytes = 4096;
inline constexpr uint64_t kMaxRingBytes = uint64_t{1} << 30;
inline constexpr uint64_t kMaxMapBytes = uint64_t{16} << 30;
inline constexpr uint64_t kValueShardBudget = uint64_t{8} << 20;

struct MapGeometry {
  uint32_t type = 0;
  uint32_t flags = 0;
  uint32_t key_size = 0;
  uint32_t value_size = 0;
  uint32_t max_entries = 0;
  uint32_t key_stride = 0;
  uint32_t value_stride = 0;
  uint32_t id_slots = 0;   // PER*: ids per key; 1 otherwise
  uint64_t slots = 0;      // HASH: power of two >= 2 * max_entries; else entries (x ids)
  uint64_t map_extra = 0;
  // Offsets within the image (after control): HASH states / keys / values;
  // others have values at 0.
  uint64_t states_offset = 0;
  uint64_t keys_offset = 0;
  uint64_t values_offset = 0;
  uint64_t image_bytes = 0;       // 0 for RINGBUF
  uint64_t allocation_bytes = 0;  // desc + control + image + value shards + aux
  uint64_t ring_bytes = 0;        // RINGBUF data bytes (host-mapped)
  // Hot counters spread over copies (probe/map_desc.h): the value copies of
  // an add-only map (1: none), the bytes of one (its values array, which
  // ends the image), and where the aux block (error shards) starts, from
  // the allocation's base.
  uint32_t value_shards = 1;
  uint64_t shard_bytes = 0;
  uint64_t aux_offset = 0;

  // What a snapshot holds: control + image.
  [[nodiscard]] uint64_t snapshot_bytes() const { return CUPROBE_MAP_CONTROL_SIZE + image_bytes; }
};

// Validates `spec` (rules above) and computes its layout.
[[nodiscard]] absl::StatusOr<MapGeometry> ComputeMapGeometry(const MapSpec& spec);

// The descriptor of a map whose allocation starts at `base` (device
// address). RINGBUF maps also take the device addresses of their host-mapped
// data and struct cuprobe_ring_host (0 for other types).
[[nodiscard]] cuprobe_map_desc MakeMapDesc(const MapGeometry& g, uint64_t base,
                                           uint64_t ring_data = 0, uint64_t ring_host = 0);

// Bytes of device memory, from control to the end of the counter shards:
// what the host copies from the device (at base + CUPROBE_MAP_DESC_SIZE) to
// fold a snapshot out of. A ring's hint lines, after the shards, are the
// GPU's alone and are not copied.
[[nodiscard]] inline uint64_t DeviceCopyBytes(const MapGeometry& g) {
  return g.aux_offset + CUPROBE_MAP_AUX_BYTES - CUPROBE_MAP_DESC_SIZE;
}

// Folds a device copy (DeviceCopyBytes bytes, from control on) in place
// into a snapshot, its first snapshot_bytes(): control.errors gains every
// error shard, and each value's first u64 gains the same u64 of every other
// value copy (probe/map_desc.h).
void FoldMapImage(const MapGeometry& g, uint8_t* device_copy);

// A HASH snapshot (control + image at `snapshot`) copied while a GPU insert
// was half done holds a PENDING slot, which the algorithms wait on: turned
// into DELETED here (the key stays, without a value), so host lookups over
// the copy never wait and maps seeded from it never hang their probes.
// Other map types are left alone.
void SettleHashStates(const MapGeometry& g, uint8_t* snapshot);

// A read-only descriptor over a snapshot copy (control + image at
// `snapshot`), for the host algorithms (lookups in a HASH snapshot).
[[nodiscard]] cuprobe_map_desc MakeSnapshotDesc(const MapGeometry& g, const uint8_t* snapshot);

// PERTHREAD, PERWARP or PERSM.
[[nodiscard]] bool IsPerIdType(uint32_t type);

// "HASH", "ARRAY", "PERTHREAD", ... ("type 1234" for others).
[[nodiscard]] std::string MapTypeName(uint32_t type);

}  // namespace cuprobe

#endif  // CUPROBE_PROBE_MAP_LAYOUT_H_
