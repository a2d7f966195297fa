// File: tests/maps/map_algorithms_test.cc
//
// The semantics of every map type, through the host compilation of the
// algorithms the GPU helper library runs (maps/map_algorithms.h): BPF's
// return codes and flags, HASH probing with colliding keys, deletes and the
// full-table behaviour, PER* ids, histogram buckets, and the ring buffer
// (wrap, pad, reserve/submit/discard, exact drops, and concurrent producers
// with a concurrent consumer: delivered + dropped == produced, no torn
// record).
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <type_traits>
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
namespace algo = ::cuprobe::mapalgo;

static_assert(std::is_standard_layout_v<cuprobe_map_desc>);
static_assert(std::is_trivially_copyable_v<cuprobe_map_desc>);
static_assert(std::is_standard_layout_v<cuprobe_map_control>);
static_assert(std::is_standard_layout_v<cuprobe_ring_host>);
static_assert(alignof(cuprobe_map_desc) == 8);
static_assert(offsetof(cuprobe_map_desc, magic) == 0);
static_assert(offsetof(cuprobe_map_desc, version) == 4);
static_assert(offsetof(cuprobe_map_desc, max_entries) == 24);
static_assert(offsetof(cuprobe_map_desc, id_slots) == 36);
static_assert(offsetof(cuprobe_map_desc, keys) == 64);
static_assert(offsetof(cuprobe_map_desc, states) == 72);
static_assert(offsetof(cuprobe_map_desc, ring_data) == 88);
static_assert(offsetof(cuprobe_map_control, count) == 0);
static_assert(offsetof(cuprobe_map_control, errors) == 8);
static_assert(offsetof(cuprobe_ring_host, publish_count) == 160);

uint64_t U64At(uint64_t address) { return *reinterpret_cast<const uint64_t*>(address); }

TEST(MapDesc, DescriptorDescribesTheAllocation) {
  HostMap m = HostMap::Make(Spec("h", CUPROBE_MAP_HASH, 12, 20, 100));
  const cuprobe_map_desc* d = m.desc();
  EXPECT_EQ(d->magic, CUPROBE_MAP_DESC_MAGIC);
  EXPECT_EQ(d->version, CUPROBE_MAP_DESC_VERSION);
  EXPECT_EQ(d->size, CUPROBE_MAP_DESC_SIZE);
  EXPECT_EQ(d->key_stride, 16u);
  EXPECT_EQ(d->value_stride, 24u);
  EXPECT_EQ(d->slot_mask, 255u);  // 2 * 100 -> 256 slots
  const uint64_t base = reinterpret_cast<uintptr_t>(d);
  EXPECT_EQ(d->control, base + 128);
  EXPECT_EQ(d->states, base + 256);
  EXPECT_EQ(d->keys, base + 256 + 1024);
  EXPECT_EQ(d->values, base + 256 + 1024 + 256 * 16);
  const uint64_t image_end = 256 + 1024 + 256 * 16 + 256 * 24;
  EXPECT_EQ(m.geometry().aux_offset, image_end);
  EXPECT_EQ(d->aux, base + image_end);
  EXPECT_EQ(m.geometry().allocation_bytes, image_end + CUPROBE_MAP_AUX_BYTES);
  EXPECT_EQ(m.geometry().snapshot_bytes(), image_end - 128);
  EXPECT_EQ(m.geometry().value_shards, 1u) << "not add-only";
  EXPECT_EQ(d->shard_bytes, 0u);
}

TEST(MapDesc, RingsHaveFullHintLinesAfterTheirCounterShards) {
  // The SM's full hint and span in a line of their own (map_desc.h), 128
  // lines after the 128 counter shards; other maps have no hint lines.
  HostMap ring = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 1 << 16));
  const MapGeometry& g = ring.geometry();
  EXPECT_EQ(g.allocation_bytes,
            g.aux_offset + CUPROBE_MAP_AUX_BYTES + CUPROBE_MAP_RING_HINT_BYTES);
  EXPECT_EQ(CUPROBE_MAP_SHARD_RING_FULL_UNTIL, CUPROBE_MAP_RING_HINTS_AT);
  EXPECT_EQ(CUPROBE_MAP_RING_HINTS_AT, CUPROBE_MAP_AUX_BYTES);  // right after the shards
  EXPECT_EQ(CUPROBE_MAP_SHARD_RING_FULL_SPAN, CUPROBE_MAP_AUX_BYTES + 8);
  // The last SM's hint line ends where the allocation ends.
  EXPECT_EQ(g.aux_offset + (CUPROBE_MAP_COUNTER_SHARDS - 1) * CUPROBE_MAP_COUNTER_SHARD_STRIDE +
                CUPROBE_MAP_SHARD_RING_FULL_UNTIL + CUPROBE_MAP_COUNTER_SHARD_STRIDE,
            g.allocation_bytes);
  // The host's copy for a snapshot stops at the counter shards.
  EXPECT_EQ(CUPROBE_MAP_DESC_SIZE + DeviceCopyBytes(g) + CUPROBE_MAP_RING_HINT_BYTES,
            g.allocation_bytes);
  HostMap array = HostMap::Make(Spec("a", CUPROBE_MAP_ARRAY, 4, 8, 16));
  EXPECT_EQ(array.geometry().allocation_bytes,
            array.geometry().aux_offset + CUPROBE_MAP_AUX_BYTES);
}

