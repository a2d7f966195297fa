// File: tests/maps/map_set_ring_test.cc
//
// MapSet's rings written in device memory and pumped into the session
// segment (PumpRings): producers that check the head first
// (kDeviceMirrored, and kHost for comparison) deliver every record in order
// and byte-exact, wait on the device while the consumer is behind, and lose
// nothing uncounted with concurrent producers, pump and consumer; producers
// that reserve first (kDeviceSpeculative) leave pads and give back what
// does not fit.
//
// Part of map_set_test (tests/maps/CMakeLists.txt); the maps and the fixture are
// in map_set_test_util.h.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/map_algorithms.h"
#include "maps/map_set.h"
#include "maps/segment.h"
#include "tests/maps/map_set_test_util.h"
#include "tests/maps/ring_test_util.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::Desc;
using ::cuprobe::testing::MapSetTest;
using ::cuprobe::testing::Specs;
using ::testing::HasSubstr;

namespace algo = ::cuprobe::mapalgo;

// A session whose ring (map 4) the test consumes, and maps over it whose
// rings are written in device memory and pumped into the segment: producers
// that check the head first (kDeviceMirrored) or reserve first and leave
// holes (kDeviceSpeculative).
class RingPumpTest : public MapSetTest {
 protected:
  void Make(RingData placement) {
    Session& session = Create(Specs());
    absl::StatusOr<Session> consumer = Session::Open(session.name(), /*writable=*/true);
    ASSERT_TRUE(consumer.ok()) << consumer.status();
    consumer_.emplace(*std::move(consumer));
    absl::StatusOr<MapRing> ring = consumer_->maps().Ring(4);
    ASSERT_TRUE(ring.ok()) << ring.status();
    ring_.emplace(*std::move(ring));
    absl::StatusOr<MapSet> maps =
        MapSet::Create(Specs(), &memory_, &session.maps(), placement);
    ASSERT_TRUE(maps.ok()) << maps.status();
    maps_.emplace(*std::move(maps));
    d_ = Desc(*maps_, 4);
    ASSERT_EQ(algo::RingIsSpeculative(d_), placement == RingData::kDeviceSpeculative);
    ASSERT_EQ(algo::RingCapacity(d_), ring_->capacity());
  }
  // 72-byte records until `attempts` have been made: how many were taken.
  uint64_t Produce(uint64_t attempts) {
    uint64_t taken = 0;
    for (uint64_t k = 0; k < attempts; ++k) {
      const uint64_t event[8] = {produced_, 1, 2, 3, 4, 5, 6, 7};
      if (algo::RingOutput(d_, event, sizeof(event), 0) == 0) {
        ++produced_;
        ++taken;
      }
    }
    return taken;
  }
  uint64_t produced_ = 0;
  // ParseBody on a delivered body with its record's zero padding.
  static bool ParseDelivered(absl::Span<const uint8_t> b, testing::CheckedBody* body) {
    std::vector<uint8_t> padded(b.begin(), b.end());
    padded.resize(((8 + b.size() + 7) & ~size_t{7}) - 8, 0);
    return testing::ParseBody(padded, body);
  }
  // Consumes what the segment's ring holds; each record's first 8 bytes go
  // to firsts_.
  size_t ConsumeFirsts() {
    return ring_->Consume([&](absl::Span<const uint8_t> b) {
      uint64_t v;
      std::memcpy(&v, b.data(), 8);
      firsts_.push_back(v);
    });
  }
  HostDeviceMemory memory_;
  std::optional<Session> consumer_;
  std::optional<MapRing> ring_;
  std::optional<MapSet> maps_;
  const cuprobe_map_desc* d_ = nullptr;
  std::vector<uint64_t> firsts_;
};

class MirroredRingTest : public RingPumpTest, public ::testing::WithParamInterface<RingData> {
 protected:
  void SetUp() override { Make(GetParam()); }
};

