// File: tests/maps/map_algorithms_test.cc
//
// The ring buffer (RINGBUF) through the host compilation of the algorithms
// the GPU helper library runs (maps/map_algorithms.h): exact bytes, wrap
// and pad, reserve/submit/discard, inline and group reservations, exact
// drops, corrupt headers, and concurrent producers with a concurrent
// consumer (delivered + dropped == produced, no torn record). The other map
// types are in map_algorithms_types_test.cc and map_algorithms_hash_test.cc.
//
// Part of map_algorithms_test (tests/maps/CMakeLists.txt).

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/map_algorithms.h"
#include "probe/map_desc.h"
#include "probe/map_layout.h"
#include "maps/map_ring.h"
#include "tests/maps/map_test_util.h"
#include "tests/maps/ring_test_util.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::HostMap;
using ::cuprobe::testing::Spec;

namespace algo = ::cuprobe::mapalgo;

std::vector<std::vector<uint8_t>> ConsumeAll(MapRing& ring) {
  std::vector<std::vector<uint8_t>> out;
  ring.Consume([&](absl::Span<const uint8_t> body) { out.emplace_back(body.begin(), body.end()); });
  EXPECT_TRUE(ring.status().ok()) << ring.status();
  return out;
}

TEST(RingMap, OutputThenConsumeRoundTripsExactBytes) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  std::vector<std::vector<uint8_t>> sent;
  for (uint32_t size : {0u, 1u, 7u, 8u, 9u, 24u, 100u}) {
    std::vector<uint8_t> body(size);
    for (uint32_t i = 0; i < size; ++i) body[i] = static_cast<uint8_t>(size + i);
    ASSERT_EQ(algo::RingOutput(m.desc(), body.data(), size, 0), 0);
    sent.push_back(body);
  }
  EXPECT_EQ(ConsumeAll(ring), sent);
  EXPECT_EQ(ring.Stats().delivered, sent.size());
  EXPECT_EQ(m.control()->ring_reserved, sent.size());
  EXPECT_EQ(ring.Stats().tail, m.control()->ring_head);
  EXPECT_EQ(algo::RingOutput(m.desc(), nullptr, 8, 0), algo::kEINVAL);
  EXPECT_EQ(algo::RingOutput(m.desc(), sent[1].data(), 1, 4), algo::kEINVAL) << "unknown flag";
}

TEST(RingMap, ExactDropsWhenFullAndRoomAgainAfterConsuming) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  const uint8_t body[24] = {1};
  int accepted = 0;
  for (int i = 0; i < 200; ++i) accepted += algo::RingOutput(m.desc(), body, 24, 0) == 0;
  constexpr int kFit = (4096 - 4096 / 8) / 32;  // the slack stays free
  EXPECT_EQ(accepted, kFit);
  EXPECT_EQ(m.control()->ring_dropped, 200u - kFit);
  EXPECT_EQ(m.control()->ring_dropped_bytes, (200u - kFit) * 32);
  EXPECT_EQ(ConsumeAll(ring).size(), uint64_t{kFit});
  // The cached tail is stale: the producer reads the consumer's real one.
  EXPECT_EQ(algo::RingOutput(m.desc(), body, 24, 0), 0);
  EXPECT_EQ(m.control()->ring_tail_cache, uint64_t{kFit} * 32);
}

TEST(RingMap, AReservationLeavesASlackOfAnEighthFree) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  std::vector<uint8_t> body(504, 0x11);  // 512 bytes per record
  for (int i = 0; i < 7; ++i) ASSERT_EQ(algo::RingOutput(m.desc(), body.data(), 504, 0), 0) << i;
  EXPECT_EQ(algo::RingOutput(m.desc(), body.data(), 504, 0), algo::kEAGAIN)
      << "3584 bytes used: the last 512 stay free";
  EXPECT_EQ(m.control()->ring_dropped, 1u);
  EXPECT_EQ(m.control()->ring_dropped_bytes, 512u);
  ASSERT_EQ(ring.Consume([](absl::Span<const uint8_t>) {}, 1), 1u);
  EXPECT_EQ(algo::RingOutput(m.desc(), body.data(), 504, 0), 0) << "room again after consuming";
  EXPECT_EQ(algo::RingOutput(m.desc(), body.data(), 4000, 0), algo::kEAGAIN)
      << "more than capacity - slack can never fit";
  EXPECT_EQ(ConsumeAll(ring).size(), 7u);
  ASSERT_TRUE(ring.status().ok()) << ring.status();
}

