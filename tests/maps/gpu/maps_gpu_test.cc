// File: tests/maps/gpu/maps_gpu_test.cc
//
// GPU tier of the maps: test kernels linked at run time with the helper
// library PTX by nvJitLink, maps allocated by MapSet through the CUDA
// driver. Each map type is driven from 1M threads (4096 x 256) through the
// generic entry points and checked exactly: the maps' virtual memory,
// counts, add-only maps folded from their SM copies, a hash map with
// colliding keys and one filled to its limit, wide keys,
// update/lookup/delete, histograms (bucket by bucket against the host build
// of the same algorithm), per-thread / per-warp / per-SM slots, the pid the
// hook writes, and snapshots published to a reader of the segment. The
// typed entry points and the ring buffers are in maps_gpu_typed_test.cc and
// maps_gpu_ring_test.cc.
//
// Part of maps_gpu_test (tests/maps/gpu/CMakeLists.txt; label gpu, skips
// without a GPU); the fixture is in maps_gpu_test_util.h.
//
//   build/tests/maps_gpu_test            (or ctest -L gpu -R maps_gpu)

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

// The maps' memory on a device with virtual memory management: small
// requests are 256-byte aligned pieces of one shared 2 MiB-granular chunk,
// large ones get mappings of their own; every piece holds its bytes; the
// chunk goes back when its last piece is freed (a new one comes after).
TEST_F(MapsGpu, VirtualMemoryPiecesAndMappingsHoldTheirBytes) {
  CudaDeviceMemory& memory = gpu_->memory();
  ASSERT_TRUE(memory.context_independent()) << "the H200 supports virtual memory management";
  std::vector<uint64_t> small;
  for (uint64_t bytes : {1u, 200u, 256u, 4096u, 1000u}) {
    absl::StatusOr<uint64_t> a = memory.Allocate(bytes);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(*a % 256, 0u);
    small.push_back(*a);
  }
  for (size_t i = 1; i < small.size(); ++i) {
    EXPECT_GT(small[i], small[i - 1]);
    EXPECT_LT(small[i] - small[0], uint64_t{2} << 20) << "one chunk";
  }
  EXPECT_EQ(small[2] - small[1], 256u) << "200 bytes take one 256-byte piece";
  absl::StatusOr<uint64_t> large = memory.Allocate(3u << 20);
  ASSERT_TRUE(large.ok()) << large.status();
  // Distinct bytes in each; read back exactly.
  std::vector<uint64_t> all = small;
  all.push_back(*large);
  for (size_t i = 0; i < all.size(); ++i) {
    const uint64_t value = 0x1111111111111111ull * (i + 1);
    ASSERT_TRUE(memory.CopyToDevice(all[i], &value, 8).ok());
  }
  ASSERT_TRUE(memory.Zero(*large + 8, (3u << 20) - 8).ok());
  for (size_t i = 0; i < all.size(); ++i) {
    uint64_t got = 0;
    ASSERT_TRUE(memory.CopyFromDevice(&got, all[i], 8).ok());
    EXPECT_EQ(got, 0x1111111111111111ull * (i + 1)) << "allocation " << i;
  }
  for (uint64_t a : all) EXPECT_TRUE(memory.Free(a).ok());
  absl::StatusOr<uint64_t> again = memory.Allocate(64);
  ASSERT_TRUE(again.ok()) << again.status();
  uint64_t value = 42, got = 0;
  ASSERT_TRUE(memory.CopyToDevice(*again, &value, 8).ok());
  ASSERT_TRUE(memory.CopyFromDevice(&got, *again, 8).ok());
  EXPECT_EQ(got, 42u);
  EXPECT_TRUE(memory.Free(*again).ok());
}

TEST_F(MapsGpu, ArrayCountsAreExactAndOutOfRangeKeysAreRefused) {
  MakeMaps({Spec("counts", CUPROBE_MAP_ARRAY, 4, 8, 1024)});
  uint32_t map = 0, modulo = 1024;
  uint64_t* no_rc = nullptr;
  Run("add_u32_key", {&map, &modulo, &no_rc});
  const uint64_t rc = Buffer(kN);
  modulo = 2048;
  uint64_t rc_ptr = rc;
  Run("add_u32_key", {&map, &modulo, &rc_ptr});
  MapSnapshot s = Snapshot(0);
  for (uint32_t k = 0; k < 1024; ++k) {
    ASSERT_EQ(U64(*s.Lookup(AsBytes(k))), 1024u + 512u) << k;
  }
  EXPECT_EQ(s.control().errors, kN / 2);
  const std::vector<uint64_t> codes = Download(rc, kN);
  for (uint64_t gid = 0; gid < kN; ++gid) {
    ASSERT_EQ(codes[gid], gid % 2048 < 1024 ? 0 : static_cast<uint64_t>(algo::kE2BIG)) << gid;
  }
}

