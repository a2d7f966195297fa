// File: tests/maps/gpu/maps_gpu_test.cc
//
// GPU tier of the maps (label gpu; skips without a GPU): test kernels linked
// at run time with the helper library PTX by nvJitLink, maps allocated by
// MapSet through the CUDA driver, ring buffers in a real session segment's
// host-registered memory. Each map type is driven from 1M threads
// (4096 x 256) and checked exactly: counts, histograms (bucket by bucket
// against the host build of the same algorithm), a hash map with colliding
// keys and one filled to its limit, update/lookup/delete, per-thread /
// per-warp / per-SM slots, and ring buffers under overflow where
// delivered + dropped = produced with no torn or duplicated record.
//
//   build/tests/maps_gpu_test            (or ctest -L gpu -R maps_gpu)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cupti_hook/real_seam.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/map_algorithms.h"
#include "probe/map_layout.h"
#include "maps/map_set.h"
#include "maps/map_snapshot.h"
#include "maps/segment.h"
#include "maps/testing/gpu_harness.h"
#include "tests/maps/map_test_util.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::GpuHarness;
using ::cuprobe::testing::GpuModule;
using ::cuprobe::testing::Spec;
namespace algo = ::cuprobe::mapalgo;

constexpr uint32_t kBlocks = 4096;
constexpr uint32_t kThreads = 256;
constexpr uint64_t kN = uint64_t{kBlocks} * kThreads;  // 1M threads
constexpr uint64_t kMagic = 0x5eed5eed5eed5eedull;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t U64(absl::Span<const uint8_t> bytes) {
  uint64_t v = 0;
  std::memcpy(&v, bytes.data(), 8);
  return v;
}

class MapsGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!cuprobe::testing::HaveGpu()) return;
    absl::StatusOr<std::unique_ptr<GpuHarness>> gpu = GpuHarness::Create(LoadCudaDriver());
    if (!gpu.ok()) {
      setup_error_ = new std::string(gpu.status().ToString());
      return;
    }
    gpu_ = gpu->release();
    // The build folder may have moved (GPU machine): find the PTX under it.
    const std::string path = cuprobe::testing::BuildDir() + "/tests/maps/gpu/map_kernels.ptx";
    const std::string ptx = ReadFile(path);
    if (ptx.empty()) {
      setup_error_ = new std::string("cannot read " + path);
      return;
    }
    absl::StatusOr<GpuModule> module = gpu_->Load(ptx);
    if (!module.ok()) {
      setup_error_ = new std::string(module.status().ToString());
      return;
    }
    module_ = *module;
  }

  void SetUp() override {
    if (!cuprobe::testing::HaveGpu()) GTEST_SKIP() << "no GPU on this machine";
    ASSERT_EQ(setup_error_, nullptr) << *setup_error_;
  }

  void TearDown() override {
    if (maps_.has_value()) {
      EXPECT_TRUE(maps_->Release().ok());
    }
    maps_.reset();
    if (session_.has_value()) (void)session_->Remove();
    session_.reset();
  }

  // A MapSet in device memory wired into the module's map table, and a
  // session segment holding its maps region when `with_session` or when a
  // map is a ring buffer (big maps stay out of /dev/shm otherwise).
  void MakeMaps(std::vector<MapSpec> specs, bool with_session = false,
                RingData ring_data = RingData::kHost) {
    for (const MapSpec& s : specs) with_session |= s.type == CUPROBE_MAP_RINGBUF;
    if (with_session) {
      SessionOptions options;
      options.ring_capacity = 4096;
      options.maps = specs;
      absl::StatusOr<Session> session = Session::Create(options);
      ASSERT_TRUE(session.ok()) << session.status();
      session_.emplace(*std::move(session));
    }
    absl::StatusOr<MapSet> maps =
        MapSet::Create(specs, &gpu_->memory(), session_.has_value() ? &session_->maps() : nullptr,
                       ring_data);
    ASSERT_TRUE(maps.ok()) << maps.status();
    maps_.emplace(*std::move(maps));
    ASSERT_TRUE(gpu_->SetMapTable(module_, maps_->table()).ok());
  }

  void Run(std::string_view kernel, std::vector<void*> args, uint32_t blocks = kBlocks) {
    absl::StatusOr<float> ms = gpu_->Launch(module_, kernel, blocks, kThreads, args.data());
    ASSERT_TRUE(ms.ok()) << kernel << ": " << ms.status();
  }

  MapSnapshot Snapshot(size_t i) {
    absl::StatusOr<MapSnapshot> s = maps_->ReadSnapshot(i);
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  }

  std::vector<uint64_t> Download(uint64_t address, uint64_t count) {
    std::vector<uint64_t> out(count);
    EXPECT_TRUE(gpu_->Download(out.data(), address, count * 8).ok());
    return out;
  }

  uint64_t Buffer(uint64_t count) {
    absl::StatusOr<uint64_t> b = gpu_->Alloc(count * 8);
    EXPECT_TRUE(b.ok()) << b.status();
    return *b;
  }

  static GpuHarness* gpu_;
  static GpuModule module_;
  static std::string* setup_error_;
  std::optional<Session> session_;
  std::optional<MapSet> maps_;
};

