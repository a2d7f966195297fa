// File: tests/maps/maps_region_test.cc
//
// The segment's maps region (maps/maps_region.h): format/attach round trips
// for every map type, the rejection of every lie a corrupt region can tell
// (each with its message), the seqlock under a concurrent writer, and the
// TypeDescription encoding.
#include "maps/maps_region.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/map_snapshot.h"
#include "tests/maps/map_test_util.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::FreeDeleter;
using ::cuprobe::testing::Spec;
using ::testing::HasSubstr;

TypeDescription EventType() {
  TypeDescription t;
  t.name = "struct event";
  t.size = 16;
  t.fields = {{"pid", "u32", 0, 4}, {"comm", "char[4]", 4, 4}, {"ts", "u64", 8, 8}};
  return t;
}

std::vector<MapSpec> EveryType() {
  std::vector<MapSpec> specs = {
      Spec("counts", CUPROBE_MAP_HASH, 8, 8, 100),
      Spec("data", CUPROBE_MAP_ARRAY, 4, 16, 3),
      Spec("per_thread", CUPROBE_MAP_PERTHREAD, 4, 8, 2, 64),
      Spec("per_warp", CUPROBE_MAP_PERWARP, 4, 8, 1, 16),
      Spec("per_sm", CUPROBE_MAP_PERSM, 4, 8, 1, 8),
      Spec("lat", CUPROBE_MAP_HIST_LOG2, 4, 8, 65),
      Spec("lin", CUPROBE_MAP_HIST_LINEAR, 4, 8, 12, 0 | (uint64_t{10} << 32)),
      Spec("events", CUPROBE_MAP_RINGBUF, 0, 0, 8192),
      Spec("more_events", CUPROBE_MAP_RINGBUF, 0, 0, 4096),
  };
  specs[0].key_type = {"u64", 8, {}};
  specs[0].value_type = {"u64", 8, {}};
  specs[1].value_type = EventType();
  return specs;
}

// A formatted region in its own aligned heap memory.
struct Region {
  std::unique_ptr<void, FreeDeleter> memory;
  uint64_t size = 0;
  uint8_t* base() const { return static_cast<uint8_t*>(memory.get()); }
  template <typename T>
  T& at(uint64_t offset) const {
    return *reinterpret_cast<T*>(base() + offset);
  }
};

Region MakeRegion(const std::vector<MapSpec>& specs) {
  Region r;
  absl::StatusOr<uint64_t> size = MapsRegion::RegionBytes(specs);
  EXPECT_TRUE(size.ok()) << size.status();
  r.size = *size;
  r.memory.reset(std::aligned_alloc(4096, r.size));
  std::memset(r.memory.get(), 0, r.size);
  absl::Status s = MapsRegion::Format(r.base(), r.size, specs);
  EXPECT_TRUE(s.ok()) << s;
  return r;
}

