// File: tests/maps/record_ring_test.cc
//
// RecordRing in process memory: layout, byte-exact round trips across the
// wrap, exact drop accounting, uncommitted records, corrupt headers, and a
// multi-threaded stress (the cross-process tests are in segment_test.cc).
#include "maps/record_ring.h"

#include <atomic>
#include <cstring>
#include <ostream>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/segment_layout.h"
#include "tests/maps/ring_test_util.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::CheckedBody;
using ::cuprobe::testing::MakeBody;
using ::cuprobe::testing::ParseBody;
using ::testing::HasSubstr;

// The wire layout, pinned once more from the consumer's side.
static_assert(sizeof(SegmentHeader) == 1024);
static_assert(sizeof(RingControl) == 512);
static_assert(offsetof(SegmentHeader, session_state) == 72);
static_assert(offsetof(SegmentHeader, hook_reason) == 224);
static_assert(offsetof(RingControl, head) % 64 == 0 && offsetof(RingControl, tail) % 64 == 0);
static_assert(offsetof(RingControl, tail) - offsetof(RingControl, head) >= 64);
static_assert(offsetof(RingControl, written) - offsetof(RingControl, tail) >= 64);
static_assert(offsetof(RingControl, dropped) - offsetof(RingControl, written) >= 64);
static_assert(RecordRing::RecordSize(0) == 8);
static_assert(RecordRing::RecordSize(1) == 16);
static_assert(RecordRing::RecordSize(8) == 16);
static_assert(RecordRing::RecordSize(5, 4) == 24);

TEST(SegmentLayout, MagicsSpellTheirNamesInMemory) {
  char magic[8];
  std::memcpy(magic, &kSegmentMagic, 8);
  EXPECT_EQ(std::string(magic, 8), "CUPROBES");
  std::memcpy(magic, &kRingMagic, 8);
  EXPECT_EQ(std::string(magic, 8), "CPRRING1");
  EXPECT_EQ(kSegmentLayoutVersion, 5u);  // 5: ring records committed in header word 1
  EXPECT_EQ(SessionStateName(SessionState::kHookDisabled), "hook-disabled");
  EXPECT_EQ(SessionStateName(static_cast<SessionState>(99)), "unknown");
}

struct Received {
  uint16_t type;
  std::vector<uint8_t> body;
};

std::vector<Received> DrainAll(RecordRing& ring, size_t max = SIZE_MAX) {
  std::vector<Received> out;
  ring.Drain(
      [&](uint16_t type, absl::Span<const uint8_t> body) {
        out.push_back({type, std::vector<uint8_t>(body.begin(), body.end())});
      },
      max);
  return out;
}

RingControl* Control(HeapRecordRing& heap) { return reinterpret_cast<RingControl*>(heap.memory()); }
uint8_t* Data(HeapRecordRing& heap) { return heap.memory() + kRingControlSize; }

TEST(RecordRing, AttachValidatesCapacityAndFormat) {
  alignas(64) static uint8_t control[kRingControlSize];
  alignas(64) static uint8_t data[4096];
  EXPECT_THAT(RecordRing::Attach(control, data, 1000 + 4).status().message(),
              HasSubstr("not a multiple of 8"));
  EXPECT_THAT(RecordRing::Attach(control, data, 128).status().message(), HasSubstr("outside"));
  std::memset(control, 0, sizeof(control));
  EXPECT_THAT(RecordRing::Attach(control, data, 4096).status().message(),
              HasSubstr("not formatted"));
  RecordRing::Format(control, data, 4096);
  EXPECT_THAT(RecordRing::Attach(control, data, 2048).status().message(),
              HasSubstr("says capacity 4096"));
  EXPECT_THAT(RecordRing::Attach(control, data + 4, 4096).status().message(),
              HasSubstr("8-aligned"));
  ASSERT_TRUE(RecordRing::Attach(control, data, 4096).ok());
  reinterpret_cast<RingControl*>(control)->tail.store(64);  // tail ahead of head
  EXPECT_THAT(RecordRing::Attach(control, data, 4096).status().message(),
              HasSubstr("cursors are inconsistent"));
  EXPECT_FALSE(HeapRecordRing::Create(100).ok());
}