GpuHarness* MapsGpu::gpu_ = nullptr;
GpuModule MapsGpu::module_;
std::string* MapsGpu::setup_error_ = nullptr;

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
  // Wide keys by address.
  map = 3;
  uint32_t modulo = 1000;
  Run("hash_add_wide_keys_typed", {&map, &modulo});
  MapSnapshot wide = Snapshot(3);
  EXPECT_EQ(wide.CountEntries(), 1000u);
  for (uint64_t k = 0; k < 1000; ++k) {
    const uint64_t key[2] = {k, ~k};
    ASSERT_EQ(U64(*wide.Lookup(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(key), 16))),
              kN / 1000 + (k < kN % 1000 ? 1 : 0))
        << k;
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

// Checks ring records {gid, gid ^ magic}: none torn, none twice.
struct RecordCheck {
  std::vector<bool> seen = std::vector<bool>(kN, false);
  uint64_t delivered = 0, bad = 0, duplicates = 0;
  void operator()(absl::Span<const uint8_t> body) {
    ++delivered;
    uint64_t r[2];
    if (body.size() != 16) {
      ++bad;
      return;
    }
    std::memcpy(r, body.data(), 16);
    if (r[0] >= kN || r[1] != (r[0] ^ kMagic)) {
      ++bad;
      return;
    }
    if (seen[r[0]]) ++duplicates;
    seen[r[0]] = true;
  }
};

TEST_F(MapsGpu, RingOverflowWithoutConsumerKeepsWhatFitsAndCountsTheRest) {
  MakeMaps({Spec("events", CUPROBE_MAP_RINGBUF, 0, 0, 1 << 20)});
  uint32_t map = 0;
  const uint64_t rc = Buffer(kN);
  uint64_t rc_ptr = rc;
  Run("ring_output", {&map, &rc_ptr});
  ASSERT_TRUE(maps_->Publish(1).ok());
  absl::StatusOr<Session> cli = Session::Open(session_->name(), true);
  ASSERT_TRUE(cli.ok());
  absl::StatusOr<MapRing> ring = cli->maps().Ring(0);
  ASSERT_TRUE(ring.ok());
  RecordCheck check;
  ring->Consume([&](absl::Span<const uint8_t> b) { check(b); });
  ASSERT_TRUE(ring->status().ok()) << ring->status();
  // 24-byte records reserved a warp (32) at a time, all or none: a warp
  // whose group fits in the first 7/8 (the slack stays free) is granted;
  // warps that passed that check together may use part of the slack, never
  // more than the ring.
  const uint64_t at_least = ((1 << 20) - (1 << 20) / 8) / (32 * 24) * 32;
  const uint64_t at_most = (1 << 20) / 24;
  EXPECT_GE(check.delivered, at_least);
  EXPECT_LE(check.delivered, at_most);
  EXPECT_EQ(check.delivered % 32, 0u) << "groups are granted whole";
  EXPECT_EQ(check.bad, 0u);
  EXPECT_EQ(check.duplicates, 0u);
  EXPECT_EQ(ring->Stats().dropped, kN - check.delivered);
  EXPECT_EQ(ring->Stats().dropped_bytes, (kN - check.delivered) * 24);
  uint64_t accepted = 0;
  for (uint64_t code : Download(rc, kN)) {
    ASSERT_TRUE(code == 0 || code == static_cast<uint64_t>(algo::kEAGAIN));
    accepted += code == 0;
  }
  EXPECT_EQ(accepted, check.delivered);
}

