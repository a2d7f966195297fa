// File: tests/unit/hook_lifecycle_test.cc
//
// The hook's lifecycle: the teardown order (watcher joined, writer gate
// closed, activity flushed twice, then unmap), a second Stop, a forked child
// that neither traces nor tears down, callbacks that fall through (during
// init, re-entrant, after a fatal error), and the contexts counted.
//
// Part of hook_test (tests/unit/CMakeLists.txt); the rig is in hook_test_util.h.

#include <chrono>
#include <string>
#include <thread>
#include <vector>

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
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::cuprobe::testing::Body;
using ::cuprobe::testing::KernelParams;
using ::cuprobe::testing::Launch;
using ::cuprobe::testing::Rig;
using ::cuprobe::testing::StderrCapture;

TEST(Hook, TeardownOrder) {
  Rig rig(/*interval_ms=*/2);
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  bool watcher_running_at_release = true;
  bool writer_gate_open_at_release = true;
  rig.output.on_release = [&] {
    watcher_running_at_release = rig.hook.watcher()->running();
    // After the gate is closed a write attempt is refused.
    writer_gate_open_at_release = rig.hook.tracer()->WhileSinkOpen([] {});
  };
  // At least one heartbeat while running. A loaded CI machine may not run the
  // watcher within any fixed sleep, so wait for it (bounded).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (rig.output.stats_published() < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GE(rig.output.stats_published(), 1) << "no heartbeat within 30 s";
  rig.hook.Stop();
  EXPECT_FALSE(watcher_running_at_release) << "the watcher must be joined before unmap";
  EXPECT_FALSE(writer_gate_open_at_release);
  // The fixed order of the steps after the run.
  std::vector<std::string> tail;
  for (const std::string& e : rig.events) {
    if (e == "ActivityFlushAll(1)" || e == "ActivityDisable(10)" || e == "Unsubscribe" ||
        e.rfind("Status(STOPPED", 0) == 0 || e == "Finish" || e == "Release") {
      tail.push_back(e);
    }
  }
  EXPECT_THAT(tail, ElementsAre("ActivityFlushAll(1)", "ActivityDisable(10)", "ActivityFlushAll(1)",
                                "Unsubscribe", "Status(STOPPED)", "Finish", "Release"));
  EXPECT_GE(rig.output.stats_published(), 2) << "heartbeats while running, plus the final one";
  EXPECT_EQ(rig.hook.lifecycle().state(), HookState::kStopped);
}

// Records that complete after teardown's first flush (a kernel late attach
// waited for, a launch still on its way) are flushed again once activity is
// off, while the sink is still open, and counted in the final stats.
TEST(Hook, TeardownFlushesAgainAfterActivityIsOff) {
  Rig rig;
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  CUpti_ActivityKernel10 k = {};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = "_Z4latev";
  k.start = 5000;
  k.end = 9000;
  k.correlationId = 21;
  k.streamId = 13;
  rig.seam.on_call = [&](const std::string& call) {
    if (call == "ActivityDisable(10)") rig.seam.QueueActivity(&k, sizeof(k));
  };
  rig.hook.Stop();
  auto kernels = rig.output.OfType(RecordType::kKernel);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(Body<KernelRecord>(kernels[0]).correlation_id, ProcessQualifiedId(4242, 21));
  EXPECT_EQ(rig.output.last_stats().records_written, rig.output.written().size());
}

// A child of fork() inherits the hook but not its watcher thread or CUDA:
// its exit() must not tear anything down (joining the parent's watcher there
// would hang, and the segment's status is the parent's).
TEST(Hook, ForkedChildNeitherTracesNorTearsDown) {
  Rig rig;
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  rig.hook.MarkForkedChild();
  int k = 0;
  rig.seam.names[&k] = "_Z1kv";
  auto p = KernelParams(&k, 1, 32, nullptr);
  Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 1, 10, 20);
  EXPECT_TRUE(rig.output.OfType(RecordType::kLaunch).empty()) << "callbacks fall through";
  const size_t events = rig.events.size();
  rig.hook.Stop();
  EXPECT_EQ(rig.events.size(), events) << "no flush, unsubscribe, status or unmap";
  EXPECT_TRUE(rig.hook.watcher()->running());
  EXPECT_EQ(rig.hook.lifecycle().state(), HookState::kReady);
  // Back in the parent's shoes, the real teardown still runs once.
  rig.hook.MarkForkedChild(false);
  rig.hook.Stop();
  EXPECT_THAT(rig.events, Contains("Release"));
  EXPECT_FALSE(rig.hook.watcher()->running());
}

