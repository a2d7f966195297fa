// File: tests/maps/map_set_counters_test.cc
//
// MapSet's site counters and thread-range counters (include/cuprobe/abi.h):
// what the GPU adds to a counter's shards, or to a launch's thread range,
// folded into every snapshot exactly.
//
// Part of map_set_test (tests/maps/CMakeLists.txt); the maps and the fixture are
// in map_set_test_util.h.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/map_algorithms.h"
#include "maps/map_set.h"
#include "maps/map_snapshot.h"
#include "tests/maps/map_set_test_util.h"
#include "tests/maps/map_test_util.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::Desc;
using ::cuprobe::testing::MapSetTest;
using ::cuprobe::testing::Spec;

namespace algo = ::cuprobe::mapalgo;

// The patch backend's counters: a block the caller made (zeroed, the
// abi.h layout), read like the others, never freed by the maps.
TEST_F(MapSetTest, AdoptedSiteCountersAreReadAndLeftToTheirOwner) {
  HostDeviceMemory memory;
  std::vector<MapSpec> specs = {Spec("counts", CUPROBE_MAP_HASH, 8, 8, 64)};
  absl::StatusOr<MapSet> maps = MapSet::Create(specs, &memory, nullptr);
  ASSERT_TRUE(maps.ok()) << maps.status();
  const uint64_t key = 0x0000000100000007;
  std::vector<uint8_t> key_bytes(8);
  std::memcpy(key_bytes.data(), &key, 8);
  std::vector<SiteCounter> counters(17);
  counters[16].adds = {SiteAdd{0, false, key_bytes, 4}};
  EXPECT_EQ(MapSet::SiteCounterBytes(17), 2u * CUPROBE_SITE_COUNTER_GROUP_BYTES);
  EXPECT_EQ(MapSet::SiteCounterBytes(0), uint64_t{CUPROBE_SITE_COUNTER_GROUP_BYTES});
  absl::StatusOr<uint64_t> base = memory.Allocate(MapSet::SiteCounterBytes(17));
  ASSERT_TRUE(base.ok());
  ASSERT_TRUE(memory.Zero(*base, MapSet::SiteCounterBytes(17)).ok());
  const uint64_t live = memory.live_allocations();
  // Refused: an add to no map; a thread-range counter.
  EXPECT_FALSE(maps->AdoptSiteCounters({SiteCounter{{SiteAdd{3, false, key_bytes, 1}}}}, *base).ok());
  EXPECT_FALSE(maps->AdoptSiteCounters({SiteCounter{{SiteAdd{0, false, key_bytes, 1}}, 8}}, *base)
                   .ok());
  ASSERT_TRUE(maps->AdoptSiteCounters(counters, *base).ok());
  *algo::Ptr<uint64_t>(*base + CUPROBE_SITE_COUNTER_GROUP_BYTES + 9 * 128) += 5;  // counter 16, shard 9
  absl::StatusOr<MapSnapshot> snap = maps->ReadSnapshot(0);
  ASSERT_TRUE(snap.ok()) << snap.status();
  std::optional<absl::Span<const uint8_t>> v = snap->Lookup(AsBytes(key));
  ASSERT_TRUE(v.has_value());
  uint64_t got = 0;
  std::memcpy(&got, v->data(), 8);
  EXPECT_EQ(got, 5u * 4);
  ASSERT_TRUE(maps->Release().ok());
  EXPECT_EQ(memory.live_allocations(), live - 1) << "the maps' own allocation only";
  EXPECT_TRUE(memory.Free(*base).ok()) << "the adopted block is still its owner's";
}

