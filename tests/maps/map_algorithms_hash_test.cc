// File: tests/maps/map_algorithms_hash_test.cc
//
// HASH maps through the host compilation of the algorithms the GPU helper
// library runs (maps/map_algorithms.h): BPF's return codes and flags,
// probing with colliding keys, deletes in a chain, the full-table behaviour
// (E2BIG, counted), odd key sizes, and concurrent adders and deleters.
//
// Part of map_algorithms_test (tests/maps/CMakeLists.txt).

#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/map_algorithms.h"
#include "probe/map_desc.h"
#include "probe/map_layout.h"
#include "maps/map_ring.h"
#include "tests/maps/map_test_util.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::HostMap;
using ::cuprobe::testing::Spec;
using ::cuprobe::testing::U64At;

namespace algo = ::cuprobe::mapalgo;

TEST(HashMap, InsertLookupDeleteFollowBpf) {
  HostMap m = HostMap::Make(Spec("h", CUPROBE_MAP_HASH, 8, 8, 16));
  const cuprobe_map_desc* d = m.desc();
  const uint64_t key = 42, v1 = 100, v2 = 200;
  EXPECT_EQ(algo::MapLookup(d, &key, 0), 0u);
  EXPECT_EQ(algo::MapUpdate(d, &key, &v1, CUPROBE_EXIST, 0), algo::kENOENT);
  EXPECT_EQ(algo::MapUpdate(d, &key, &v1, CUPROBE_NOEXIST, 0), 0);
  EXPECT_EQ(m.control()->count, 1u);
  EXPECT_EQ(U64At(algo::MapLookup(d, &key, 0)), v1);
  EXPECT_EQ(algo::MapUpdate(d, &key, &v2, CUPROBE_NOEXIST, 0), algo::kEEXIST);
  EXPECT_EQ(U64At(algo::MapLookup(d, &key, 0)), v1);
  EXPECT_EQ(algo::MapUpdate(d, &key, &v2, CUPROBE_EXIST, 0), 0);
  EXPECT_EQ(U64At(algo::MapLookup(d, &key, 0)), v2);
  EXPECT_EQ(algo::MapUpdate(d, &key, &v1, CUPROBE_ANY, 0), 0);
  EXPECT_EQ(U64At(algo::MapLookup(d, &key, 0)), v1);
  EXPECT_EQ(m.control()->count, 1u);
  EXPECT_EQ(algo::MapDelete(d, &key), 0);
  EXPECT_EQ(algo::MapDelete(d, &key), algo::kENOENT);
  EXPECT_EQ(algo::MapLookup(d, &key, 0), 0u);
  EXPECT_EQ(m.control()->count, 0u);
  // Re-inserted: the value starts from the new one, not the old.
  EXPECT_EQ(algo::MapUpdate(d, &key, &v2, CUPROBE_ANY, 0), 0);
  EXPECT_EQ(U64At(algo::MapLookup(d, &key, 0)), v2);
  // MAP_ADD on a new key inserts zero, then adds.
  const uint64_t other = 43;
  int64_t err = 1;
  uint64_t* target = algo::MapAddTarget(d, &other, 0, &err);
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(*target, 0u);
  *target += 7;
  EXPECT_EQ(U64At(algo::MapLookup(d, &other, 0)), 7u);
  EXPECT_EQ(m.control()->count, 2u);
}

TEST(HashMap, DeleteOnADeletedKeyRevivedWithZeroValueByAdd) {
  HostMap m = HostMap::Make(Spec("h", CUPROBE_MAP_HASH, 4, 16, 4));
  const uint32_t key = 9;
  const uint8_t value[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             1,    2,    3,    4,    5,    6,    7,    8};
  ASSERT_EQ(algo::MapUpdate(m.desc(), &key, value, CUPROBE_ANY, 0), 0);
  ASSERT_EQ(algo::MapDelete(m.desc(), &key), 0);
  int64_t err = 1;
  uint64_t* target = algo::MapAddTarget(m.desc(), &key, 0, &err);
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(target[0], 0u);
  EXPECT_EQ(target[1], 0u) << "a revived slot's whole value is zeroed";
}

// Keys whose hash lands on the same home slot, found by search.
std::vector<uint64_t> CollidingKeys(const cuprobe_map_desc* d, size_t count) {
  std::vector<uint64_t> keys;
  uint64_t home = ~uint64_t{0};
  for (uint64_t k = 1; keys.size() < count; ++k) {
    const uint64_t slot = algo::HashKey(reinterpret_cast<const uint8_t*>(&k), 8) & d->slot_mask;
    if (home == ~uint64_t{0}) home = slot;
    if (slot == home) keys.push_back(k);
  }
  return keys;
}