TEST(MapDesc, AddOnlyMapsSpreadTheirValuesAndTheHostFoldsThem) {
  MapSpec spec = Spec("h", CUPROBE_MAP_HASH, 8, 8, 4096);
  spec.flags = CUPROBE_MAP_F_ADD_ONLY;
  HostMap m = HostMap::Make(spec);
  const MapGeometry& g = m.geometry();
  const cuprobe_map_desc* d = m.desc();
  // 8192 slots of 8-byte values: 64 KiB a copy, 128 copies fit 8 MiB.
  EXPECT_EQ(g.value_shards, 128u);
  EXPECT_EQ(g.shard_bytes, 8192u * 8);
  EXPECT_EQ(d->shard_bytes, g.shard_bytes);
  EXPECT_EQ(d->shard_mask, 127u);
  EXPECT_EQ(g.aux_offset, 256 + g.image_bytes + 127 * g.shard_bytes);
  EXPECT_EQ(d->aux, reinterpret_cast<uintptr_t>(d) + g.aux_offset);
  EXPECT_EQ(g.allocation_bytes, g.aux_offset + CUPROBE_MAP_AUX_BYTES);
  // The host algorithms insert the key and add to the first copy; the GPU
  // adds to its SM's copy and error shard: write those as it would.
  const uint64_t key = 42;
  int64_t err = 0;
  uint64_t* value = algo::MapAddTarget(d, &key, 0, &err);
  ASSERT_NE(value, nullptr);
  *value += 5;
  uint64_t three = 3, seven = 7, errors = 2;
  std::memcpy(reinterpret_cast<uint8_t*>(value) + 1 * g.shard_bytes, &three, 8);
  std::memcpy(reinterpret_cast<uint8_t*>(value) + 127 * g.shard_bytes, &seven, 8);
  std::memcpy(reinterpret_cast<uint8_t*>(d->aux) + 5 * CUPROBE_MAP_COUNTER_SHARD_STRIDE, &errors, 8);
  m.control()->errors = 1;
  std::vector<uint8_t> copy(DeviceCopyBytes(g));
  std::memcpy(copy.data(), m.control(), copy.size());
  FoldMapImage(g, copy.data());
  copy.resize(g.snapshot_bytes());
  const cuprobe_map_desc snap = MakeSnapshotDesc(g, copy.data());
  EXPECT_EQ(snap.shard_bytes, 0u);
  EXPECT_EQ(snap.aux, 0u);
  auto* folded = reinterpret_cast<const uint64_t*>(algo::MapLookup(&snap, &key, 0));
  ASSERT_NE(folded, nullptr);
  EXPECT_EQ(*folded, 5u + 3 + 7);
  cuprobe_map_control control;
  std::memcpy(&control, copy.data(), sizeof(control));
  EXPECT_EQ(control.errors, 3u);
  EXPECT_EQ(control.count, 1u);

  // Maps that are not add-only, and types without hot shared counters, keep
  // one copy.
  spec.flags = 0;
  EXPECT_EQ(ComputeMapGeometry(spec)->value_shards, 1u);
  MapSpec per_thread = Spec("t", CUPROBE_MAP_PERTHREAD, 4, 8, 1);
  per_thread.flags = CUPROBE_MAP_F_ADD_ONLY;
  EXPECT_EQ(ComputeMapGeometry(per_thread)->value_shards, 1u);
  MapSpec big = Spec("b", CUPROBE_MAP_ARRAY, 4, 8, 1u << 20);  // 8 MiB of values
  big.flags = CUPROBE_MAP_F_ADD_ONLY;
  EXPECT_EQ(ComputeMapGeometry(big)->value_shards, 1u) << "no room in the budget";
}

TEST(MapDesc, BadDescriptorsFailCleanly) {
  HostMap m = HostMap::Make(Spec("a", CUPROBE_MAP_ARRAY, 4, 8, 4));
  cuprobe_map_desc bad = *m.desc();
  bad.magic = 0;
  const uint32_t key = 0;
  const uint64_t value = 1;
  EXPECT_EQ(algo::MapLookup(&bad, &key, 0), 0u);
  EXPECT_EQ(algo::MapLookup(nullptr, &key, 0), 0u);
  EXPECT_EQ(algo::MapUpdate(&bad, &key, &value, 0, 0), algo::kEINVAL);
  bad = *m.desc();
  bad.version = CUPROBE_MAP_DESC_VERSION + 1;
  EXPECT_EQ(algo::MapUpdate(&bad, &key, &value, 0, 0), algo::kEINVAL);
  int64_t err = 0;
  EXPECT_EQ(algo::MapAddTarget(&bad, &key, 0, &err), nullptr);
  EXPECT_EQ(err, algo::kEINVAL);
  EXPECT_EQ(algo::MapLookup(m.desc(), nullptr, 0), 0u);
}

// ---- ARRAY -----------------------------------------------------------------

TEST(ArrayMap, LookupUpdateDeleteFollowBpf) {
  HostMap m = HostMap::Make(Spec("a", CUPROBE_MAP_ARRAY, 4, 12, 10));
  const cuprobe_map_desc* d = m.desc();
  uint32_t key = 3;
  const uint64_t addr = algo::MapLookup(d, &key, 0);
  EXPECT_EQ(addr, d->values + 3 * 16);
  const uint8_t value[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  EXPECT_EQ(algo::MapUpdate(d, &key, value, CUPROBE_ANY, 0), 0);
  EXPECT_EQ(std::memcmp(reinterpret_cast<void*>(addr), value, 12), 0);
  EXPECT_EQ(algo::MapUpdate(d, &key, value, CUPROBE_EXIST, 0), 0);
  EXPECT_EQ(algo::MapUpdate(d, &key, value, CUPROBE_NOEXIST, 0), algo::kEEXIST);
  EXPECT_EQ(algo::MapUpdate(d, &key, value, 3, 0), algo::kEINVAL);
  EXPECT_EQ(algo::MapDelete(d, &key), algo::kEINVAL);
  key = 10;
  EXPECT_EQ(algo::MapLookup(d, &key, 0), 0u);
  EXPECT_EQ(algo::MapUpdate(d, &key, value, CUPROBE_ANY, 0), algo::kE2BIG);
  EXPECT_EQ(m.control()->errors, 1u);
  // value_size 12 >= 8: MAP_ADD adds to the first 8 bytes.
  key = 3;
  int64_t err = 1;
  uint64_t* target = algo::MapAddTarget(d, &key, 0, &err);
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(err, 0);
  *target += 5;
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(addr), 0x0807060504030201ull + 5);
}