TEST_F(MapsGpu, HashOneHotKeyAndUniformKeysWithVaryingDeltas) {
  MakeMaps(
      {Spec("hot", CUPROBE_MAP_HASH, 8, 8, 16), Spec("uniform", CUPROBE_MAP_HASH, 8, 8, 4096)});
  std::vector<uint64_t> keys(4096);
  for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = i * 1000003 + 17;
  const uint64_t keys_dev = Buffer(keys.size());
  ASSERT_TRUE(gpu_->Upload(keys_dev, keys.data(), keys.size() * 8).ok());
  uint32_t map = 0, nkeys = 1, mode = 0;
  uint64_t keys_ptr = keys_dev;
  uint64_t* no_rc = nullptr;
  Run("hash_add_keys", {&map, &keys_ptr, &nkeys, &mode, &no_rc});
  MapSnapshot hot = Snapshot(0);
  EXPECT_EQ(hot.CountEntries(), 1u);
  EXPECT_EQ(U64(*hot.Lookup(AsBytes(keys[0]))), kN);

  map = 1;
  nkeys = 4096;
  mode = 1;  // delta = gid * 65537 + 2^33: the warp sums carry across 32-bit halves
  Run("hash_add_keys", {&map, &keys_ptr, &nkeys, &mode, &no_rc});
  std::vector<uint64_t> expected(4096, 0);
  for (uint64_t gid = 0; gid < kN; ++gid) expected[gid % 4096] += gid * 65537 + (uint64_t{1} << 33);
  MapSnapshot uniform = Snapshot(1);
  EXPECT_EQ(uniform.control().count, 4096u);
  EXPECT_EQ(uniform.control().errors, 0u);
  for (uint64_t i = 0; i < 4096; ++i) {
    ASSERT_EQ(U64(*uniform.Lookup(AsBytes(keys[i]))), expected[i]) << i;
  }
}

TEST_F(MapsGpu, AddOnlyMapsSpreadOverSmCopiesAndFoldExactly) {
  // What the compiler marks add-only (mem_trace's counters): adds go to the
  // copy of the SM they run on, and a snapshot folds the copies.
  MapSpec hot = Spec("hot", CUPROBE_MAP_HASH, 8, 8, 4096);
  MapSpec array = Spec("array", CUPROBE_MAP_ARRAY, 4, 8, 64);
  MapSpec hist = Spec("hist", CUPROBE_MAP_HIST_LOG2, 4, 8, 65);
  for (MapSpec* m : {&hot, &array, &hist}) m->flags = CUPROBE_MAP_F_ADD_ONLY;
  MakeMaps({hot, array, hist});
  ASSERT_GT(maps_->geometry(0).value_shards, 1u);
  std::vector<uint64_t> keys = {0x1234567};
  const uint64_t keys_dev = Buffer(1);
  ASSERT_TRUE(gpu_->Upload(keys_dev, keys.data(), 8).ok());
  uint32_t map = 0, nkeys = 1, mode = 0, modulo = 64;
  uint64_t keys_ptr = keys_dev;
  uint64_t* no_rc = nullptr;
  Run("hash_add_keys", {&map, &keys_ptr, &nkeys, &mode, &no_rc});
  Run("hash_add_keys", {&map, &keys_ptr, &nkeys, &mode, &no_rc});
  map = 1;
  Run("add_u32_key", {&map, &modulo, &no_rc});
  map = 2;
  uint32_t no_modulo = 0;
  Run("hist_add", {&map, &no_modulo});

  MapSnapshot h = Snapshot(0);
  EXPECT_EQ(h.CountEntries(), 1u);
  EXPECT_EQ(U64(*h.Lookup(AsBytes(keys[0]))), 2 * kN);
  EXPECT_EQ(h.control().errors, 0u);
  MapSnapshot a = Snapshot(1);
  for (uint32_t i = 0; i < 64; ++i) ASSERT_EQ(U64(*a.Lookup(AsBytes(i))), kN / 64) << i;
  MapSnapshot g = Snapshot(2);
  const std::vector<uint64_t> buckets = g.Buckets();
  uint64_t total = 0;
  for (uint64_t c : buckets) total += c;
  EXPECT_EQ(total, kN);
  EXPECT_EQ(buckets[0], 1u) << "gid 0";
  EXPECT_EQ(buckets[1], 1u) << "gid 1";
  EXPECT_EQ(buckets[2], 2u) << "gids 2-3";

  // The hot key's adds really went to several copies.
  const MapGeometry& geometry = maps_->geometry(0);
  std::vector<uint8_t> raw(DeviceCopyBytes(geometry));
  ASSERT_TRUE(gpu_->memory()
                  .CopyFromDevice(raw.data(), maps_->table()[0] + CUPROBE_MAP_DESC_SIZE, raw.size())
                  .ok());
  const uint8_t* values = raw.data() + CUPROBE_MAP_CONTROL_SIZE + geometry.values_offset;
  uint32_t used = 0;
  for (uint32_t shard = 0; shard < geometry.value_shards; ++shard) {
    const uint8_t* copy = values + shard * geometry.shard_bytes;
    for (uint64_t at = 0; at < geometry.shard_bytes; at += 8) {
      uint64_t v;
      std::memcpy(&v, copy + at, 8);
      if (v != 0) {
        ++used;
        break;
      }
    }
  }
  EXPECT_GT(used, 8u) << "copies written by " << used << " SMs' shards";
  RecordProperty("hot_key_copies_used", std::to_string(used));
}