// Rings whose producers reserve first.
class SpeculativeRingTest : public RingPumpTest {
 protected:
  void SetUp() override { Make(RingData::kDeviceSpeculative); }
};

// kDeviceMirrored: producers write into a device copy of the ring, and the
// segment sees records only through PumpRings: nothing before a pump, then
// every record in order and byte-exact (discarded ones skipped), across
// many wraps of a small ring. The pump frees the device ring as it moves
// records (zeroing them there first); the rings area, at positions of its
// own, is freed by the consumer.
TEST_P(MirroredRingTest, DeliversEveryRecordInOrderThroughThePump) {
  EXPECT_TRUE(maps_->has_rings());
  EXPECT_EQ(memory_.live_host_mappings(), 0u) << "no host memory registered for the GPU";
  const uint64_t capacity = algo::RingCapacity(d_);
  const uint64_t area = d_->slot_mask + 1;  // the device data (twice the capacity: ReserveFirst)
  auto* shadow = algo::Ptr<cuprobe_ring_host>(d_->ring_host);
  EXPECT_EQ(shadow->magic, CUPROBE_RING_HOST_MAGIC);
  EXPECT_NE(reinterpret_cast<uint8_t*>(d_->ring_data), ring_->data()) << "the device's own copy";

  uint32_t next = 0;                // sequence numbers produced
  std::vector<uint32_t> expected;   // ... that are not discarded
  std::vector<uint32_t> got;
  auto produce_until_full = [&] {
    for (;;) {
      std::vector<uint8_t> body = testing::MakeBody(0, next, testing::BodyLenFor(next));
      if (next % 3 == 0) {
        const uint64_t at = algo::RingReserve(d_, body.size(), 0);
        if (at == 0) return;
        std::memcpy(algo::Ptr<uint8_t>(at), body.data(), body.size());
        const bool discard = next % 7 == 0;
        algo::RingFinishRecord(at, discard);
        if (!discard) expected.push_back(next);
      } else {
        if (algo::RingOutput(d_, body.data(), body.size(), 0) != 0) return;
        expected.push_back(next);
      }
      ++next;
    }
  };
  auto consume = [&] {
    return ring_->Consume([&](absl::Span<const uint8_t> b) {
      testing::CheckedBody body;
      ASSERT_TRUE(ParseDelivered(b, &body)) << body.error;
      got.push_back(body.seq);
    });
  };
  for (int round = 0; round < 40; ++round) {
    produce_until_full();
    EXPECT_EQ(consume(), 0u) << "round " << round << ": nothing in the segment before a pump";
    absl::StatusOr<uint64_t> pumped = maps_->PumpRings();
    ASSERT_TRUE(pumped.ok()) << pumped.status();
    EXPECT_GT(*pumped, 0u);
    // Until both sides are empty (a record the rings area had no room for
    // waits on the device for the next pump).
    for (int i = 0; i < 4 && (*pumped > 0 || consume() > 0); ++i) {
      consume();
      pumped = maps_->PumpRings();
      ASSERT_TRUE(pumped.ok());
    }
    ASSERT_TRUE(ring_->status().ok()) << ring_->status();
    EXPECT_EQ(shadow->tail, algo::Control(d_)->ring_head) << "round " << round << ": all moved";
    const uint8_t* data = algo::Ptr<const uint8_t>(d_->ring_data);
    EXPECT_EQ(std::count(data, data + area, 0), static_cast<long>(area))
        << "round " << round << ": what was moved is zero on the device";
  }
  EXPECT_EQ(got, expected);
  EXPECT_GT(ring_->Stats().tail, 20 * capacity) << "many wraps";
  ASSERT_TRUE(maps_->Release().ok());
  EXPECT_EQ(memory_.live_allocations(), 0u) << "the device copy is freed too";
}