TEST(RecordRing, RoundTripIsByteExactAcrossTheWrap) {
  constexpr uint64_t kCapacity = 1024;
  auto heap = HeapRecordRing::Create(kCapacity);
  ASSERT_TRUE(heap.ok()) << heap.status();
  RecordRing& ring = heap->ring();

  uint64_t pos = 0;  // our own model of the ring position
  int split_headers_impossible = 0, split_bodies = 0;
  for (uint32_t n = 0; n < 1000; ++n) {
    const uint32_t body_size = (n * 53) % 301;  // 0 .. 300, every residue mod 8
    const uint32_t extra_size = n % 3 == 0 ? (n % 13) : 0;
    std::vector<uint8_t> body(body_size), extra(extra_size);
    for (uint32_t i = 0; i < body_size; ++i) body[i] = static_cast<uint8_t>(n + i * 7 + 1);
    for (uint32_t i = 0; i < extra_size; ++i) extra[i] = static_cast<uint8_t>(0xA0 + i);
    const uint16_t type = static_cast<uint16_t>(n % 6 + 1);
    const uint64_t size = RecordRing::RecordSize(body_size, extra_size);
    ASSERT_TRUE(ring.Write(type, body.data(), body_size, extra_size ? extra.data() : nullptr,
                           extra_size))
        << n;
    if (pos % kCapacity + 8 > kCapacity) ++split_headers_impossible;
    if (pos % kCapacity + size > kCapacity && pos % kCapacity + 8 < kCapacity) ++split_bodies;
    pos += size;

    std::vector<Received> got = DrainAll(ring);
    ASSERT_EQ(got.size(), 1u) << n;
    EXPECT_EQ(got[0].type, type);
    ASSERT_EQ(got[0].body.size(), size - 8) << n;
    std::vector<uint8_t> expect = body;
    expect.insert(expect.end(), extra.begin(), extra.end());
    expect.resize(size - 8, 0);  // zero padding
    ASSERT_EQ(got[0].body, expect) << "record " << n << " body " << body_size;
  }
  EXPECT_EQ(split_headers_impossible, 0);
  EXPECT_GT(split_bodies, 50);  // the split copy path really ran
  EXPECT_EQ(ring.written(), 1000u);
  EXPECT_EQ(ring.dropped(), 0u);
  EXPECT_EQ(ring.used_bytes(), 0u);
  EXPECT_TRUE(ring.consumer_status().ok());
  // Everything consumed was zeroed: no stale header can read as a commit.
  for (uint64_t i = 0; i < kCapacity; ++i) ASSERT_EQ(Data(*heap)[i], 0) << i;
}

TEST(RecordRing, BatchesDrainInOrderAndMaxRecordsIsHonored) {
  auto heap = HeapRecordRing::Create(512);
  ASSERT_TRUE(heap.ok());
  RecordRing& ring = heap->ring();
  for (uint32_t i = 0; i < 10; ++i) ASSERT_TRUE(ring.Write(1, &i, sizeof(i)));
  std::vector<Received> first = DrainAll(ring, 4);
  ASSERT_EQ(first.size(), 4u);
  std::vector<Received> rest = DrainAll(ring);
  ASSERT_EQ(rest.size(), 6u);
  for (uint32_t i = 0; i < 10; ++i) {
    const Received& r = i < 4 ? first[i] : rest[i - 4];
    uint32_t v;
    std::memcpy(&v, r.body.data(), 4);
    EXPECT_EQ(v, i);
  }
  EXPECT_TRUE(DrainAll(ring).empty());
}