TEST(Hook, SecondStopIsANoOp) {
  Rig rig;
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  rig.hook.Stop();
  size_t n = rig.events.size();
  rig.hook.Stop();
  EXPECT_EQ(rig.events.size(), n);
}

TEST(Hook, CallbackDuringInitFallsThrough) {
  Rig rig;
  // CUPTI may deliver a callback from inside Subscribe (another thread
  // launching while we initialize); fire one from there, on this thread and
  // on another one.
  rig.seam.on_call = [&](const std::string& call) {
    if (call != "Subscribe") return;
    CUpti_CallbackData data = {};
    data.callbackSite = CUPTI_API_ENTER;
    Hook::Callback(&rig.hook, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                   &data);
    std::thread([&] {
      Hook::Callback(&rig.hook, CUPTI_CB_DOMAIN_DRIVER_API,
                     CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data);
    }).join();
  };
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  EXPECT_EQ(rig.hook.callbacks_fell_through(), 2u);
  EXPECT_TRUE(rig.output.OfType(RecordType::kLaunch).empty());
  rig.hook.Stop();
}

TEST(Hook, ReentrantCallbackFallsThrough) {
  Rig rig;
  int k = 0;
  rig.seam.names.emplace(&k, "k");
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  auto p = KernelParams(&k, 1, 1, nullptr);
  {
    ReentrancyGuard inside_hook;  // as if the hook itself were calling the driver
    Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 1, 1, 2);
  }
  EXPECT_EQ(rig.hook.callbacks_fell_through(), 2u);
  EXPECT_TRUE(rig.output.OfType(RecordType::kLaunch).empty());
  // A name lookup inside the callback that re-enters CUPTI falls through too.
  rig.seam.on_call = [&](const std::string& call) {
    if (call != "FunctionName") return;
    CUpti_CallbackData inner = {};
    inner.callbackSite = CUPTI_API_ENTER;
    rig.seam.Fire(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &inner);
  };
  Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 2, 3, 4);
  EXPECT_EQ(rig.output.OfType(RecordType::kLaunch).size(), 1u);
  EXPECT_EQ(rig.hook.callbacks_fell_through(), 3u);
  rig.hook.Stop();
}

TEST(Hook, FatalErrorDisablesAndLaunchesFallThrough) {
  Rig rig;
  int k = 0;
  rig.seam.names.emplace(&k, "k");
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  CUpti_StateData state = {};
  state.notification.result = CUPTI_ERROR_UNKNOWN;
  state.notification.message = "device lost";
  StderrCapture capture;
  rig.seam.Fire(CUPTI_CB_DOMAIN_STATE, CUPTI_CBID_STATE_FATAL_ERROR, &state);
  EXPECT_THAT(capture.Take(), HasSubstr("CUPTI reported a fatal error: device lost"));
  EXPECT_EQ(rig.hook.lifecycle().state(), HookState::kDisabled);
  auto p = KernelParams(&k, 1, 1, nullptr);
  Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 1, 1, 2);
  EXPECT_TRUE(rig.output.OfType(RecordType::kLaunch).empty());
  rig.hook.Stop();
  EXPECT_EQ(rig.hook.lifecycle().state(), HookState::kStopped);
}

TEST(Hook, ContextsAreCounted) {
  Rig rig;
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  CUpti_ResourceData r = {};
  rig.seam.Fire(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED, &r);
  rig.seam.Fire(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED, &r);
  rig.seam.Fire(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, &r);
  EXPECT_EQ(rig.hook.contexts_alive(), 1);
  rig.hook.Stop();
}

}  // namespace
}  // namespace cuprobe