// Site counters (include/cuprobe/abi.h): the hook registers a module's
// counters; the GPU adds to their shards; every snapshot gains count x
// delta for each add, a HASH key appearing at its first count.
TEST_F(MapSetTest, SiteCountersFoldIntoSnapshotsExactly) {
  HostDeviceMemory memory;
  std::vector<MapSpec> specs = {Spec("counts", CUPROBE_MAP_HASH, 8, 8, 64),
                                Spec("lat", CUPROBE_MAP_HIST_LOG2, 4, 8, 65)};
  absl::StatusOr<MapSet> maps = MapSet::Create(specs, &memory, nullptr);
  ASSERT_TRUE(maps.ok()) << maps.status();
  const uint64_t key_a = 0x0000000100000007, key_b = 0x0000000200000007;
  auto bytes = [](uint64_t v) {
    std::vector<uint8_t> b(8);
    std::memcpy(b.data(), &v, 8);
    return b;
  };
  // 17 counters: the 17th lives in the second group of 16.
  std::vector<SiteCounter> counters(17);
  counters[0].adds = {SiteAdd{0, false, bytes(key_a), 1}, SiteAdd{0, false, bytes(key_b), 4}};
  counters[1].adds = {SiteAdd{0, false, bytes(key_a), 2}, SiteAdd{1, true, bytes(1000), 3}};
  counters[16].adds = {SiteAdd{0, false, bytes(key_b), 1}};
  // A key that was never counted must not appear.
  counters[5].adds = {SiteAdd{0, false, bytes(0x99), 1}};
  EXPECT_FALSE(maps->AddSiteCounters({SiteCounter{{SiteAdd{2, false, {}, 1}}}}).ok());  // no map 2
  absl::StatusOr<uint64_t> base = maps->AddSiteCounters(counters);
  ASSERT_TRUE(base.ok()) << base.status();
  // What the flush code does: counter c, shard s at
  // base + (c / 16) * GROUP + s * 128 + (c % 16) * 8.
  auto shard = [&](uint32_t c, uint32_t s) {
    return algo::Ptr<uint64_t>(*base + (c / 16) * CUPROBE_SITE_COUNTER_GROUP_BYTES + s * 128 +
                               (c % 16) * 8);
  };
  *shard(0, 0) += 10;
  *shard(0, 127) += 5;   // 15 executions of counter 0
  *shard(1, 3) += 2;     // 2 of counter 1
  *shard(16, 64) += 7;   // 7 of counter 16
  auto value_of = [&](const MapSnapshot& snap, uint64_t key) -> std::optional<uint64_t> {
    std::optional<absl::Span<const uint8_t>> v = snap.Lookup(AsBytes(key));
    if (!v) return std::nullopt;
    uint64_t got = 0;
    std::memcpy(&got, v->data(), 8);
    return got;
  };
  absl::StatusOr<MapSnapshot> snap = maps->ReadSnapshot(0);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(value_of(*snap, key_a), 15u * 1 + 2u * 2);
  EXPECT_EQ(value_of(*snap, key_b), 15u * 4 + 7u);
  EXPECT_FALSE(value_of(*snap, 0x99).has_value());
  absl::StatusOr<MapSnapshot> hist = maps->ReadSnapshot(1);
  ASSERT_TRUE(hist.ok()) << hist.status();
  // log2 bucket of 1000 is 10.
  const uint32_t bucket = 10;
  uint64_t got = 0;
  std::memcpy(&got, hist->Lookup(AsBytes(bucket))->data(), 8);
  EXPECT_EQ(got, 2u * 3);
  // Clearing a map restarts its site counts; the other map keeps its own.
  ASSERT_TRUE(maps->Clear(0).ok());
  snap = maps->ReadSnapshot(0);
  ASSERT_TRUE(snap.ok());
  EXPECT_FALSE(value_of(*snap, key_a).has_value());
  *shard(0, 1) += 1;
  snap = maps->ReadSnapshot(0);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(value_of(*snap, key_a), 1u);
  EXPECT_EQ(value_of(*snap, key_b), 4u);
  hist = maps->ReadSnapshot(1);
  std::memcpy(&got, hist->Lookup(AsBytes(bucket))->data(), 8);
  EXPECT_EQ(got, 6u);
  ASSERT_TRUE(maps->Release().ok());
}