TEST(ArrayMap, KeysAndValuesAtAnyAlignment) {
  HostMap m = HostMap::Make(Spec("a", CUPROBE_MAP_ARRAY, 4, 8, 300));
  alignas(8) uint8_t buffer[32] = {};
  const uint32_t key = 257;
  const uint64_t value = 0x1122334455667788ull;
  std::memcpy(buffer + 1, &key, 4);
  std::memcpy(buffer + 11, &value, 8);
  EXPECT_EQ(algo::MapUpdate(m.desc(), buffer + 1, buffer + 11, CUPROBE_ANY, 0), 0);
  EXPECT_EQ(U64At(algo::MapLookup(m.desc(), &key, 0)), value);
}

TEST(ArrayMap, SmallValuesCannotBeAddedTo) {
  HostMap m = HostMap::Make(Spec("a", CUPROBE_MAP_ARRAY, 4, 4, 4));
  const uint32_t key = 0;
  int64_t err = 0;
  EXPECT_EQ(algo::MapAddTarget(m.desc(), &key, 0, &err), nullptr);
  EXPECT_EQ(err, algo::kEINVAL);
}

// ---- HASH ----------------------------------------------------------------

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

// ---- PER-THREAD / PER-WARP / PER-SM ---------------------------------------------

TEST(PerIdMap, ValuePerKeyAndId) {
  for (uint32_t type : {CUPROBE_MAP_PERTHREAD, CUPROBE_MAP_PERWARP, CUPROBE_MAP_PERSM}) {
    HostMap m = HostMap::Make(Spec("p", type, 4, 8, 3, /*ids=*/100));
    const cuprobe_map_desc* d = m.desc();
    EXPECT_EQ(d->id_slots, 100u);
    const uint32_t key = 2;
    const uint64_t v = 5;
    EXPECT_EQ(algo::MapUpdate(d, &key, &v, CUPROBE_ANY, 17), 0);
    EXPECT_EQ(algo::MapLookup(d, &key, 17), d->values + (2 * 100 + 17) * 8);
    EXPECT_EQ(U64At(algo::MapLookup(d, &key, 17)), 5u);
    EXPECT_EQ(U64At(algo::MapLookup(d, &key, 16)), 0u);
    int64_t err = 1;
    uint64_t* target = algo::MapAddTarget(d, &key, 99, &err);
    ASSERT_NE(target, nullptr);
    EXPECT_EQ(target, reinterpret_cast<uint64_t*>(d->values + (2 * 100 + 99) * 8));
    // Out-of-range ids and keys are refused and counted.
    EXPECT_EQ(algo::MapLookup(d, &key, 100), 0u);
    EXPECT_EQ(algo::MapUpdate(d, &key, &v, CUPROBE_ANY, 100), algo::kE2BIG);
    EXPECT_EQ(algo::MapAddTarget(d, &key, 1000, &err), nullptr);
    EXPECT_EQ(err, algo::kE2BIG);
    const uint32_t bad_key = 3;
    EXPECT_EQ(algo::MapAddTarget(d, &bad_key, 0, &err), nullptr);
    EXPECT_EQ(m.control()->errors, 4u);
    EXPECT_EQ(algo::MapDelete(d, &key), algo::kEINVAL);
  }
}

TEST(PerIdMap, DefaultIdCounts) {
  EXPECT_EQ(HostMap::Make(Spec("t", CUPROBE_MAP_PERTHREAD, 4, 8, 1)).desc()->id_slots,
            kDefaultPerThreadIds);
  EXPECT_EQ(HostMap::Make(Spec("w", CUPROBE_MAP_PERWARP, 4, 8, 1)).desc()->id_slots,
            kDefaultPerWarpIds);
  EXPECT_EQ(HostMap::Make(Spec("s", CUPROBE_MAP_PERSM, 4, 8, 1)).desc()->id_slots,
            kDefaultPerSmIds);
}

// ---- Histograms --------------------------------------------------------------

TEST(Histogram, Log2Buckets) {
  HostMap m = HostMap::Make(Spec("h", CUPROBE_MAP_HIST_LOG2, 4, 8, 65));
  const cuprobe_map_desc* d = m.desc();
  const std::vector<std::pair<uint64_t, uint32_t>> cases = {
      {0, 0}, {1, 1}, {2, 2}, {3, 2}, {4, 3}, {7, 3}, {8, 4}, {1023, 10}, {1024, 11},
      {(uint64_t{1} << 63) - 1, 63}, {uint64_t{1} << 63, 64}, {~uint64_t{0}, 64}};
  for (const auto& [value, bucket] : cases) {
    EXPECT_EQ(algo::HistBucket(d, value), bucket) << value;
    EXPECT_EQ(algo::HistTarget(d, value), reinterpret_cast<uint64_t*>(d->values + bucket * 8));
  }
  HostMap small = HostMap::Make(Spec("s", CUPROBE_MAP_HIST_LOG2, 4, 8, 5));
  EXPECT_EQ(algo::HistBucket(small.desc(), 7), 3u);
  EXPECT_EQ(algo::HistBucket(small.desc(), 8), 4u);
  EXPECT_EQ(algo::HistBucket(small.desc(), 1ull << 40), 4u) << "clamped to the last bucket";
}