TEST(RingMap, BytesReservedAcrossTheEndBecomeOneWrappingPad) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  std::vector<uint8_t> small(1192, 0xab);  // 1200 bytes per record
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(algo::RingOutput(m.desc(), small.data(), small.size(), 0), 0) << i;
    ASSERT_EQ(ConsumeAll(ring).size(), 1u);
  }
  ASSERT_EQ(m.control()->ring_head, 3600u);  // tail 3600 too; 496 bytes before the end
  // The next 1008 bytes at 3600 cross the end of the data.
  std::vector<uint8_t> big(1000, 0xcd);
  ASSERT_EQ(algo::RingOutput(m.desc(), big.data(), 1000, 0), 0);
  EXPECT_EQ(m.control()->ring_head, 3600u + 2 * 1008u) << "a wrapping 1008-byte pad, then the record";
  auto* data = static_cast<uint8_t*>(m.ring_block()) + CUPROBE_RING_HOST_SIZE;
  uint32_t pad = 0;
  std::memcpy(&pad, data + 3600, 4);
  EXPECT_EQ(pad, CUPROBE_RING_COMMIT | CUPROBE_RING_PAD | 1000u);
  const auto got = ConsumeAll(ring);
  ASSERT_TRUE(ring.status().ok()) << ring.status();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], big);
  EXPECT_EQ(ring.Stats().tail, 3600u + 2 * 1008u);
  EXPECT_EQ(m.control()->ring_reserved, 4u) << "the pad is not a record";
  // The consumer zeroed what it read.
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(data[i], 0) << "byte " << i;
}

TEST(RingMap, ReserveSubmitDiscard) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  const uint64_t a = algo::RingReserve(m.desc(), 16, 0);
  const uint64_t b = algo::RingReserve(m.desc(), 16, 0);
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, 0u);
  EXPECT_EQ(algo::RingReserve(m.desc(), 16, 1), 0u) << "reserve takes no flags";
  std::memset(reinterpret_cast<void*>(b), 0xbb, 16);
  algo::RingFinishRecord(b, false);
  EXPECT_TRUE(ConsumeAll(ring).empty()) << "b waits behind the uncommitted a";
  std::memset(reinterpret_cast<void*>(a), 0xaa, 16);
  algo::RingFinishRecord(a, /*discard=*/true);
  const auto got = ConsumeAll(ring);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], std::vector<uint8_t>(16, 0xbb));
  EXPECT_EQ(ring.Stats().discarded, 1u);
  EXPECT_EQ(ring.Stats().delivered, 1u);
}

TEST(RingMap, ReservedRecordsCommitThroughHeaderWordOne) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  auto* data = static_cast<uint8_t*>(m.ring_block()) + CUPROBE_RING_HOST_SIZE;
  const uint64_t a = algo::RingReserve(m.desc(), 20, 0);
  ASSERT_EQ(a, reinterpret_cast<uintptr_t>(data) + CUPROBE_RING_HEADER_SIZE);
  uint32_t words[2] = {};
  std::memcpy(words, data, 8);
  EXPECT_EQ(words[0], 20u) << "the length alone, not committed";
  EXPECT_EQ(words[1], 0u);
  std::memset(reinterpret_cast<void*>(a), 0x5a, 20);
  algo::RingFinishRecord(a, false);
  std::memcpy(words, data, 8);
  EXPECT_EQ(words[0], 20u) << "submit leaves word 0 as it was";
  EXPECT_EQ(words[1], CUPROBE_RING_COMMIT);
  // A zero-length record commits the same way.
  const uint64_t z = algo::RingReserve(m.desc(), 0, 0);
  ASSERT_NE(z, 0u);
  algo::RingFinishRecord(z, false);
  const auto got = ConsumeAll(ring);
  ASSERT_TRUE(ring.status().ok()) << ring.status();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], std::vector<uint8_t>(20, 0x5a));
  EXPECT_TRUE(got[1].empty());
  EXPECT_EQ(ring.Stats().tail, 32u + 8u);
  for (size_t i = 0; i < 64; ++i) ASSERT_EQ(data[i], 0) << "byte " << i << " zeroed for reuse";
}