TEST(MapsRegion, FormatThenAttachRoundTripsEveryType) {
  const std::vector<MapSpec> specs = EveryType();
  Region r = MakeRegion(specs);
  EXPECT_EQ(r.size % 4096, 0u);
  absl::StatusOr<MapsRegion> region = MapsRegion::Attach(r.base(), r.size, false);
  ASSERT_TRUE(region.ok()) << region.status();
  ASSERT_EQ(region->size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const MapInfo& info = region->map(i);
    EXPECT_EQ(info.spec.name, specs[i].name);
    EXPECT_EQ(info.spec.type, specs[i].type);
    EXPECT_EQ(info.spec.key_size, specs[i].key_size);
    EXPECT_EQ(info.spec.value_size, specs[i].value_size);
    EXPECT_EQ(info.spec.max_entries, specs[i].max_entries);
    EXPECT_EQ(info.spec.map_extra, specs[i].map_extra);
    EXPECT_EQ(info.snapshot_size, info.geometry.snapshot_bytes());
    EXPECT_EQ(info.snapshot_offset % 64, 0u);
    EXPECT_EQ(region->generation(i), 0u);
  }
  EXPECT_EQ(region->map(1).spec.value_type.name, "struct event");
  ASSERT_EQ(region->map(1).spec.value_type.fields.size(), 3u);
  EXPECT_EQ(region->map(1).spec.value_type.fields[1].name, "comm");
  EXPECT_EQ(region->map(1).spec.value_type.fields[2].offset, 8u);
  EXPECT_EQ(region->map(0).spec.key_type.name, "u64");
  EXPECT_EQ(region->Find("lat"), 5u);
  EXPECT_EQ(region->Find("nope"), std::nullopt);
  // The rings: page-aligned, inside the rings area, formatted.
  absl::Span<uint8_t> rings = region->RingsArea();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(rings.data()) % 4096, 0u);
  EXPECT_EQ(rings.size(), 12288u + 8192u) << "two blocks, each rounded up to pages";
  for (size_t i : {7u, 8u}) {
    absl::StatusOr<MapRing> ring = region->Ring(i);
    ASSERT_TRUE(ring.ok()) << ring.status();
    EXPECT_EQ(ring->capacity(), specs[i].max_entries);
    EXPECT_GE(reinterpret_cast<uint8_t*>(ring->host()), rings.data());
    EXPECT_LE(ring->data() + ring->capacity(), rings.data() + rings.size());
  }
  EXPECT_EQ(region->Ring(0).status().code(), absl::StatusCode::kInvalidArgument);
  // A read-only region refuses clear requests.
  EXPECT_EQ(region->RequestClear(0).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(MapsRegion, BadSpecsAreRefusedWithTheMapsName) {
  std::vector<MapSpec> specs = {Spec("a", CUPROBE_MAP_ARRAY, 4, 8, 1),
                                Spec("a", CUPROBE_MAP_ARRAY, 4, 8, 1)};
  EXPECT_THAT(std::string(MapsRegion::RegionBytes(specs).status().message()),
              HasSubstr("two maps are named 'a'"));
  specs = {Spec("", CUPROBE_MAP_ARRAY, 4, 8, 1)};
  EXPECT_THAT(std::string(MapsRegion::RegionBytes(specs).status().message()),
              HasSubstr("names have 1 to 255 bytes"));
  specs = {Spec("bad\nname", CUPROBE_MAP_ARRAY, 4, 8, 1)};
  EXPECT_THAT(std::string(MapsRegion::RegionBytes(specs).status().message()),
              HasSubstr("control character 0x0a"));
  specs = {Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 5000)};
  EXPECT_THAT(std::string(MapsRegion::RegionBytes(specs).status().message()),
              HasSubstr("map 'r' (RINGBUF): max_entries (its size in bytes) is 5000"));
  specs = {Spec("h", CUPROBE_MAP_HIST_LOG2, 4, 4, 10)};
  EXPECT_THAT(std::string(MapsRegion::RegionBytes(specs).status().message()),
              HasSubstr("declare the value as __u64"));
  specs = {Spec("x", 99, 4, 8, 1)};
  EXPECT_THAT(std::string(MapsRegion::RegionBytes(specs).status().message()),
              HasSubstr("map 'x' has type 99"));
  specs = {Spec("p", CUPROBE_MAP_PERTHREAD, 4, 8, 100000, 1u << 20)};
  EXPECT_THAT(std::string(MapsRegion::RegionBytes(specs).status().message()),
              HasSubstr("or the ids per key"));
}

struct Lie {
  std::string name;
  std::function<void(const Region&)> mutate;
  absl::StatusCode code;
  std::string message;
};

class RegionLies : public ::testing::TestWithParam<Lie> {};

constexpr uint64_t kEntries = 256;
uint64_t EntryField(size_t map, size_t offset) { return kEntries + map * 256 + offset; }

