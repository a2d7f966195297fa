// File: maps/map_set.h
//
// MapSet: the hook's side of the maps. Given the bundle's map specs, it
// allocates every map in device memory (descriptor + control + image, see
// probe/map_desc.h), initializes it, and returns the descriptors' device
// addresses: what the hook writes into each instrumented module's
// `__cuprobe_map_table`. Its watcher then calls Publish() after kernels
// complete and every N ms: a snapshot of each map goes into the session's
// maps region (seqlocked), ring counters into the rings' control blocks, and
// readers' clear requests are honoured.
//
//   CudaDeviceMemory or HostDeviceMemory memory;  // maps/device_memory.h
//   CUPROBE_ASSIGN_OR_RETURN(MapSet maps,
//                            MapSet::Create(bundle.maps, &memory, &session.maps()));
//   cuMemcpyHtoD(table_address, maps.table().data(), 8 * maps.table().size());
//   ...
//   CUPROBE_RETURN_IF_ERROR(maps.Publish(NowNs()));  // watcher
//   CUPROBE_RETURN_IF_ERROR(maps.Release());         // teardown, context still valid
//
// Ring buffers need the region: the consumer reads their records from its
// rings area. Where the GPU writes them depends on RingData:
//  - kHost: into the rings area itself, which Create maps for the device
//    once (DeviceMemory::MapHost over the whole area; in the hook this is
//    cuMemHostRegister, so Create must run once a context exists).
//  - kDeviceMirrored: into a ring of the same capacity in device memory
//    (its struct cuprobe_ring_host, then the data), from which PumpRings()
//    moves committed records into the rings area: in order, each written
//    body first and commit word last, at the pump's own position there
//    (padding at the end as a producer would; a record the consumer has no
//    room for yet waits on the device). The device bytes handed on are
//    zeroed before the device ring's tail frees them. A record written by
//    the GPU into host memory costs it about 8.6 ns (a PCIe write per
//    store), into device memory under 2 ns (docs/PERFORMANCE.md,
//    bench/experiments/ring_latency.cu).
//  - kDeviceSpeculative: as kDeviceMirrored, with a device data area twice
//    the capacity, and producers that reserve first and check after
//    (CUPROBE_MAP_F_RING_SPECULATIVE, probe/map_desc.h): a producer whose
//    bytes do not fit within the capacity makes them a pad in the area's
//    free half, which the pump skips like any pad.
//
// Hazards:
//  - Not thread-safe: one thread (the watcher) publishes; Create and Release
//    happen before and after it runs.
//  - Clear() zeroes device memory that running kernels may be updating:
//    updates racing the clear may survive it or be lost.
//  - `memory` and `region` must outlive the MapSet.
#ifndef CUPROBE_MAPS_MAP_SET_H_
#define CUPROBE_MAPS_MAP_SET_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "maps/device_memory.h"
#include "probe/map_layout.h"
#include "maps/map_snapshot.h"
#include "maps/maps_region.h"
#include "probe/bundle.h"

namespace cuprobe {

enum class RingData { kHost, kDeviceMirrored, kDeviceSpeculative };

class MapSet {
 public:
  // `region` may be null when no map is a RINGBUF (then Publish only
  // updates nothing but ReadSnapshot works). With a region, its maps must be
  // exactly `specs` (name, type, sizes, extra: FAILED_PRECONDITION naming
  // the first difference otherwise: the segment was made for another bundle).
  [[nodiscard]] static absl::StatusOr<MapSet> Create(absl::Span<const MapSpec> specs,
                                                     DeviceMemory* memory, MapsRegion* region,
                                                     RingData ring_data = RingData::kHost);

  MapSet(MapSet&&) noexcept;
  MapSet& operator=(MapSet&&) noexcept;
  MapSet(const MapSet&) = delete;
  MapSet& operator=(const MapSet&) = delete;
  ~MapSet();  // does not free device memory (the context may be gone): call Release

  // Entry i: the device address of map i's descriptor.
  [[nodiscard]] const std::vector<uint64_t>& table() const { return table_; }
  // Bytes [128 i, 128 i + 128): map i's descriptor as the device holds it,
  // for a module's constant copy (__cuprobe_map_descs, abi.h 3.).
  [[nodiscard]] const std::vector<uint8_t>& descriptors() const { return descriptors_; }
  [[nodiscard]] size_t size() const { return maps_.size(); }
  // Whether any map is a ring buffer.
  [[nodiscard]] bool has_rings() const { return has_rings_; }
  [[nodiscard]] const MapGeometry& geometry(size_t i) const { return maps_[i].geometry; }
  [[nodiscard]] const MapSpec& spec(size_t i) const { return maps_[i].spec; }