TEST(RingMap, StrayBitsInAReservedRecordsHeaderStopTheConsumer) {
  for (const auto& [w0, w1] : {std::pair<uint32_t, uint32_t>{16, CUPROBE_RING_COMMIT | 1},
                               {16 | CUPROBE_RING_PAD, CUPROBE_RING_COMMIT},
                               {16 | CUPROBE_RING_DISCARD, CUPROBE_RING_COMMIT}}) {
    HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
    MapRing ring = m.Ring();
    auto* data = static_cast<uint8_t*>(m.ring_block()) + CUPROBE_RING_HOST_SIZE;
    const uint32_t words[2] = {w0, w1};
    std::memcpy(data, words, 8);
    EXPECT_EQ(ring.Consume([](absl::Span<const uint8_t>) { FAIL(); }), 0u);
    EXPECT_EQ(ring.status().code(), absl::StatusCode::kDataLoss) << w0 << " " << w1;
    EXPECT_THAT(std::string(ring.status().message()), ::testing::HasSubstr("stray bits"));
  }
  {
    // Committed in word 0 (as bpf_ringbuf_output commits): word 1 must be 0.
    HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
    MapRing ring = m.Ring();
    auto* data = static_cast<uint8_t*>(m.ring_block()) + CUPROBE_RING_HOST_SIZE;
    const uint32_t words[2] = {CUPROBE_RING_COMMIT | 16, 7};
    std::memcpy(data, words, 8);
    EXPECT_EQ(ring.Consume([](absl::Span<const uint8_t>) { FAIL(); }), 0u);
    EXPECT_EQ(ring.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(ring.status().message()),
                ::testing::HasSubstr("non-zero word 1 (0x00000007)"));
  }
  // Word 1 without COMMIT is a record not yet submitted: the consumer waits.
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  auto* data = static_cast<uint8_t*>(m.ring_block()) + CUPROBE_RING_HOST_SIZE;
  const uint32_t words[2] = {16, CUPROBE_RING_DISCARD};
  std::memcpy(data, words, 8);
  EXPECT_EQ(ring.Consume([](absl::Span<const uint8_t>) { FAIL(); }), 0u);
  EXPECT_TRUE(ring.status().ok()) << ring.status();
}

// The compiler's inline reservation for a lone lane (abi.h 9.) as the
// generated code makes it: cursors, one fetch-and-add, and RingReserveAt for
// whatever does not simply fit (on the host a refresh of the cached tail is
// always due over half full, so the helper serves that case). `others`:
// bytes other producers reserve between this one's check and its
// fetch-and-add.
uint64_t InlineReserve(HostMap& m, uint64_t size, uint64_t others = 0) {
  cuprobe_map_control* c = m.control();
  const uint64_t capacity = m.desc()->slot_mask + 1;
  const uint64_t record = algo::RingRecordSize(size);
  const uint64_t tail = c->ring_tail_cache;
  const uint64_t head = c->ring_head;
  if (record * 8 > capacity * 3 || head - tail > capacity / 2) {
    return algo::RingReserve(m.desc(), size, 0);
  }
  c->ring_head += others;
  const uint64_t p = __atomic_fetch_add(&c->ring_head, record, __ATOMIC_RELAXED);
  if (p + record - tail <= capacity && (p & (capacity - 1)) + record <= capacity) {
    ++c->ring_reserved;
    return algo::RingBeginRecord(m.desc(), p, static_cast<uint32_t>(size));
  }
  return algo::RingReserveAt(m.desc(), size, p, tail);
}

TEST(RingMap, AnInlineReservationAtTheEndPadsAndTakesTheStart) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  auto* data = static_cast<uint8_t*>(m.ring_block()) + CUPROBE_RING_HOST_SIZE;
  // 125 records of 32 bytes, consumed: head = tail = 4000.
  const std::vector<uint8_t> small(24, 0x11);
  for (int i = 0; i < 125; ++i) {
    ASSERT_EQ(algo::RingOutput(m.desc(), small.data(), 24, 0), 0);
    if (i == 99) {
      ASSERT_EQ(ConsumeAll(ring).size(), 100u);
    }
  }
  ASSERT_EQ(ConsumeAll(ring).size(), 25u);
  m.control()->ring_tail_cache = ring.Stats().tail;
  ASSERT_EQ(m.control()->ring_head, 4000u);
  // 200 bytes from 4000 cross the end: they become a pad, and the record
  // takes the next 200, at 4200 (offset 104).
  const uint64_t body = InlineReserve(m, 192);
  ASSERT_NE(body, 0u);
  EXPECT_EQ(body, reinterpret_cast<uintptr_t>(data) + 104 + CUPROBE_RING_HEADER_SIZE);
  uint32_t pad = 0;
  std::memcpy(&pad, data + 4000, 4);
  EXPECT_EQ(pad, CUPROBE_RING_COMMIT | CUPROBE_RING_PAD | 192u) << "the whole 200 bytes, wrapped";
  EXPECT_EQ(m.control()->ring_head, 4096u + 104 + 200);
  std::memset(reinterpret_cast<void*>(body), 0x7e, 192);
  algo::RingFinishRecord(body, false);
  const auto got = ConsumeAll(ring);
  ASSERT_TRUE(ring.status().ok()) << ring.status();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], std::vector<uint8_t>(192, 0x7e));
  EXPECT_EQ(m.control()->ring_reserved, 126u);
  EXPECT_EQ(m.control()->ring_dropped, 0u);
}

