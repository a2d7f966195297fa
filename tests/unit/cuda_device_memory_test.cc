// CudaDeviceMemory's bookkeeping on a fake driver table (CPU): virtual
// memory pieces carved from shared chunks, a chunk given back with its last
// piece, mappings of their own for large requests, cleanup on every failed
// driver call, cuMemAlloc where the device has no virtual memory
// management, and the copy stream's moves. MapsGpu.VirtualMemoryPieces…
// (tests/maps/gpu) runs the same paths on the real driver.
#include "maps/cuda_device_memory.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/fake_cuda_driver.h"

namespace cuprobe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using ::cuprobe::testing::FakeCudaDriver;

constexpr uint64_t kGranularity = ::cuprobe::testing::kFakeGranularity;

class CudaDeviceMemoryTest : public ::testing::Test {
 protected:
  std::unique_ptr<CudaDeviceMemory> Make() {
    absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> m = CudaDeviceMemory::Create(driver_.driver());
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  }
  FakeCudaDriver driver_;
  ::cuprobe::testing::FakeCudaState& fake_ = driver_.state;
};

TEST_F(CudaDeviceMemoryTest, SmallRequestsArePiecesOfOneChunkGivenBackWithTheLastPiece) {
  auto memory = Make();
  ASSERT_NE(memory, nullptr);
  EXPECT_TRUE(memory->context_independent());
  std::vector<uint64_t> pieces;
  for (uint64_t bytes : {1u, 200u, 256u, 4096u}) {
    absl::StatusOr<uint64_t> a = memory->Allocate(bytes);
    ASSERT_TRUE(a.ok()) << a.status();
    pieces.push_back(*a);
  }
  const uint64_t base = pieces[0];
  EXPECT_THAT(pieces, ElementsAre(base, base + 256, base + 512, base + 768));
  EXPECT_THAT(fake_.created_sizes, ElementsAre(kGranularity)) << "one chunk";
  for (size_t i = 0; i + 1 < pieces.size(); ++i) {
    ASSERT_TRUE(memory->Free(pieces[i]).ok());
    EXPECT_EQ(fake_.mapped.size(), 1u) << "the chunk stays while a piece lives";
  }
  ASSERT_TRUE(memory->Free(pieces.back()).ok());
  EXPECT_TRUE(fake_.mapped.empty());
  EXPECT_TRUE(fake_.reserved.empty());
  EXPECT_TRUE(fake_.handles.empty());
  // The next piece comes from a new chunk.
  absl::StatusOr<uint64_t> again = memory->Allocate(64);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(fake_.created_sizes.size(), 2u);
  EXPECT_TRUE(memory->Free(*again).ok());
}

TEST_F(CudaDeviceMemoryTest, AFullChunkOpensAnotherAndLargeRequestsGetTheirOwnMapping) {
  auto memory = Make();
  ASSERT_NE(memory, nullptr);
  std::vector<uint64_t> pieces;
  for (int i = 0; i < 5; ++i) {  // 512 KiB each: four fit in a chunk
    absl::StatusOr<uint64_t> a = memory->Allocate(512u << 10);
    ASSERT_TRUE(a.ok()) << a.status();
    pieces.push_back(*a);
  }
  EXPECT_EQ(pieces[3] - pieces[0], 3u * (512u << 10));
  EXPECT_THAT(fake_.created_sizes, ElementsAre(kGranularity, kGranularity));
  // Over half the granularity: a mapping of its own, rounded up.
  absl::StatusOr<uint64_t> large = memory->Allocate(3u << 20);
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ(fake_.created_sizes.back(), 4u << 20);
  ASSERT_TRUE(memory->Free(*large).ok());
  EXPECT_EQ(fake_.mapped.size(), 2u);
  for (uint64_t p : pieces) ASSERT_TRUE(memory->Free(p).ok());
  EXPECT_TRUE(fake_.mapped.empty());
  EXPECT_TRUE(fake_.handles.empty());
}

TEST_F(CudaDeviceMemoryTest, AFailedMapGivesBackTheAddressAndTheHandle) {
  auto memory = Make();
  ASSERT_NE(memory, nullptr);
  fake_.map_failures = 1;
  absl::StatusOr<uint64_t> a = memory->Allocate(100);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("MemMap"));
  EXPECT_TRUE(fake_.reserved.empty());
  EXPECT_TRUE(fake_.handles.empty());
  absl::StatusOr<uint64_t> b = memory->Allocate(100);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(memory->Free(*b).ok());
  EXPECT_TRUE(fake_.handles.empty());
}

TEST_F(CudaDeviceMemoryTest, WithoutVirtualMemoryManagementItIsCuMemAlloc) {
  fake_.vmm = 0;
  auto memory = Make();
  ASSERT_NE(memory, nullptr);
  EXPECT_FALSE(memory->context_independent());
  absl::StatusOr<uint64_t> a = memory->Allocate(100);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(memory->Free(*a).ok());
  EXPECT_EQ(fake_.allocs, 1);
  EXPECT_EQ(fake_.frees, 1);
  EXPECT_TRUE(fake_.created_sizes.empty());
}

TEST_F(CudaDeviceMemoryTest, TheStreamMovesAndAFailedMoveLeavesNoStaleHandle) {
  auto memory = Make();
  ASSERT_NE(memory, nullptr);
  const CUstream first = memory->stream();
  ASSERT_NE(first, nullptr);
  const auto a = reinterpret_cast<CUcontext>(0xC1);
  const auto b = reinterpret_cast<CUcontext>(0xC2);
  const auto c = reinterpret_cast<CUcontext>(0xC3);
  ASSERT_TRUE(memory->MoveStream(a, b).ok());
  EXPECT_THAT(fake_.streams_destroyed, ElementsAre(first));
  EXPECT_NE(memory->stream(), nullptr);
  EXPECT_NE(memory->stream(), first);
  EXPECT_EQ(fake_.current, b);
  // The new context cannot be made current: no stream is left, the old one
  // is destroyed in its own context, and copies say why they cannot run.
  const CUstream second = memory->stream();
  fake_.destroyed.insert(c);
  EXPECT_FALSE(memory->MoveStream(b, c).ok());
  EXPECT_EQ(memory->stream(), nullptr);
  EXPECT_THAT(fake_.streams_destroyed, ElementsAre(first, second));
  uint64_t word = 0;
  absl::Status copy = memory->CopyToDevice(0x1000, &word, 8);
  EXPECT_EQ(copy.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(copy.message(), HasSubstr("copy stream"));
  // A later move with no old stream (null `from`) makes one again.
  ASSERT_TRUE(memory->MoveStream(nullptr, b).ok());
  EXPECT_NE(memory->stream(), nullptr);
  EXPECT_EQ(fake_.streams_destroyed.size(), 2u);
}

}  // namespace
}  // namespace cuprobe
