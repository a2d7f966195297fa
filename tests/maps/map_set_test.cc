// File: tests/maps/map_set_test.cc
//
// MapSet (the hook's runtime) over HostDeviceMemory and a real session
// segment: descriptors in "device" memory driven by the host build of the
// helper algorithms, snapshots published into the segment and read back by
// readers in other processes (fork), clear requests across processes, ring
// buffers produced in forked writers and consumed in the parent, initial
// values, spec mismatches and cleanup on failure.
#include "maps/map_set.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/map_algorithms.h"
#include "maps/map_snapshot.h"
#include "maps/segment.h"
#include "tests/maps/map_test_util.h"
#include "tests/maps/ring_test_util.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::Spec;
using ::testing::HasSubstr;
namespace algo = ::cuprobe::mapalgo;

std::vector<MapSpec> Specs() {
  std::vector<MapSpec> specs = {
      Spec("counts", CUPROBE_MAP_HASH, 8, 8, 64),
      Spec("globals", CUPROBE_MAP_ARRAY, 4, 24, 1),
      Spec("lat", CUPROBE_MAP_HIST_LOG2, 4, 8, 65),
      Spec("per_thread", CUPROBE_MAP_PERTHREAD, 4, 8, 1, 256),
      Spec("events", CUPROBE_MAP_RINGBUF, 0, 0, 8192),
  };
  specs[1].initial_value = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  return specs;
}

const cuprobe_map_desc* Desc(const MapSet& maps, size_t i) {
  return algo::Ptr<const cuprobe_map_desc>(maps.table()[i]);
}

// A shared anonymous mapping: "device memory" that forked children see at
// the same addresses as the parent.
class SharedArena {
 public:
  explicit SharedArena(uint64_t bytes) : bytes_(bytes) {
    memory_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  }
  ~SharedArena() { ::munmap(memory_, bytes_); }
  void* memory() const { return memory_; }
  uint64_t bytes() const { return bytes_; }

 private:
  void* memory_;
  uint64_t bytes_;
};

class MapSetTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (Session& s : sessions_) (void)s.Remove();
  }
  Session& Create(std::vector<MapSpec> specs) {
    SessionOptions options;
    options.ring_capacity = 4096;
    options.maps = std::move(specs);
    absl::StatusOr<Session> s = Session::Create(options);
    EXPECT_TRUE(s.ok()) << s.status();
    sessions_.push_back(*std::move(s));
    return sessions_.back();
  }
  std::vector<Session> sessions_;
};

TEST_F(MapSetTest, DescriptorsDriveTheAlgorithmsAndReadersSeePublishedSnapshots) {
  Session& session = Create(Specs());
  HostDeviceMemory memory;
  absl::StatusOr<MapSet> maps = MapSet::Create(Specs(), &memory, &session.maps());
  ASSERT_TRUE(maps.ok()) << maps.status();
  ASSERT_EQ(maps->table().size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(Desc(*maps, i)->magic, CUPROBE_MAP_DESC_MAGIC);
    EXPECT_EQ(Desc(*maps, i)->type, Specs()[i].type);
  }
  // What probes would do, through the same code as the GPU helpers.
  for (uint64_t k = 0; k < 10; ++k) {
    int64_t err = 0;
    uint64_t* c = algo::MapAddTarget(Desc(*maps, 0), &k, 0, &err);
    ASSERT_NE(c, nullptr);
    *c += k * 100;
    algo::AtomicAdd64(algo::HistTarget(Desc(*maps, 2), k), 1);
    const uint32_t zero = 0;
    *algo::MapAddTarget(Desc(*maps, 3), &zero, k * 3, &err) += 1;
  }
  const uint64_t event[2] = {0xabc, 0xdef};
  ASSERT_EQ(algo::RingOutput(Desc(*maps, 4), event, sizeof(event), 0), 0);
  ASSERT_TRUE(maps->Publish(1234).ok());

  // A reader: another mapping of the segment, read-only.
  absl::StatusOr<Session> reader = Session::Open(session.name(), /*writable=*/false);
  ASSERT_TRUE(reader.ok()) << reader.status();
  MapsRegion& region = reader->maps();
  ASSERT_EQ(region.size(), 5u);
  EXPECT_EQ(region.publish_count(), 1u);
  EXPECT_EQ(region.last_publish_ns(), 1234u);
  auto snapshot = [&](size_t i) {
    absl::StatusOr<SnapshotBytes> bytes = region.ReadSnapshot(i);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return MapSnapshot(region.map(i), *std::move(bytes));
  };
  MapSnapshot counts = snapshot(0);
  EXPECT_EQ(counts.generation(), 1u);
  EXPECT_EQ(counts.control().count, 10u);
  EXPECT_EQ(counts.CountEntries(), 10u);
  for (uint64_t k = 0; k < 10; ++k) {
    auto v = counts.Lookup(AsBytes(k));
    ASSERT_TRUE(v.has_value()) << k;
    uint64_t value;
    std::memcpy(&value, v->data(), 8);
    EXPECT_EQ(value, k * 100);
  }
  const uint64_t missing = 99;
  EXPECT_FALSE(counts.Lookup(AsBytes(missing)).has_value());
  EXPECT_FALSE(counts.Lookup(absl::Span<const uint8_t>()).has_value()) << "wrong key size";

  MapSnapshot globals = snapshot(1);
  auto g = globals.Lookup(AsBytes(uint32_t{0}));
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(std::vector<uint8_t>(g->begin(), g->end()),
            std::vector<uint8_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                  0, 0, 0}))
      << "the initial value, zero-padded (the allocation was poisoned)";

  const std::vector<uint64_t> buckets = snapshot(2).Buckets();
  ASSERT_EQ(buckets.size(), 65u);
  EXPECT_EQ(buckets[0], 1u);  // 0
  EXPECT_EQ(buckets[1], 1u);  // 1
  EXPECT_EQ(buckets[2], 2u);  // 2, 3
  EXPECT_EQ(buckets[3], 4u);  // 4..7
  EXPECT_EQ(buckets[4], 2u);  // 8, 9

  MapSnapshot per_thread = snapshot(3);
  std::vector<uint64_t> ids;
  per_thread.ForEach([&](absl::Span<const uint8_t>, uint64_t id, absl::Span<const uint8_t>) {
    ids.push_back(id);
  });
  EXPECT_THAT(ids, ::testing::ElementsAre(0, 3, 6, 9, 12, 15, 18, 21, 24, 27));

  // The ring's counters were published; its record is there for a consumer.
  absl::StatusOr<MapRing> ring = region.Ring(4);
  ASSERT_TRUE(ring.ok());
  EXPECT_EQ(ring->Stats().reserved, 1u);
  EXPECT_EQ(ring->Stats().head, 24u);
  EXPECT_EQ(ring->Consume([](absl::Span<const uint8_t>) {}), 0u) << "read-only";
  absl::StatusOr<Session> consumer = Session::Open(session.name(), /*writable=*/true);
  ASSERT_TRUE(consumer.ok());
  absl::StatusOr<MapRing> writable_ring = consumer->maps().Ring(4);
  ASSERT_TRUE(writable_ring.ok());
  std::vector<uint8_t> got;
  EXPECT_EQ(writable_ring->Consume([&](absl::Span<const uint8_t> b) {
    got.assign(b.begin(), b.end());
  }),
            1u);
  EXPECT_EQ(got.size(), 16u);
  EXPECT_EQ(std::memcmp(got.data(), event, 16), 0);

  // The same values straight from device memory.
  absl::StatusOr<MapSnapshot> direct = maps->ReadSnapshot(0);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(direct->CountEntries(), 10u);
  ASSERT_TRUE(maps->Release().ok());
  EXPECT_EQ(memory.live_allocations(), 0u);
  EXPECT_EQ(memory.live_host_mappings(), 0u);
  EXPECT_TRUE(maps->Release().ok()) << "idempotent";
}

