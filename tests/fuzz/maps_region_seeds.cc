// File: tests/fuzz/maps_region_seeds.cc
//
// Writes the seed corpus of maps_region_fuzz into a folder: valid maps
// regions (every map type, snapshots published by a MapSet over host memory,
// ring records waiting, reserved ones committed or discarded) and corrupted
// variants (truncated, bytes flipped at the header's and entries' fields).
// Run at build time, so the seeds always follow the current layout.
//
//   maps_region_seeds OUT_DIR
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "maps/device_memory.h"
#include "maps/map_algorithms.h"
#include "maps/map_set.h"
#include "maps/maps_region.h"

namespace {

using namespace cuprobe;

MapSpec Spec(std::string name, uint32_t type, uint32_t key, uint32_t value, uint32_t entries,
             uint64_t extra = 0) {
  MapSpec s;
  s.name = std::move(name);
  s.type = type;
  s.key_size = key;
  s.value_size = value;
  s.max_entries = entries;
  s.map_extra = extra;
  return s;
}

void Write(const std::filesystem::path& dir, const std::string& name,
           const std::vector<uint8_t>& bytes) {
  std::ofstream out(dir / name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// A region for `specs` filled through a MapSet; returns its bytes.
std::vector<uint8_t> Region(const std::vector<MapSpec>& specs, int records) {
  const uint64_t size = *MapsRegion::RegionBytes(specs);
  auto* base = static_cast<uint8_t*>(std::aligned_alloc(4096, size));
  std::memset(base, 0, size);
  if (!MapsRegion::Format(base, size, specs).ok()) std::abort();
  MapsRegion region = *MapsRegion::Attach(base, size, true);
  HostDeviceMemory memory;
  MapSet maps = *MapSet::Create(specs, &memory, &region);
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto* d = mapalgo::Ptr<const cuprobe_map_desc>(maps.table()[i]);
    for (uint64_t k = 0; k < 20; ++k) {
      int64_t err = 0;
      if (specs[i].type == CUPROBE_MAP_HIST_LOG2 || specs[i].type == CUPROBE_MAP_HIST_LINEAR) {
        *mapalgo::HistTarget(d, k * k) += 1;
      } else if (specs[i].type == CUPROBE_MAP_RINGBUF) {
        for (int r = 0; r < records; ++r) {
          const uint64_t body[3] = {k, static_cast<uint64_t>(r), k ^ 0xabc};
          if (r % 4 == 3) {
            // bpf_ringbuf_reserve's records commit through header word 1.
            const uint64_t at = mapalgo::RingReserve(d, 8 + (r % 3) * 8, 0);
            if (at != 0) {
              std::memcpy(reinterpret_cast<void*>(at), body, 8 + (r % 3) * 8);
              mapalgo::RingFinishRecord(at, /*discard=*/r % 8 == 7);
            }
          } else {
            (void)mapalgo::RingOutput(d, body, 8 + (r % 3) * 8, 0);
          }
        }
      } else if (specs[i].type == CUPROBE_MAP_HASH) {
        std::vector<uint8_t> key(specs[i].key_size, static_cast<uint8_t>(k));
        if (uint64_t* t = mapalgo::MapAddTarget(d, key.data(), 0, &err)) *t += k;
      } else {
        const uint32_t key = static_cast<uint32_t>(k % specs[i].max_entries);
        if (uint64_t* t = mapalgo::MapAddTarget(d, &key, k, &err)) *t += k + 1;
      }
    }
  }
  if (!maps.Publish(42).ok()) std::abort();
  std::vector<uint8_t> bytes(base, base + size);
  (void)maps.Release();
  std::free(base);
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  MapSpec hash = Spec("counts", CUPROBE_MAP_HASH, 8, 8, 32);
  hash.key_type = {"u64", 8, {}};
  MapSpec array = Spec("events_by_sm", CUPROBE_MAP_ARRAY, 4, 16, 8);
  array.value_type = {"struct ev", 16, {{"n", "u64", 0, 8}, {"name", "char[8]", 8, 8}}};
  const std::vector<MapSpec> all = {
      hash,
      array,
      Spec("lat", CUPROBE_MAP_HIST_LOG2, 4, 8, 65),
      Spec("lin", CUPROBE_MAP_HIST_LINEAR, 4, 8, 12, uint64_t{10} << 32),
      Spec("per_thread", CUPROBE_MAP_PERTHREAD, 4, 8, 2, 32),
      Spec("per_warp", CUPROBE_MAP_PERWARP, 4, 8, 1, 8),
      Spec("per_sm", CUPROBE_MAP_PERSM, 4, 8, 1, 4),
      Spec("wide", CUPROBE_MAP_HASH, 13, 24, 8),
      Spec("events", CUPROBE_MAP_RINGBUF, 0, 0, 4096),
  };
  const std::vector<uint8_t> full = Region(all, 30);
  Write(dir, "all_types.bin", full);
  Write(dir, "ring_only.bin", Region({Spec("events", CUPROBE_MAP_RINGBUF, 0, 0, 4096)}, 150));
  Write(dir, "empty_region.bin", Region({}, 0));
  // Truncations and single-field lies of the valid region.
  for (size_t cut : {size_t{0}, size_t{100}, size_t{256}, full.size() / 2, full.size() - 1}) {
    Write(dir, "truncated_" + std::to_string(cut) + ".bin",
          std::vector<uint8_t>(full.begin(), full.begin() + static_cast<long>(cut)));
  }
  const size_t fields[] = {0,
                           8,
                           16,
                           24,
                           32,
                           40,
                           48,
                           56,
                           64,
                           72,  // header
                           256 + 0,
                           256 + 8,
                           256 + 16,
                           256 + 20,
                           256 + 32,
                           256 + 40,
                           256 + 48,
                           256 + 64,
                           256 + 80,
                           256 + 88,
                           256 + 96,
                           256 + 104,  // entry 0
                           256 + 8 * 256 + 96,
                           256 + 8 * 256 + 104};  // the ring's
  for (size_t f : fields) {
    std::vector<uint8_t> lie = full;
    lie[f] ^= 0x41;
    lie[f + 1] ^= 0x10;
    Write(dir, "lie_at_" + std::to_string(f) + ".bin", lie);
  }
  return 0;
}