TEST(RingMap, AnInlineReservationThatOvershootsGivesItsBytesBackAndCountsADrop) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  // 1800 bytes reserved and never committed (the consumer cannot pass
  // them): the cached tail says under half full, but by the fetch-and-add
  // other producers hold 1000 bytes more, and 1408 do not fit after them.
  const uint64_t held = algo::RingReserve(m.desc(), 1792, 0);
  ASSERT_NE(held, 0u);
  ASSERT_EQ(m.control()->ring_head, 1800u);
  EXPECT_EQ(InlineReserve(m, 1400, /*others=*/1000), 0u);
  EXPECT_EQ(m.control()->ring_head, 2800u) << "the bytes went back";
  EXPECT_EQ(m.control()->ring_dropped, 1u);
  EXPECT_EQ(m.control()->ring_dropped_bytes, 1408u);
  EXPECT_EQ(m.control()->ring_reserved, 1u);
  // What fits still fits, inline.
  const uint64_t next = InlineReserve(m, 24);
  ASSERT_NE(next, 0u);
  EXPECT_EQ(next, held + 2800);
  EXPECT_EQ(m.control()->ring_reserved, 2u);
}

TEST(RingMap, GroupReservationIsAllOrNothing) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  uint64_t first = 0;
  // 3584 bytes usable: two groups of 32 records of 48 bytes, not a third.
  EXPECT_EQ(algo::RingReserveGroup(m.desc(), 48, 32, &first), 32u);
  EXPECT_EQ(first, 0u);
  EXPECT_EQ(algo::RingReserveGroup(m.desc(), 48, 32, &first), 32u);
  EXPECT_EQ(first, 32u * 48);
  EXPECT_EQ(algo::RingReserveGroup(m.desc(), 48, 32, &first), 0u);
  EXPECT_EQ(algo::RingReserveGroup(m.desc(), 48, 1, &first), 1u) << "a smaller group still fits";
  EXPECT_EQ(m.control()->ring_reserved, 65u);
  EXPECT_EQ(m.control()->ring_dropped, 32u);
  EXPECT_EQ(m.control()->ring_dropped_bytes, 32u * 48);
  EXPECT_EQ(algo::RingReserveGroup(m.desc(), 8192, 1, &first), 0u) << "larger than the ring";
}

TEST(RingMap, CorruptHeadersStopTheConsumer) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring = m.Ring();
  auto* data = static_cast<uint8_t*>(m.ring_block()) + CUPROBE_RING_HOST_SIZE;
  const uint32_t runs_past = CUPROBE_RING_COMMIT | 5000;
  std::memcpy(data, &runs_past, 4);
  EXPECT_EQ(ring.Consume([](absl::Span<const uint8_t>) { FAIL(); }), 0u);
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(ring.status().message()), ::testing::HasSubstr("past the end"));

  HostMap m2 = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  MapRing ring2 = m2.Ring();
  auto* data2 = static_cast<uint8_t*>(m2.ring_block()) + CUPROBE_RING_HOST_SIZE;
  const uint32_t short_pad = CUPROBE_RING_COMMIT | CUPROBE_RING_PAD | 8;
  std::memcpy(data2, &short_pad, 4);
  EXPECT_EQ(ring2.Consume([](absl::Span<const uint8_t>) { FAIL(); }), 0u);
  EXPECT_THAT(std::string(ring2.status().message()), ::testing::HasSubstr("pad record"));
}

