// File: tests/maps/gpu/maps_gpu_typed_test.cc
//
// GPU tier of the maps, the specialized entry points (abi.h 8.) that
// compiled probes call: typed ARRAY adds (and their refusal of other map
// types), warp grouping for every key pattern, typed HASH entry points
// against the generic ones, typed PER* and ARRAY lookups, typed histograms
// against the host algorithm; each from 1M threads, checked exactly.
//
// Part of maps_gpu_test (tests/maps/gpu/CMakeLists.txt; label gpu, skips
// without a GPU); the fixture is in maps_gpu_test_util.h.
//
//   build/tests/maps_gpu_test            (or ctest -L gpu -R maps_gpu)

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/map_algorithms.h"
#include "probe/map_layout.h"
#include "maps/map_set.h"
#include "maps/map_snapshot.h"
#include "maps/segment.h"
#include "tests/maps/gpu/maps_gpu_test_util.h"
#include "tests/maps/map_test_util.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::MapsGpu;
using ::cuprobe::testing::Spec;
using ::cuprobe::testing::U64;
using ::cuprobe::testing::kN;

namespace algo = ::cuprobe::mapalgo;

// ---- Specialized entry points (abi.h 8.): what compiled probes call ----

TEST_F(MapsGpu, TypedArrayAddsAreExactAndRefuseOtherMapTypes) {
  MakeMaps({Spec("counts", CUPROBE_MAP_ARRAY, 4, 8, 1024), Spec("h", CUPROBE_MAP_HASH, 8, 8, 16)});
  uint32_t map = 0, modulo = 1024;
  uint64_t* no_rc = nullptr;
  Run("array_add_index", {&map, &modulo, &no_rc});
  const uint64_t rc = Buffer(kN);
  uint64_t rc_ptr = rc;
  modulo = 2048;
  Run("array_add_index", {&map, &modulo, &rc_ptr});
  MapSnapshot s = Snapshot(0);
  for (uint32_t k = 0; k < 1024; ++k) ASSERT_EQ(U64(*s.Lookup(AsBytes(k))), 1024u + 512u) << k;
  EXPECT_EQ(s.control().errors, kN / 2);
  std::vector<uint64_t> codes = Download(rc, kN);
  for (uint64_t gid = 0; gid < kN; ++gid) {
    ASSERT_EQ(codes[gid], gid % 2048 < 1024 ? 0 : static_cast<uint64_t>(algo::kE2BIG)) << gid;
  }
  // The ARRAY entry point on a HASH map: a bad map, nothing written.
  map = 1;
  modulo = 4;
  Run("array_add_index", {&map, &modulo, &rc_ptr});
  codes = Download(rc, kN);
  for (uint64_t gid = 0; gid < kN; ++gid) {
    ASSERT_EQ(codes[gid], static_cast<uint64_t>(algo::kEINVAL)) << gid;
  }
  EXPECT_EQ(Snapshot(1).CountEntries(), 0u);
}

TEST_F(MapsGpu, WarpGroupingIsExactForEveryKeyPattern) {
  // Patterns of map_kernels.cu (PatternKey): one key, distinct keys, runs of
  // neighbours, alternating keys, partial warps. Each takes another path of
  // the grouping; the sums must be exact whichever it takes.
  std::vector<MapSpec> specs;
  for (int p = 0; p < 5; ++p) specs.push_back(Spec("a", CUPROBE_MAP_ARRAY, 4, 8, 1024));
  for (int p = 0; p < 5; ++p) specs.push_back(Spec("h", CUPROBE_MAP_HASH, 8, 8, 2048));
  MakeMaps(specs);
  for (uint32_t pattern = 0; pattern < 5; ++pattern) {
    uint32_t array_map = pattern, hash_map = 5 + pattern, pat = pattern;
    Run("array_add_pattern", {&array_map, &pat});
    Run("hash_word_add_pattern", {&hash_map, &pat});
    std::map<uint32_t, uint64_t> expected;
    for (uint64_t gid = 0; gid < kN; ++gid) {
      uint32_t key = 0;
      bool call = true;
      switch (pattern) {
        case 0: key = 0; break;
        case 1: key = gid % 1024; break;
        case 2: key = (gid / 4) % 1024; break;
        case 3: key = gid % 2; break;
        default: key = (gid / 8) % 1024; call = gid % 3 != 0; break;
      }
      if (call) expected[key] += gid + 1;
    }
    MapSnapshot a = Snapshot(array_map);
    MapSnapshot h = Snapshot(hash_map);
    EXPECT_EQ(h.CountEntries(), expected.size()) << "pattern " << pattern;
    EXPECT_EQ(h.control().errors, 0u);
    for (uint32_t k = 0; k < 1024; ++k) {
      const uint64_t want = expected.contains(k) ? expected[k] : 0;
      ASSERT_EQ(U64(*a.Lookup(AsBytes(k))), want) << "pattern " << pattern << " key " << k;
      const uint64_t hash_key = uint64_t{k} * 1000003 + 17;
      std::optional<absl::Span<const uint8_t>> v = h.Lookup(AsBytes(hash_key));
      ASSERT_EQ(v.has_value(), expected.contains(k)) << "pattern " << pattern << " key " << k;
      if (v.has_value()) {
        ASSERT_EQ(U64(*v), want) << "pattern " << pattern << " key " << k;
      }
    }
  }
}

