// File: tests/unit/hook_threads_test.cc
//
// The hook under many launching threads: Stop while threads launch never
// writes after the release, the tracer's per-thread counters sum exactly
// (also past its slots, and for two tracers on one thread), and the
// tracer's CloseSink waits for a writer inside the sink.
//
// Part of hook_test (tests/unit/CMakeLists.txt); the rig is in hook_test_util.h.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cupti_hook/hook.h"
#include "cupti_hook/testing/fake_output.h"
#include "cupti_hook/testing/fake_seam.h"
#include "cupti_hook/tracer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/hook_test_util.h"

namespace cuprobe {
namespace {

using ::testing::Contains;
using ::cuprobe::testing::Body;
using ::cuprobe::testing::KernelParams;
using ::cuprobe::testing::Launch;
using ::cuprobe::testing::LaunchFromThisThread;
using ::cuprobe::testing::NameOf;
using ::cuprobe::testing::Rig;

TEST(Hook, StopWhileThreadsLaunchNeverWritesAfterRelease) {
  for (int round = 0; round < 20; ++round) {
    Rig rig(/*interval_ms=*/1);
    int k = 0;
    rig.seam.names.emplace(&k, "k");
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        auto p = KernelParams(&k, 1, 1, nullptr);
        uint32_t corr = static_cast<uint32_t>(t) << 24;
        while (!stop.load()) {
          LaunchFromThisThread(rig.hook, &p, ++corr);
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    rig.hook.Stop();
    stop.store(true);
    for (auto& t : threads) t.join();
    ASSERT_EQ(rig.output.writes_after_release(), 0) << "round " << round;
    ASSERT_THAT(rig.events, Contains("Release"));
  }
}

// Each thread adds to its own counters; stats() sums them. Exact totals
// from four threads, and sums that never go backwards while they run.
TEST(Hook, StatsSumEveryLaunchingThreadExactly) {
  Rig rig;
  int k = 0;
  rig.seam.names.emplace(&k, "k");
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  constexpr int kThreads = 4;
  constexpr uint32_t kPerThread = 5000;
  std::atomic<int> running{kThreads};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto p = KernelParams(&k, 1, 1, nullptr);
      for (uint32_t i = 0; i < kPerThread; ++i) {
        LaunchFromThisThread(rig.hook, &p, (static_cast<uint32_t>(t) << 24) + i);
      }
      running.fetch_sub(1);
    });
  }
  TracerStats last;
  int went_back = 0;
  while (running.load() > 0) {
    TracerStats now = rig.hook.tracer()->stats();
    if (now.launches < last.launches || now.records_written < last.records_written) ++went_back;
    last = now;
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(went_back, 0) << "a sum of the threads' counters went backwards";

  TracerStats stats = rig.hook.tracer()->stats();
  EXPECT_EQ(stats.launches, uint64_t{kThreads} * kPerThread);
  EXPECT_EQ(stats.records_written, rig.output.written().size());
  EXPECT_EQ(stats.records_dropped, 0u);
  std::map<uint32_t, int> per_tid;
  for (const auto& w : rig.output.OfType(RecordType::kLaunch)) ++per_tid[Body<LaunchRecord>(w).tid];
  ASSERT_EQ(per_tid.size(), size_t{kThreads});
  for (const auto& [tid, n] : per_tid) {
    EXPECT_NE(tid, static_cast<uint32_t>(CurrentThreadId()));
    EXPECT_EQ(n, static_cast<int>(kPerThread)) << "thread " << tid;
  }
  rig.hook.Stop();
}

// One thread launching under two hooks in turn (two tracers): each keeps
// its own counts and names the same handle by its own seam.
TEST(Hook, TwoTracersOnOneThreadKeepTheirOwnCountsAndNames) {
  Rig a;
  // Another pid: b's name ids differ from a's, so a name from the wrong
  // tracer's cache cannot pass for the right one.
  Rig b(60000, "", [](HookConfig& c) { c.pid = 4343; });
  int k = 0;
  a.seam.names[&k] = "kernel_in_a";
  b.seam.names[&k] = "kernel_in_b";
  ASSERT_EQ(a.hook.Start(), HookState::kReady);
  ASSERT_EQ(b.hook.Start(), HookState::kReady);
  auto p = KernelParams(&k, 1, 1, nullptr);
  for (uint32_t i = 0; i < 10; ++i) {
    Launch(a.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 2 * i, 10, 20);
    Launch(b.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 2 * i + 1, 10, 20);
  }
  Launch(a.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 100, 10, 20);
  EXPECT_EQ(a.hook.tracer()->stats().launches, 11u);
  EXPECT_EQ(b.hook.tracer()->stats().launches, 10u);
  EXPECT_EQ(a.hook.tracer()->stats().records_written, a.output.written().size());
  EXPECT_EQ(b.hook.tracer()->stats().records_written, b.output.written().size());
  for (const auto& w : a.output.OfType(RecordType::kLaunch)) {
    EXPECT_EQ(NameOf(a.output, Body<LaunchRecord>(w).name_id), "kernel_in_a");
  }
  for (const auto& w : b.output.OfType(RecordType::kLaunch)) {
    EXPECT_EQ(NameOf(b.output, Body<LaunchRecord>(w).name_id), "kernel_in_b");
  }
  a.hook.Stop();
  b.hook.Stop();
}

// A program that starts a thread per piece of work: past the tracer's
// per-thread slots the rest share one, and every launch is still counted and
// attributed to its own thread.
TEST(Hook, ThreadsBeyondTheSlotsShareOneAndCountExactly) {
  Rig rig;
  int k = 0;
  rig.seam.names.emplace(&k, "k");
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  constexpr int kThreads = 300;  // more than Tracer's 256 slots
  std::map<uint32_t, int> launched_by;
  for (int t = 0; t < kThreads; ++t) {
    uint32_t tid = 0;
    std::thread([&, t] {
      tid = static_cast<uint32_t>(CurrentThreadId());
      auto p = KernelParams(&k, 1, 1, nullptr);
      for (uint32_t i = 0; i < 3; ++i) LaunchFromThisThread(rig.hook, &p, t * 3 + i);
    }).join();
    launched_by[tid] += 3;
  }
  ASSERT_EQ(launched_by.size(), size_t{kThreads}) << "thread ids were reused: fewer slots taken";
  TracerStats stats = rig.hook.tracer()->stats();
  EXPECT_EQ(stats.launches, uint64_t{kThreads} * 3);
  EXPECT_EQ(stats.records_written, rig.output.written().size());
  std::map<uint32_t, int> recorded_by;
  for (const auto& w : rig.output.OfType(RecordType::kLaunch)) {
    LaunchRecord r = Body<LaunchRecord>(w);
    ++recorded_by[r.tid];
    EXPECT_EQ(NameOf(rig.output, r.name_id), "k");
  }
  EXPECT_EQ(recorded_by, launched_by);
  rig.hook.Stop();
}

// A sink whose writes wait until the test lets them go.
class HeldSink : public RecordSink {
 public:
  bool Write(uint16_t, const void*, uint32_t, const void*, uint32_t) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++writes_;
    cv_.notify_all();
    if (hold_) cv_.wait(lock, [&] { return !hold_; });
    return true;
  }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = true;
  }
  void WaitForWrites(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return writes_ >= n; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = false;
    cv_.notify_all();
  }
  int writes() {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false;
  int writes_ = 0;
};