TEST(HashMap, CollidingKeysProbeAndSurviveDeletesInTheChain) {
  HostMap m = HostMap::Make(Spec("h", CUPROBE_MAP_HASH, 8, 8, 64));
  const cuprobe_map_desc* d = m.desc();
  const std::vector<uint64_t> keys = CollidingKeys(d, 12);
  for (uint64_t k : keys) {
    const uint64_t v = k * 10;
    ASSERT_EQ(algo::MapUpdate(d, &k, &v, CUPROBE_NOEXIST, 0), 0) << k;
  }
  // They occupy consecutive slots from the home slot.
  std::set<uint64_t> slots;
  for (uint64_t k : keys) slots.insert((algo::MapLookup(d, &k, 0) - d->values) / d->value_stride);
  EXPECT_EQ(slots.size(), keys.size());
  // Delete every other key: the rest stay reachable past the deleted slots.
  for (size_t i = 0; i < keys.size(); i += 2) ASSERT_EQ(algo::MapDelete(d, &keys[i]), 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t addr = algo::MapLookup(d, &keys[i], 0);
    if (i % 2 == 0) {
      EXPECT_EQ(addr, 0u) << i;
    } else {
      ASSERT_NE(addr, 0u) << i;
      EXPECT_EQ(U64At(addr), keys[i] * 10);
    }
  }
  EXPECT_EQ(m.control()->count, keys.size() / 2);
  // A deleted key comes back in its own slot.
  const uint64_t v = 1;
  const uint64_t before = algo::MapLookup(d, &keys[1], 0);
  ASSERT_EQ(algo::MapUpdate(d, &keys[0], &v, CUPROBE_ANY, 0), 0);
  EXPECT_EQ(algo::MapLookup(d, &keys[1], 0), before);
  EXPECT_EQ(U64At(algo::MapLookup(d, &keys[0], 0)), 1u);
}

TEST(HashMap, FullMapRefusesNewKeysWithE2bigAndCountsThem) {
  HostMap m = HostMap::Make(Spec("h", CUPROBE_MAP_HASH, 8, 8, 5));
  const cuprobe_map_desc* d = m.desc();
  for (uint64_t k = 0; k < 5; ++k) ASSERT_EQ(algo::MapUpdate(d, &k, &k, CUPROBE_ANY, 0), 0);
  uint64_t k = 5;
  EXPECT_EQ(algo::MapUpdate(d, &k, &k, CUPROBE_ANY, 0), algo::kE2BIG);
  int64_t err = 0;
  EXPECT_EQ(algo::MapAddTarget(d, &k, 0, &err), nullptr);
  EXPECT_EQ(err, algo::kE2BIG);
  EXPECT_EQ(m.control()->errors, 2u);
  EXPECT_EQ(m.control()->count, 5u);
  // Existing keys still update; a delete makes room.
  uint64_t existing = 2, v = 99;
  EXPECT_EQ(algo::MapUpdate(d, &existing, &v, CUPROBE_ANY, 0), 0);
  EXPECT_EQ(algo::MapDelete(d, &existing), 0);
  EXPECT_EQ(algo::MapUpdate(d, &k, &k, CUPROBE_ANY, 0), 0);
  EXPECT_EQ(U64At(algo::MapLookup(d, &k, 0)), 5u);
  // The refused key of before was not left behind as a live entry.
  EXPECT_EQ(m.control()->count, 5u);
}

TEST(HashMap, SlotsUsedUpByDeletedDistinctKeysGiveE2big) {
  // 4 entries -> 8 slots. Each new distinct key takes a slot for good (slots
  // are key-stable until the map is cleared): the 9th distinct key finds no
  // EMPTY slot although only one key is live.
  HostMap m = HostMap::Make(Spec("h", CUPROBE_MAP_HASH, 8, 8, 4));
  const cuprobe_map_desc* d = m.desc();
  ASSERT_EQ(d->slot_mask, 7u);
  for (uint64_t k = 100; k < 108; ++k) {
    ASSERT_EQ(algo::MapUpdate(d, &k, &k, CUPROBE_ANY, 0), 0) << k;
    ASSERT_EQ(algo::MapDelete(d, &k), 0);
  }
  uint64_t k = 200;
  EXPECT_EQ(algo::MapUpdate(d, &k, &k, CUPROBE_ANY, 0), algo::kE2BIG);
  // An old key revives fine.
  k = 103;
  EXPECT_EQ(algo::MapUpdate(d, &k, &k, CUPROBE_ANY, 0), 0);
}