TEST_F(MapsGpu, RingWithAConcurrentConsumerLosesNothingUncounted) {
  MakeMaps({Spec("events", CUPROBE_MAP_RINGBUF, 0, 0, 4 << 20)});
  absl::StatusOr<Session> cli = Session::Open(session_->name(), true);
  ASSERT_TRUE(cli.ok());
  absl::StatusOr<MapRing> ring = cli->maps().Ring(0);
  ASSERT_TRUE(ring.ok());
  RecordCheck check;
  std::atomic<bool> done{false};
  std::thread consumer([&] {
    while (!done.load()) {
      if (ring->Consume([&](absl::Span<const uint8_t> b) { check(b); }) == 0) {
        std::this_thread::yield();
      }
    }
    ring->Consume([&](absl::Span<const uint8_t> b) { check(b); });
  });
  uint32_t map = 0;
  uint64_t* no_rc = nullptr;
  for (int round = 0; round < 4; ++round) Run("ring_output", {&map, &no_rc});
  done.store(true);
  consumer.join();
  ASSERT_TRUE(ring->status().ok()) << ring->status();
  ASSERT_TRUE(maps_->Publish(2).ok());
  const MapRingStats stats = ring->Stats();
  EXPECT_EQ(check.bad, 0u);
  EXPECT_EQ(check.delivered + stats.dropped, 4 * kN);
  EXPECT_EQ(stats.reserved, check.delivered);
  EXPECT_EQ(stats.head, stats.tail);
  RecordProperty("delivered", std::to_string(check.delivered));
  RecordProperty("dropped", std::to_string(stats.dropped));
}