// CloseSink (teardown, before the segment is unmapped) waits for a thread
// that is inside a write, and a write after it returns is dropped. Both
// kinds of writer: a thread with its own slot, and one of the threads past
// the tracer's slots, which share one (`fill_slots`).
void CloseSinkWaitsForTheWriterInside(bool fill_slots) {
  FakeSeam seam;
  HeldSink sink;
  Tracer tracer(seam, sink, 7);
  int before = 0;
  std::set<uint64_t> tids;
  if (fill_slots) {
    for (int t = 0; t < 256; ++t) {
      std::thread([&, t] {
        tids.insert(CurrentThreadId());
        (void)tracer.InternName(absl::StrCat("name", t));
      }).join();
    }
    before = sink.writes();
    ASSERT_EQ(before, 256);
    ASSERT_EQ(tids.size(), 256u) << "thread ids were reused: the slots are not all taken";
  }
  sink.Hold();
  std::thread writer([&] {  // a name record, then the process record
    tids.insert(CurrentThreadId());
    tracer.Begin("./app");
  });
  sink.WaitForWrites(before + 1);
  ASSERT_EQ(tids.size(), fill_slots ? 257u : 1u);
  std::atomic<bool> closed{false};
  bool quiet = false;
  std::thread closer([&] {
    quiet = tracer.CloseSink();
    closed.store(true);
  });
  // Once the gate is seen closed the closer is waiting for the writer; give
  // it time to (wrongly) return before letting the writer go.
  while (tracer.WhileSinkOpen([] {})) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(closed.load()) << "CloseSink returned while a writer was inside";
  sink.Release();
  writer.join();
  closer.join();
  EXPECT_TRUE(quiet);
  EXPECT_EQ(sink.writes(), before + 1) << "the process record, written after the close, was dropped";
  (void)tracer.InternName("late");
  EXPECT_EQ(sink.writes(), before + 1);
}

TEST(Tracer, CloseSinkWaitsForAWriterInside) { CloseSinkWaitsForTheWriterInside(false); }
TEST(Tracer, CloseSinkWaitsForAWriterInsideTheSharedSlot) {
  CloseSinkWaitsForTheWriterInside(true);
}

}  // namespace
}  // namespace cuprobe