TEST(HashMap, OddKeySizesAndUnalignedKeys) {
  for (uint32_t key_size : {1u, 3u, 4u, 7u, 12u, 16u, 33u}) {
    HostMap m = HostMap::Make(Spec("h", CUPROBE_MAP_HASH, key_size, 8, 256));
    const cuprobe_map_desc* d = m.desc();
    std::vector<uint8_t> buffer(key_size + 3);
    for (uint64_t i = 0; i < 200; ++i) {
      for (uint32_t b = 0; b < key_size; ++b) buffer[1 + b] = static_cast<uint8_t>(i * 7 + b * 13);
      if (key_size == 1 && i >= 200) break;
      const int64_t rc = algo::MapUpdate(d, buffer.data() + 1, &i, CUPROBE_NOEXIST, 0);
      // 1-byte keys: i*7 mod 256 is a permutation, so all 200 are distinct.
      ASSERT_EQ(rc, 0) << "key_size " << key_size << " i " << i;
    }
    for (uint64_t i = 0; i < 200; ++i) {
      for (uint32_t b = 0; b < key_size; ++b) buffer[2 + b] = static_cast<uint8_t>(i * 7 + b * 13);
      const uint64_t addr = algo::MapLookup(d, buffer.data() + 2, 0);
      ASSERT_NE(addr, 0u) << "key_size " << key_size << " i " << i;
      EXPECT_EQ(U64At(addr), i);
    }
    EXPECT_EQ(m.control()->count, 200u);
  }
}

TEST(HashMap, ConcurrentAddersOnCollidingKeysCountExactly) {
  HostMap m = HostMap::Make(Spec("h", CUPROBE_MAP_HASH, 8, 8, 64));
  const cuprobe_map_desc* d = m.desc();
  const std::vector<uint64_t> keys = CollidingKeys(d, 24);
  constexpr int kThreads = 4;
  constexpr int kRounds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const uint64_t key = keys[(i * 7 + t) % keys.size()];
        int64_t err = 0;
        uint64_t* target = algo::MapAddTarget(d, &key, 0, &err);
        ASSERT_NE(target, nullptr) << err;
        algo::AtomicAdd64(target, key);
      }
    });
  }
  for (auto& t : threads) t.join();
  uint64_t total_hits = 0;
  for (uint64_t key : keys) {
    const uint64_t addr = algo::MapLookup(d, &key, 0);
    ASSERT_NE(addr, 0u);
    EXPECT_EQ(U64At(addr) % key, 0u);
    total_hits += U64At(addr) / key;
  }
  EXPECT_EQ(total_hits, uint64_t{kThreads} * kRounds);
  EXPECT_EQ(m.control()->count, keys.size());
  EXPECT_EQ(m.control()->errors, 0u);
}

TEST(HashMap, ConcurrentInsertDeleteOfDisjointKeysStaysConsistent) {
  HostMap m = HostMap::Make(Spec("h", CUPROBE_MAP_HASH, 8, 8, 1024));
  const cuprobe_map_desc* d = m.desc();
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t round = 0; round < 200; ++round) {
        for (uint64_t i = 0; i < 64; ++i) {
          const uint64_t key = (static_cast<uint64_t>(t) << 32) | i;
          const uint64_t value = round;
          ASSERT_EQ(algo::MapUpdate(d, &key, &value, CUPROBE_ANY, 0), 0);
        }
        for (uint64_t i = 0; i < 64; i += 2) {
          const uint64_t key = (static_cast<uint64_t>(t) << 32) | i;
          ASSERT_EQ(algo::MapDelete(d, &key), 0);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(m.control()->count, uint64_t{kThreads} * 32);
  for (int t = 0; t < kThreads; ++t) {
    for (uint64_t i = 0; i < 64; ++i) {
      const uint64_t key = (static_cast<uint64_t>(t) << 32) | i;
      const uint64_t addr = algo::MapLookup(d, &key, 0);
      if (i % 2 == 0) {
        EXPECT_EQ(addr, 0u);
      } else {
        ASSERT_NE(addr, 0u);
        EXPECT_EQ(U64At(addr), 199u);
      }
    }
  }
}

}  // namespace
}  // namespace cuprobe
