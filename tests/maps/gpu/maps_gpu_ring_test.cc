// File: tests/maps/gpu/maps_gpu_ring_test.cc
//
// GPU tier of the maps, the ring buffers: in a real session segment's
// host-registered memory (overflow without a consumer, a concurrent
// consumer) and in device memory pumped while kernels run, reserve, submit
// and discard; delivered + dropped = produced with no torn or duplicated
// record.
//
// Part of maps_gpu_test (tests/maps/gpu/CMakeLists.txt; label gpu, skips
// without a GPU); the fixture is in maps_gpu_test_util.h.
//
//   build/tests/maps_gpu_test            (or ctest -L gpu -R maps_gpu)

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
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
using ::cuprobe::testing::kThreads;
using ::cuprobe::testing::kN;
using ::cuprobe::testing::kMagic;

namespace algo = ::cuprobe::mapalgo;

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

}  // namespace
}  // namespace cuprobe