TEST(Histogram, LinearBuckets) {
  // min -10, step 5, 6 buckets: (<-10) [-10,-5) [-5,0) [0,5) [5,10) [10,...)
  const uint64_t extra = static_cast<uint32_t>(-10) | (uint64_t{5} << 32);
  HostMap m = HostMap::Make(Spec("l", CUPROBE_MAP_HIST_LINEAR, 4, 8, 6, extra));
  const cuprobe_map_desc* d = m.desc();
  const std::vector<std::pair<int64_t, uint32_t>> cases = {
      {-11, 0}, {INT64_MIN, 0}, {-10, 1}, {-6, 1}, {-5, 2}, {-1, 2}, {0, 3},
      {4, 3},   {5, 4},         {9, 4},   {10, 5}, {1000, 5}, {INT64_MAX, 5}};
  for (const auto& [value, bucket] : cases) {
    EXPECT_EQ(algo::HistBucket(d, static_cast<uint64_t>(value)), bucket) << value;
  }
  HostMap array = HostMap::Make(Spec("a", CUPROBE_MAP_ARRAY, 4, 8, 6));
  EXPECT_EQ(algo::HistTarget(array.desc(), 1), nullptr) << "not a histogram";
}

TEST(Histogram, LinearBucketsWithoutDivisionMatchTheDefinition) {
  // HistBucketOf decides the last bucket by a multiply and divides in 32
  // bits when it can: compare with the definition over steps, ranges and
  // values that cross 2^32.
  std::mt19937_64 rng(5);
  for (uint32_t step : {1u, 3u, 1000u, 0xfffffffu, 0xffffffffu}) {
    for (uint32_t entries : {3u, 4u, 7u, 1000u}) {
      for (int32_t min : {0, -10, INT32_MIN, INT32_MAX}) {
        const uint64_t extra = static_cast<uint32_t>(min) | (uint64_t{step} << 32);
        HostMap m = HostMap::Make(Spec("l", CUPROBE_MAP_HIST_LINEAR, 4, 8, entries, extra));
        for (int i = 0; i < 200; ++i) {
          int64_t v = static_cast<int64_t>(rng());
          if (i % 3 == 0) v = min + static_cast<int64_t>(rng() % (uint64_t{entries} * step + 3));
          if (i % 3 == 1) v = static_cast<int64_t>(rng() % (uint64_t{1} << 40)) - (1 << 20);
          uint64_t want = 0;
          if (v >= min) {
            want = 1 + (static_cast<uint64_t>(v) - static_cast<uint64_t>(int64_t{min})) / step;
          }
          if (want > entries - 1) want = entries - 1;
          ASSERT_EQ(algo::HistBucket(m.desc(), static_cast<uint64_t>(v)), want)
              << "step " << step << " entries " << entries << " min " << min << " v " << v;
        }
      }
    }
  }
}

// ---- Typed operations (the specialized entry points) ----------------------------

TEST(TypedOps, WordKeysHashCompareAndStoreLikeByteKeys) {
  std::mt19937_64 rng(3);
  for (uint32_t size = 1; size <= 8; ++size) {
    HostMap m = HostMap::Make(Spec("h", CUPROBE_MAP_HASH, size, 8, 512));
    const cuprobe_map_desc* d = m.desc();
    for (int i = 0; i < 300; ++i) {
      const uint64_t raw = rng();
      uint8_t bytes[8];
      std::memcpy(bytes, &raw, 8);
      // Garbage above key_size is ignored.
      const uint64_t garbage = size < 8 ? ~uint64_t{0} << (8 * size) : 0;
      const algo::WordKey word{algo::KeyWordOf(raw | garbage, size), size};
      ASSERT_EQ(algo::HashOf(word), algo::HashKey(bytes, size)) << size;
      int64_t err_word = 1, err_bytes = 1;
      uint64_t* by_word = algo::HashAddTarget(d, word, &err_word);
      uint64_t* by_bytes = algo::MapAddTarget(d, bytes, 0, &err_bytes);
      ASSERT_EQ(err_word, 0);
      ASSERT_EQ(err_bytes, 0);
      ASSERT_EQ(by_word, by_bytes) << "size " << size << " key " << raw;
      *by_word += 1;
      ASSERT_EQ(algo::HashLookup(d, word), algo::MapLookup(d, bytes, 0));
    }
  }
}