TEST_F(MapsGpu, HashWithCollidingKeysFilledExactlyToItsLimit) {
  const MapSpec spec = Spec("collide", CUPROBE_MAP_HASH, 8, 8, 1024);
  const uint64_t mask = ComputeMapGeometry(spec)->slots - 1;
  // 64 home slots 8 apart, 16 keys each: probe chains of 16 that run into
  // the next home's chain.
  std::vector<uint64_t> keys;
  std::map<uint64_t, int> per_home;
  for (uint64_t k = 1; keys.size() < 1024; ++k) {
    const uint64_t home = algo::HashKey(reinterpret_cast<const uint8_t*>(&k), 8) & mask;
    if (home % 8 != 0 || home >= 512) continue;
    if (per_home[home] == 16) continue;
    ++per_home[home];
    keys.push_back(k);
  }
  ASSERT_EQ(per_home.size(), 64u);
  MakeMaps({spec});
  const uint64_t keys_dev = Buffer(keys.size());
  ASSERT_TRUE(gpu_->Upload(keys_dev, keys.data(), keys.size() * 8).ok());
  uint32_t map = 0, nkeys = 1024, mode = 0;
  uint64_t keys_ptr = keys_dev;
  const uint64_t rc = Buffer(kN);
  uint64_t rc_ptr = rc;
  Run("hash_add_keys", {&map, &keys_ptr, &nkeys, &mode, &rc_ptr});
  MapSnapshot s = Snapshot(0);
  EXPECT_EQ(s.control().count, 1024u);
  EXPECT_EQ(s.control().errors, 0u);
  for (uint64_t k : keys) ASSERT_EQ(U64(*s.Lookup(AsBytes(k))), kN / 1024) << k;
  for (uint64_t code : Download(rc, kN)) ASSERT_EQ(code, 0u);
}

