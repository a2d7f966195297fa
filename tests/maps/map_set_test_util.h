// File: tests/maps/map_set_test_util.h
//
// What the sources of map_set_test (tests/maps/map_set*_test.cc) share: the
// maps most tests make (one of each type: HASH, ARRAY with an initial value,
// HIST_LOG2, PERTHREAD, RINGBUF), a map's descriptor in the "device" memory,
// and the fixture that makes session segments and removes them after each
// test.
//
//   TEST_F(MapSetTest, ...) {
//     Session& session = Create(Specs());
//     HostDeviceMemory memory;
//     absl::StatusOr<MapSet> maps = MapSet::Create(Specs(), &memory, &session.maps());
//     mapalgo::MapUpdate(Desc(*maps, 0), &key, &value, 0, 0);
#ifndef CUPROBE_TESTS_MAPS_MAP_SET_TEST_UTIL_H_
#define CUPROBE_TESTS_MAPS_MAP_SET_TEST_UTIL_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "maps/map_algorithms.h"
#include "maps/map_set.h"
#include "maps/segment.h"
#include "tests/maps/map_test_util.h"

namespace cuprobe::testing {

// The five maps, one of each type.
inline std::vector<MapSpec> Specs() {
  std::vector<MapSpec> specs = {
      Spec("counts", CUPROBE_MAP_HASH, 8, 8, 64),
      Spec("globals", CUPROBE_MAP_ARRAY, 4, 24, 1),
      Spec("lat", CUPROBE_MAP_HIST_LOG2, 4, 8, 65),
      Spec("per_thread", CUPROBE_MAP_PERTHREAD, 4, 8, 1, 256),
      Spec("events", CUPROBE_MAP_RINGBUF, 0, 0, 8192),
  };
  specs[1].initial_value = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  return specs;
}

// Map i's descriptor, read where MapSet put it.
inline const cuprobe_map_desc* Desc(const MapSet& maps, size_t i) {
  return mapalgo::Ptr<const cuprobe_map_desc>(maps.table()[i]);
}

// Makes session segments (Create) and removes them after each test.
class MapSetTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (Session& s : sessions_) (void)s.Remove();
  }
  Session& Create(std::vector<MapSpec> specs) {
    SessionOptions options;
    options.ring_capacity = 4096;
    options.maps = std::move(specs);
    absl::StatusOr<Session> s = Session::Create(options);
    EXPECT_TRUE(s.ok()) << s.status();
    sessions_.push_back(*std::move(s));
    return sessions_.back();
  }
  std::vector<Session> sessions_;
};

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_MAPS_MAP_SET_TEST_UTIL_H_