TEST(TypedOps, EntryPointsRefuseDescriptorsOfAnotherType) {
  HostMap array = HostMap::Make(Spec("a", CUPROBE_MAP_ARRAY, 4, 8, 4));
  HostMap per = HostMap::Make(Spec("p", CUPROBE_MAP_PERTHREAD, 4, 8, 4, 8));
  HostMap log2 = HostMap::Make(Spec("l", CUPROBE_MAP_HIST_LOG2, 4, 8, 65));
  int64_t err = 0;
  EXPECT_EQ(algo::IndexedLookup(array.desc(), CUPROBE_MAP_PERTHREAD, 0, 0), 0u);
  EXPECT_EQ(algo::IndexedAddTarget(array.desc(), CUPROBE_MAP_PERWARP, 0, 0, &err), nullptr);
  EXPECT_EQ(err, algo::kEINVAL);
  EXPECT_EQ(algo::HistTargetOf(log2.desc(), CUPROBE_MAP_HIST_LINEAR, 5), nullptr);
  // The right type: the generic operations' answers, errors counted alike.
  EXPECT_EQ(algo::IndexedLookup(per.desc(), CUPROBE_MAP_PERTHREAD, 1, 3),
            algo::MapLookup(per.desc(), std::array<uint32_t, 1>{1}.data(), 3));
  EXPECT_EQ(algo::IndexedAddTarget(per.desc(), CUPROBE_MAP_PERTHREAD, 1, 8, &err), nullptr);
  EXPECT_EQ(err, algo::kE2BIG);
  EXPECT_EQ(algo::IndexedAddTarget(per.desc(), CUPROBE_MAP_PERTHREAD, 4, 0, &err), nullptr);
  EXPECT_EQ(err, algo::kE2BIG);
  EXPECT_EQ(per.control()->errors, 2u);  // one id and one index out of range
  EXPECT_EQ(algo::IndexedLookup(array.desc(), CUPROBE_MAP_ARRAY, 4, 0), 0u);
  EXPECT_EQ(array.control()->errors, 0u) << "lookups past the end are not counted";
  EXPECT_EQ(algo::HistTargetOf(log2.desc(), CUPROBE_MAP_HIST_LOG2, 1000),
            algo::HistTarget(log2.desc(), 1000));
}

// ---- RINGBUF --------------------------------------------------------------------

std::vector<std::vector<uint8_t>> ConsumeAll(MapRing& ring) {
  std::vector<std::vector<uint8_t>> out;
  ring.Consume([&](absl::Span<const uint8_t> body) { out.emplace_back(body.begin(), body.end()); });
  EXPECT_TRUE(ring.status().ok()) << ring.status();
  return out;
}

TEST(RingMap, OutputThenConsumeRoundTripsExactBytes) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  std::vector<std::vector<uint8_t>> sent;
  for (uint32_t size : {0u, 1u, 7u, 8u, 9u, 24u, 100u}) {
    std::vector<uint8_t> body(size);
    for (uint32_t i = 0; i < size; ++i) body[i] = static_cast<uint8_t>(size + i);
    ASSERT_EQ(algo::RingOutput(m.desc(), body.data(), size, 0), 0);
    sent.push_back(body);
  }
  EXPECT_EQ(ConsumeAll(ring), sent);
  EXPECT_EQ(ring.Stats().delivered, sent.size());
  EXPECT_EQ(m.control()->ring_reserved, sent.size());
  EXPECT_EQ(ring.Stats().tail, m.control()->ring_head);
  EXPECT_EQ(algo::RingOutput(m.desc(), nullptr, 8, 0), algo::kEINVAL);
  EXPECT_EQ(algo::RingOutput(m.desc(), sent[1].data(), 1, 4), algo::kEINVAL) << "unknown flag";
}

TEST(RingMap, ExactDropsWhenFullAndRoomAgainAfterConsuming) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  const uint8_t body[24] = {1};
  int accepted = 0;
  for (int i = 0; i < 200; ++i) accepted += algo::RingOutput(m.desc(), body, 24, 0) == 0;
  constexpr int kFit = (4096 - 4096 / 8) / 32;  // the slack stays free
  EXPECT_EQ(accepted, kFit);
  EXPECT_EQ(m.control()->ring_dropped, 200u - kFit);
  EXPECT_EQ(m.control()->ring_dropped_bytes, (200u - kFit) * 32);
  EXPECT_EQ(ConsumeAll(ring).size(), uint64_t{kFit});
  // The cached tail is stale: the producer reads the consumer's real one.
  EXPECT_EQ(algo::RingOutput(m.desc(), body, 24, 0), 0);
  EXPECT_EQ(m.control()->ring_tail_cache, uint64_t{kFit} * 32);
}

TEST(RingMap, AReservationLeavesASlackOfAnEighthFree) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  std::vector<uint8_t> body(504, 0x11);  // 512 bytes per record
  for (int i = 0; i < 7; ++i) ASSERT_EQ(algo::RingOutput(m.desc(), body.data(), 504, 0), 0) << i;
  EXPECT_EQ(algo::RingOutput(m.desc(), body.data(), 504, 0), algo::kEAGAIN)
      << "3584 bytes used: the last 512 stay free";
  EXPECT_EQ(m.control()->ring_dropped, 1u);
  EXPECT_EQ(m.control()->ring_dropped_bytes, 512u);
  ASSERT_EQ(ring.Consume([](absl::Span<const uint8_t>) {}, 1), 1u);
  EXPECT_EQ(algo::RingOutput(m.desc(), body.data(), 504, 0), 0) << "room again after consuming";
  EXPECT_EQ(algo::RingOutput(m.desc(), body.data(), 4000, 0), algo::kEAGAIN)
      << "more than capacity - slack can never fit";
  EXPECT_EQ(ConsumeAll(ring).size(), 7u);
  ASSERT_TRUE(ring.status().ok()) << ring.status();
}