// A consumer that falls behind: the rings area fills, the pump stops
// there and records wait on the device (which, once full, drops new ones,
// counted), and none is lost, repeated or reordered once the consumer
// catches up.
TEST_P(MirroredRingTest, RecordsWaitOnTheDeviceWhileTheConsumerIsBehind) {
  uint64_t produced = 0, refused = 0;
  auto produce = [&](int n) {
    for (int k = 0; k < n; ++k) {
      const uint64_t event[8] = {produced, 1, 2, 3, 4, 5, 6, 7};  // 72-byte records
      if (algo::RingOutput(d_, event, sizeof(event), 0) == 0) {
        ++produced;
      } else {
        ++refused;
      }
    }
  };
  // 8 KiB rings of 72-byte records: three fills' worth before consuming.
  for (int i = 0; i < 3; ++i) {
    produce(120);
    ASSERT_TRUE(maps_->PumpRings().ok());
  }
  EXPECT_GT(refused, 0u) << "the device ring filled behind the full rings area";
  EXPECT_GT(algo::Control(d_)->ring_head, *algo::Ptr<uint64_t>(d_->ring_host + 64))
      << "records wait on the device";
  for (int i = 0; i < 6; ++i) {
    ConsumeFirsts();
    ASSERT_TRUE(maps_->PumpRings().ok());
  }
  EXPECT_EQ(ConsumeFirsts(), 0u);
  ASSERT_EQ(firsts_.size(), produced);
  for (uint64_t k = 0; k < firsts_.size(); ++k) ASSERT_EQ(firsts_[k], k);
  ASSERT_TRUE(maps_->Publish(1).ok());
  EXPECT_EQ(ring_->Stats().dropped, refused) << "every refusal counted";
  EXPECT_EQ(ring_->Stats().head, ring_->Stats().tail) << "nothing pending";
  ASSERT_TRUE(maps_->Release().ok());
}

// The mirror stops at the first record not committed yet, and hands on
// what follows it once it is committed, in reservation order.
TEST_P(MirroredRingTest, WaitsForARecordStillBeingWritten) {
  const uint64_t first = algo::RingReserve(d_, 16, 0);
  ASSERT_NE(first, 0u);
  const uint64_t a[2] = {1, 1}, b[2] = {2, 2};
  std::memcpy(algo::Ptr<uint8_t>(first), a, sizeof(a));
  ASSERT_EQ(algo::RingOutput(d_, b, sizeof(b), 0), 0);
  absl::StatusOr<uint64_t> pumped = maps_->PumpRings();
  ASSERT_TRUE(pumped.ok());
  EXPECT_EQ(*pumped, 0u) << "the first record is not committed";
  EXPECT_EQ(ConsumeFirsts(), 0u);
  algo::RingFinishRecord(first, /*discard=*/false);
  ASSERT_TRUE(maps_->Publish(1).ok()) << "Publish pumps too";
  EXPECT_EQ(ConsumeFirsts(), 2u);
  EXPECT_THAT(firsts_, ::testing::ElementsAre(1u, 2u));
  ASSERT_TRUE(maps_->Release().ok());
}

// A record larger than half the ring, which does not fit before the end of
// the segment's ring: the pump writes the pad to the end first, and the
// record once the consumer has passed it (pad and record together would be
// more than the ring holds, and used to stop the pump for good).
TEST_P(MirroredRingTest, ARecordLargerThanHalfTheRingStillArrives) {
  const uint64_t capacity = algo::RingCapacity(d_);
  std::vector<uint64_t> a(capacity / 2 / 8 - 1, 1), b(5000 / 8 - 1, 2);  // 4096- and 5000-byte records
  ASSERT_EQ(algo::RingOutput(d_, a.data(), a.size() * 8, 0), 0);
  ASSERT_TRUE(maps_->PumpRings().ok());
  EXPECT_EQ(ConsumeFirsts(), 1u);
  // On the device too it crosses the end: its first try pads there, and
  // (checking the head first, with a slack of an eighth) may be refused
  // until the pump passes that pad.
  int tries = 1;
  for (; algo::RingOutput(d_, b.data(), b.size() * 8, 0) != 0 && tries < 3; ++tries) {
    ASSERT_TRUE(maps_->PumpRings().ok());
  }
  ASSERT_LT(tries, 3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(maps_->PumpRings().ok());
    ConsumeFirsts();
  }
  EXPECT_THAT(firsts_, ::testing::ElementsAre(1u, 2u));
  ASSERT_TRUE(maps_->Publish(1).ok());
  EXPECT_EQ(ring_->Stats().head, ring_->Stats().tail) << "nothing pending";
  ASSERT_TRUE(maps_->Release().ok());
}

