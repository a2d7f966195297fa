// File: tests/maps/map_algorithms_types_test.cc
//
// The semantics of the map types through the host compilation of the
// algorithms the GPU helper library runs (maps/map_algorithms.h): the
// descriptor's layout and bad descriptors, ARRAY (BPF's return codes and
// flags), PER* ids, histogram buckets, and the typed entry points. HASH is
// in map_algorithms_hash_test.cc, the ring buffer in map_algorithms_test.cc.
//
// Part of map_algorithms_test (tests/maps/CMakeLists.txt).

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <utility>
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

// A one-counter ARRAY's copies are a line apart (8 bytes apart, 16 SMs
// would add to one line), and the host folds only the values, not the
// padding between copies.
TEST(MapDesc, SmallAddOnlyMapsKeepEachCopyOnItsOwnLine) {
  MapSpec spec = Spec("one", CUPROBE_MAP_ARRAY, 4, 8, 1);
  spec.flags = CUPROBE_MAP_F_ADD_ONLY;
  HostMap m = HostMap::Make(spec);
  const MapGeometry& g = m.geometry();
  EXPECT_EQ(g.value_shards, uint32_t{CUPROBE_MAP_MAX_VALUE_SHARDS});
  EXPECT_EQ(g.shard_bytes, uint64_t{CUPROBE_MAP_COUNTER_SHARD_STRIDE});
  EXPECT_EQ(m.desc()->shard_bytes, g.shard_bytes);
  EXPECT_GE(g.aux_offset, 256 + g.values_offset + g.value_shards * g.shard_bytes - g.shard_bytes + 8);
  uint64_t* value = reinterpret_cast<uint64_t*>(m.desc()->values);
  *value = 1;
  const uint64_t two = 2, padding = 99;
  std::memcpy(reinterpret_cast<uint8_t*>(value) + 3 * g.shard_bytes, &two, 8);
  std::memcpy(reinterpret_cast<uint8_t*>(value) + 3 * g.shard_bytes + 8, &padding, 8);
  std::vector<uint8_t> copy(DeviceCopyBytes(g));
  std::memcpy(copy.data(), m.control(), copy.size());
  FoldMapImage(g, copy.data());
  uint64_t folded = 0, next = 0;
  std::memcpy(&folded, copy.data() + CUPROBE_MAP_CONTROL_SIZE + g.values_offset, 8);
  std::memcpy(&next, copy.data() + CUPROBE_MAP_CONTROL_SIZE + g.values_offset + 8, 8);
  EXPECT_EQ(folded, 3u);
  EXPECT_EQ(next, 0u) << "padding is not a value";
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

// Keys of 9 to 16 bytes by value (the two-word entry point): the same hash,
// slot and value as the key's bytes, the second word's bytes past key_size
// ignored.
TEST(TypedOps, PairKeysHashCompareAndStoreLikeByteKeys) {
  std::mt19937_64 rng(5);
  for (uint32_t size = 9; size <= 16; ++size) {
    HostMap m = HostMap::Make(Spec("h", CUPROBE_MAP_HASH, size, 8, 512));
    const cuprobe_map_desc* d = m.desc();
    for (int i = 0; i < 300; ++i) {
      const uint64_t lo = rng(), hi = rng();
      uint8_t bytes[16];
      std::memcpy(bytes, &lo, 8);
      std::memcpy(bytes + 8, &hi, 8);
      const uint64_t garbage = size < 16 ? ~uint64_t{0} << (8 * (size - 8)) : 0;
      const algo::PairKey pair{lo, algo::KeyWordOf(hi | garbage, size - 8), size};
      ASSERT_EQ(algo::HashOf(pair), algo::HashKey(bytes, size)) << size;
      int64_t err_pair = 1, err_bytes = 1;
      uint64_t* by_pair = algo::HashAddTarget(d, pair, &err_pair);
      uint64_t* by_bytes = algo::MapAddTarget(d, bytes, 0, &err_bytes);
      ASSERT_EQ(err_pair, 0);
      ASSERT_EQ(err_bytes, 0);
      ASSERT_EQ(by_pair, by_bytes) << "size " << size << " key " << lo << " " << hi;
      *by_pair += 1;
      ASSERT_EQ(algo::HashLookup(d, pair), algo::MapLookup(d, bytes, 0));
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

}  // namespace
}  // namespace cuprobe