TEST_F(MapsGpu, TypedHashEntryPointsMatchTheGenericOnes) {
  MakeMaps({Spec("hot", CUPROBE_MAP_HASH, 8, 8, 16), Spec("uniform", CUPROBE_MAP_HASH, 8, 8, 4096),
            Spec("kv", CUPROBE_MAP_HASH, 8, 8, 1 << 20), Spec("wide", CUPROBE_MAP_HASH, 16, 8, 1024),
            Spec("small", CUPROBE_MAP_HASH, 4, 8, 64)});
  std::vector<uint64_t> keys(4096);
  for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = i * 1000003 + 17;
  const uint64_t keys_dev = Buffer(keys.size());
  ASSERT_TRUE(gpu_->Upload(keys_dev, keys.data(), keys.size() * 8).ok());
  uint32_t map = 0, nkeys = 1, mode = 0;
  uint64_t keys_ptr = keys_dev;
  uint64_t* no_rc = nullptr;
  Run("hash_word_add_keys", {&map, &keys_ptr, &nkeys, &mode, &no_rc});
  EXPECT_EQ(U64(*Snapshot(0).Lookup(AsBytes(keys[0]))), kN);
  map = 1;
  nkeys = 4096;
  mode = 1;
  Run("hash_word_add_keys", {&map, &keys_ptr, &nkeys, &mode, &no_rc});
  std::vector<uint64_t> expected(4096, 0);
  for (uint64_t gid = 0; gid < kN; ++gid) expected[gid % 4096] += gid * 65537 + (uint64_t{1} << 33);
  MapSnapshot uniform = Snapshot(1);
  EXPECT_EQ(uniform.control().count, 4096u);
  for (uint64_t i = 0; i < 4096; ++i) {
    ASSERT_EQ(U64(*uniform.Lookup(AsBytes(keys[i]))), expected[i]) << i;
  }
  // Lookups by word and by address find what the generic update wrote.
  map = 2;
  const uint64_t rc = Buffer(kN), out = Buffer(kN);
  uint64_t rc_ptr = rc, out_ptr = out, flags = CUPROBE_ANY;
  Run("hash_update", {&map, &flags, &rc_ptr});
  for (uint32_t by_word : {0u, 1u}) {
    Run("hash_lookup_typed", {&map, &by_word, &out_ptr});
    const std::vector<uint64_t> values = Download(out, kN);
    for (uint64_t gid = 0; gid < kN; ++gid) ASSERT_EQ(values[gid], gid + 1) << gid << " " << by_word;
  }
  // Wide keys by address, then the same keys by value (two words): the
  // same slots, so every count doubles.
  map = 3;
  uint32_t modulo = 1000;
  Run("hash_add_wide_keys_typed", {&map, &modulo});
  for (int by_value = 0; by_value < 2; ++by_value) {
    if (by_value == 1) Run("hash_add_wide_keys_2word", {&map, &modulo});
    MapSnapshot wide = Snapshot(3);
    EXPECT_EQ(wide.CountEntries(), 1000u);
    for (uint64_t k = 0; k < 1000; ++k) {
      const uint64_t key[2] = {k, ~k};
      ASSERT_EQ(U64(*wide.Lookup(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key), 16))),
                (1 + by_value) * (kN / 1000 + (k < kN % 1000 ? 1 : 0)))
          << k << " " << by_value;
    }
  }
  // The word entry point on a 4-byte key map uses the low 4 bytes only; on a
  // 16-byte key map it refuses (-EINVAL) and writes nothing.
  map = 4;
  nkeys = 16;
  mode = 0;
  std::vector<uint64_t> high(16);
  for (uint64_t i = 0; i < 16; ++i) high[i] = (uint64_t{0xdead} << 32) | i;
  ASSERT_TRUE(gpu_->Upload(keys_dev, high.data(), high.size() * 8).ok());
  Run("hash_word_add_keys", {&map, &keys_ptr, &nkeys, &mode, &rc_ptr});
  MapSnapshot small = Snapshot(4);
  EXPECT_EQ(small.CountEntries(), 16u);
  for (uint32_t i = 0; i < 16; ++i) ASSERT_EQ(U64(*small.Lookup(AsBytes(i))), kN / 16) << i;
  map = 3;
  Run("hash_word_add_keys", {&map, &keys_ptr, &nkeys, &mode, &rc_ptr});
  for (uint64_t code : Download(rc, kN)) ASSERT_EQ(code, static_cast<uint64_t>(algo::kEINVAL));
  EXPECT_EQ(Snapshot(3).CountEntries(), 1000u);
}