// A second MapSet on the same region (the next process of a session, or the
// maps made again after cudaDeviceReset) goes on from the last snapshot:
// counts add up, HASH keys stay, the ring's head continues past what the
// consumer already read, with no record repeated or lost.
class MapSetPlacementTest : public MapSetTest, public ::testing::WithParamInterface<RingData> {};

TEST_P(MapSetPlacementTest, MapsMadeAgainContinueFromTheLastSnapshot) {
  Session& session = Create(Specs());
  absl::StatusOr<Session> consumer = Session::Open(session.name(), /*writable=*/true);
  ASSERT_TRUE(consumer.ok());
  absl::StatusOr<MapRing> ring = consumer->maps().Ring(4);
  ASSERT_TRUE(ring.ok());
  std::vector<uint64_t> events;
  auto consume = [&] {
    return ring->Consume([&](absl::Span<const uint8_t> b) {
      uint64_t v;
      std::memcpy(&v, b.data(), 8);
      events.push_back(v);
    });
  };
  auto run = [&](uint64_t round) {
    HostDeviceMemory memory;
    absl::StatusOr<MapSet> maps = MapSet::Create(Specs(), &memory, &session.maps(), GetParam());
    ASSERT_TRUE(maps.ok()) << maps.status();
    absl::StatusOr<size_t> seeded = maps->SeedFromRegion();
    ASSERT_TRUE(seeded.ok()) << seeded.status();
    EXPECT_EQ(*seeded, round == 0 ? 0u : 5u) << "maps with a snapshot";
    for (uint64_t k = 0; k < 10; ++k) {
      int64_t err = 0;
      *algo::MapAddTarget(Desc(*maps, 0), &k, 0, &err) += k * 100;
      algo::AtomicAdd64(algo::HistTarget(Desc(*maps, 2), k), 1);
    }
    const uint64_t key = 100 + round;  // a key only this round adds
    int64_t err = 0;
    *algo::MapAddTarget(Desc(*maps, 0), &key, 0, &err) += 1;
    const uint64_t event[2] = {round, round};
    ASSERT_EQ(algo::RingOutput(Desc(*maps, 4), event, sizeof(event), 0), 0);
    ASSERT_TRUE(maps->Publish(1000 + round).ok());
    EXPECT_EQ(consume(), 1u);
    ASSERT_TRUE(maps->Release().ok());
  };
  for (uint64_t round = 0; round < 3; ++round) run(round);

  MapsRegion& region = session.maps();
  absl::StatusOr<SnapshotBytes> bytes = region.ReadSnapshot(0);
  ASSERT_TRUE(bytes.ok());
  MapSnapshot counts(region.map(0), *std::move(bytes));
  EXPECT_EQ(counts.CountEntries(), 13u) << "10 shared keys and one per round";
  for (uint64_t k = 0; k < 10; ++k) {
    auto v = counts.Lookup(AsBytes(k));
    ASSERT_TRUE(v.has_value()) << k;
    uint64_t value;
    std::memcpy(&value, v->data(), 8);
    EXPECT_EQ(value, 3 * k * 100) << k;
  }
  bytes = region.ReadSnapshot(2);
  ASSERT_TRUE(bytes.ok());
  const std::vector<uint64_t> buckets = MapSnapshot(region.map(2), *std::move(bytes)).Buckets();
  EXPECT_EQ(buckets[3], 12u) << "4..7, three rounds";
  EXPECT_THAT(events, ::testing::ElementsAre(0u, 1u, 2u));
  EXPECT_EQ(ring->Stats().reserved, 3u);
  EXPECT_EQ(ring->Stats().head, 72u);
}