TEST(RecordRing, FullRingDropsAndCountsExactlyThenRecovers) {
  auto heap = HeapRecordRing::Create(256);
  ASSERT_TRUE(heap.ok());
  RecordRing& ring = heap->ring();
  uint8_t body[300] = {};
  // 24-byte bodies make 32-byte records: exactly 8 fit.
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(ring.Write(2, body, 24)) << i;
  EXPECT_EQ(ring.used_bytes(), 256u);
  EXPECT_FALSE(ring.Write(2, body, 24));
  EXPECT_FALSE(ring.Write(2, body, 1));  // even the smallest record
  EXPECT_EQ(ring.dropped(), 2u);
  EXPECT_EQ(ring.dropped_bytes(), 32u + 16u);
  // Larger than the whole ring: dropped even when empty later.
  EXPECT_FALSE(ring.Write(2, body, 300));
  EXPECT_EQ(ring.dropped(), 3u);
  EXPECT_EQ(ring.dropped_bytes(), 32u + 16u + 312u);
  EXPECT_EQ(ring.written(), 8u);

  EXPECT_EQ(DrainAll(ring, 1).size(), 1u);  // frees exactly one slot
  EXPECT_TRUE(ring.Write(2, body, 24));
  EXPECT_FALSE(ring.Write(2, body, 24));
  EXPECT_EQ(DrainAll(ring).size(), 8u);
  EXPECT_EQ(ring.used_bytes(), 0u);
  // A record the size of the whole ring fits an empty ring.
  EXPECT_TRUE(ring.Write(2, body, 248));
  std::vector<Received> big = DrainAll(ring);
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0].body.size(), 248u);
  EXPECT_EQ(ring.written(), 10u);
  EXPECT_EQ(ring.dropped(), 4u);
}

TEST(RecordRing, DrainStopsAtAnUncommittedRecord) {
  auto heap = HeapRecordRing::Create(512);
  ASSERT_TRUE(heap.ok());
  RecordRing& ring = heap->ring();
  uint64_t v = 1;
  ASSERT_TRUE(ring.Write(1, &v, 8));  // [0, 16)
  // A producer that reserved [16, 32) and has not committed yet.
  Control(*heap)->head.fetch_add(16);
  v = 3;
  ASSERT_TRUE(ring.Write(3, &v, 8));  // [32, 48), committed
  std::vector<Received> got = DrainAll(ring);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].type, 1);
  EXPECT_TRUE(DrainAll(ring).empty());  // still waiting, not an error
  EXPECT_TRUE(ring.consumer_status().ok());
  // The slow producer commits: its body, then the size word.
  v = 2;
  std::memcpy(Data(*heap) + 16 + 4, "\x02\x00\x00\x00", 4);
  std::memcpy(Data(*heap) + 16 + 8, &v, 8);
  std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(Data(*heap) + 16)).store(16);
  got = DrainAll(ring);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].type, 2);
  EXPECT_EQ(got[1].type, 3);
}

struct Corruption {
  const char* name;
  uint32_t size_word;
};
void PrintTo(const Corruption& c, std::ostream* os) { *os << c.name << " " << c.size_word; }

class CorruptHeader : public ::testing::TestWithParam<Corruption> {};

TEST_P(CorruptHeader, DrainStopsWithDataLossAndReadsNothingOutside) {
  constexpr uint64_t kCapacity = 512;
  auto heap = HeapRecordRing::Create(kCapacity);
  ASSERT_TRUE(heap.ok());
  RecordRing& ring = heap->ring();
  uint8_t body[40] = {};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ring.Write(4, body, sizeof(body)));  // 48 each
  // The second record's size word, as another process could leave it.
  std::memcpy(Data(*heap) + 48, &GetParam().size_word, 4);
  int calls = 0;
  EXPECT_EQ(ring.Drain([&](uint16_t, absl::Span<const uint8_t>) { ++calls; }), 1u);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(ring.consumer_status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(ring.consumer_status().message(), HasSubstr("position 48"));
  // Sticky: the ring is not read again.
  EXPECT_EQ(ring.Drain([&](uint16_t, absl::Span<const uint8_t>) { ++calls; }), 0u);
  EXPECT_EQ(calls, 1);
}

