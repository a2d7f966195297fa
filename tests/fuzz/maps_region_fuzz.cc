// File: tests/fuzz/maps_region_fuzz.cc
//
// Fuzz target of the session segment's maps region (maps/maps_region.h),
// everything a reader does with bytes another process wrote: Attach
// (validation of every offset, size, name and type description), snapshots
// (seqlock copy, HASH probing over the copy, iteration, printing), ring
// consumption (record headers), the TypeDescription parser on the raw
// input, and the hook's side of a region it did not write: the pending host
// write of each map, and maps made over host memory from the region's specs,
// seeded from its snapshots and published (which applies the writes). Any crash, hang or out-of-bounds access is a bug; errors are the
// expected outcome.
//
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-19
//       -DCMAKE_C_COMPILER=clang-19 -DCUPROBE_BUILD_FUZZERS=ON
//       -DCUPROBE_SANITIZE="address;undefined"
//   ninja -C build-fuzz maps_region_fuzz maps_region_seeds
//   build-fuzz/bin/maps_region_fuzz -max_total_time=60 /tmp/new
//   build-fuzz/tests/fuzz/maps_region_seeds
//
// Normal builds link this file with corpus_main.cc (ctest
// maps_region_fuzz_corpus) and replay the seeds that maps_region_seeds
// writes at build time (valid regions of every map type with published
// snapshots and ring records, and corrupted variants of them).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "maps/device_memory.h"
#include "maps/map_print.h"
#include "maps/map_set.h"
#include "maps/map_snapshot.h"
#include "maps/maps_region.h"

namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

void Exercise(cuprobe::MapsRegion& region) {
  for (size_t i = 0; i < region.size(); ++i) {
    const cuprobe::MapInfo& info = region.map(i);
    (void)region.Find(info.spec.name);
    absl::StatusOr<cuprobe::SnapshotBytes> bytes = region.ReadSnapshot(i, 2);
    if (bytes.ok()) {
      cuprobe::MapSnapshot snapshot(info, *std::move(bytes));
      (void)snapshot.CountEntries();
      (void)snapshot.Buckets();
      const uint8_t key[cuprobe::kMaxHashKeySize] = {};
      const uint32_t key_size = info.spec.key_size == 0 ? 4 : info.spec.key_size;
      (void)snapshot.Lookup(absl::MakeConstSpan(key, key_size), 0);
      (void)cuprobe::FormatMap(snapshot);
    }
    if (info.spec.type == CUPROBE_MAP_RINGBUF) {
      absl::StatusOr<cuprobe::MapRing> ring = region.Ring(i);
      if (ring.ok()) {
        size_t seen = 0;
        ring->Consume([&](absl::Span<const uint8_t> body) { seen += body.size(); });
        (void)cuprobe::FormatRingStats(info.spec.name, ring->Stats());
      }
    }
    (void)region.PendingWrite(i);
  }
  // What the hook does with the region: seed maps from it, apply the
  // pending writes, publish. Bounded: huge (valid) specs are skipped.
  std::vector<cuprobe::MapSpec> specs;
  uint64_t bytes = 0;
  for (const cuprobe::MapInfo& info : region.maps()) {
    specs.push_back(info.spec);
    bytes += info.geometry.allocation_bytes;
  }
  if (specs.empty() || bytes > (uint64_t{64} << 20)) return;
  cuprobe::HostDeviceMemory memory;
  absl::StatusOr<cuprobe::MapSet> maps = cuprobe::MapSet::Create(specs, &memory, &region);
  if (!maps.ok()) return;
  (void)maps->SeedFromRegion();
  (void)maps->Publish(1);
  (void)maps->Release();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)cuprobe::ParseTypeDescription(absl::MakeConstSpan(data, size));
  if (size == 0 || size > (size_t{64} << 20)) return 0;
  // The region sits page-aligned in the segment; give it an exact-size
  // (rounded only for aligned_alloc) private copy, writable like the
  // consumer's mapping.
  const size_t rounded = (size + 4095) / 4096 * 4096;
  std::unique_ptr<uint8_t, FreeDeleter> copy(
      static_cast<uint8_t*>(std::aligned_alloc(4096, rounded)));
  std::memcpy(copy.get(), data, size);
  absl::StatusOr<cuprobe::MapsRegion> region =
      cuprobe::MapsRegion::Attach(copy.get(), size, /*writable=*/true);
  if (region.ok()) Exercise(*region);
  return 0;
}