// Rings in device memory (the hook's placements), pumped into the segment
// by a thread of their own while 4M producers run, as the hook's ring pump
// does, and read by a consumer: delivered + dropped = produced exactly, no
// torn or duplicated record, and at the end nothing waits on the device
// (with producers that reserve first, refused bytes are pads it skips).
TEST_F(MapsGpu, DeviceRingsPumpedWhileKernelsRunLoseNothingUncounted) {
  for (RingData placement : {RingData::kDeviceMirrored, RingData::kDeviceSpeculative}) {
    SCOPED_TRACE(placement == RingData::kDeviceMirrored ? "check first" : "reserve first");
    MakeMaps({Spec("events", CUPROBE_MAP_RINGBUF, 0, 0, 4 << 20)}, false, placement);
    const cuprobe_map_desc desc = [&] {
      cuprobe_map_desc d;
      std::memcpy(&d, maps_->descriptors().data(), sizeof(d));
      return d;
    }();
    EXPECT_EQ((desc.flags & CUPROBE_MAP_F_RING_SPECULATIVE) != 0,
              placement == RingData::kDeviceSpeculative);
    absl::StatusOr<Session> cli = Session::Open(session_->name(), true);
    ASSERT_TRUE(cli.ok());
    absl::StatusOr<MapRing> ring = cli->maps().Ring(0);
    ASSERT_TRUE(ring.ok());
    CUcontext context = nullptr;
    ASSERT_EQ(gpu_->driver().CtxGetCurrent(&context), CUDA_SUCCESS);
    RecordCheck check;
    // Each thread's record, once per round at most (4 rounds).
    std::vector<uint8_t> times(kN, 0);
    std::atomic<uint64_t> taken{0};
    auto take = [&](absl::Span<const uint8_t> b) {
      check(b);
      if (b.size() == 16 && U64(b) < kN) ++times[U64(b)];
      taken.fetch_add(1, std::memory_order_relaxed);
    };
    std::atomic<bool> done{false};
    std::atomic<uint64_t> idle_pumps{0};  // pumps that moved and consumed nothing
    absl::Status pump_status;
    std::atomic<bool> pump_failed{false};
    std::thread pump([&] {
      (void)gpu_->driver().CtxSetCurrent(context);
      while (!done.load()) {
        absl::StatusOr<uint64_t> moved = maps_->PumpRings();
        if (!moved.ok()) {
          pump_status = moved.status();
          pump_failed.store(true);
          return;
        }
        if (ring->Consume(take) == 0 && *moved == 0) {
          idle_pumps.fetch_add(1);
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
      }
    });
    // A round (1M records of 24 bytes) overflows the 4 MiB ring while the
    // pump runs beside it; after each round the test waits for the pump to go
    // idle twice, so the next round finds the ring emptied and delivers
    // again. Producers that reserve first read the device tail itself and
    // fill at least half the ring every round; producers that check the
    // head first see the pump's progress through a cached tail that one
    // producer per microsecond refreshes, so they take less of it (44-53 k
    // of about 175 k records per round on the H200), but never nothing.
    uint32_t map = 0;
    uint64_t* no_rc = nullptr;
    const uint64_t least_per_round =
        placement == RingData::kDeviceSpeculative ? (uint64_t{4} << 20) / 24 / 2 : 1;
    for (int round = 0; round < 4; ++round) {
      const uint64_t before = taken.load();
      Run("ring_output", {&map, &no_rc});
      const uint64_t idle = idle_pumps.load();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (idle_pumps.load() < idle + 2 && !pump_failed.load() &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      EXPECT_GE(taken.load() - before, least_per_round) << "round " << round;
    }
    done.store(true);
    pump.join();
    ASSERT_TRUE(pump_status.ok()) << pump_status;
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(maps_->Publish(2).ok());
      ring->Consume(take);
    }
    ASSERT_TRUE(ring->status().ok()) << ring->status();
    const MapRingStats stats = ring->Stats();
    EXPECT_EQ(check.bad, 0u);
    EXPECT_GT(check.delivered, 0u);
    EXPECT_EQ(check.delivered + stats.dropped, 4 * kN);
    EXPECT_EQ(stats.reserved, check.delivered);
    EXPECT_EQ(stats.head, stats.tail) << "nothing waits on the device";
    EXPECT_GT(stats.dropped, 0u) << "the ring overflowed (the refusal path ran)";
    EXPECT_LE(*std::max_element(times.begin(), times.end()), 4) << "no record more often than it was produced";
    RecordProperty(placement == RingData::kDeviceMirrored ? "delivered_check_first"
                                                          : "delivered_reserve_first",
                   std::to_string(check.delivered));
    ASSERT_TRUE(maps_->Release().ok());
    maps_.reset();
    (void)session_->Remove();
    session_.reset();
  }
}

TEST_F(MapsGpu, RingReserveSubmitAndDiscard) {
  MakeMaps({Spec("events", CUPROBE_MAP_RINGBUF, 0, 0, 4 << 20)});
  uint32_t map = 0;
  constexpr uint32_t kBlocksSmall = 256;  // 65536 records of 24 bytes fit
  const uint64_t n = uint64_t{kBlocksSmall} * kThreads;
  const uint64_t rc = Buffer(n);
  uint64_t rc_ptr = rc;
  Run("ring_reserve_submit", {&map, &rc_ptr}, kBlocksSmall);
  for (uint64_t code : Download(rc, n)) ASSERT_EQ(code, 1u);
  absl::StatusOr<Session> cli = Session::Open(session_->name(), true);
  ASSERT_TRUE(cli.ok());
  absl::StatusOr<MapRing> ring = cli->maps().Ring(0);
  ASSERT_TRUE(ring.ok());
  RecordCheck check;
  ring->Consume([&](absl::Span<const uint8_t> b) { check(b); });
  EXPECT_EQ(check.delivered, n / 2);
  EXPECT_EQ(check.bad, 0u);
  for (uint64_t gid = 0; gid < n; ++gid) ASSERT_EQ(check.seen[gid], gid % 2 == 0) << gid;
  EXPECT_EQ(ring->Stats().discarded, n / 2);
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