  // Snapshots every map into the region (if any) and honours clear requests
  // and host writes (ARRAY entries; MapsRegion::RequestWrite), before the
  // snapshot, so a reader that saw a write acknowledged sees it published.
  // Mirrored rings are pumped first (PumpRings).
  [[nodiscard]] absl::Status Publish(uint64_t now_ns);

  // kDeviceMirrored: for each ring, moves the records committed on the
  // device since the last call into the rings area (in order, up to the
  // first record not committed yet or with no room there yet), then zeroes
  // what it moved on the device and moves the device ring's tail past it.
  // Returns how many records it published. DATA_LOSS (once; the ring's
  // records stop there) for a malformed header on the device. A no-op for
  // kHost. One thread at a time (the hook's ring pump, or Publish).
  [[nodiscard]] absl::StatusOr<uint64_t> PumpRings();

  // Continues from what the region last published: every map that has a
  // snapshot (generation > 0) gets that snapshot's control and image as its
  // device state (value copies and counter shards stay zero: the snapshot
  // is folded). For maps re-created in a new context (after
  // cudaDeviceReset) or by the next process of a session, so counts go on
  // where they stopped. HASH slots caught half-inserted come back DELETED
  // (SettleHashStates); a ring keeps its counters but its producer
  // position comes from the ring (MapRing::ResumePosition). The maps that
  // wrote the snapshot must be gone (their kernels over). Call right after
  // Create, before any kernel runs. Returns how many maps were seeded; a
  // no-op without a region.
  [[nodiscard]] absl::StatusOr<size_t> SeedFromRegion();

  // Back to the initial state: zero counters and image, initial value again.
  // INVALID_ARGUMENT for ring buffers.
  [[nodiscard]] absl::Status Clear(size_t i);

  // Map i straight from the device (control + image), as a snapshot.
  [[nodiscard]] absl::StatusOr<MapSnapshot> ReadSnapshot(size_t i);

  // Site counters of one module (include/cuprobe/abi.h, "Site counters"):
  // allocates and zeroes its [counter][CUPROBE_SITE_COUNTER_SHARDS] u64
  // block and returns its device address, for the module's
  // CUPROBE_SITE_COUNTS_SYMBOL. From then on every snapshot of a map gains,
  // for each add of a counter that targets it, count x delta (a HASH key is
  // inserted at its first count, as the GPU would). A thread-range counter
  // (SiteCounter::thread_ids) gets an area of its own, whose address goes
  // in its slot of shard 0, and each launch it recorded adds delta to the
  // ids the launch had (abi.h). INVALID_ARGUMENT for an add that names no
  // map of the set, or a map the counter cannot add to.
  [[nodiscard]] absl::StatusOr<uint64_t> AddSiteCounters(std::vector<SiteCounter> counters);
  // The same for counters (no thread-range one) whose block the caller
  // allocated and zeroed, SiteCounterBytes(counters.size()) bytes at `base`,
  // and frees: the patch backend's, made where the maps' lock cannot be
  // taken (cupti_hook/kernel_patcher.h).
  [[nodiscard]] absl::Status AdoptSiteCounters(std::vector<SiteCounter> counters, uint64_t base);
  // Bytes of the block of `counters` site counters (abi.h layout).
  [[nodiscard]] static uint64_t SiteCounterBytes(size_t counters);

  // Frees the device memory and unmaps the rings area. Idempotent; the
  // MapSet is empty afterwards. Call while the context that registered the
  // rings area (MapHost) is still valid; device memory may outlive it.
  [[nodiscard]] absl::Status Release();