INSTANTIATE_TEST_SUITE_P(Rings, MapSetPlacementTest,
                         ::testing::Values(RingData::kHost, RingData::kDeviceMirrored),
                         [](const ::testing::TestParamInfo<RingData>& info) {
                           return info.param == RingData::kHost ? "InHostMemory"
                                                                : "InDeviceMemoryMirrored";
                         });

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

// Host writes (`cuprobe maps --set`): a reader in another process asks, the
// hook's next publish writes the ARRAY entry into device memory (zeroing an
// add-only map's other value copies, restarting site counts of that entry)
// and acknowledges once the snapshot holds it.
// Maps made again after a producer that left its ring unfinished (killed
// mid-kernel: a committed record not yet consumed, then a reserved record
// never committed, and kernels that ran on after its last publish): the new
// producer starts a capacity past the consumer's tail, the consumer reads
// the committed record, skips the rest, and then reads the new records;
// nothing torn, nothing read twice. A HASH slot caught half-inserted comes
// back DELETED, so neither probes nor the hook ever wait on it.
TEST_F(MapSetTest, MapsMadeAgainAfterAnUncleanEndResumeTheRingAndSettleTheHash) {
  Session& session = Create(Specs());
  absl::StatusOr<Session> consumer = Session::Open(session.name(), /*writable=*/true);
  ASSERT_TRUE(consumer.ok());
  absl::StatusOr<MapRing> ring = consumer->maps().Ring(4);
  ASSERT_TRUE(ring.ok());
  std::vector<uint64_t> events;
  auto consume = [&] {
    return ring->Consume([&](absl::Span<const uint8_t> b) {
      uint64_t v;
      std::memcpy(&v, b.data(), 8);
      events.push_back(v);
    });
  };
  {
    HostDeviceMemory memory;
    absl::StatusOr<MapSet> maps = MapSet::Create(Specs(), &memory, &session.maps());
    ASSERT_TRUE(maps.ok());
    const uint64_t first[2] = {1, 1};
    ASSERT_EQ(algo::RingOutput(Desc(*maps, 4), first, sizeof(first), 0), 0);
    ASSERT_TRUE(maps->Publish(1).ok());  // the last publish: head 24
    // After it: a committed record, then one reserved and never committed.
    const uint64_t late[2] = {2, 2};
    ASSERT_EQ(algo::RingOutput(Desc(*maps, 4), late, sizeof(late), 0), 0);
    ASSERT_NE(algo::RingReserve(Desc(*maps, 4), 16, 0), 0u);
    // A HASH insert caught half done in the snapshot.
    const uint64_t key = 5;
    int64_t err = 0;
    *algo::MapAddTarget(Desc(*maps, 0), &key, 0, &err) += 1;
    uint32_t* states = algo::Ptr<uint32_t>(Desc(*maps, 0)->states);
    for (uint64_t slot = 0; slot <= Desc(*maps, 0)->slot_mask; ++slot) {
      if ((states[slot] & 3u) == CUPROBE_HASH_LIVE) states[slot] = (states[slot] & ~3u) | 1u;
    }
    absl::StatusOr<MapSnapshot> folded = maps->ReadSnapshot(0);  // must not hang
    ASSERT_TRUE(folded.ok());
    // Publish the HASH by hand with the pending slot (as a snapshot taken
    // mid-insert would hold): the region's copy, then no Release.
    uint8_t* dst = session.maps().BeginSnapshot(0);
    ASSERT_TRUE(memory.CopyFromDevice(dst, maps->table()[0] + CUPROBE_MAP_DESC_SIZE,
                                      maps->geometry(0).snapshot_bytes())
                    .ok());
    session.maps().EndSnapshot(0, 2);
    // The producer is gone without a last publish or release.
  }
  HostDeviceMemory memory;
  absl::StatusOr<MapSet> maps = MapSet::Create(Specs(), &memory, &session.maps());
  ASSERT_TRUE(maps.ok());
  ASSERT_TRUE(maps->SeedFromRegion().ok());
  const cuprobe_map_control* control = algo::Control(Desc(*maps, 4));
  EXPECT_EQ(control->ring_head, 8192u) << "a capacity past the consumer's tail (0)";
  EXPECT_EQ(control->ring_reserved, 1u) << "counters go on from the snapshot";
  const uint64_t key = 5;
  int64_t err = 0;
  uint64_t* value = algo::MapAddTarget(Desc(*maps, 0), &key, 0, &err);  // must not hang
  ASSERT_NE(value, nullptr);
  *value += 1;
  const uint64_t next[2] = {3, 3};
  ASSERT_EQ(algo::RingOutput(Desc(*maps, 4), next, sizeof(next), 0), algo::kEAGAIN)
      << "full until the consumer passes what was left";
  EXPECT_EQ(consume(), 2u) << "the two committed records";
  ASSERT_EQ(algo::RingOutput(Desc(*maps, 4), next, sizeof(next), 0), 0);
  EXPECT_EQ(consume(), 1u);
  EXPECT_THAT(events, ::testing::ElementsAre(1u, 2u, 3u));
  EXPECT_EQ(ring->host()->abandoned, 8192u - 48u) << "the unfinished record and the rest";
  EXPECT_TRUE(ring->status().ok()) << ring->status();
  ASSERT_TRUE(maps->Publish(3).ok());
  ASSERT_TRUE(maps->Release().ok());
}