TEST(RingMap, AttachRejectsBadBlocks) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 4096));
  EXPECT_EQ(MapRing::Attach(m.ring_block(), 8192, true).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(MapRing::Attach(m.ring_block(), 4095, true).status().code(),
            absl::StatusCode::kDataLoss);
  auto* host = static_cast<cuprobe_ring_host*>(m.ring_block());
  host->tail = 3;
  EXPECT_EQ(MapRing::Attach(m.ring_block(), 4096, true).status().code(),
            absl::StatusCode::kDataLoss);
  host->tail = 0;
  host->magic = 0;
  EXPECT_EQ(MapRing::Attach(m.ring_block(), 4096, true).status().code(),
            absl::StatusCode::kDataLoss);
  MapRing::Format(m.ring_block(), 4096);
  absl::StatusOr<MapRing> read_only = MapRing::Attach(m.ring_block(), 4096, false);
  ASSERT_TRUE(read_only.ok());
  EXPECT_EQ(read_only->Consume([](absl::Span<const uint8_t>) {}), 0u);
  EXPECT_EQ(read_only->status().code(), absl::StatusCode::kFailedPrecondition);
}

// Record body: producer, sequence, length, then bytes derived from them.
std::vector<uint8_t> StressBody(uint32_t producer, uint32_t seq) {
  const uint32_t length = 12 + (seq * 37 + producer * 11) % 120;
  std::vector<uint8_t> body(length);
  std::memcpy(body.data(), &producer, 4);
  std::memcpy(body.data() + 4, &seq, 4);
  std::memcpy(body.data() + 8, &length, 4);
  for (uint32_t i = 12; i < length; ++i) body[i] = static_cast<uint8_t>(producer * 31 + seq + i);
  return body;
}

TEST(RingMap, ConcurrentProducersAndConsumerLoseNothingUncounted) {
  HostMap m = HostMap::Make(Spec("r", CUPROBE_MAP_RINGBUF, 0, 0, 16384));
  MapRing ring = m.Ring();
  constexpr uint32_t kProducers = 4;
  constexpr uint32_t kPerProducer = 100000;
  std::atomic<uint32_t> running{kProducers};
  std::vector<uint64_t> accepted(kProducers, 0);
  std::vector<std::thread> producers;
  for (uint32_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint32_t seq = 0; seq < kPerProducer; ++seq) {
        const std::vector<uint8_t> body = StressBody(p, seq);
        if (seq % 5 == 0) {  // the reserve/submit path too
          const uint64_t ptr = algo::RingReserve(m.desc(), body.size(), 0);
          if (ptr != 0) {
            std::memcpy(reinterpret_cast<void*>(ptr), body.data(), body.size());
            algo::RingFinishRecord(ptr, false);
            ++accepted[p];
          }
        } else if (algo::RingOutput(m.desc(), body.data(), body.size(), 0) == 0) {
          ++accepted[p];
        }
      }
      running.fetch_sub(1);
    });
  }
  uint64_t delivered = 0, torn = 0, out_of_order = 0;
  std::vector<int64_t> last_seq(kProducers, -1);
  auto check = [&](absl::Span<const uint8_t> body) {
    uint32_t producer = 0, seq = 0;
    if (body.size() < 12) {
      ++torn;
      return;
    }
    std::memcpy(&producer, body.data(), 4);
    std::memcpy(&seq, body.data() + 4, 4);
    if (producer >= kProducers ||
        std::vector<uint8_t>(body.begin(), body.end()) != StressBody(producer, seq)) {
      ++torn;
      return;
    }
    if (static_cast<int64_t>(seq) <= last_seq[producer]) ++out_of_order;
    last_seq[producer] = seq;
    ++delivered;
  };
  while (running.load() > 0) {
    if (ring.Consume(check) == 0) std::this_thread::yield();
  }
  for (auto& t : producers) t.join();
  ring.Consume(check);
  ASSERT_TRUE(ring.status().ok()) << ring.status();
  uint64_t total_accepted = 0;
  for (uint64_t a : accepted) total_accepted += a;
  EXPECT_EQ(torn, 0u);
  EXPECT_EQ(out_of_order, 0u) << "each producer's records arrive in its order";
  EXPECT_EQ(delivered, total_accepted);
  EXPECT_EQ(delivered + m.control()->ring_dropped, uint64_t{kProducers} * kPerProducer);
  EXPECT_EQ(m.control()->ring_reserved, delivered);
  EXPECT_GT(delivered, 0u);
  EXPECT_EQ(ring.Stats().tail, m.control()->ring_head);
  RecordProperty("delivered", std::to_string(delivered));
  RecordProperty("dropped", std::to_string(m.control()->ring_dropped));
}

}  // namespace
}  // namespace cuprobe
