#include "cupti_hook/init_state.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cuprobe {
namespace {

TEST(InitStateMachine, HappyPath) {
  InitStateMachine m;
  EXPECT_EQ(m.state(), HookState::kUninit);
  EXPECT_EQ(m.owner(), 0u);
  ASSERT_TRUE(m.TryBeginInit());
  EXPECT_EQ(m.state(), HookState::kInitializing);
  EXPECT_EQ(m.owner(), CurrentThreadId());
  EXPECT_FALSE(m.IsReady());
  EXPECT_TRUE(m.FinishInit());
  EXPECT_TRUE(m.IsReady());
  ASSERT_TRUE(m.TryBeginStop());
  EXPECT_EQ(m.state(), HookState::kStopping);
  m.FinishStop();
  EXPECT_EQ(m.state(), HookState::kStopped);
}

TEST(InitStateMachine, InitOnlyOnce) {
  InitStateMachine m;
  ASSERT_TRUE(m.TryBeginInit());
  EXPECT_FALSE(m.TryBeginInit());
  ASSERT_TRUE(m.FinishInit());
  EXPECT_FALSE(m.TryBeginInit());
  EXPECT_FALSE(m.FinishInit()) << "READY cannot be entered twice";
}

TEST(InitStateMachine, OnlyTheOwnerFinishesInit) {
  InitStateMachine m;
  ASSERT_TRUE(m.TryBeginInit());
  bool other = true;
  std::thread([&] { other = m.FinishInit(); }).join();
  EXPECT_FALSE(other);
  EXPECT_EQ(m.state(), HookState::kInitializing);
  EXPECT_TRUE(m.FinishInit());
}

TEST(InitStateMachine, DisableDuringInitKeepsFirstReason) {
  InitStateMachine m;
  ASSERT_TRUE(m.TryBeginInit());
  EXPECT_TRUE(m.Disable("no driver"));
  EXPECT_EQ(m.state(), HookState::kDisabled);
  EXPECT_FALSE(m.Disable("second reason"));
  EXPECT_EQ(m.reason(), "no driver");
  EXPECT_FALSE(m.FinishInit()) << "DISABLED never becomes READY";
  ASSERT_TRUE(m.TryBeginStop());
  m.FinishStop();
  EXPECT_EQ(m.state(), HookState::kStopped);
}

TEST(InitStateMachine, DisableFromReady) {
  InitStateMachine m;
  ASSERT_TRUE(m.TryBeginInit());
  ASSERT_TRUE(m.FinishInit());
  EXPECT_TRUE(m.Disable("CUPTI fatal error"));
  EXPECT_EQ(m.state(), HookState::kDisabled);
  EXPECT_EQ(m.reason(), "CUPTI fatal error");
}

TEST(InitStateMachine, StopIsOnceAndNotDuringInit) {
  InitStateMachine m;
  ASSERT_TRUE(m.TryBeginInit());
  EXPECT_FALSE(m.TryBeginStop()) << "teardown must not race the init owner";
  ASSERT_TRUE(m.FinishInit());
  EXPECT_TRUE(m.TryBeginStop());
  EXPECT_FALSE(m.TryBeginStop());
  m.FinishStop();
  EXPECT_FALSE(m.TryBeginStop());
  EXPECT_FALSE(m.TryBeginInit()) << "a stopped hook never restarts";
  EXPECT_FALSE(m.Disable("late"));
}

TEST(InitStateMachine, StopBeforeInitPreventsInit) {
  InitStateMachine m;
  ASSERT_TRUE(m.TryBeginStop());
  EXPECT_FALSE(m.TryBeginInit());
  m.FinishStop();
  EXPECT_EQ(m.state(), HookState::kStopped);
}

TEST(InitStateMachine, ManyThreadsRaceExactlyOneOwner) {
  for (int round = 0; round < 200; ++round) {
    InitStateMachine m;
    std::atomic<int> winners{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        while (!go.load()) {
        }
        if (m.TryBeginInit()) {
          winners.fetch_add(1);
          EXPECT_TRUE(m.FinishInit());
        }
      });
    }
    go.store(true);
    for (auto& t : threads) t.join();
    ASSERT_EQ(winners.load(), 1) << "round " << round;
    EXPECT_TRUE(m.IsReady());
  }
}

TEST(ReentrancyGuard, NestsPerThread) {
  EXPECT_FALSE(ReentrancyGuard::Active());
  {
    ReentrancyGuard outer;
    EXPECT_TRUE(ReentrancyGuard::Active());
    {
      ReentrancyGuard inner;
      EXPECT_TRUE(ReentrancyGuard::Active());
    }
    EXPECT_TRUE(ReentrancyGuard::Active());
    bool other_thread_active = true;
    std::thread([&] { other_thread_active = ReentrancyGuard::Active(); }).join();
    EXPECT_FALSE(other_thread_active);
  }
  EXPECT_FALSE(ReentrancyGuard::Active());
}

TEST(HookStateName, AllNamed) {
  EXPECT_EQ(HookStateName(HookState::kUninit), "UNINIT");
  EXPECT_EQ(HookStateName(HookState::kInitializing), "INITIALIZING");
  EXPECT_EQ(HookStateName(HookState::kReady), "READY");
  EXPECT_EQ(HookStateName(HookState::kDisabled), "DISABLED");
  EXPECT_EQ(HookStateName(HookState::kStopping), "STOPPING");
  EXPECT_EQ(HookStateName(HookState::kStopped), "STOPPED");
}

}  // namespace
}  // namespace cuprobe
