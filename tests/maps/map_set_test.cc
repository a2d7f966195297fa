// File: tests/maps/map_set_test.cc
//
// MapSet (the hook's runtime) over HostDeviceMemory and a real session
// segment: descriptors in "device" memory driven by the host build of the
// helper algorithms, snapshots published into the segment and read back by
// a reader, maps made again that go on from the last snapshot (also after an
// unclean end), host writes, clear, initial values, spec mismatches, a
// corrupt region, and cleanup on failure. Rings pumped from device memory,
// site counters and forked processes are in the other map_set_*_test.cc
// files.
//
// Part of map_set_test (tests/maps/CMakeLists.txt); the maps and the fixture are
// in map_set_test_util.h.

#include "maps/map_set.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/map_algorithms.h"
#include "maps/map_snapshot.h"
#include "maps/segment.h"
#include "tests/maps/map_set_test_util.h"
#include "tests/maps/map_test_util.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::Desc;
using ::cuprobe::testing::MapSetTest;
using ::cuprobe::testing::Spec;
using ::cuprobe::testing::Specs;
using ::testing::HasSubstr;

namespace algo = ::cuprobe::mapalgo;

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

}  // namespace
}  // namespace cuprobe