 private:
  struct Map {
    MapSpec spec;  // initial_value kept for Clear
    MapGeometry geometry;
    uint64_t base = 0;  // device address of the allocation
  };
  struct SiteBlock {
    uint64_t base = 0;  // device address
    bool owned = true;  // allocated here (AddSiteCounters), freed by Release
    std::vector<SiteCounter> counters;
    // Per counter and add: the count when the add's map was last cleared.
    std::vector<std::vector<uint64_t>> cleared;
    // Per counter: a thread-range counter's area (index in range_areas_),
    // -1 for the others.
    std::vector<int32_t> area;
  };
  // The area of thread-range counters (abi.h): one per distinct counter,
  // shared by every module whose kernels record into it (their launches
  // add up the same either way).
  struct RangeArea {
    SiteCounter counter;
    uint64_t base = 0;  // device address
    // Per add: the area when the add's map was last cleared (empty: never).
    std::vector<std::vector<uint64_t>> cleared;
  };
  // What the site counters hold now: counts by block and counter (shards
  // summed), and each RangeArea as errors, then launches[0 .. high water].
  // INVALID_ARGUMENT for an add that names no map of the set, or a map
  // the counter cannot add to.
  absl::Status CheckSiteCounters(const std::vector<SiteCounter>& counters) const;
  struct SiteCountValues {
    std::vector<std::vector<uint64_t>> counts;
    std::vector<std::vector<uint64_t>> areas;
  };
  MapSet() = default;
  // Where Create puts ring data (RingData), and for kHost the rings area as
  // the device sees it (MapHost).
  struct RingPlacement {
    bool speculative = false;
    bool mirrored = false;
    absl::Span<uint8_t> area;  // kHost: the region's rings area
    uint64_t device = 0;       // kHost: its device address
  };
  // Create's step for map i: its memory, its ring (if any), its descriptor
  // (into table_ and descriptors_), its initial state.
  [[nodiscard]] absl::Status CreateMap(size_t i, const RingPlacement& rings);
  // A mirrored ring's device copy (mirrors_[i]); returns its address.
  [[nodiscard]] absl::StatusOr<uint64_t> StartMirror(size_t i, MapRing& ring, bool speculative);
  [[nodiscard]] absl::Status Initialize(size_t i);
  // Clears map i: Initialize, and its site counts start again from 0.
  [[nodiscard]] absl::Status ClearMap(size_t i);
  // Every block's counts, and (with `areas`) every range area.
  [[nodiscard]] absl::StatusOr<SiteCountValues> SiteCounts(bool areas = true);
  // Adds the site counts that target map i to its folded copy.
  void ApplySiteCounts(size_t i, const SiteCountValues& counts,
                       uint8_t* snapshot) const;
  [[nodiscard]] MapInfo InfoFor(size_t i) const;
  // Publish without the host writes: clears, then every map's snapshot.
  [[nodiscard]] absl::Status PublishSnapshots(uint64_t now_ns);
  // A host write (MapsRegion::RequestWrite) into map i's device memory.
  [[nodiscard]] HostWriteResult ApplyHostWrite(size_t i, const HostWrite& write);
  // Map i's device memory from control on, folded (FoldMapImage): its first
  // snapshot_bytes() are the snapshot.
  // `counts`: SiteCounts(), read once per Publish (null: read here).
  [[nodiscard]] absl::Status CopyFolded(size_t i, std::vector<uint8_t>* out,
                                        const SiteCountValues* counts = nullptr);
  // A mirrored ring (kDeviceMirrored): its device copy and how far the
  // mirror and the zeroing have got.
  struct RingMirror {
    uint64_t shadow = 0;     // device address: struct cuprobe_ring_host, then the data
    uint64_t position = 0;   // device position: records before it were handed on (and
                             // zeroed; the device copy's tail)
    uint64_t host_head = 0;  // where the next record goes in the rings area
    bool broken = false;     // a malformed header on the device: nothing after it
    uint64_t area = 0;       // device data bytes (twice the capacity: kDeviceSpeculative)
    std::vector<uint8_t> staging;  // the device data, at the same offsets
  };
  [[nodiscard]] absl::StatusOr<uint64_t> PumpRing(size_t i, RingMirror& mirror);
  // Device data [from, to) of a ring (positions; wraps) into `staging`, at
  // the same offsets.
  [[nodiscard]] absl::Status CopyRingRange(const RingMirror& mirror, uint64_t from, uint64_t to,
                                           std::vector<uint8_t>& staging);

  DeviceMemory* memory_ = nullptr;
  MapsRegion* region_ = nullptr;
  std::vector<Map> maps_;
  std::vector<uint64_t> table_;
  std::vector<uint8_t> descriptors_;
  std::vector<std::optional<MapRing>> rings_;  // per map; nullopt for non-rings
  void* rings_host_ = nullptr;        // mapped rings area (kHost), or null
  bool has_rings_ = false;
  std::vector<std::optional<RingMirror>> mirrors_;  // per map; kDeviceMirrored rings only
  std::vector<uint8_t> staging_;      // device -> host (folded), before the seqlocked copy
  std::vector<SiteBlock> site_blocks_;
  std::vector<RangeArea> range_areas_;
};

}  // namespace cuprobe

#endif  // CUPROBE_MAPS_MAP_SET_H_