INSTANTIATE_TEST_SUITE_P(
    RecordRing, CorruptHeader,
    ::testing::Values(Corruption{"NotMultipleOf8", 12}, Corruption{"SmallerThanHeader", 4},
                      Corruption{"Huge", 0xFFFFFFF8u}, Corruption{"LargerThanCapacity", 520},
                      Corruption{"BeyondHead", 512}, Corruption{"JustBeyondHead", 104}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(RecordRing, HostileButConsistentCursorsStayInBounds) {
  // A segment peer sets head a full capacity ahead and plants a size word of
  // the whole capacity 16 bytes before the end: the body wraps; Drain must read
  // exactly capacity - 8 bytes, all inside the data area (ASan checks).
  constexpr uint64_t kCapacity = 256;
  auto heap = HeapRecordRing::Create(kCapacity);
  ASSERT_TRUE(heap.ok());
  RingControl* c = Control(*heap);
  c->tail.store(kCapacity - 16);
  c->head.store(2 * kCapacity - 16);
  uint32_t size = kCapacity;
  std::memcpy(Data(*heap) + kCapacity - 16, &size, 4);
  std::vector<Received> got = DrainAll(heap->ring());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].body.size(), kCapacity - 8);
  EXPECT_TRUE(heap->ring().consumer_status().ok());

  // tail beyond head: producers drop instead of writing, the consumer stops.
  c->tail.store(1024);
  c->head.store(512);
  uint64_t v = 0;
  EXPECT_FALSE(heap->ring().Write(1, &v, 8));
  std::memcpy(Data(*heap), &size, 4);  // a "commit" at tail % capacity == 0
  EXPECT_EQ(heap->ring().Drain([](uint16_t, absl::Span<const uint8_t>) {}), 0u);
  EXPECT_EQ(heap->ring().consumer_status().code(), absl::StatusCode::kDataLoss);
}

TEST(RecordRing, MisalignedSharedCursorsAreRejectedNotUsed) {
  auto heap = HeapRecordRing::Create(256);
  ASSERT_TRUE(heap.ok());
  Control(*heap)->head.store(4);
  uint64_t v = 0;
  EXPECT_FALSE(heap->ring().Write(1, &v, 8));
  EXPECT_EQ(heap->ring().dropped(), 1u);
  Control(*heap)->head.store(8);
  Control(*heap)->tail.store(4);
  EXPECT_EQ(heap->ring().Drain([](uint16_t, absl::Span<const uint8_t>) {}), 0u);
  EXPECT_THAT(heap->ring().consumer_status().message(), HasSubstr("misaligned"));
}

TEST(RecordRing, ReadOnlyViewCannotWriteOrDrain) {
  auto heap = HeapRecordRing::Create(256);
  ASSERT_TRUE(heap.ok());
  uint64_t v = 7;
  ASSERT_TRUE(heap->ring().Write(1, &v, 8));
  auto view = RecordRing::Attach(heap->memory(), Data(*heap), 256, /*writable=*/false);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->written(), 1u);
  EXPECT_FALSE(view->Write(1, &v, 8));
  EXPECT_EQ(view->Drain([](uint16_t, absl::Span<const uint8_t>) {}), 0u);
  EXPECT_EQ(view->consumer_status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DrainAll(heap->ring()).size(), 1u);  // the record is still there
}

TEST(RecordRing, MovedFromRingIsInert) {
  auto heap = HeapRecordRing::Create(256);
  ASSERT_TRUE(heap.ok());
  uint64_t v = 9;
  ASSERT_TRUE(heap->ring().Write(1, &v, 8));
  RecordRing taken = std::move(heap->ring());
  EXPECT_FALSE(heap->ring().Write(1, &v, 8));
  EXPECT_EQ(heap->ring().written(), 0u);
  EXPECT_EQ(heap->ring().Drain([](uint16_t, absl::Span<const uint8_t>) {}), 0u);
  EXPECT_EQ(taken.written(), 1u);
  EXPECT_EQ(DrainAll(taken).size(), 1u);
}

struct StressParam {
  uint64_t capacity;
  uint32_t records_per_producer;
};
void PrintTo(const StressParam& p, std::ostream* os) {
  *os << p.capacity << " bytes, " << p.records_per_producer << " records per producer";
}

