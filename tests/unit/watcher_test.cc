#include "cupti_hook/watcher.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "cupti_hook/init_state.h"
#include "gtest/gtest.h"

namespace cuprobe {
namespace {

using std::chrono::milliseconds;

// Ticks come at the interval: five of them take at least about five
// intervals (never faster), and they do come. A loaded CI machine may run the
// thread late, so the wait for them is bounded but generous.
TEST(Watcher, TicksAtItsInterval) {
  std::atomic<int> ticks{0};
  Watcher w(milliseconds(5), [&] { ticks.fetch_add(1); });
  const auto t0 = std::chrono::steady_clock::now();
  w.Start();
  const auto deadline = t0 + std::chrono::seconds(30);
  while (ticks.load() < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  const int seen = ticks.load();
  w.Stop();
  ASSERT_GE(seen, 5) << "no five ticks within 30 s";
  // cv waits may wake a little early; 4 full intervals is a safe floor.
  EXPECT_GE(elapsed, milliseconds(4 * 5)) << "ticks faster than the interval";
  EXPECT_EQ(static_cast<uint64_t>(ticks.load()), w.ticks());
}

// No busy ticking: at most one tick per 5 ms interval of the time it ran
// (measured, since a loaded machine may oversleep the 100 ms), plus one.
TEST(Watcher, DoesNotTickFasterThanItsInterval) {
  std::atomic<int> ticks{0};
  Watcher w(milliseconds(5), [&] { ticks.fetch_add(1); });
  const auto t0 = std::chrono::steady_clock::now();
  w.Start();
  std::this_thread::sleep_for(milliseconds(100));
  w.Stop();
  const auto ran = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t0);
  EXPECT_LE(ticks.load(), ran.count() / 5 + 1) << "in " << ran.count() << " ms";
}

TEST(Watcher, StopWakesItAtOnceAndJoins) {
  std::atomic<int> ticks{0};
  Watcher w(milliseconds(60000), [&] { ticks.fetch_add(1); });
  w.Start();
  EXPECT_TRUE(w.running());
  auto t0 = std::chrono::steady_clock::now();
  w.Stop();
  auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(elapsed, milliseconds(1000)) << "Stop must not wait for the interval";
  EXPECT_FALSE(w.running());
  EXPECT_EQ(ticks.load(), 0);
  w.Stop();  // idempotent
}

TEST(Watcher, NoTickAfterStopReturns) {
  std::atomic<bool> stopped{false};
  std::atomic<int> late{0};
  Watcher w(milliseconds(1), [&] {
    if (stopped.load()) late.fetch_add(1);
    std::this_thread::sleep_for(milliseconds(2));
  });
  w.Start();
  std::this_thread::sleep_for(milliseconds(20));
  w.Stop();
  stopped.store(true);
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(late.load(), 0);
}

TEST(Watcher, PokeRunsATickSoon) {
  std::atomic<int> ticks{0};
  Watcher w(milliseconds(60000), [&] { ticks.fetch_add(1); });
  w.Start();
  w.Poke();
  for (int i = 0; i < 200 && ticks.load() == 0; ++i) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(ticks.load(), 1);
  w.Stop();
}

// WakeAt runs the wake callback once, about when asked, between ticks and
// without a tick; a later WakeAt replaces an earlier one; one asked for a
// time past runs at once; none runs after Stop. (Times are wide: a loaded
// CI machine may hold the test's thread for a while between two calls.)
TEST(Watcher, WakeAtRunsTheWakeOnceWithoutATick) {
  std::atomic<int> ticks{0}, wakes{0};
  Watcher w(milliseconds(60000), [&] { ticks.fetch_add(1); }, [&] { wakes.fetch_add(1); });
  w.Start();
  const auto t0 = Watcher::Clock::now();
  w.WakeAt(t0 + milliseconds(1000));
  w.WakeAt(t0 + milliseconds(1500));  // replaces the first
  for (int i = 0; i < 30000 && wakes.load() == 0; ++i) std::this_thread::sleep_for(milliseconds(1));
  EXPECT_GE(Watcher::Clock::now() - t0, milliseconds(1499)) << "not before the time asked";
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(wakes.load(), 1) << "once, for the later time";
  EXPECT_EQ(w.wakes(), 1u);
  w.WakeAt(t0);  // already past
  for (int i = 0; i < 30000 && wakes.load() == 1; ++i) std::this_thread::sleep_for(milliseconds(1));
  EXPECT_EQ(wakes.load(), 2);
  EXPECT_EQ(ticks.load(), 0) << "a wake is not a tick";
  const auto t1 = Watcher::Clock::now();
  w.WakeAt(t1 + milliseconds(500));
  w.Stop();
  EXPECT_LT(Watcher::Clock::now() - t1, milliseconds(1000)) << "Stop does not wait for a wake";
  const int at_stop = wakes.load();
  std::this_thread::sleep_for(milliseconds(600) - (Watcher::Clock::now() - t1));
  EXPECT_EQ(wakes.load(), at_stop) << "none after Stop";
}

// Wakes do not hold ticks back: a wake that asks again every 2 ms for
// 300 ms leaves the 20 ms ticks running meanwhile.
TEST(Watcher, WakesThatAskAgainLeaveTicksOnTheirInterval) {
  std::atomic<int> ticks{0}, wakes{0}, ticks_while_waking{-1};
  Watcher* self = nullptr;
  Watcher::Clock::time_point end;
  Watcher w(milliseconds(20), [&] { ticks.fetch_add(1); }, [&] {
    wakes.fetch_add(1);
    if (Watcher::Clock::now() < end) {
      self->WakeAt(Watcher::Clock::now() + milliseconds(2));
    } else {
      ticks_while_waking.store(ticks.load());
    }
  });
  self = &w;
  end = Watcher::Clock::now() + milliseconds(300);
  w.Start();
  w.WakeAt(Watcher::Clock::now());
  for (int i = 0; i < 30000 && ticks_while_waking.load() < 0; ++i) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  w.Stop();
  EXPECT_GE(wakes.load(), 10);
  // About 15 expected; a tick schedule that each wake pushed back would
  // give none.
  EXPECT_GE(ticks_while_waking.load(), 3);
}

TEST(Watcher, TickRunsUnderTheReentrancyGuard) {
  std::atomic<bool> guarded{false};
  std::atomic<int> ticks{0};
  Watcher w(milliseconds(1), [&] {
    guarded.store(ReentrancyGuard::Active());
    ticks.fetch_add(1);
  });
  w.Start();
  for (int i = 0; i < 30000 && ticks.load() == 0; ++i) std::this_thread::sleep_for(milliseconds(1));
  w.Stop();
  ASSERT_GT(ticks.load(), 0) << "no tick within 30 s";
  EXPECT_TRUE(guarded.load()) << "driver calls from the watcher must fall through our callbacks";
}

}  // namespace
}  // namespace cuprobe
