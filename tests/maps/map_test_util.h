// File: tests/maps/map_test_util.h
//
// Maps over plain host memory for the CPU tests of maps/map_algorithms.h:
// the descriptor, control and image laid out exactly as MapSet lays them out
// in device memory (probe/map_layout.h), so the host-compiled algorithms run
// on the same bytes the GPU helpers would.
//
//   HostMap m = HostMap::Make(Spec("counts", CUPROBE_MAP_HASH, 8, 8, 1024));
//   mapalgo::MapUpdate(m.desc(), &key, &value, CUPROBE_ANY, 0);
#ifndef CUPROBE_TESTS_MAPS_MAP_TEST_UTIL_H_
#define CUPROBE_TESTS_MAPS_MAP_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "maps/map_algorithms.h"
#include "probe/map_layout.h"
#include "maps/map_ring.h"
#include "probe/bundle.h"

namespace cuprobe::testing {

inline MapSpec Spec(std::string name, uint32_t type, uint32_t key_size, uint32_t value_size,
                    uint32_t max_entries, uint64_t map_extra = 0) {
  MapSpec s;
  s.name = std::move(name);
  s.type = type;
  s.key_size = key_size;
  s.value_size = value_size;
  s.max_entries = max_entries;
  s.map_extra = map_extra;
  return s;
}

// The 8 bytes at a host address (a value MapLookup returned).
inline uint64_t U64At(uint64_t address) { return *reinterpret_cast<const uint64_t*>(address); }

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// One map in zeroed, 256-aligned host memory (+ a formatted ring block for
// RINGBUF).
class HostMap {
 public:
  static HostMap Make(const MapSpec& spec) {
    absl::StatusOr<MapGeometry> g = ComputeMapGeometry(spec);
    EXPECT_TRUE(g.ok()) << g.status();
    HostMap m;
    m.geometry_ = *g;
    m.memory_.reset(Zeroed(g->allocation_bytes, 256));
    const uint64_t base = reinterpret_cast<uintptr_t>(m.memory_.get());
    uint64_t ring_data = 0, ring_host = 0;
    if (spec.type == CUPROBE_MAP_RINGBUF) {
      m.ring_block_.reset(Zeroed(MapRing::BlockBytes(g->ring_bytes), 4096));
      MapRing::Format(m.ring_block_.get(), g->ring_bytes);
      ring_host = reinterpret_cast<uintptr_t>(m.ring_block_.get());
      ring_data = ring_host + CUPROBE_RING_HOST_SIZE;
    }
    cuprobe_map_desc d = MakeMapDesc(*g, base, ring_data, ring_host);
    std::memcpy(m.memory_.get(), &d, sizeof(d));
    return m;
  }

  const cuprobe_map_desc* desc() const {
    return reinterpret_cast<const cuprobe_map_desc*>(memory_.get());
  }
  cuprobe_map_control* control() const {
    return reinterpret_cast<cuprobe_map_control*>(static_cast<uint8_t*>(memory_.get()) +
                                                  CUPROBE_MAP_DESC_SIZE);
  }
  uint8_t* image() const {
    return static_cast<uint8_t*>(memory_.get()) + CUPROBE_MAP_IMAGE_OFFSET;
  }
  const MapGeometry& geometry() const { return geometry_; }
  void* ring_block() const { return ring_block_.get(); }

  MapRing Ring() const {
    absl::StatusOr<MapRing> r = MapRing::Attach(ring_block_.get(), geometry_.ring_bytes, true);
    EXPECT_TRUE(r.ok()) << r.status();
    return *std::move(r);
  }

 private:
  static void* Zeroed(uint64_t bytes, uint64_t align) {
    const uint64_t rounded = (bytes + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    std::memset(p, 0, rounded);
    return p;
  }

  MapGeometry geometry_;
  std::unique_ptr<void, FreeDeleter> memory_;
  std::unique_ptr<void, FreeDeleter> ring_block_;
};

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_MAPS_MAP_TEST_UTIL_H_
