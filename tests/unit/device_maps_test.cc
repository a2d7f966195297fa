// DeviceMaps' sharing of the probes' maps between CUDA contexts, on a fake
// driver table (CPU): which contexts may use them, and what happens to them
// when contexts are destroyed. Lifecycle/…/contexts (tests/gpu) runs the
// same paths on the H200 with a real program and exact counts.
#include <cstdint>
#include <utility>
#include <vector>

#include "cupti_hook/probe_runtime.h"
#include "maps/segment.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/fake_cuda_driver.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::FakeCudaDriver;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

const auto kA = reinterpret_cast<CUcontext>(0xA0);
const auto kB = reinterpret_cast<CUcontext>(0xB0);
const auto kC = reinterpret_cast<CUcontext>(0xC0);

std::vector<MapSpec> OneArray() {
  return {MapSpec{.name = "counts", .type = CUPROBE_MAP_ARRAY, .key_size = 4, .value_size = 8,
                  .max_entries = 16}};
}

class DeviceMapsTest : public ::testing::Test {
 protected:
  DeviceMapsTest()
      : maps_(OneArray(), /*session=*/nullptr,
              [this](CUcontext c, CUstream s) { streams_told_.emplace_back(c, s); },
              fake_.driver()) {}
  // A context is created (and is current), as CUPTI reports it.
  void Create(CUcontext c) {
    fake_.state.current = c;
    maps_.Prepare(c);
  }
  // The maps made in A; B created and admitted as their user.
  void ShareAWithB() {
    Create(kA);
    ASSERT_TRUE(maps_.MapTable().ok());
    Create(kB);
    fake_.state.current = kB;
    ASSERT_TRUE(maps_.UsableInCurrentContext().ok());
  }
  FakeCudaDriver fake_;
  std::vector<std::pair<CUcontext, CUstream>> streams_told_;
  DeviceMaps maps_;
};

TEST_F(DeviceMapsTest, ContextsOfTheDeviceShareTheMapsWhichMoveWhenTheirContextGoes) {
  Create(kA);
  ASSERT_EQ(fake_.state.streams_created.size(), 1u);
  const CUstream first = fake_.state.streams_created[0].second;
  EXPECT_THAT(streams_told_, ElementsAre(Pair(kA, first)));
  absl::StatusOr<std::vector<uint64_t>> table_a = maps_.MapTable();
  ASSERT_TRUE(table_a.ok()) << table_a.status();
  Create(kB);
  EXPECT_EQ(fake_.state.streams_created.size(), 1u) << "made once, in A";
  fake_.state.current = kB;
  ASSERT_TRUE(maps_.UsableInCurrentContext().ok());
  absl::StatusOr<std::vector<uint64_t>> table_b = maps_.MapTable();
  ASSERT_TRUE(table_b.ok()) << table_b.status();
  EXPECT_EQ(*table_b, *table_a) << "one set of maps";
  const size_t mapped = fake_.state.mapped.size();
  ASSERT_GT(mapped, 0u);

  // A goes while B uses the maps: nothing is freed, the copy stream is
  // destroyed and made again in B, and the tracer is told.
  maps_.OnContextDestroying(kA);
  EXPECT_EQ(fake_.state.mapped.size(), mapped);
  EXPECT_THAT(fake_.state.streams_destroyed, ElementsAre(first));
  ASSERT_EQ(fake_.state.streams_created.size(), 2u);
  EXPECT_EQ(fake_.state.streams_created[1].first, kB);
  EXPECT_THAT(streams_told_,
              ElementsAre(Pair(kA, first), Pair(kB, fake_.state.streams_created[1].second)));
  EXPECT_TRUE(maps_.Publish(1).ok());
  // B, the last user, goes: the maps are freed, every mapping given back.
  maps_.OnContextDestroying(kB);
  EXPECT_TRUE(fake_.state.mapped.empty());
  EXPECT_TRUE(fake_.state.handles.empty());
  EXPECT_TRUE(fake_.state.reserved.empty());
}

// No context current when the maps are first asked for (a library loaded
// before the program's first context): not a failure to remember; the
// first context makes them. A context that cannot be made current at its
// creation leaves them to the next one too.
TEST_F(DeviceMapsTest, WithoutAContextTheMapsWaitForTheFirstOne) {
  fake_.state.current = nullptr;
  absl::StatusOr<std::vector<uint64_t>> none = maps_.MapTable();
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("no CUDA context is current"));
  EXPECT_TRUE(fake_.state.streams_created.empty());
  fake_.state.destroyed.insert(kC);  // cuCtxSetCurrent fails there
  maps_.Prepare(kC);
  EXPECT_TRUE(fake_.state.streams_created.empty());
  Create(kA);
  ASSERT_EQ(fake_.state.streams_created.size(), 1u);
  EXPECT_EQ(fake_.state.streams_created[0].first, kA);
  absl::StatusOr<std::vector<uint64_t>> table = maps_.MapTable();
  EXPECT_TRUE(table.ok()) << table.status();
}