TEST_P(RegionLies, AttachRejectsWithASpecificMessage) {
  Region r = MakeRegion(EveryType());
  GetParam().mutate(r);
  absl::StatusOr<MapsRegion> region = MapsRegion::Attach(r.base(), r.size, false);
  ASSERT_FALSE(region.ok()) << GetParam().name;
  EXPECT_EQ(region.status().code(), GetParam().code) << region.status();
  EXPECT_THAT(std::string(region.status().message()), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    MapsRegion, RegionLies,
    ::testing::Values(
        Lie{"Magic", [](const Region& r) { r.at<uint64_t>(0) = 1; }, absl::StatusCode::kDataLoss,
            "bad magic 0x0000000000000001"},
        Lie{"Version", [](const Region& r) { r.at<uint32_t>(8) = 9; },
            absl::StatusCode::kFailedPrecondition, "maps region version 9"},
        Lie{"DescVersion", [](const Region& r) { r.at<uint32_t>(72) = 99; },
            absl::StatusCode::kFailedPrecondition, "map descriptor version 99"},
        Lie{"HeaderSize", [](const Region& r) { r.at<uint32_t>(12) = 100; },
            absl::StatusCode::kDataLoss, "header_size 100"},
        Lie{"RegionSize", [](const Region& r) { r.at<uint64_t>(16) += 4096; },
            absl::StatusCode::kDataLoss, "the segment gives it"},
        Lie{"MapCount", [](const Region& r) { r.at<uint32_t>(24) = 100000; },
            absl::StatusCode::kDataLoss, "map_count 100000 exceeds"},
        Lie{"MapCountPastEnd", [](const Region& r) { r.at<uint32_t>(24) = 4000; },
            absl::StatusCode::kDataLoss, "the map entries at offset 256"},
        Lie{"EntriesHuge", [](const Region& r) { r.at<uint64_t>(32) = ~uint64_t{0} - 63; },
            absl::StatusCode::kDataLoss, "the map entries"},
        Lie{"StringsPastEnd", [](const Region& r) { r.at<uint64_t>(48) = r.size; },
            absl::StatusCode::kDataLoss, "the strings at offset"},
        Lie{"RingsMisaligned", [](const Region& r) { r.at<uint64_t>(56) += 64; },
            absl::StatusCode::kDataLoss, "rings area at"},
        Lie{"NameOutside", [](const Region& r) { r.at<uint64_t>(EntryField(0, 32)) = 1u << 30; },
            absl::StatusCode::kDataLoss, "map 0's name (offset 1073741824"},
        Lie{"NameSizeOutside", [](const Region& r) { r.at<uint32_t>(EntryField(2, 40)) = 5000; },
            absl::StatusCode::kDataLoss, "map 2's name"},
        Lie{"NameEmpty", [](const Region& r) { r.at<uint32_t>(EntryField(1, 40)) = 0; },
            absl::StatusCode::kDataLoss, "map 1 has a name of 0 bytes"},
        Lie{"DuplicateName",
            [](const Region& r) {
              r.at<uint64_t>(EntryField(1, 32)) = r.at<uint64_t>(EntryField(0, 32));
              r.at<uint32_t>(EntryField(1, 40)) = r.at<uint32_t>(EntryField(0, 40));
            },
            absl::StatusCode::kDataLoss, "two maps are named 'counts'"},
        Lie{"UnknownType", [](const Region& r) { r.at<uint32_t>(EntryField(0, 0)) = 77; },
            absl::StatusCode::kDataLoss, "has type 77"},
        Lie{"BadSpec", [](const Region& r) { r.at<uint32_t>(EntryField(5, 12)) = 4; },
            absl::StatusCode::kDataLoss, "map 'lat' (HIST_LOG2): value_size is 4"},
        Lie{"IdSlots", [](const Region& r) { r.at<uint32_t>(EntryField(2, 20)) = 65; },
            absl::StatusCode::kDataLoss, "records 65 ids per key, its spec gives 64"},
        Lie{"MaxEntriesGrows", [](const Region& r) { r.at<uint32_t>(EntryField(1, 16)) = 1000; },
            absl::StatusCode::kDataLoss, "map 'data' has a 176-byte snapshot area, its spec needs"},
        Lie{"SnapshotOutside",
            [](const Region& r) { r.at<uint64_t>(EntryField(0, 80)) = r.size - 64; },
            absl::StatusCode::kDataLoss, "the snapshot of map 'counts'"},
        Lie{"SnapshotOverlapsEntries",
            [](const Region& r) { r.at<uint64_t>(EntryField(1, 80)) = 256; },
            absl::StatusCode::kDataLoss, "overlaps"},
        Lie{"SnapshotsOverlap",
            [](const Region& r) {
              r.at<uint64_t>(EntryField(4, 80)) = r.at<uint64_t>(EntryField(3, 80));
            },
            absl::StatusCode::kDataLoss, "overlaps the snapshot of map"},
        Lie{"RingSize", [](const Region& r) { r.at<uint64_t>(EntryField(7, 104)) = 4096; },
            absl::StatusCode::kDataLoss, "ring 'events' has 4096 data bytes, its spec says 8192"},
        Lie{"RingOutsideArea",
            [](const Region& r) { r.at<uint64_t>(EntryField(7, 96)) = 4096; },
            absl::StatusCode::kDataLoss, "lies outside the rings area"},
        Lie{"RingsOverlap",
            [](const Region& r) {
              r.at<uint64_t>(EntryField(8, 96)) = r.at<uint64_t>(EntryField(7, 96));
            },
            absl::StatusCode::kDataLoss, "map ring control says capacity 8192, the map says 4096"},
        Lie{"RingNotFormatted",
            [](const Region& r) { r.at<uint64_t>(r.at<uint64_t>(EntryField(8, 96))) = 0; },
            absl::StatusCode::kDataLoss, "ring 'more_events': map ring is not formatted"},
        Lie{"RingOnAnArray", [](const Region& r) { r.at<uint64_t>(EntryField(1, 104)) = 4096; },
            absl::StatusCode::kDataLoss, "is not a ring buffer but has a ring"},
        Lie{"TypeFieldCountLies",
            [](const Region& r) {
              // data's value type: "struct event" -> name(4+12), size(4), count(4)
              const uint64_t strings = r.at<uint64_t>(40);
              const uint64_t type = strings + r.at<uint64_t>(EntryField(1, 64));
              r.at<uint32_t>(type + 20) = 1000;
            },
            absl::StatusCode::kDataLoss, "claims 1000 fields"},
        Lie{"TypeFieldOutsideType",
            [](const Region& r) {
              const uint64_t strings = r.at<uint64_t>(40);
              const uint64_t type = strings + r.at<uint64_t>(EntryField(1, 64));
              r.at<uint32_t>(type + 16) = 4;  // the struct shrinks to 4 bytes
            },
            absl::StatusCode::kDataLoss, "lies outside the 4-byte type"}),
    [](const ::testing::TestParamInfo<Lie>& info) { return info.param.name; });

TEST(MapsRegion, TooSmallOrMisalignedRegions) {
  Region r = MakeRegion(EveryType());
  EXPECT_EQ(MapsRegion::Attach(r.base(), 100, false).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(MapsRegion::Attach(r.base() + 8, r.size - 8, false).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MapsRegion::Format(r.base(), r.size - 4096, EveryType()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MapsRegion, SeqlockReadersNeverSeeAHalfWrittenSnapshot) {
  const std::vector<MapSpec> specs = {Spec("big", CUPROBE_MAP_ARRAY, 4, 8, 1 << 15)};
  Region r = MakeRegion(specs);
  absl::StatusOr<MapsRegion> writer = MapsRegion::Attach(r.base(), r.size, true);
  absl::StatusOr<MapsRegion> reader = MapsRegion::Attach(r.base(), r.size, false);
  ASSERT_TRUE(writer.ok() && reader.ok());
  const uint64_t bytes = writer->map(0).snapshot_size;
  std::atomic<bool> stop{false};
  std::thread publisher([&] {
    for (uint64_t generation = 1; !stop.load(); ++generation) {
      uint8_t* dst = writer->BeginSnapshot(0);
      std::memset(dst, static_cast<int>(generation & 0xff), bytes);
      writer->EndSnapshot(0, generation);
      // A watcher publishes every few ms; back to back would starve readers
      // of a quiet window (they then report UNAVAILABLE, as designed).
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  uint64_t consistent = 0, last_generation = 0;
  for (int i = 0; i < 2000; ++i) {
    absl::StatusOr<SnapshotBytes> snap = reader->ReadSnapshot(0, 1000000);
    if (!snap.ok()) {
      ADD_FAILURE() << snap.status();
      break;
    }
    const uint8_t first = snap->bytes[0];
    if (!std::all_of(snap->bytes.begin(), snap->bytes.end(),
                     [first](uint8_t b) { return b == first; })) {
      ADD_FAILURE() << "a torn snapshot";
      break;
    }
    if (snap->generation > 0) {
      EXPECT_EQ(first, snap->generation & 0xff);
    }
    EXPECT_GE(snap->generation, last_generation);
    last_generation = snap->generation;
    ++consistent;
  }
  stop.store(true);
  publisher.join();
  EXPECT_EQ(consistent, 2000u);
}

TEST(MapsRegion, WriterThatDiedMidSnapshotDoesNotWedgeTheNextOne) {
  Region r = MakeRegion({Spec("a", CUPROBE_MAP_ARRAY, 4, 8, 4)});
  absl::StatusOr<MapsRegion> region = MapsRegion::Attach(r.base(), r.size, true);
  ASSERT_TRUE(region.ok());
  (void)region->BeginSnapshot(0);  // and never ends
  absl::Status torn = region->ReadSnapshot(0, 10).status();
  EXPECT_EQ(torn.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(torn.message(), ::testing::HasSubstr("'a': its snapshot is half-written")) << torn;
  std::memset(region->BeginSnapshot(0), 7, region->map(0).snapshot_size);
  region->EndSnapshot(0, 123);
  absl::StatusOr<SnapshotBytes> snap = region->ReadSnapshot(0);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->bytes[5], 7);
  EXPECT_EQ(snap->publish_ns, 123u);
}

// A host writer (`cuprobe maps --set`) killed while it held a map's write
// mailbox leaves its pid there: the next writer takes the mailbox over.
// A live holder is waited for, up to the writer's deadline.
TEST(MapsRegion, HostWriteMailboxOfADeadWriterIsTakenOver) {
  Region r = MakeRegion({Spec("config", CUPROBE_MAP_ARRAY, 4, 8, 4)});
  absl::StatusOr<MapsRegion> region = MapsRegion::Attach(r.base(), r.size, true);
  ASSERT_TRUE(region.ok()) << region.status();
  const auto& header = r.at<MapsRegionHeader>(0);
  auto& entry = r.at<MapEntry>(header.entries_offset);
  const std::vector<uint8_t> value = {42, 0, 0, 0, 0, 0, 0, 0};
  // A holder that is alive (the test's parent): the writer times out and
  // the mailbox stays the holder's.
  const auto parent = static_cast<uint32_t>(::getppid());
  entry.write_owner.store(parent);
  absl::StatusOr<uint64_t> busy = region->RequestWrite(0, 1, value, absl::Milliseconds(20));
  EXPECT_EQ(busy.status().code(), absl::StatusCode::kDeadlineExceeded) << busy.status();
  EXPECT_THAT(std::string(busy.status().message()), ::testing::HasSubstr("another writer"));
  EXPECT_EQ(entry.write_owner.load(), parent);
  // A holder that is gone: a child that exited, first as a zombie (not
  // reaped yet), then reaped.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  entry.write_owner.store(static_cast<uint32_t>(child));
  absl::StatusOr<uint64_t> first = region->RequestWrite(0, 2, value, absl::Seconds(5));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(region->PendingWrite(0).has_value());
  region->AcknowledgeWrite(0, *first, HostWriteResult::kApplied);  // as the hook would
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  entry.write_owner.store(static_cast<uint32_t>(child));
  absl::StatusOr<uint64_t> seq = region->RequestWrite(0, 1, value, absl::Seconds(5));
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(entry.write_owner.load(), 0u) << "given back after the write";
  std::optional<HostWrite> pending = region->PendingWrite(0);
  ASSERT_TRUE(pending.has_value());
  EXPECT_EQ(pending->key, 1u);
  EXPECT_EQ(pending->value, value);
  EXPECT_EQ(pending->seq, *seq);
}

TEST(TypeDescription, RoundTripsAndRejectsTruncation) {
  const TypeDescription t = EventType();
  const std::vector<uint8_t> bytes = SerializeTypeDescription(t);
  absl::StatusOr<TypeDescription> back = ParseTypeDescription(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->name, t.name);
  EXPECT_EQ(back->size, t.size);
  ASSERT_EQ(back->fields.size(), 3u);
  EXPECT_EQ(back->fields[2].type, "u64");
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(ParseTypeDescription(absl::MakeConstSpan(bytes.data(), n)).ok()) << n;
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_THAT(std::string(ParseTypeDescription(longer).status().message()),
              HasSubstr("1 trailing bytes"));
}

}  // namespace
}  // namespace cuprobe