TEST_F(MapsGpu, FullHashAdmitsExactlyMaxEntriesKeys) {
  MakeMaps({Spec("full", CUPROBE_MAP_HASH, 8, 8, 1000)});
  std::vector<uint64_t> keys(1200);
  for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = i * 7 + 1;
  const uint64_t keys_dev = Buffer(keys.size());
  ASSERT_TRUE(gpu_->Upload(keys_dev, keys.data(), keys.size() * 8).ok());
  uint32_t map = 0, nkeys = 1200, mode = 0;
  uint64_t keys_ptr = keys_dev;
  const uint64_t rc = Buffer(kN);
  uint64_t rc_ptr = rc;
  Run("hash_add_keys", {&map, &keys_ptr, &nkeys, &mode, &rc_ptr});
  MapSnapshot s = Snapshot(0);
  const std::vector<uint64_t> codes = Download(rc, kN);
  // Each key is admitted for all of its threads or for none.
  std::vector<int> verdict(1200, -1);
  uint64_t ok_calls = 0, refused_calls = 0;
  for (uint64_t gid = 0; gid < kN; ++gid) {
    const int ok = codes[gid] == 0 ? 1 : 0;
    if (!ok) {
      ASSERT_EQ(codes[gid], static_cast<uint64_t>(algo::kE2BIG));
    }
    ok_calls += ok;
    refused_calls += 1 - ok;
    int& v = verdict[gid % 1200];
    if (v == -1) v = ok;
    ASSERT_EQ(v, ok) << "key " << gid % 1200 << " was both admitted and refused";
  }
  uint64_t admitted = 0, total = 0;
  for (uint64_t i = 0; i < 1200; ++i) {
    std::optional<absl::Span<const uint8_t>> v = s.Lookup(AsBytes(keys[i]));
    ASSERT_EQ(v.has_value(), verdict[i] == 1) << i;
    if (v.has_value()) {
      ++admitted;
      total += U64(*v);
    }
  }
  EXPECT_EQ(admitted, 1000u);
  EXPECT_EQ(s.control().count, 1000u);
  EXPECT_EQ(total, ok_calls);
  EXPECT_EQ(s.control().errors, refused_calls);
}

TEST_F(MapsGpu, HashWideKeysTakeThePerLanePath) {
  MakeMaps({Spec("wide", CUPROBE_MAP_HASH, 16, 8, 1024)});
  uint32_t map = 0, modulo = 1000;
  Run("hash_add_wide_keys", {&map, &modulo});
  MapSnapshot s = Snapshot(0);
  EXPECT_EQ(s.CountEntries(), 1000u);
  for (uint64_t k = 0; k < 1000; ++k) {
    const uint64_t key[2] = {k, ~k};
    const uint64_t expected = kN / 1000 + (k < kN % 1000 ? 1 : 0);
    ASSERT_EQ(U64(*s.Lookup(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key), 16))),
              expected)
        << k;
  }
}

TEST_F(MapsGpu, HashUpdateLookupDeleteFromAMillionThreads) {
  MakeMaps({Spec("kv", CUPROBE_MAP_HASH, 8, 8, 1 << 20)});
  uint32_t map = 0;
  const uint64_t rc = Buffer(kN), out = Buffer(kN);
  uint64_t rc_ptr = rc, out_ptr = out, flags = CUPROBE_NOEXIST;
  Run("hash_update", {&map, &flags, &rc_ptr});
  for (uint64_t code : Download(rc, kN)) ASSERT_EQ(code, 0u);
  Run("hash_update", {&map, &flags, &rc_ptr});
  for (uint64_t code : Download(rc, kN)) ASSERT_EQ(code, static_cast<uint64_t>(algo::kEEXIST));
  Run("hash_lookup", {&map, &out_ptr});
  std::vector<uint64_t> values = Download(out, kN);
  for (uint64_t gid = 0; gid < kN; ++gid) ASSERT_EQ(values[gid], gid + 1) << gid;
  Run("hash_delete_even", {&map, &rc_ptr});
  const std::vector<uint64_t> deleted = Download(rc, kN);
  for (uint64_t gid = 0; gid < kN; gid += 2) ASSERT_EQ(deleted[gid], 0u) << gid;
  Run("hash_lookup", {&map, &out_ptr});
  values = Download(out, kN);
  for (uint64_t gid = 0; gid < kN; ++gid) {
    ASSERT_EQ(values[gid], gid % 2 == 0 ? 0 : gid + 1) << gid;
  }
  EXPECT_EQ(Snapshot(0).control().count, kN / 2);
}

TEST_F(MapsGpu, HistogramsMatchTheHostAlgorithmBucketByBucket) {
  const uint64_t linear_extra = 0 | (uint64_t{10} << 32);
  MakeMaps({Spec("log2", CUPROBE_MAP_HIST_LOG2, 4, 8, 65),
            Spec("linear", CUPROBE_MAP_HIST_LINEAR, 4, 8, 102, linear_extra)});
  uint32_t map = 0, modulo = 0;
  Run("hist_add", {&map, &modulo});
  map = 1;
  modulo = 1000;
  Run("hist_add", {&map, &modulo});
  // The expected buckets from the host build of the same algorithm.
  ::cuprobe::testing::HostMap log2 = ::cuprobe::testing::HostMap::Make(maps_->spec(0));
  ::cuprobe::testing::HostMap linear = ::cuprobe::testing::HostMap::Make(maps_->spec(1));
  std::vector<uint64_t> want_log2(65, 0), want_linear(102, 0);
  for (uint64_t gid = 0; gid < kN; ++gid) {
    ++want_log2[algo::HistBucket(log2.desc(), gid)];
    ++want_linear[algo::HistBucket(linear.desc(), gid % 1000)];
  }
  EXPECT_EQ(Snapshot(0).Buckets(), want_log2);
  EXPECT_EQ(Snapshot(1).Buckets(), want_linear);
  EXPECT_EQ(want_log2[20], kN / 2) << "[512K, 1M) holds half of the ids";
}