TEST_F(MapsGpu, TypedPerIdAndArrayLookups) {
  MakeMaps({Spec("t", CUPROBE_MAP_PERTHREAD, 4, 8, 1, kN),
            Spec("w", CUPROBE_MAP_PERWARP, 4, 8, 1, kN / 32),
            Spec("s", CUPROBE_MAP_PERSM, 4, 8, 1, 1024),
            Spec("half", CUPROBE_MAP_PERTHREAD, 4, 8, 1, kN / 2),
            Spec("a", CUPROBE_MAP_ARRAY, 4, 8, 1024)});
  const uint64_t out = Buffer(kN);
  uint64_t out_ptr = out;
  uint64_t* no_out = nullptr;
  uint32_t map = 0, type = CUPROBE_MAP_PERTHREAD;
  Run("per_id_typed", {&map, &type, &no_out});
  Run("per_id_typed", {&map, &type, &out_ptr});
  for (uint64_t v : Download(out, kN)) ASSERT_EQ(v, 2u);  // a thread sees its own adds
  map = 1;
  type = CUPROBE_MAP_PERWARP;
  Run("per_id_typed", {&map, &type, &no_out});
  Run("per_id_typed", {&map, &type, &no_out});
  map = 2;
  type = CUPROBE_MAP_PERSM;
  Run("per_id_typed", {&map, &type, &no_out});
  Run("per_id_typed", {&map, &type, &no_out});
  const uint32_t key = 0;
  MapSnapshot w = Snapshot(1);
  for (uint64_t id = 0; id < kN / 32; ++id) ASSERT_EQ(U64(*w.Lookup(AsBytes(key), id)), 64u) << id;
  uint64_t total = 0;
  Snapshot(2).ForEach([&](absl::Span<const uint8_t>, uint64_t id, absl::Span<const uint8_t> v) {
    EXPECT_LT(id, static_cast<uint64_t>(gpu_->sm_count()));
    total += U64(v);
  });
  EXPECT_EQ(total, 2 * kN);
  // Ids past id_slots: the add and the lookup each count an error.
  map = 3;
  type = CUPROBE_MAP_PERTHREAD;
  Run("per_id_typed", {&map, &type, &out_ptr});
  const std::vector<uint64_t> half = Download(out, kN);
  for (uint64_t gid = 0; gid < kN; ++gid) ASSERT_EQ(half[gid], gid < kN / 2 ? 1 : ~uint64_t{0});
  EXPECT_EQ(Snapshot(3).control().errors, kN);
  // ARRAY lookups past max_entries: null, not counted.
  map = 4;
  type = 0;
  Run("per_id_typed", {&map, &type, &out_ptr});
  const std::vector<uint64_t> arr = Download(out, kN);
  for (uint64_t gid = 0; gid < kN; ++gid) ASSERT_EQ(arr[gid], gid % 2048 < 1024 ? 0 : ~uint64_t{0});
  EXPECT_EQ(Snapshot(4).control().errors, 0u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(Snapshot(i).control().errors, 0u);
}

TEST_F(MapsGpu, TypedHistogramsMatchTheHostAlgorithm) {
  const uint64_t linear_extra = 0 | (uint64_t{10} << 32);
  MakeMaps({Spec("log2", CUPROBE_MAP_HIST_LOG2, 4, 8, 65),
            Spec("linear", CUPROBE_MAP_HIST_LINEAR, 4, 8, 102, linear_extra)});
  uint32_t map = 0, modulo = 0, linear = 0;
  Run("hist_add_typed", {&map, &modulo, &linear});
  map = 1;
  modulo = 1000;
  linear = 1;
  Run("hist_add_typed", {&map, &modulo, &linear});
  ::cuprobe::testing::HostMap log2 = ::cuprobe::testing::HostMap::Make(maps_->spec(0));
  ::cuprobe::testing::HostMap lin = ::cuprobe::testing::HostMap::Make(maps_->spec(1));
  std::vector<uint64_t> want_log2(65, 0), want_linear(102, 0);
  for (uint64_t gid = 0; gid < kN; ++gid) {
    ++want_log2[algo::HistBucket(log2.desc(), gid)];
    ++want_linear[algo::HistBucket(lin.desc(), gid % 1000)];
  }
  EXPECT_EQ(Snapshot(0).Buckets(), want_log2);
  EXPECT_EQ(Snapshot(1).Buckets(), want_linear);
  // The LOG2 entry point on the LINEAR map changes nothing.
  linear = 0;
  Run("hist_add_typed", {&map, &modulo, &linear});
  EXPECT_EQ(Snapshot(1).Buckets(), want_linear);
}

}  // namespace
}  // namespace cuprobe