TEST(RingMap, BytesReservedAcrossTheEndBecomeOneWrappingPad) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  std::vector<uint8_t> small(1192, 0xab);  // 1200 bytes per record
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(algo::RingOutput(m.desc(), small.data(), small.size(), 0), 0) << i;
    ASSERT_EQ(ConsumeAll(ring).size(), 1u);
  }
  ASSERT_EQ(m.control()->ring_head, 3600u);  // tail 3600 too; 496 bytes before the end
  // The next 1008 bytes at 3600 cross the end of the data.
  std::vector<uint8_t> big(1000, 0xcd);
  ASSERT_EQ(algo::RingOutput(m.desc(), big.data(), 1000, 0), 0);
  EXPECT_EQ(m.control()->ring_head, 3600u + 2 * 1008u) << "a wrapping 1008-byte pad, then the record";
  auto* data = static_cast<uint8_t*>(m.ring_block()) + CUPROBE_RING_HOST_SIZE;
  uint32_t pad = 0;
  std::memcpy(&pad, data + 3600, 4);
  EXPECT_EQ(pad, CUPROBE_RING_COMMIT | CUPROBE_RING_PAD | 1000u);
  const auto got = ConsumeAll(ring);
  ASSERT_TRUE(ring.status().ok()) << ring.status();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], big);
  EXPECT_EQ(ring.Stats().tail, 3600u + 2 * 1008u);
  EXPECT_EQ(m.control()->ring_reserved, 4u) << "the pad is not a record";
  // The consumer zeroed what it read.
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(data[i], 0) << "byte " << i;
}

TEST(RingMap, ReserveSubmitDiscard) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  const uint64_t a = algo::RingReserve(m.desc(), 16, 0);
  const uint64_t b = algo::RingReserve(m.desc(), 16, 0);
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, 0u);
  EXPECT_EQ(algo::RingReserve(m.desc(), 16, 1), 0u) << "reserve takes no flags";
  std::memset(reinterpret_cast<void*>(b), 0xbb, 16);
  algo::RingFinishRecord(b, false);
  EXPECT_TRUE(ConsumeAll(ring).empty()) << "b waits behind the uncommitted a";
  std::memset(reinterpret_cast<void*>(a), 0xaa, 16);
  algo::RingFinishRecord(a, /*discard=*/true);
  const auto got = ConsumeAll(ring);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], std::vector<uint8_t>(16, 0xbb));
  EXPECT_EQ(ring.Stats().discarded, 1u);
  EXPECT_EQ(ring.Stats().delivered, 1u);
}

TEST(RingMap, ReservedRecordsCommitThroughHeaderWordOne) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  auto* data = static_cast<uint8_t*>(m.ring_block()) + CUPROBE_RING_HOST_SIZE;
  const uint64_t a = algo::RingReserve(m.desc(), 20, 0);
  ASSERT_EQ(a, reinterpret_cast<uintptr_t>(data) + CUPROBE_RING_HEADER_SIZE);
  uint32_t words[2] = {};
  std::memcpy(words, data, 8);
  EXPECT_EQ(words[0], 20u) << "the length alone, not committed";
  EXPECT_EQ(words[1], 0u);
  std::memset(reinterpret_cast<void*>(a), 0x5a, 20);
  algo::RingFinishRecord(a, false);
  std::memcpy(words, data, 8);
  EXPECT_EQ(words[0], 20u) << "submit leaves word 0 as it was";
  EXPECT_EQ(words[1], CUPROBE_RING_COMMIT);
  // A zero-length record commits the same way.
  const uint64_t z = algo::RingReserve(m.desc(), 0, 0);
  ASSERT_NE(z, 0u);
  algo::RingFinishRecord(z, false);
  const auto got = ConsumeAll(ring);
  ASSERT_TRUE(ring.status().ok()) << ring.status();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], std::vector<uint8_t>(20, 0x5a));
  EXPECT_TRUE(got[1].empty());
  EXPECT_EQ(ring.Stats().tail, 32u + 8u);
  for (size_t i = 0; i < 64; ++i) ASSERT_EQ(data[i], 0) << "byte " << i << " zeroed for reuse";
}

TEST(RingMap, StrayBitsInAReservedRecordsHeaderStopTheConsumer) {
  for (const auto& [w0, w1] : {std::pair<uint32_t, uint32_t>{16, CUPROBE_RING_COMMIT | 1},
                               {16 | CUPROBE_RING_PAD, CUPROBE_RING_COMMIT},
                               {16 | CUPROBE_RING_DISCARD, CUPROBE_RING_COMMIT}}) {
    HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
    MapRing ring = m.Ring();
    auto* data = static_cast<uint8_t*>(m.ring_block()) + CUPROBE_RING_HOST_SIZE;
    const uint32_t words[2] = {w0, w1};
    std::memcpy(data, words, 8);
    EXPECT_EQ(ring.Consume([](absl::Span<const uint8_t>) { FAIL(); }), 0u);
    EXPECT_EQ(ring.status().code(), absl::StatusCode::kDataLoss) << w0 << " " << w1;
    EXPECT_THAT(std::string(ring.status().message()), ::testing::HasSubstr("stray bits"));
  }
  {
    // Committed in word 0 (as bpf_ringbuf_output commits): word 1 must be 0.
    HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
    MapRing ring = m.Ring();
    auto* data = static_cast<uint8_t*>(m.ring_block()) + CUPROBE_RING_HOST_SIZE;
    const uint32_t words[2] = {CUPROBE_RING_COMMIT | 16, 7};
    std::memcpy(data, words, 8);
    EXPECT_EQ(ring.Consume([](absl::Span<const uint8_t>) { FAIL(); }), 0u);
    EXPECT_EQ(ring.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(ring.status().message()),
                ::testing::HasSubstr("non-zero word 1 (0x00000007)"));
  }
  // Word 1 without COMMIT is a record not yet submitted: the consumer waits.
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  auto* data = static_cast<uint8_t*>(m.ring_block()) + CUPROBE_RING_HOST_SIZE;
  const uint32_t words[2] = {16, CUPROBE_RING_DISCARD};
  std::memcpy(data, words, 8);
  EXPECT_EQ(ring.Consume([](absl::Span<const uint8_t>) { FAIL(); }), 0u);
  EXPECT_TRUE(ring.status().ok()) << ring.status();
}