TEST_F(MapsGpu, PerThreadPerWarpPerSmSlots) {
  MakeMaps({Spec("t", CUPROBE_MAP_PERTHREAD, 4, 8, 1, kN),
            Spec("w", CUPROBE_MAP_PERWARP, 4, 8, 1, kN / 32),
            Spec("s", CUPROBE_MAP_PERSM, 4, 8, 1, 1024)});
  for (uint32_t map : {0u, 1u, 2u}) {
    Run("per_id_add", {&map});
    Run("per_id_add", {&map});
  }
  const uint32_t key = 0;
  MapSnapshot t = Snapshot(0);
  EXPECT_EQ(t.CountEntries(), kN);
  for (uint64_t id = 0; id < kN; ++id) ASSERT_EQ(U64(*t.Lookup(AsBytes(key), id)), 2u) << id;
  MapSnapshot w = Snapshot(1);
  EXPECT_EQ(w.CountEntries(), kN / 32);
  for (uint64_t id = 0; id < kN / 32; ++id) ASSERT_EQ(U64(*w.Lookup(AsBytes(key), id)), 64u) << id;
  MapSnapshot s = Snapshot(2);
  uint64_t total = 0, sms = 0;
  s.ForEach([&](absl::Span<const uint8_t>, uint64_t id, absl::Span<const uint8_t> v) {
    EXPECT_LT(id, static_cast<uint64_t>(gpu_->sm_count()));
    total += U64(v);
    ++sms;
  });
  EXPECT_EQ(total, 2 * kN);
  EXPECT_LE(sms, static_cast<uint64_t>(gpu_->sm_count()));
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(Snapshot(i).control().errors, 0u);
}

TEST_F(MapsGpu, PidTgidReadsTheValueTheHookWrites) {
  MakeMaps({Spec("unused", CUPROBE_MAP_ARRAY, 4, 8, 1)});
  const uint64_t value = (uint64_t{4242} << 32) | 4242;
  ASSERT_TRUE(gpu_->SetPidTgid(module_, value).ok());
  const uint64_t out = Buffer(1024);
  uint64_t out_ptr = out;
  Run("read_pid_tgid", {&out_ptr}, 4);
  for (uint64_t v : Download(out, 1024)) ASSERT_EQ(v, value);
}

TEST_F(MapsGpu, PublishedSnapshotsReachAReaderOfTheSegment) {
  MakeMaps({Spec("counts", CUPROBE_MAP_ARRAY, 4, 8, 1024)}, /*with_session=*/true);
  uint32_t map = 0, modulo = 1024;
  uint64_t* no_rc = nullptr;
  Run("add_u32_key", {&map, &modulo, &no_rc});
  ASSERT_TRUE(maps_->Publish(7).ok());
  absl::StatusOr<Session> reader = Session::Open(session_->name(), false);
  ASSERT_TRUE(reader.ok());
  absl::StatusOr<SnapshotBytes> bytes = reader->maps().ReadSnapshot(0);
  ASSERT_TRUE(bytes.ok());
  MapSnapshot s(reader->maps().map(0), *std::move(bytes));
  EXPECT_EQ(s.generation(), 1u);
  for (uint32_t k = 0; k < 1024; ++k) ASSERT_EQ(U64(*s.Lookup(AsBytes(k))), 1024u);
  ASSERT_TRUE(reader->maps().RequestClear(0).code() == absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(session_->maps().RequestClear(0).ok());
  ASSERT_TRUE(maps_->Publish(8).ok());
  MapSnapshot cleared = Snapshot(0);
  EXPECT_EQ(cleared.CountEntries(), 1024u) << "arrays list every index";
  for (uint32_t k = 0; k < 1024; ++k) ASSERT_EQ(U64(*cleared.Lookup(AsBytes(k))), 0u);
}

}  // namespace
}  // namespace cuprobe