// Thread-range counters (abi.h): the GPU's first thread of each launch adds
// 1 to launches[min(T, ids)] of the counter's area (and T - ids to its
// errors); every snapshot gains delta for each id below each launch's T,
// next to what the map's own memory holds.
TEST_F(MapSetTest, ThreadRangeCountersGiveEveryThreadOfEachLaunchItsAdds) {
  HostDeviceMemory memory;
  std::vector<MapSpec> specs = {Spec("exits", CUPROBE_MAP_PERTHREAD, 4, 8, 2, 256),
                                Spec("calls", CUPROBE_MAP_ARRAY, 4, 8, 4)};
  absl::StatusOr<MapSet> maps = MapSet::Create(specs, &memory, nullptr);
  ASSERT_TRUE(maps.ok()) << maps.status();
  const std::vector<uint8_t> key0 = {0, 0, 0, 0}, key1 = {1, 0, 0, 0}, key2 = {2, 0, 0, 0};
  // Counters the map cannot take are refused: wrong ids, a key out of
  // range, a count counter on a PERTHREAD map, a range on an ARRAY.
  EXPECT_FALSE(maps->AddSiteCounters({SiteCounter{{SiteAdd{0, false, key1, 1}}, 100}}).ok());
  EXPECT_FALSE(maps->AddSiteCounters({SiteCounter{{SiteAdd{0, false, key2, 1}}, 256}}).ok());
  EXPECT_FALSE(maps->AddSiteCounters({SiteCounter{{SiteAdd{0, false, key1, 1}}, 0}}).ok());
  EXPECT_FALSE(maps->AddSiteCounters({SiteCounter{{SiteAdd{1, false, key1, 1}}, 256}}).ok());
  // Counter 0 counts (ARRAY calls[1] += 1), counter 1 is a range
  // (exits[1][thread] += 3).
  absl::StatusOr<uint64_t> base = maps->AddSiteCounters(
      {SiteCounter{{SiteAdd{1, false, key1, 1}}, 0}, SiteCounter{{SiteAdd{0, false, key1, 3}}, 256}});
  ASSERT_TRUE(base.ok()) << base.status();
  // What the launch's first thread does (site_counter_pass.cc).
  auto launch = [&](uint64_t threads, uint64_t block_base) {
    auto* area = algo::Ptr<uint64_t>(*algo::Ptr<uint64_t>(block_base + 8));  // counter 1's slot
    ASSERT_NE(area, nullptr);
    if (threads > 256) area[0] += threads - 256;
    const uint64_t j = std::min<uint64_t>(threads, 256);
    area[1] = std::max(area[1], j);
    area[2 + j] += 1;
  };
  launch(100, *base);
  launch(100, *base);
  launch(300, *base);
  // A second module with the same counter shares the area: its launches
  // add up with the first one's.
  absl::StatusOr<uint64_t> second =
      maps->AddSiteCounters({SiteCounter{{SiteAdd{1, false, key1, 1}}, 0},
                             SiteCounter{{SiteAdd{0, false, key1, 3}}, 256}});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*algo::Ptr<uint64_t>(*second + 8), *algo::Ptr<uint64_t>(*base + 8));
  launch(256, *second);
  *algo::Ptr<uint64_t>(*base) += 9;  // counter 0: 9 executions
  // A thread's own add, by a probe that was called (exits[1][5] += 7).
  int64_t err = 0;
  uint64_t* own = algo::IndexedAddTarget(Desc(*maps, 0), CUPROBE_MAP_PERTHREAD, 1, 5, &err);
  ASSERT_NE(own, nullptr);
  *own += 7;
  auto value = [](const MapSnapshot& snap, const std::vector<uint8_t>& key, uint64_t id) {
    std::optional<absl::Span<const uint8_t>> v = snap.Lookup(key, id);
    uint64_t got = ~uint64_t{0};
    if (v) std::memcpy(&got, v->data(), 8);
    return got;
  };
  absl::StatusOr<MapSnapshot> snap = maps->ReadSnapshot(0);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(value(*snap, key1, 0), 4u * 3);
  EXPECT_EQ(value(*snap, key1, 5), 4u * 3 + 7);
  EXPECT_EQ(value(*snap, key1, 99), 4u * 3);
  EXPECT_EQ(value(*snap, key1, 100), 2u * 3);  // the launches of 300 and 256
  EXPECT_EQ(value(*snap, key1, 255), 2u * 3);
  EXPECT_EQ(value(*snap, key0, 0), 0u);
  EXPECT_EQ(snap->control().errors, 300u - 256);  // 44 threads past the ids
  EXPECT_EQ(snap->CountEntries(), 256u);
  absl::StatusOr<MapSnapshot> calls = maps->ReadSnapshot(1);
  ASSERT_TRUE(calls.ok());
  EXPECT_EQ(value(*calls, key1, 0), 9u);
  // A clear starts the ranges again: one launch of 10 threads after it.
  ASSERT_TRUE(maps->Clear(0).ok());
  launch(10, *base);
  snap = maps->ReadSnapshot(0);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(value(*snap, key1, 9), 3u);
  EXPECT_EQ(value(*snap, key1, 10), 0u);
  EXPECT_EQ(snap->control().errors, 0u);
  EXPECT_EQ(snap->CountEntries(), 10u);
  ASSERT_TRUE(maps->Release().ok());
}

}  // namespace
}  // namespace cuprobe
