// File: tests/unit/hook_range_types_test.cc
//
// The capture ranges' own types, without a hook: CaptureRanges (which
// correlation ids lie in a range: out of order, id 0, past the last range,
// across the wrap of the ids, readers racing with start and stop),
// RangeActivity (when a range's stop switches the activity off) and
// ParseCaptureRangeEnd.
//
// Part of hook_test (tests/unit/CMakeLists.txt).

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "cupti_hook/hook.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuprobe {
namespace {

TEST(CaptureRanges, ContainsTheCallsBetweenEachStartAndStop) {
  CaptureRanges r;
  EXPECT_FALSE(r.Contains(0));
  EXPECT_FALSE(r.Contains(5));
  EXPECT_EQ(r.Close(3), CaptureRanges::Change::kUnchanged) << "a stop with no start";
  EXPECT_EQ(r.count(), 0);
  EXPECT_EQ(r.Open(10), CaptureRanges::Change::kOpened);
  EXPECT_EQ(r.Open(11), CaptureRanges::Change::kUnchanged) << "the driver call inside";
  EXPECT_TRUE(r.open());
  EXPECT_FALSE(r.Contains(9));
  EXPECT_TRUE(r.Contains(10));
  EXPECT_TRUE(r.Contains((1u << 30) + 5)) << "an open range holds every later call";
  EXPECT_EQ(r.Close(20), CaptureRanges::Change::kClosed);
  EXPECT_EQ(r.Close(21), CaptureRanges::Change::kUnchanged);
  EXPECT_FALSE(r.open());
  EXPECT_TRUE(r.Contains(19));
  EXPECT_FALSE(r.Contains(20)) << "the stop call itself is outside";
  EXPECT_FALSE(r.Contains(25));
  EXPECT_EQ(r.Open(30), CaptureRanges::Change::kOpened);
  EXPECT_EQ(r.Close(40), CaptureRanges::Change::kClosed);
  EXPECT_EQ(r.Open(50), CaptureRanges::Change::kOpened);  // open at exit
  EXPECT_EQ(r.count(), 3);
  std::vector<uint32_t> inside;
  for (uint32_t id = 0; id < 60; ++id) {
    if (r.Contains(id)) inside.push_back(id);
  }
  std::vector<uint32_t> want;
  for (uint32_t id = 10; id < 20; ++id) want.push_back(id);
  for (uint32_t id = 30; id < 40; ++id) want.push_back(id);
  for (uint32_t id = 50; id < 60; ++id) want.push_back(id);
  EXPECT_EQ(inside, want);
}

// Id 0 is CUPTI's "no correlation id": in no range, even an open one, and
// it does not move the high mark (as an id 2^32 ahead it would, once the
// real ids pass 2^31, and every later id would be widened wrong).
TEST(CaptureRanges, IdZeroIsInNoRangeAndMovesNothing) {
  CaptureRanges r;
  const uint32_t half = 1u << 31;
  EXPECT_FALSE(r.Contains((1u << 30) + 10));  // the high mark moves to it
  ASSERT_EQ(r.Open(half - 100), CaptureRanges::Change::kOpened);
  EXPECT_TRUE(r.Contains(half + 20));  // and past 2^31
  EXPECT_FALSE(r.Contains(0)) << "not even in an open range";
  EXPECT_TRUE(r.Contains(half - 50)) << "a late record of a call inside";
  ASSERT_EQ(r.Close(half + 100), CaptureRanges::Change::kClosed);
  EXPECT_FALSE(r.Contains(0));
  EXPECT_TRUE(r.Contains(half - 90)) << "the range's own calls, after all that";
  EXPECT_TRUE(r.Contains(half + 99));
  EXPECT_FALSE(r.Contains(half + 100));
  EXPECT_FALSE(r.Contains(half - 101));
}

// A start on one thread may have taken its id before a stop on another:
// the ranges stay sorted and disjoint (the search needs it), and an empty
// range holds nothing.
TEST(CaptureRanges, IdsOutOfOrderKeepRangesDisjoint) {
  CaptureRanges r;
  ASSERT_EQ(r.Open(100), CaptureRanges::Change::kOpened);
  ASSERT_EQ(r.Close(90), CaptureRanges::Change::kClosed);  // before its start: empty
  EXPECT_FALSE(r.Contains(95));
  EXPECT_FALSE(r.Contains(100));
  ASSERT_EQ(r.Open(80), CaptureRanges::Change::kOpened);  // begins at 100, not 80
  EXPECT_FALSE(r.Contains(85));
  EXPECT_TRUE(r.Contains(100));
  ASSERT_EQ(r.Close(120), CaptureRanges::Change::kClosed);
  EXPECT_TRUE(r.Contains(119));
  EXPECT_FALSE(r.Contains(120));
}

TEST(CaptureRanges, PastTheLastRangeNothingMoreIsCaptured) {
  CaptureRanges r;
  // Range i spans [10 + 10i, 15 + 10i).
  for (int i = 0; i < CaptureRanges::kMaxRanges; ++i) {
    ASSERT_EQ(r.Open(10 + 10 * i), CaptureRanges::Change::kOpened) << i;
    ASSERT_EQ(r.Close(15 + 10 * i), CaptureRanges::Change::kClosed) << i;
  }
  const uint32_t next = 10 + 10 * CaptureRanges::kMaxRanges;
  EXPECT_EQ(r.Open(next), CaptureRanges::Change::kFull) << "reported once";
  EXPECT_EQ(r.Open(next + 10), CaptureRanges::Change::kUnchanged);
  EXPECT_EQ(r.count(), CaptureRanges::kMaxRanges);
  EXPECT_FALSE(r.Contains(next + 1));
  EXPECT_TRUE(r.Contains(next - 6));
  EXPECT_FALSE(r.Contains(next - 5));
  for (int i = 0; i < CaptureRanges::kMaxRanges; i += 97) {
    EXPECT_TRUE(r.Contains(10 + 10 * i)) << i;
    EXPECT_TRUE(r.Contains(14 + 10 * i)) << i;
    EXPECT_FALSE(r.Contains(15 + 10 * i)) << i;
    EXPECT_FALSE(r.Contains(19 + 10 * i)) << i;
  }
}

// Correlation ids are 32 bits: past 2^32 calls they start again from 0. A
// range open across the wrap holds the calls after it, ranges after it work
// as before, and an old range does not claim the new calls with its ids.
TEST(CaptureRanges, WorkAcrossTheWrapOfCorrelationIds) {
  CaptureRanges r;
  ASSERT_EQ(r.Open(10), CaptureRanges::Change::kOpened);
  ASSERT_EQ(r.Close(20), CaptureRanges::Change::kClosed);
  // The calls the hook sees on the way (every launch asks).
  for (uint64_t id = 1000; id < 0xFFFF0000u; id += 0x10000000u) {
    EXPECT_FALSE(r.Contains(static_cast<uint32_t>(id)));
  }
  ASSERT_EQ(r.Open(0xFFFFFFF0u), CaptureRanges::Change::kOpened);
  EXPECT_TRUE(r.Contains(0xFFFFFFF5u));
  EXPECT_TRUE(r.Contains(5)) << "after the wrap, inside the open range";
  EXPECT_TRUE(r.Contains(15)) << "not range 1's [10, 20): a call after the wrap";
  ASSERT_EQ(r.Close(100), CaptureRanges::Change::kClosed);
  EXPECT_TRUE(r.Contains(50));
  EXPECT_FALSE(r.Contains(150));
  EXPECT_TRUE(r.Contains(0xFFFFFFF8u)) << "a late record of a call before the wrap";
  EXPECT_FALSE(r.Contains(0xFFFFFFE0u));
  ASSERT_EQ(r.Open(200), CaptureRanges::Change::kOpened);
  ASSERT_EQ(r.Close(300), CaptureRanges::Change::kClosed);
  EXPECT_TRUE(r.Contains(250));
  EXPECT_FALSE(r.Contains(300));
  EXPECT_FALSE(r.Contains(199));
}

// Readers (launching threads, CUPTI's activity thread) run while ranges open
// and close: a call made before any start is never captured, one made inside
// a range that has been opened always is.
TEST(CaptureRanges, ReadersRaceWithStartAndStop) {
  CaptureRanges r;
  std::atomic<bool> done{false}, reading{false};
  std::atomic<int> wrong{0};
  std::thread reader([&] {
    reading.store(true);
    while (!done.load()) {
      if (r.Contains(5)) wrong.fetch_add(1);
      int n = r.count();
      // Range i spans [100 + 10i, 105 + 10i) once closed; its start is in
      // it as soon as it is counted.
      if (n > 0 && !r.Contains(100 + 10 * (n - 1))) wrong.fetch_add(1);
    }
  });
  while (!reading.load()) std::this_thread::yield();
  for (int i = 0; i < CaptureRanges::kMaxRanges; ++i) {
    // No ASSERT while the reader runs: it would return without joining it.
    EXPECT_EQ(r.Open(100 + 10 * i), CaptureRanges::Change::kOpened);
    EXPECT_EQ(r.Close(105 + 10 * i), CaptureRanges::Change::kClosed);
  }
  done.store(true);
  reader.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(CaptureRangeEnd, ParsesEveryValue) {
  struct Case {
    const char* value;
    int max_ranges;
    bool ignore_stop;
  };
  for (const Case& c : {Case{"repeat", 4096, false}, Case{"repeat:1", 1, false},
                        Case{"repeat:4096", 4096, false}, Case{"stop", 1, false},
                        Case{"none", 1, true}}) {
    absl::StatusOr<CaptureRangeEnd> end = ParseCaptureRangeEnd(c.value);
    ASSERT_TRUE(end.ok()) << c.value << ": " << end.status();
    EXPECT_EQ(end->max_ranges, c.max_ranges) << c.value;
    EXPECT_EQ(end->ignore_stop, c.ignore_stop) << c.value;
  }
  for (const char* bad : {"", "repeat:", "repeat:0", "repeat:-1", "repeat:4097", "repeat:1x",
                          "repeat: 3", "repeat:+3", "repeat:00003", "stop-shutdown",
                          "repeat-shutdown:2", "Repeat"}) {
    EXPECT_FALSE(ParseCaptureRangeEnd(bad).ok()) << bad;
  }
}

TEST(RangeActivity, SwitchesOffAtTheStopUnlessBackToBack) {
  constexpr uint64_t kGap = RangeActivity::kBackToBackNs;
  RangeActivity a;
  a.Opened(5000);
  EXPECT_TRUE(a.Closed(6000)) << "the first range";
  EXPECT_FALSE(a.Tick(6000 + 10 * kGap));
  a.Opened(6000 + kGap - 1);
  EXPECT_FALSE(a.Closed(7000 + kGap));
  EXPECT_TRUE(a.lingering());
  EXPECT_FALSE(a.Tick(7000 + 2 * kGap - 1));
  EXPECT_TRUE(a.Tick(7000 + 2 * kGap));
  EXPECT_FALSE(a.lingering());
  EXPECT_FALSE(a.Tick(7000 + 3 * kGap)) << "once";
  a.Opened(7000 + 2 * kGap);  // exactly kGap after the close: not back to back
  EXPECT_TRUE(a.Closed(8000 + 2 * kGap));
  a.Opened(8000 + 2 * kGap + 10);
  EXPECT_FALSE(a.Closed(9000 + 2 * kGap));
  // A start while lingering that comes after the gap (the watcher had not
  // ticked yet): off at this range's stop.
  a.Opened(9000 + 4 * kGap);
  EXPECT_FALSE(a.lingering());
  EXPECT_TRUE(a.Closed(9000 + 5 * kGap));
  // Not when the hook says it may not.
  a.Opened(9000 + 5 * kGap + 1);
  EXPECT_TRUE(a.Closed(9000 + 5 * kGap + 2, /*may_linger=*/false));
  EXPECT_FALSE(a.lingering());
  // How long a linger has left.
  a.Opened(9000 + 5 * kGap + 3);
  EXPECT_FALSE(a.Closed(10000 + 5 * kGap));
  EXPECT_EQ(a.WaitNs(10000 + 5 * kGap), kGap);
  EXPECT_EQ(a.WaitNs(10000 + 5 * kGap + 400), kGap - 400);
  EXPECT_EQ(a.WaitNs(10000 + 6 * kGap), 0u);
  EXPECT_TRUE(a.Tick(10000 + 6 * kGap));
  // A clock that steps back reads as a long gap.
  a.Opened(100);
  EXPECT_TRUE(a.Closed(200));
  a.Opened(300);
  EXPECT_FALSE(a.Closed(400));
  EXPECT_TRUE(a.Tick(50)) << "earlier than the close";
}

}  // namespace
}  // namespace cuprobe