// The compiler's inline reservation for a lone lane (abi.h 9.) as the
// generated code makes it: cursors, one fetch-and-add, and RingReserveAt for
// whatever does not simply fit (on the host a refresh of the cached tail is
// always due over half full, so the helper serves that case). `others`:
// bytes other producers reserve between this one's check and its
// fetch-and-add.
uint64_t InlineReserve(HostMap& m, uint64_t size, uint64_t others = 0) {
  cuprobe_map_control* c = m.control();
  const uint64_t capacity = m.desc()->slot_mask + 1;
  const uint64_t record = algo::RingRecordSize(size);
  const uint64_t tail = c->ring_tail_cache;
  const uint64_t head = c->ring_head;
  if (record * 8 > capacity * 3 || head - tail > capacity / 2) {
    return algo::RingReserve(m.desc(), size, 0);
  }
  c->ring_head += others;
  const uint64_t p = __atomic_fetch_add(&c->ring_head, record, __ATOMIC_RELAXED);
  if (p + record - tail <= capacity && (p & (capacity - 1)) + record <= capacity) {
    ++c->ring_reserved;
    return algo::RingBeginRecord(m.desc(), p, static_cast<uint32_t>(size));
  }
  return algo::RingReserveAt(m.desc(), size, p, tail);
}

TEST(RingMap, AnInlineReservationAtTheEndPadsAndTakesTheStart) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  auto* data = static_cast<uint8_t*>(m.ring_block()) + CUPROBE_RING_HOST_SIZE;
  // 125 records of 32 bytes, consumed: head = tail = 4000.
  const std::vector<uint8_t> small(24, 0x11);
  for (int i = 0; i < 125; ++i) {
    ASSERT_EQ(algo::RingOutput(m.desc(), small.data(), 24, 0), 0);
    if (i == 99) {
      ASSERT_EQ(ConsumeAll(ring).size(), 100u);
    }
  }
  ASSERT_EQ(ConsumeAll(ring).size(), 25u);
  m.control()->ring_tail_cache = ring.Stats().tail;
  ASSERT_EQ(m.control()->ring_head, 4000u);
  // 200 bytes from 4000 cross the end: they become a pad, and the record
  // takes the next 200, at 4200 (offset 104).
  const uint64_t body = InlineReserve(m, 192);
  ASSERT_NE(body, 0u);
  EXPECT_EQ(body, reinterpret_cast<uintptr_t>(data) + 104 + CUPROBE_RING_HEADER_SIZE);
  uint32_t pad = 0;
  std::memcpy(&pad, data + 4000, 4);
  EXPECT_EQ(pad, CUPROBE_RING_COMMIT | CUPROBE_RING_PAD | 192u) << "the whole 200 bytes, wrapped";
  EXPECT_EQ(m.control()->ring_head, 4096u + 104 + 200);
  std::memset(reinterpret_cast<void*>(body), 0x7e, 192);
  algo::RingFinishRecord(body, false);
  const auto got = ConsumeAll(ring);
  ASSERT_TRUE(ring.status().ok()) << ring.status();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], std::vector<uint8_t>(192, 0x7e));
  EXPECT_EQ(m.control()->ring_reserved, 126u);
  EXPECT_EQ(m.control()->ring_dropped, 0u);
}

TEST(RingMap, AnInlineReservationThatOvershootsGivesItsBytesBackAndCountsADrop) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  // 1800 bytes reserved and never committed (the consumer cannot pass
  // them): the cached tail says under half full, but by the fetch-and-add
  // other producers hold 1000 bytes more, and 1408 do not fit after them.
  const uint64_t held = algo::RingReserve(m.desc(), 1792, 0);
  ASSERT_NE(held, 0u);
  ASSERT_EQ(m.control()->ring_head, 1800u);
  EXPECT_EQ(InlineReserve(m, 1400, /*others=*/1000), 0u);
  EXPECT_EQ(m.control()->ring_head, 2800u) << "the bytes went back";
  EXPECT_EQ(m.control()->ring_dropped, 1u);
  EXPECT_EQ(m.control()->ring_dropped_bytes, 1408u);
  EXPECT_EQ(m.control()->ring_reserved, 1u);
  // What fits still fits, inline.
  const uint64_t next = InlineReserve(m, 24);
  ASSERT_NE(next, 0u);
  EXPECT_EQ(next, held + 2800);
  EXPECT_EQ(m.control()->ring_reserved, 2u);
}

TEST(RingMap, GroupReservationIsAllOrNothing) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  uint64_t first = 0;
  // 3584 bytes usable: two groups of 32 records of 48 bytes, not a third.
  EXPECT_EQ(algo::RingReserveGroup(m.desc(), 48, 32, &first), 32u);
  EXPECT_EQ(first, 0u);
  EXPECT_EQ(algo::RingReserveGroup(m.desc(), 48, 32, &first), 32u);
  EXPECT_EQ(first, 32u * 48);
  EXPECT_EQ(algo::RingReserveGroup(m.desc(), 48, 32, &first), 0u);
  EXPECT_EQ(algo::RingReserveGroup(m.desc(), 48, 1, &first), 1u) << "a smaller group still fits";
  EXPECT_EQ(m.control()->ring_reserved, 65u);
  EXPECT_EQ(m.control()->ring_dropped, 32u);
  EXPECT_EQ(m.control()->ring_dropped_bytes, 32u * 48);
  EXPECT_EQ(algo::RingReserveGroup(m.desc(), 8192, 1, &first), 0u) << "larger than the ring";
}