TEST_F(MapSetTest, HostWritesReachTheDeviceAtTheNextPublish) {
  std::vector<MapSpec> specs = {Spec("config", CUPROBE_MAP_ARRAY, 4, 8, 4),
                                Spec("hits", CUPROBE_MAP_ARRAY, 4, 8, 4),
                                Spec("lat", CUPROBE_MAP_HIST_LOG2, 4, 8, 65)};
  specs[1].flags |= CUPROBE_MAP_F_ADD_ONLY;  // value copies, as the compiler marks counters
  Session& session = Create(specs);
  HostDeviceMemory memory;
  absl::StatusOr<MapSet> maps = MapSet::Create(specs, &memory, &session.maps());
  ASSERT_TRUE(maps.ok()) << maps.status();
  ASSERT_GT(maps->geometry(1).value_shards, 1u) << "the test needs value copies";
  absl::StatusOr<uint64_t> base = maps->AddSiteCounters(
      {SiteCounter{{SiteAdd{1, false, {2, 0, 0, 0}, 1}, SiteAdd{1, false, {3, 0, 0, 0}, 1}}}});
  ASSERT_TRUE(base.ok()) << base.status();
  uint64_t* counter = algo::Ptr<uint64_t>(*base);  // counter 0, shard 0
  // Entry 2 of "hits": 5 in copy 0, 6 in copy 1, 4 site-counted executions.
  const cuprobe_map_desc* hits = Desc(*maps, 1);
  *algo::Ptr<uint64_t>(hits->values + 2 * 8) = 5;
  *algo::Ptr<uint64_t>(hits->values + hits->shard_bytes + 2 * 8) = 6;
  *counter = 4;

  absl::StatusOr<Session> other = Session::Open(session.name(), /*writable=*/true);
  ASSERT_TRUE(other.ok());
  MapsRegion& region = other->maps();
  auto u64 = [](uint64_t v) {
    std::vector<uint8_t> b(8);
    std::memcpy(b.data(), &v, 8);
    return b;
  };
  absl::StatusOr<uint64_t> seq_config = region.RequestWrite(0, 1, u64(42), absl::Seconds(1));
  ASSERT_TRUE(seq_config.ok()) << seq_config.status();
  absl::StatusOr<uint64_t> seq_hits = region.RequestWrite(1, 2, u64(100), absl::Seconds(1));
  ASSERT_TRUE(seq_hits.ok()) << seq_hits.status();
  EXPECT_FALSE(region.WriteResult(0, *seq_config).has_value()) << "not applied before a publish";
  // One write per map at a time: a second one waits for the first.
  EXPECT_EQ(region.RequestWrite(0, 0, u64(1), absl::Milliseconds(5)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(maps->Publish(77).ok());
  EXPECT_EQ(region.WriteResult(0, *seq_config), HostWriteResult::kApplied);
  EXPECT_EQ(region.WriteResult(1, *seq_hits), HostWriteResult::kApplied);
  EXPECT_EQ(*algo::Ptr<uint64_t>(Desc(*maps, 0)->values + 8), 42u) << "device memory";
  auto published = [&](size_t map, uint32_t key) {
    absl::StatusOr<SnapshotBytes> bytes = region.ReadSnapshot(map);
    EXPECT_TRUE(bytes.ok());
    MapSnapshot snap(region.map(map), *std::move(bytes));
    uint64_t v = 0;
    std::memcpy(&v, snap.Lookup(AsBytes(key))->data(), 8);
    return v;
  };
  EXPECT_EQ(published(0, 1), 42u);
  EXPECT_EQ(published(1, 2), 100u) << "copies and site counts of the entry start again";
  EXPECT_EQ(published(1, 3), 4u) << "another entry's site counts stay";
  // The GPU goes on adding after the write.
  *algo::Ptr<uint64_t>(hits->values + hits->shard_bytes + 2 * 8) += 1;
  *counter += 2;
  ASSERT_TRUE(maps->Publish(78).ok());
  EXPECT_EQ(published(1, 2), 103u);
  EXPECT_EQ(published(1, 3), 6u);

  // Refused before anything is pending: wrong type, index, size; read-only.
  EXPECT_THAT(std::string(region.RequestWrite(2, 0, u64(1), absl::Seconds(1)).status().message()),
              HasSubstr("only ARRAY maps take writes"));
  EXPECT_THAT(std::string(region.RequestWrite(0, 4, u64(1), absl::Seconds(1)).status().message()),
              HasSubstr("no index 4"));
  EXPECT_THAT(
      std::string(region.RequestWrite(0, 0, {1, 2, 3}, absl::Seconds(1)).status().message()),
      HasSubstr("holds 8-byte values, the write has 3"));
  absl::StatusOr<Session> reader = Session::Open(session.name(), /*writable=*/false);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(reader->maps().RequestWrite(0, 0, u64(1), absl::Seconds(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(maps->Release().ok());
}

TEST_F(MapSetTest, OpenRejectsASessionWhoseMapsRegionIsCorrupt) {
  Session& session = Create(Specs());
  ASSERT_GT(session.maps().size(), 0u);
  auto* base = reinterpret_cast<uint8_t*>(&session.header());
  const uint64_t maps_offset = session.header().maps_offset;
  ASSERT_EQ(maps_offset % 4096, 0u);
  // The region's magic.
  base[maps_offset] ^= 0xff;
  absl::StatusOr<Session> bad = Session::Open(session.name(), false);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr(absl::StrCat("segment '", session.name(), "': maps region: bad magic")));
  base[maps_offset] ^= 0xff;
  ASSERT_TRUE(Session::Open(session.name(), false).ok());
  // A map's snapshot area pointing into the header of the segment.
  uint64_t& snapshot_offset = *reinterpret_cast<uint64_t*>(base + maps_offset + 256 + 80);
  const uint64_t saved = snapshot_offset;
  snapshot_offset = 64;
  bad = Session::Open(session.name(), false);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("overlaps"));
  snapshot_offset = saved;
  // The segment header's maps_size lies.
  session.header().maps_size += 4096;
  bad = Session::Open(session.name(), false);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("is not a page-aligned range"));
  session.header().maps_size -= 4096;
  EXPECT_TRUE(Session::Open(session.name(), false).ok());
}

TEST_F(MapSetTest, ClearRestoresTheInitialStateAndRefusesRings) {
  HostDeviceMemory memory;
  Session& session = Create(Specs());
  absl::StatusOr<MapSet> maps = MapSet::Create(Specs(), &memory, &session.maps());
  ASSERT_TRUE(maps.ok());
  uint8_t* value = algo::Ptr<uint8_t>(Desc(*maps, 1)->values);
  std::memset(value, 0xee, 24);
  for (uint64_t k = 0; k < 5; ++k) ASSERT_EQ(algo::MapUpdate(Desc(*maps, 0), &k, &k, 0, 0), 0);
  ASSERT_TRUE(maps->Clear(1).ok());
  EXPECT_EQ(value[0], 1);
  EXPECT_EQ(value[10], 0);
  ASSERT_TRUE(maps->Clear(0).ok());
  EXPECT_EQ(algo::Control(Desc(*maps, 0))->count, 0u);
  const uint64_t k = 3;
  EXPECT_EQ(algo::MapLookup(Desc(*maps, 0), &k, 0), 0u);
  EXPECT_EQ(maps->Clear(4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(maps->Clear(5).code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(maps->Release().ok());
}

TEST_F(MapSetTest, ARegionMadeForOtherMapsIsRefused) {
  Session& session = Create(Specs());
  HostDeviceMemory memory;
  std::vector<MapSpec> other = Specs();
  other[2].max_entries = 33;
  absl::StatusOr<MapSet> maps = MapSet::Create(other, &memory, &session.maps());
  EXPECT_EQ(maps.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(maps.status().message()), HasSubstr("map 2 differs"));
  other.pop_back();
  maps = MapSet::Create(other, &memory, &session.maps());
  EXPECT_THAT(std::string(maps.status().message()), HasSubstr("describes 5 maps"));
  // Rings need a region.
  maps = MapSet::Create(Specs(), &memory, nullptr);
  EXPECT_THAT(std::string(maps.status().message()), HasSubstr("needs its maps region"));
  EXPECT_EQ(memory.live_allocations(), 0u);
}

TEST_F(MapSetTest, AFailedAllocationGivesEverythingBack) {
  Session& session = Create(Specs());
  // Room for the first three maps only.
  uint64_t room = 0;
  for (size_t i = 0; i < 3; ++i) {
    absl::StatusOr<MapGeometry> g = ComputeMapGeometry(Specs()[i]);
    ASSERT_TRUE(g.ok()) << g.status();
    room += (g->allocation_bytes + 255) & ~uint64_t{255};
  }
  alignas(256) static uint8_t arena[1 << 16];
  ASSERT_LT(room, sizeof(arena));
  HostDeviceMemory memory(arena, room);
  absl::StatusOr<MapSet> maps = MapSet::Create(Specs(), &memory, &session.maps());
  ASSERT_FALSE(maps.ok());
  EXPECT_EQ(maps.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(maps.status().message()), HasSubstr("for map 'per_thread'"));
  EXPECT_EQ(memory.live_allocations(), 0u);
  EXPECT_EQ(memory.live_host_mappings(), 0u);
}

TEST_F(MapSetTest, MapsWithoutASessionStillWork) {
  HostDeviceMemory memory;
  std::vector<MapSpec> specs = {Spec("a", CUPROBE_MAP_ARRAY, 4, 8, 4)};
  absl::StatusOr<MapSet> maps = MapSet::Create(specs, &memory, nullptr);
  ASSERT_TRUE(maps.ok()) << maps.status();
  const uint32_t key = 2;
  const uint64_t v = 77;
  ASSERT_EQ(algo::MapUpdate(Desc(*maps, 0), &key, &v, 0, 0), 0);
  EXPECT_TRUE(maps->Publish(1).ok());
  absl::StatusOr<MapSnapshot> snap = maps->ReadSnapshot(0);
  ASSERT_TRUE(snap.ok());
  uint64_t got = 0;
  std::memcpy(&got, snap->Lookup(AsBytes(key))->data(), 8);
  EXPECT_EQ(got, 77u);
  ASSERT_TRUE(maps->Release().ok());
}

// Site counters (include/cuprobe/abi.h): the hook registers a module's
// counters; the GPU adds to their shards; every snapshot gains count x
// delta for each add, a HASH key appearing at its first count.
TEST_F(MapSetTest, SiteCountersFoldIntoSnapshotsExactly) {
  HostDeviceMemory memory;
  std::vector<MapSpec> specs = {Spec("counts", CUPROBE_MAP_HASH, 8, 8, 64),
                                Spec("lat", CUPROBE_MAP_HIST_LOG2, 4, 8, 65)};
  absl::StatusOr<MapSet> maps = MapSet::Create(specs, &memory, nullptr);
  ASSERT_TRUE(maps.ok()) << maps.status();
  const uint64_t key_a = 0x0000000100000007, key_b = 0x0000000200000007;
  auto bytes = [](uint64_t v) {
    std::vector<uint8_t> b(8);
    std::memcpy(b.data(), &v, 8);
    return b;
  };
  // 17 counters: the 17th lives in the second group of 16.
  std::vector<SiteCounter> counters(17);
  counters[0].adds = {SiteAdd{0, false, bytes(key_a), 1}, SiteAdd{0, false, bytes(key_b), 4}};
  counters[1].adds = {SiteAdd{0, false, bytes(key_a), 2}, SiteAdd{1, true, bytes(1000), 3}};
  counters[16].adds = {SiteAdd{0, false, bytes(key_b), 1}};
  // A key that was never counted must not appear.
  counters[5].adds = {SiteAdd{0, false, bytes(0x99), 1}};
  EXPECT_FALSE(maps->AddSiteCounters({SiteCounter{{SiteAdd{2, false, {}, 1}}}}).ok());  // no map 2
  absl::StatusOr<uint64_t> base = maps->AddSiteCounters(counters);
  ASSERT_TRUE(base.ok()) << base.status();
  // What the flush code does: counter c, shard s at
  // base + (c / 16) * GROUP + s * 128 + (c % 16) * 8.
  auto shard = [&](uint32_t c, uint32_t s) {
    return algo::Ptr<uint64_t>(*base + (c / 16) * CUPROBE_SITE_COUNTER_GROUP_BYTES + s * 128 +
                               (c % 16) * 8);
  };
  *shard(0, 0) += 10;
  *shard(0, 127) += 5;   // 15 executions of counter 0
  *shard(1, 3) += 2;     // 2 of counter 1
  *shard(16, 64) += 7;   // 7 of counter 16
  auto value_of = [&](const MapSnapshot& snap, uint64_t key) -> std::optional<uint64_t> {
    std::optional<absl::Span<const uint8_t>> v = snap.Lookup(AsBytes(key));
    if (!v) return std::nullopt;
    uint64_t got = 0;
    std::memcpy(&got, v->data(), 8);
    return got;
  };
  absl::StatusOr<MapSnapshot> snap = maps->ReadSnapshot(0);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(value_of(*snap, key_a), 15u * 1 + 2u * 2);
  EXPECT_EQ(value_of(*snap, key_b), 15u * 4 + 7u);
  EXPECT_FALSE(value_of(*snap, 0x99).has_value());
  absl::StatusOr<MapSnapshot> hist = maps->ReadSnapshot(1);
  ASSERT_TRUE(hist.ok()) << hist.status();
  // log2 bucket of 1000 is 10.
  const uint32_t bucket = 10;
  uint64_t got = 0;
  std::memcpy(&got, hist->Lookup(AsBytes(bucket))->data(), 8);
  EXPECT_EQ(got, 2u * 3);
  // Clearing a map restarts its site counts; the other map keeps its own.
  ASSERT_TRUE(maps->Clear(0).ok());
  snap = maps->ReadSnapshot(0);
  ASSERT_TRUE(snap.ok());
  EXPECT_FALSE(value_of(*snap, key_a).has_value());
  *shard(0, 1) += 1;
  snap = maps->ReadSnapshot(0);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(value_of(*snap, key_a), 1u);
  EXPECT_EQ(value_of(*snap, key_b), 4u);
  hist = maps->ReadSnapshot(1);
  std::memcpy(&got, hist->Lookup(AsBytes(bucket))->data(), 8);
  EXPECT_EQ(got, 6u);
  ASSERT_TRUE(maps->Release().ok());
}

// Thread-range counters (abi.h): the GPU's first thread of each launch adds
// 1 to launches[min(T, ids)] of the counter's area (and T - ids to its
// errors); every snapshot gains delta for each id below each launch's T,
// next to what the map's own memory holds.
TEST_F(MapSetTest, ThreadRangeCountersGiveEveryThreadOfEachLaunchItsAdds) {
  HostDeviceMemory memory;
  std::vector<MapSpec> specs = {Spec("exits", CUPROBE_MAP_PERTHREAD, 4, 8, 2, 256),
                                Spec("calls", CUPROBE_MAP_ARRAY, 4, 8, 4)};
  absl::StatusOr<MapSet> maps = MapSet::Create(specs, &memory, nullptr);
  ASSERT_TRUE(maps.ok()) << maps.status();
  const std::vector<uint8_t> key0 = {0, 0, 0, 0}, key1 = {1, 0, 0, 0}, key2 = {2, 0, 0, 0};
  // Counters the map cannot take are refused: wrong ids, a key out of
  // range, a count counter on a PERTHREAD map, a range on an ARRAY.
  EXPECT_FALSE(maps->AddSiteCounters({SiteCounter{{SiteAdd{0, false, key1, 1}}, 100}}).ok());
  EXPECT_FALSE(maps->AddSiteCounters({SiteCounter{{SiteAdd{0, false, key2, 1}}, 256}}).ok());
  EXPECT_FALSE(maps->AddSiteCounters({SiteCounter{{SiteAdd{0, false, key1, 1}}, 0}}).ok());
  EXPECT_FALSE(maps->AddSiteCounters({SiteCounter{{SiteAdd{1, false, key1, 1}}, 256}}).ok());
  // Counter 0 counts (ARRAY calls[1] += 1), counter 1 is a range
  // (exits[1][thread] += 3).
  absl::StatusOr<uint64_t> base = maps->AddSiteCounters(
      {SiteCounter{{SiteAdd{1, false, key1, 1}}, 0}, SiteCounter{{SiteAdd{0, false, key1, 3}}, 256}});
  ASSERT_TRUE(base.ok()) << base.status();
  // What the launch's first thread does (site_counter_pass.cc).
  auto launch = [&](uint64_t threads, uint64_t block_base) {
    auto* area = algo::Ptr<uint64_t>(*algo::Ptr<uint64_t>(block_base + 8));  // counter 1's slot
    ASSERT_NE(area, nullptr);
    if (threads > 256) area[0] += threads - 256;
    const uint64_t j = std::min<uint64_t>(threads, 256);
    area[1] = std::max(area[1], j);
    area[2 + j] += 1;
  };
  launch(100, *base);
  launch(100, *base);
  launch(300, *base);
  // A second module with the same counter shares the area: its launches
  // add up with the first one's.
  absl::StatusOr<uint64_t> second =
      maps->AddSiteCounters({SiteCounter{{SiteAdd{1, false, key1, 1}}, 0},
                             SiteCounter{{SiteAdd{0, false, key1, 3}}, 256}});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*algo::Ptr<uint64_t>(*second + 8), *algo::Ptr<uint64_t>(*base + 8));
  launch(256, *second);
  *algo::Ptr<uint64_t>(*base) += 9;  // counter 0: 9 executions
  // A thread's own add, by a probe that was called (exits[1][5] += 7).
  int64_t err = 0;
  uint64_t* own = algo::IndexedAddTarget(Desc(*maps, 0), CUPROBE_MAP_PERTHREAD, 1, 5, &err);
  ASSERT_NE(own, nullptr);
  *own += 7;
  auto value = [](const MapSnapshot& snap, const std::vector<uint8_t>& key, uint64_t id) {
    std::optional<absl::Span<const uint8_t>> v = snap.Lookup(key, id);
    uint64_t got = ~uint64_t{0};
    if (v) std::memcpy(&got, v->data(), 8);
    return got;
  };
  absl::StatusOr<MapSnapshot> snap = maps->ReadSnapshot(0);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(value(*snap, key1, 0), 4u * 3);
  EXPECT_EQ(value(*snap, key1, 5), 4u * 3 + 7);
  EXPECT_EQ(value(*snap, key1, 99), 4u * 3);
  EXPECT_EQ(value(*snap, key1, 100), 2u * 3);  // the launches of 300 and 256
  EXPECT_EQ(value(*snap, key1, 255), 2u * 3);
  EXPECT_EQ(value(*snap, key0, 0), 0u);
  EXPECT_EQ(snap->control().errors, 300u - 256);  // 44 threads past the ids
  EXPECT_EQ(snap->CountEntries(), 256u);
  absl::StatusOr<MapSnapshot> calls = maps->ReadSnapshot(1);
  ASSERT_TRUE(calls.ok());
  EXPECT_EQ(value(*calls, key1, 0), 9u);
  // A clear starts the ranges again: one launch of 10 threads after it.
  ASSERT_TRUE(maps->Clear(0).ok());
  launch(10, *base);
  snap = maps->ReadSnapshot(0);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(value(*snap, key1, 9), 3u);
  EXPECT_EQ(value(*snap, key1, 10), 0u);
  EXPECT_EQ(snap->control().errors, 0u);
  EXPECT_EQ(snap->CountEntries(), 10u);
  ASSERT_TRUE(maps->Release().ok());
}

// Waits for a child and returns its exit code (-1 on a signal).
int Wait(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(MapSetTest, WritersInForkedProcessesReadersInOthers) {
  // The "device" is a shared mapping; the hook (parent) owns the MapSet;
  // kernels are forked writers; a forked reader checks a snapshot.
  SharedArena arena(64 << 20);
  HostDeviceMemory memory(arena.memory(), arena.bytes());
  Session& session = Create(Specs());
  absl::StatusOr<MapSet> maps = MapSet::Create(Specs(), &memory, &session.maps());
  ASSERT_TRUE(maps.ok()) << maps.status();
  constexpr int kWriters = 3;
  constexpr uint64_t kAdds = 20000;
  std::vector<pid_t> writers;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = ::fork();
    if (pid == 0) {
      for (uint64_t i = 0; i < kAdds; ++i) {
        const uint64_t key = i % 40;  // shared keys: contention on insert and add
        int64_t err = 0;
        uint64_t* c = algo::MapAddTarget(Desc(*maps, 0), &key, 0, &err);
        if (c == nullptr) ::_exit(10);
        algo::AtomicAdd64(c, 1);
        algo::AtomicAdd64(algo::HistTarget(Desc(*maps, 2), i), 1);
      }
      ::_exit(0);
    }
    writers.push_back(pid);
  }
  // Publish while they run (the watcher's periodic tick), then at the end.
  bool running = true;
  while (running) {
    ASSERT_TRUE(maps->Publish(1).ok());
    running = false;
    for (pid_t pid : writers) running |= ::waitpid(pid, nullptr, WNOHANG) == 0;
  }
  for (pid_t pid : writers) (void)::waitpid(pid, nullptr, 0);
  ASSERT_TRUE(maps->Publish(2).ok());
  // The reader runs in yet another process and reports through its exit code.
  const std::string name = session.name();
  pid_t reader = ::fork();
  if (reader == 0) {
    absl::StatusOr<Session> s = Session::Open(name, false);
    if (!s.ok()) ::_exit(20);
    absl::StatusOr<SnapshotBytes> bytes = s->maps().ReadSnapshot(0);
    if (!bytes.ok()) ::_exit(21);
    MapSnapshot counts(s->maps().map(0), *std::move(bytes));
    uint64_t total = 0;
    counts.ForEach([&](absl::Span<const uint8_t>, uint64_t, absl::Span<const uint8_t> v) {
      uint64_t x;
      std::memcpy(&x, v.data(), 8);
      total += x;
    });
    if (counts.CountEntries() != 40) ::_exit(22);
    if (total != kWriters * kAdds) ::_exit(23);
    absl::StatusOr<SnapshotBytes> hist = s->maps().ReadSnapshot(2);
    if (!hist.ok()) ::_exit(24);
    uint64_t hist_total = 0;
    for (uint64_t b : MapSnapshot(s->maps().map(2), *std::move(hist)).Buckets()) hist_total += b;
    ::_exit(hist_total == kWriters * kAdds ? 0 : 25);
  }
  EXPECT_EQ(Wait(reader), 0);
  ASSERT_TRUE(maps->Release().ok());
}

TEST_F(MapSetTest, ClearRequestedByAnotherProcessIsHonouredAtTheNextPublish) {
  HostDeviceMemory memory;
  Session& session = Create(Specs());
  absl::StatusOr<MapSet> maps = MapSet::Create(Specs(), &memory, &session.maps());
  ASSERT_TRUE(maps.ok());
  const uint64_t key = 5;
  ASSERT_EQ(algo::MapUpdate(Desc(*maps, 0), &key, &key, 0, 0), 0);
  const std::string name = session.name();
  pid_t child = ::fork();
  if (child == 0) {
    absl::StatusOr<Session> s = Session::Open(name, true);
    if (!s.ok()) ::_exit(1);
    ::_exit(s->maps().RequestClear(0).ok() && !s->maps().RequestClear(4).ok() ? 0 : 2);
  }
  ASSERT_EQ(Wait(child), 0);
  EXPECT_EQ(session.maps().clear_requests(0), 1u);
  EXPECT_EQ(session.maps().clears_done(0), 0u);
  ASSERT_TRUE(maps->Publish(5).ok());
  EXPECT_EQ(session.maps().clears_done(0), 1u);
  EXPECT_EQ(algo::MapLookup(Desc(*maps, 0), &key, 0), 0u);
  absl::StatusOr<SnapshotBytes> bytes = session.maps().ReadSnapshot(0);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(MapSnapshot(session.maps().map(0), *std::move(bytes)).CountEntries(), 0u);
  ASSERT_TRUE(maps->Release().ok());
}

std::vector<uint8_t> Body(uint32_t producer, uint32_t seq) {
  std::vector<uint8_t> body(8 + (seq % 7) * 8);
  std::memcpy(body.data(), &producer, 4);
  std::memcpy(body.data() + 4, &seq, 4);
  for (size_t i = 8; i < body.size(); ++i) body[i] = static_cast<uint8_t>(producer ^ seq ^ i);
  return body;
}

TEST_F(MapSetTest, RingProducersInForkedProcessesConsumerInTheParent) {
  SharedArena arena(16 << 20);
  HostDeviceMemory memory(arena.memory(), arena.bytes());
  Session& session = Create(Specs());
  absl::StatusOr<MapSet> maps = MapSet::Create(Specs(), &memory, &session.maps());
  ASSERT_TRUE(maps.ok()) << maps.status();
  constexpr uint32_t kProducers = 3;
  constexpr uint32_t kRecords = 30000;
  std::vector<pid_t> producers;
  for (uint32_t p = 0; p < kProducers; ++p) {
    pid_t pid = ::fork();
    if (pid == 0) {
      for (uint32_t seq = 0; seq < kRecords; ++seq) {
        const std::vector<uint8_t> body = Body(p, seq);
        (void)algo::RingOutput(Desc(*maps, 4), body.data(), body.size(), 0);
      }
      ::_exit(0);
    }
    producers.push_back(pid);
  }
  // The consumer: a separate writable mapping, as the CLI would have.
  absl::StatusOr<Session> cli = Session::Open(session.name(), true);
  ASSERT_TRUE(cli.ok());
  absl::StatusOr<MapRing> ring = cli->maps().Ring(4);
  ASSERT_TRUE(ring.ok());
  uint64_t delivered = 0, bad = 0;
  auto check = [&](absl::Span<const uint8_t> body) {
    uint32_t p = 0, seq = 0;
    if (body.size() >= 8) {
      std::memcpy(&p, body.data(), 4);
      std::memcpy(&seq, body.data() + 4, 4);
    }
    if (body.size() < 8 || p >= kProducers ||
        std::vector<uint8_t>(body.begin(), body.end()) != Body(p, seq)) {
      ++bad;
    }
    ++delivered;
  };
  bool running = true;
  while (running) {
    if (ring->Consume(check) == 0) std::this_thread::yield();
    running = false;
    for (pid_t pid : producers) running |= ::waitpid(pid, nullptr, WNOHANG) == 0;
  }
  for (pid_t pid : producers) (void)::waitpid(pid, nullptr, 0);
  ring->Consume(check);
  ASSERT_TRUE(ring->status().ok()) << ring->status();
  ASSERT_TRUE(maps->Publish(9).ok());
  const MapRingStats stats = ring->Stats();
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(delivered + stats.dropped, uint64_t{kProducers} * kRecords);
  EXPECT_EQ(stats.delivered, delivered);
  EXPECT_EQ(stats.reserved, delivered);
  EXPECT_EQ(stats.head, stats.tail);
  ASSERT_TRUE(maps->Release().ok());
}

}  // namespace
}  // namespace cuprobe
