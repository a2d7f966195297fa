#include "cupti_hook/watcher.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "cupti_hook/init_state.h"
#include "gtest/gtest.h"

namespace cuprobe {
namespace {

using std::chrono::milliseconds;

TEST(Watcher, TicksAtItsInterval) {
  std::atomic<int> ticks{0};
  Watcher w(milliseconds(5), [&] { ticks.fetch_add(1); });
  w.Start();
  std::this_thread::sleep_for(milliseconds(100));
  w.Stop();
  EXPECT_GE(ticks.load(), 5);
  EXPECT_LE(ticks.load(), 25);
  EXPECT_EQ(static_cast<uint64_t>(ticks.load()), w.ticks());
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

TEST(Watcher, TickRunsUnderTheReentrancyGuard) {
  std::atomic<bool> guarded{false};
  Watcher w(milliseconds(1), [&] { guarded.store(ReentrancyGuard::Active()); });
  w.Start();
  std::this_thread::sleep_for(milliseconds(20));
  w.Stop();
  EXPECT_TRUE(guarded.load()) << "driver calls from the watcher must fall through our callbacks";
}

}  // namespace
}  // namespace cuprobe