TEST_F(DeviceMapsTest, ContextsNotSeenCreatedOrOnAnotherDeviceAreRefused) {
  Create(kA);
  ASSERT_TRUE(maps_.MapTable().ok());
  fake_.state.current = kC;  // never reported created
  absl::Status unseen = maps_.UsableInCurrentContext();
  EXPECT_EQ(unseen.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(unseen.message(), HasSubstr("not seen created"));
  fake_.state.devices[kB] = 1;
  Create(kB);
  fake_.state.current = kB;
  absl::Status other = maps_.UsableInCurrentContext();
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), HasSubstr("on device 0"));
  // A goes with no user: published and freed.
  maps_.OnContextDestroying(kA);
  EXPECT_TRUE(fake_.state.mapped.empty());
}

TEST_F(DeviceMapsTest, WithoutVirtualMemoryManagementOtherContextsAreRefused) {
  fake_.state.vmm = 0;
  Create(kA);
  ASSERT_TRUE(maps_.MapTable().ok());
  Create(kB);
  fake_.state.current = kB;
  absl::Status refused = maps_.UsableInCurrentContext();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("virtual memory management"));
}

TEST_F(DeviceMapsTest, AUserBeingDestroyedIsForgottenAndNeverTakesTheMaps) {
  ShareAWithB();
  maps_.OnContextDestroying(kB);
  // B is gone: asking again from it is refused, and A's destruction frees
  // the maps instead of moving them into B.
  EXPECT_FALSE(maps_.UsableInCurrentContext().ok());
  maps_.OnContextDestroying(kA);
  EXPECT_TRUE(fake_.state.mapped.empty());
  EXPECT_EQ(fake_.state.streams_created.size(), 1u);
}

TEST_F(DeviceMapsTest, AFailedMoveIsRetriedAtTheNextPublish) {
  ShareAWithB();
  // B cannot make a stream while A goes.
  fake_.state.destroyed.insert(kB);
  maps_.OnContextDestroying(kA);
  EXPECT_EQ(streams_told_.size(), 1u) << "no new stream to tell of";
  EXPECT_FALSE(maps_.Publish(1).ok());
  fake_.state.destroyed.erase(kB);
  EXPECT_TRUE(maps_.Publish(2).ok());
  ASSERT_EQ(streams_told_.size(), 2u);
  EXPECT_EQ(streams_told_[1].first, kB);
}

// A ring buffer's records go to device memory (RingData::kDeviceMirrored or
// kDeviceSpeculative):
// its maps are shared with another context like any others. With the ring
// in host memory registered in the first context (kHost) they cannot be.
TEST(DeviceMapsRings, RingsInDeviceMemoryAreSharedAndRingsInHostMemoryAreNot) {
  const std::vector<MapSpec> specs = {
      MapSpec{.name = "events", .type = CUPROBE_MAP_RINGBUF, .max_entries = 8192}};
  SessionOptions options;
  options.maps = specs;
  absl::StatusOr<Session> session = Session::Create(options);
  ASSERT_TRUE(session.ok()) << session.status();
  for (RingData placement :
       {RingData::kDeviceMirrored, RingData::kDeviceSpeculative, RingData::kHost}) {
    FakeCudaDriver fake;
    DeviceMaps maps(specs, &*session, nullptr, fake.driver(), placement);
    EXPECT_EQ(maps.mirrors_rings(), placement != RingData::kHost);
    fake.state.current = kA;
    maps.Prepare(kA);
    ASSERT_TRUE(maps.MapTable().ok());
    EXPECT_EQ(fake.state.host_registered.size(), placement == RingData::kHost ? 1u : 0u);
    fake.state.current = kB;
    maps.Prepare(kB);
    absl::Status shared = maps.UsableInCurrentContext();
    if (placement != RingData::kHost) {
      EXPECT_TRUE(shared.ok()) << shared;
      EXPECT_TRUE(maps.PumpRings().ok()) << "nothing to move before the maps are claimed";
    } else {
      EXPECT_EQ(shared.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_THAT(shared.message(), HasSubstr("CUPROBE_RING_DATA=host"));
    }
    ASSERT_TRUE(maps.Release(1).ok());
    EXPECT_TRUE(fake.state.host_registered.empty()) << "unregistered at release";
  }
  ASSERT_TRUE(session->Remove().ok());
}

}  // namespace
}  // namespace cuprobe