// A committed header with bits the consumer would reject (here word 1 set
// beside a word-0 commit) is a bad header on the device: the records before
// it are handed on, then one DATA_LOSS that says where, and the segment's
// ring stays readable (the header is never copied there).
TEST_P(MirroredRingTest, AHeaderWithStrayBitsIsNeverHandedOn) {
  const uint64_t a[2] = {1, 1}, b[2] = {2, 2};
  ASSERT_EQ(algo::RingOutput(d_, a, sizeof(a), 0), 0);
  ASSERT_EQ(algo::RingOutput(d_, b, sizeof(b), 0), 0);
  uint32_t* second = algo::RingHeaderAt(d_, 24);
  ASSERT_EQ(second[0], CUPROBE_RING_COMMIT | 16u);
  second[1] = 0x1234;
  absl::StatusOr<uint64_t> pumped = maps_->PumpRings();
  ASSERT_TRUE(pumped.ok()) << "the record before it first";
  EXPECT_EQ(*pumped, 1u);
  pumped = maps_->PumpRings();
  ASSERT_FALSE(pumped.ok());
  EXPECT_EQ(pumped.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(pumped.status().message(),
              HasSubstr("ring 'events': the record at device position 24 has a bad header "
                        "(0x80000010 0x00001234)"));
  EXPECT_EQ(ConsumeFirsts(), 1u);
  EXPECT_TRUE(ring_->status().ok()) << ring_->status();
  EXPECT_THAT(firsts_, ::testing::ElementsAre(1u));
  ASSERT_TRUE(maps_->Release().ok());
}

// Producers that reserve first: the device data is twice the capacity.
// Records are granted within the capacity; a refused record's bytes, in the
// other half, become a pad (its producer waits for nobody); past that half
// they are given back. The pump skips the pads, and the records on either
// side of them arrive in order.
TEST_F(SpeculativeRingTest, RefusedBytesBecomePadsAndPastTwiceTheCapacityAreGivenBack) {
  const uint64_t capacity = algo::RingCapacity(d_);
  EXPECT_EQ(d_->slot_mask + 1, 2 * capacity);
  // 72-byte records: 113 fit in the 8 KiB; each refusal then pads 72 bytes
  // until the next would end past 16 KiB (113 + 114 records' worth), and
  // the rest are given back.
  EXPECT_EQ(Produce(300), capacity / 72);
  EXPECT_EQ(algo::Control(d_)->ring_head, (capacity / 72 + 114) * 72);
  EXPECT_EQ(algo::Control(d_)->ring_dropped, 300 - capacity / 72);
  const uint8_t* data = algo::Ptr<const uint8_t>(d_->ring_data);
  uint32_t pad;
  std::memcpy(&pad, data + (capacity / 72) * 72, 4);
  EXPECT_EQ(pad, CUPROBE_RING_COMMIT | CUPROBE_RING_PAD | 64) << "the first refused record's pad";
  // The pump moves the records and passes the pads; new records follow.
  absl::StatusOr<uint64_t> pumped = maps_->PumpRings();
  ASSERT_TRUE(pumped.ok()) << pumped.status();
  EXPECT_EQ(*pumped, capacity / 72);
  EXPECT_EQ(algo::Ptr<cuprobe_ring_host>(d_->ring_host)->tail, algo::Control(d_)->ring_head);
  EXPECT_EQ(std::count(data, data + 2 * capacity, 0), static_cast<long>(2 * capacity))
      << "what was moved or passed is zero on the device";
  ConsumeFirsts();
  EXPECT_EQ(Produce(10), 10u);
  ASSERT_TRUE(maps_->Publish(1).ok());
  ConsumeFirsts();
  ASSERT_EQ(firsts_.size(), produced_);
  for (uint64_t k = 0; k < firsts_.size(); ++k) ASSERT_EQ(firsts_[k], k);
  EXPECT_EQ(ring_->Stats().dropped, 300 - capacity / 72);
  EXPECT_EQ(ring_->Stats().head, ring_->Stats().tail) << "nothing pending";
  ASSERT_TRUE(maps_->Release().ok());
}

// A refused producer whose bytes end past twice the capacity waits only for
// producers after it: once one of them is granted (the tail moved), it is
// granted too; once one pads, it may pad too. Here: the ring is full and a
// reservation's bytes lie past the padding half; the pump frees the ring,
// and the producer's retry is granted without any give-back.
TEST_F(SpeculativeRingTest, AProducerPastThePaddingHalfIsGrantedOnceTheTailMoves) {
  const uint64_t capacity = algo::RingCapacity(d_);
  EXPECT_EQ(Produce(300), capacity / 72);
  const uint64_t head = algo::Control(d_)->ring_head;
  // As if this producer's fetch-and-add came now, with the tail it read
  // before the pump moved: past two capacities.
  const uint64_t p = algo::AtomicAdd64(&algo::Control(d_)->ring_head, 72);
  ASSERT_EQ(p, head);
  ASSERT_TRUE(maps_->PumpRings().ok());
  ConsumeFirsts();
  // (Its bytes would cross the end of the data: a pad, then a grant at the
  // start.)
  const uint64_t body = algo::RingReserveAt(d_, 64, p, /*tail=*/0);
  ASSERT_NE(body, 0u);
  EXPECT_EQ(body, d_->ring_data + (p + 72) % (2 * capacity) + CUPROBE_RING_HEADER_SIZE);
  const uint64_t event[8] = {produced_++, 1, 2, 3, 4, 5, 6, 7};
  std::memcpy(algo::Ptr<uint8_t>(body), event, sizeof(event));
  algo::RingFinishRecord(body, /*discard=*/false);
  EXPECT_EQ(algo::Control(d_)->ring_dropped, 300 - capacity / 72) << "not a drop";
  ASSERT_TRUE(maps_->Publish(1).ok());
  ConsumeFirsts();
  ASSERT_EQ(firsts_.size(), produced_);
  for (uint64_t k = 0; k < firsts_.size(); ++k) ASSERT_EQ(firsts_[k], k);
  ASSERT_TRUE(maps_->Release().ok());
}

// Producers whose bytes end past twice the capacity give them back, the
// last one first: the head returns to where it was, and both are drops.
TEST_F(SpeculativeRingTest, BytesPastTwiceTheCapacityAreGivenBackLastFirst) {
  const uint64_t capacity = algo::RingCapacity(d_);
  EXPECT_EQ(Produce(300), capacity / 72);
  const uint64_t head = algo::Control(d_)->ring_head;
  const uint64_t dropped = algo::Control(d_)->ring_dropped;
  const uint64_t x = algo::AtomicAdd64(&algo::Control(d_)->ring_head, 72);
  const uint64_t y = algo::AtomicAdd64(&algo::Control(d_)->ring_head, 72);
  ASSERT_GT(x + 72, 2 * capacity) << "past the padding half";
  EXPECT_EQ(algo::RingReserveAt(d_, 64, y, /*tail=*/0), 0u);
  EXPECT_EQ(algo::Control(d_)->ring_head, y);
  EXPECT_EQ(algo::RingReserveAt(d_, 64, x, /*tail=*/0), 0u);
  EXPECT_EQ(algo::Control(d_)->ring_head, head);
  EXPECT_EQ(algo::Control(d_)->ring_dropped, dropped + 2);
  ASSERT_TRUE(maps_->Publish(1).ok());
  EXPECT_EQ(ConsumeFirsts(), capacity / 72);
  ASSERT_TRUE(maps_->Release().ok());
}

// Threads reserving and committing concurrently (a refused record is
// tried again) while the test's thread pumps, skipping holes, and
// consumes: every record arrives exactly once, byte-exact, each producer's
// in its own order, and every refusal is counted as a drop; at the end
// nothing is pending on the device.
TEST_P(MirroredRingTest, ConcurrentProducersThePumpAndAConsumerLoseNothingUncounted) {
  constexpr uint32_t kProducers = 4;
  constexpr uint32_t kEach = 20000;
  std::atomic<uint64_t> refused{0};
  std::atomic<uint32_t> running{kProducers};
  std::vector<std::thread> producers;
  for (uint32_t t = 0; t < kProducers; ++t) {
    producers.emplace_back([&, t] {
      // A refused record is tried again (after the others had a turn)
      // until it gets in: every record arrives in the end.
      auto put = [&](uint32_t seq) {
        std::vector<uint8_t> body = testing::MakeBody(t, seq, testing::BodyLenFor(seq));
        if (seq % 2 == 0) {
          const uint64_t at = algo::RingReserve(d_, body.size(), 0);
          if (at == 0) return false;
          std::memcpy(algo::Ptr<uint8_t>(at), body.data(), body.size());
          algo::RingFinishRecord(at, /*discard=*/false);
          return true;
        }
        return algo::RingOutput(d_, body.data(), body.size(), 0) == 0;
      };
      for (uint32_t seq = 0; seq < kEach; ++seq) {
        while (!put(seq)) {
          refused.fetch_add(1);
          std::this_thread::yield();
        }
      }
      running.fetch_sub(1);
    });
  }
  std::vector<int64_t> last_seq(kProducers, -1);
  uint64_t got = 0;
  auto consume = [&] {
    return ring_->Consume([&](absl::Span<const uint8_t> b) {
      testing::CheckedBody body;
      ASSERT_TRUE(ParseDelivered(b, &body)) << body.error;
      ASSERT_LT(body.producer, kProducers);
      ASSERT_GT(static_cast<int64_t>(body.seq), last_seq[body.producer]) << "in order, once";
      last_seq[body.producer] = body.seq;
      ++got;
    });
  };
  // The pump starts once the ring has refused a record (so the refusal
  // paths run: a pad or a give-back when reserving first).
  while (refused.load() == 0) std::this_thread::yield();
  while (running.load() > 0) {
    absl::StatusOr<uint64_t> pumped = maps_->PumpRings();
    ASSERT_TRUE(pumped.ok()) << pumped.status();
    consume();
    std::this_thread::yield();
  }
  for (auto& t : producers) t.join();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(maps_->Publish(1).ok());
    consume();
  }
  EXPECT_EQ(got, uint64_t{kProducers} * kEach);
  EXPECT_GT(refused.load(), 0u);
  for (uint32_t t = 0; t < kProducers; ++t) EXPECT_EQ(last_seq[t], kEach - 1);
  const MapRingStats stats = ring_->Stats();
  EXPECT_EQ(stats.dropped, refused.load());
  EXPECT_EQ(stats.head, stats.tail) << "nothing pending";
  EXPECT_EQ(algo::Ptr<cuprobe_ring_host>(d_->ring_host)->tail, algo::Control(d_)->ring_head);

  ASSERT_TRUE(maps_->Release().ok());
}

INSTANTIATE_TEST_SUITE_P(Placements, MirroredRingTest,
                         ::testing::Values(RingData::kDeviceMirrored, RingData::kDeviceSpeculative),
                         [](const ::testing::TestParamInfo<RingData>& info) {
                           return info.param == RingData::kDeviceMirrored ? "CheckFirst"
                                                                          : "ReserveFirst";
                         });

}  // namespace
}  // namespace cuprobe