class RingStress : public ::testing::TestWithParam<StressParam> {};

// 8 producer threads, one concurrent consumer: every committed record
// arrives exactly once, in per-producer order, untorn; written + dropped
// equals attempted, and each producer's own view of its successes matches.
TEST_P(RingStress, EveryRecordOnceInOrderUntorn) {
  constexpr int kProducers = 8;
  const uint32_t n = GetParam().records_per_producer;
  auto heap = HeapRecordRing::Create(GetParam().capacity);
  ASSERT_TRUE(heap.ok());
  RecordRing& ring = heap->ring();

  std::vector<std::vector<uint8_t>> succeeded(kProducers, std::vector<uint8_t>(n, 0));
  std::vector<std::vector<uint8_t>> received(kProducers, std::vector<uint8_t>(n, 0));
  std::vector<int64_t> last_seq(kProducers, -1);
  std::atomic<int> done{0};
  std::atomic<bool> go{false};
  uint64_t bad = 0, out_of_order = 0, duplicates = 0, total = 0;
  std::string first_error;

  std::thread consumer([&] {
    auto on_record = [&](uint16_t type, absl::Span<const uint8_t> body) {
      ++total;
      CheckedBody b;
      if (type != cuprobe::testing::kStressType || !ParseBody(body, &b) || b.producer >= kProducers ||
          b.seq >= n) {
        if (first_error.empty()) first_error = b.error.empty() ? "bad type/ids" : b.error;
        ++bad;
        return;
      }
      if (received[b.producer][b.seq]++) ++duplicates;
      if (static_cast<int64_t>(b.seq) <= last_seq[b.producer]) ++out_of_order;
      last_seq[b.producer] = b.seq;
    };
    for (;;) {
      const bool finished = done.load(std::memory_order_acquire) == kProducers;
      if (ring.Drain(on_record) == 0) {
        if (finished) break;  // all producers committed before `done`
        std::this_thread::yield();
      }
    }
  });
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      uint32_t drops = 0;
      for (uint32_t s = 0; s < n; ++s) {
        std::vector<uint8_t> body = MakeBody(p, s, cuprobe::testing::BodyLenFor(s));
        if (ring.Write(cuprobe::testing::kStressType, body.data(),
                       static_cast<uint32_t>(body.size()))) {
          succeeded[p][s] = 1;
        } else if (++drops % 64 == 0) {
          // Full: let the consumer in on small machines, but rarely: under
          // load each yield can cost a whole timeslice.
          std::this_thread::yield();
        }
      }
      done.fetch_add(1, std::memory_order_release);
    });
  }
  go.store(true, std::memory_order_release);
  for (auto& t : producers) t.join();
  consumer.join();

  EXPECT_EQ(bad, 0u) << first_error;
  EXPECT_EQ(duplicates, 0u);
  EXPECT_EQ(out_of_order, 0u);
  uint64_t ok = 0;
  for (int p = 0; p < kProducers; ++p) {
    for (uint32_t s = 0; s < n; ++s) ok += succeeded[p][s];
    EXPECT_EQ(received[p], succeeded[p]) << "producer " << p;
  }
  EXPECT_EQ(total, ok);
  EXPECT_EQ(ring.written(), ok);
  EXPECT_EQ(ring.written() + ring.dropped(), uint64_t{kProducers} * n);
  EXPECT_EQ(ring.used_bytes(), 0u);
  EXPECT_TRUE(ring.consumer_status().ok());
  EXPECT_GT(ok, 0u);
  RecordProperty("dropped", static_cast<int>(ring.dropped()));
}

INSTANTIATE_TEST_SUITE_P(RecordRing, RingStress,
                         ::testing::Values(StressParam{1 << 16, 20000},   // mostly fits
                                           StressParam{1024, 20000}),     // constant wrap + drops
                         [](const auto& info) {
                           return "Capacity" + std::to_string(info.param.capacity);
                         });

}  // namespace
}  // namespace cuprobe
