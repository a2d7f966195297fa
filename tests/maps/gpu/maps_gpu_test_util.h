// File: tests/maps/gpu/maps_gpu_test_util.h
//
// The fixture of maps_gpu_test (tests/maps/gpu/maps_gpu*_test.cc): once per
// run, the GPU harness and the test kernels (map_kernels.ptx, linked with
// the helper library by nvJitLink); per test, a MapSet in device memory
// wired into the kernels' map table, with a session segment when asked for
// or when a map is a ring buffer. Every test skips without a GPU.
//
//   TEST_F(MapsGpu, ...) {
//     MakeMaps({Spec("counts", CUPROBE_MAP_ARRAY, 4, 8, 1024)});
//     Run("add_u32_key", {&map, &modulo, &no_rc});
//     MapSnapshot s = Snapshot(0);
#ifndef CUPROBE_TESTS_MAPS_GPU_MAPS_GPU_TEST_UTIL_H_
#define CUPROBE_TESTS_MAPS_GPU_MAPS_GPU_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cupti_hook/real_seam.h"
#include "gtest/gtest.h"
#include "maps/map_set.h"
#include "maps/map_snapshot.h"
#include "maps/segment.h"
#include "maps/testing/gpu_harness.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe::testing {

// The launch shape of most tests: 1M threads.
inline constexpr uint32_t kBlocks = 4096;
inline constexpr uint32_t kThreads = 256;
inline constexpr uint64_t kN = uint64_t{kBlocks} * kThreads;  // 1M threads
inline constexpr uint64_t kMagic = 0x5eed5eed5eed5eedull;

// A whole file ("" when it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The first 8 bytes of a value.
inline uint64_t U64(absl::Span<const uint8_t> bytes) {
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

  inline static GpuHarness* gpu_ = nullptr;
  inline static GpuModule module_;
  inline static std::string* setup_error_ = nullptr;
  std::optional<Session> session_;
  std::optional<MapSet> maps_;
};

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_MAPS_GPU_MAPS_GPU_TEST_UTIL_H_