TEST(RingMap, CorruptHeadersStopTheConsumer) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  auto* data = static_cast<uint8_t*>(m.ring_block()) + CUPROBE_RING_HOST_SIZE;
  const uint32_t runs_past = CUPROBE_RING_COMMIT | 5000;
  std::memcpy(data, &runs_past, 4);
  EXPECT_EQ(ring.Consume([](absl::Span<const uint8_t>) { FAIL(); }), 0u);
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(ring.status().message()), ::testing::HasSubstr("past the end"));

  HostMap m2 = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring2 = m2.Ring();
  auto* data2 = static_cast<uint8_t*>(m2.ring_block()) + CUPROBE_RING_HOST_SIZE;
  const uint32_t short_pad = CUPROBE_RING_COMMIT | CUPROBE_RING_PAD | 8;
  std::memcpy(data2, &short_pad, 4);
  EXPECT_EQ(ring2.Consume([](absl::Span<const uint8_t>) { FAIL(); }), 0u);
  EXPECT_THAT(std::string(ring2.status().message()), ::testing::HasSubstr("pad record"));
}

TEST(RingMap, AttachRejectsBadBlocks) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  EXPECT_EQ(MapRing::Attach(m.ring_block(), 8192, true).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(MapRing::Attach(m.ring_block(), 4095, true).status().code(),
            absl::StatusCode::kDataLoss);
  auto* host = static_cast<cuprobe_ring_host*>(m.ring_block());
  host->tail = 3;
  EXPECT_EQ(MapRing::Attach(m.ring_block(), 4096, true).status().code(),
            absl::StatusCode::kDataLoss);
  host->tail = 0;
  host->magic = 0;
  EXPECT_EQ(MapRing::Attach(m.ring_block(), 4096, true).status().code(),
            absl::StatusCode::kDataLoss);
  MapRing::Format(m.ring_block(), 4096);
  absl::StatusOr<MapRing> read_only = MapRing::Attach(m.ring_block(), 4096, false);
  ASSERT_TRUE(read_only.ok());
  EXPECT_EQ(read_only->Consume([](absl::Span<const uint8_t>) {}), 0u);
  EXPECT_EQ(read_only->status().code(), absl::StatusCode::kFailedPrecondition);
}

// Record body: producer, sequence, length, then bytes derived from them.
std::vector<uint8_t> StressBody(uint32_t producer, uint32_t seq) {
  const uint32_t length = 12 + (seq * 37 + producer * 11) % 120;
  std::vector<uint8_t> body(length);
  std::memcpy(body.data(), &producer, 4);
  std::memcpy(body.data() + 4, &seq, 4);
  std::memcpy(body.data() + 8, &length, 4);
  for (uint32_t i = 12; i < length; ++i) body[i] = static_cast<uint8_t>(producer * 31 + seq + i);
  return body;
}

TEST(RingMap, ConcurrentProducersAndConsumerLoseNothingUncounted) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 16384));
  MapRing ring = m.Ring();
  constexpr uint32_t kProducers = 4;
  constexpr uint32_t kPerProducer = 100000;
  std::atomic<uint32_t> running{kProducers};
  std::vector<uint64_t> accepted(kProducers, 0);
  std::vector<std::thread> producers;
  for (uint32_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint32_t seq = 0; seq < kPerProducer; ++seq) {
        const std::vector<uint8_t> body = StressBody(p, seq);
        if (seq % 5 == 0) {  // the reserve/submit path too
          const uint64_t ptr = algo::RingReserve(m.desc(), body.size(), 0);
          if (ptr != 0) {
            std::memcpy(reinterpret_cast<void*>(ptr), body.data(), body.size());
            algo::RingFinishRecord(ptr, false);
            ++accepted[p];
          }
        } else if (algo::RingOutput(m.desc(), body.data(), body.size(), 0) == 0) {
          ++accepted[p];
        }
      }
      running.fetch_sub(1);
    });
  }
  uint64_t delivered = 0, torn = 0, out_of_order = 0;
  std::vector<int64_t> last_seq(kProducers, -1);
  auto check = [&](absl::Span<const uint8_t> body) {
    uint32_t producer = 0, seq = 0;
    if (body.size() < 12) {
      ++torn;
      return;
    }
    std::memcpy(&producer, body.data(), 4);
    std::memcpy(&seq, body.data() + 4, 4);
    if (producer >= kProducers ||
        std::vector<uint8_t>(body.begin(), body.end()) != StressBody(producer, seq)) {
      ++torn;
      return;
    }
    if (static_cast<int64_t>(seq) <= last_seq[producer]) ++out_of_order;
    last_seq[producer] = seq;
    ++delivered;
  };
  while (running.load() > 0) {
    if (ring.Consume(check) == 0) std::this_thread::yield();
  }
  for (auto& t : producers) t.join();
  ring.Consume(check);
  ASSERT_TRUE(ring.status().ok()) << ring.status();
  uint64_t total_accepted = 0;
  for (uint64_t a : accepted) total_accepted += a;
  EXPECT_EQ(torn, 0u);
  EXPECT_EQ(out_of_order, 0u) << "each producer's records arrive in its order";
  EXPECT_EQ(delivered, total_accepted);
  EXPECT_EQ(delivered + m.control()->ring_dropped, uint64_t{kProducers} * kPerProducer);
  EXPECT_EQ(m.control()->ring_reserved, delivered);
  EXPECT_GT(delivered, 0u);
  EXPECT_EQ(ring.Stats().tail, m.control()->ring_head);
  RecordProperty("delivered", std::to_string(delivered));
  RecordProperty("dropped", std::to_string(m.control()->ring_dropped));
}

}  // namespace
}  // namespace cuprobe
