// The hook's logic against the fake seam.
#include "cupti_hook/hook.h"

#include <unistd.h>

#include <string>

#include "cupti_hook/testing/fake_seam.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/log.h"

namespace cuprobe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class StderrCapture {
 public:
  StderrCapture() {
    EXPECT_EQ(::pipe(fds_), 0);
    SetLogFd(fds_[1]);
  }
  ~StderrCapture() { SetLogFd(2); }
  std::string Take() {
    SetLogFd(2);
    ::close(fds_[1]);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds_[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    ::close(fds_[0]);
    return out;
  }

 private:
  int fds_[2];
};

CUpti_CallbackData ApiEnter() {
  CUpti_CallbackData data = {};
  data.callbackSite = CUPTI_API_ENTER;
  data.functionName = "cuLaunchKernel";
  return data;
}

TEST(Hook, StartSubscribesAndBecomesReady) {
  FakeSeam seam;
  Hook hook(seam, {});
  EXPECT_EQ(hook.Start(), HookState::kReady);
  EXPECT_TRUE(seam.subscribed());
  EXPECT_THAT(seam.calls(), ElementsAre("Subscribe"));
}

TEST(Hook, SecondStartIsANoOp) {
  FakeSeam seam;
  Hook hook(seam, {});
  ASSERT_EQ(hook.Start(), HookState::kReady);
  EXPECT_EQ(hook.Start(), HookState::kReady);
  EXPECT_THAT(seam.calls(), ElementsAre("Subscribe"));
}

TEST(Hook, AnotherToolOwnsCuptiDisablesWithItsName) {
  FakeSeam seam;
  seam.subscribe_status = absl::AlreadyExistsError("cuptiSubscribe_v2 failed");
  seam.other_tool = "Nsight Systems";
  Hook hook(seam, {});
  StderrCapture capture;
  EXPECT_EQ(hook.Start(), HookState::kDisabled);
  std::string err = capture.Take();
  EXPECT_THAT(err, HasSubstr("CUPTI is already in use by 'Nsight Systems'"));
  EXPECT_THAT(err, HasSubstr("the application runs unchanged"));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_THAT(hook.lifecycle().reason(), HasSubstr("Nsight Systems"));
  EXPECT_FALSE(seam.subscribed());
}

TEST(Hook, NoDriverDisablesWithOneLine) {
  FakeSeam seam;
  seam.subscribe_status = absl::UnavailableError("cuptiSubscribe_v2 failed: CUPTI_ERROR_UNKNOWN");
  Hook hook(seam, {});
  StderrCapture capture;
  EXPECT_EQ(hook.Start(), HookState::kDisabled);
  std::string err = capture.Take();
  EXPECT_THAT(err, HasSubstr("cannot subscribe to CUPTI"));
  EXPECT_THAT(err, HasSubstr("CUPTI_ERROR_UNKNOWN"));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  // Teardown of a disabled hook does not touch CUPTI.
  hook.Stop();
  EXPECT_EQ(hook.lifecycle().state(), HookState::kStopped);
  EXPECT_THAT(seam.calls(), ElementsAre("Subscribe"));
}

TEST(Hook, CallbackDuringInitFallsThrough) {
  FakeSeam seam;
  Hook* hook_ptr = nullptr;
  // CUPTI may deliver a callback from inside Subscribe (e.g. another thread
  // launching while we initialize); fire one from there.
  seam.on_call = [&](const std::string& call) {
    if (call != "Subscribe") return;
    CUpti_CallbackData data = ApiEnter();
    Hook::Callback(hook_ptr, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                   &data);
  };
  Hook hook(seam, {});
  hook_ptr = &hook;
  ASSERT_EQ(hook.Start(), HookState::kReady);
  EXPECT_EQ(hook.callbacks_seen(), 1u);
  EXPECT_EQ(hook.callbacks_fell_through(), 1u);
}

TEST(Hook, CallbackFromAnotherThreadDuringInitFallsThrough) {
  FakeSeam seam;
  Hook* hook_ptr = nullptr;
  seam.on_call = [&](const std::string& call) {
    if (call != "Subscribe") return;
    std::thread([&] {
      CUpti_CallbackData data = ApiEnter();
      Hook::Callback(hook_ptr, CUPTI_CB_DOMAIN_DRIVER_API,
                     CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data);
    }).join();
  };
  Hook hook(seam, {});
  hook_ptr = &hook;
  ASSERT_EQ(hook.Start(), HookState::kReady);
  EXPECT_EQ(hook.callbacks_fell_through(), 1u);
}

TEST(Hook, ReentrantCallbackFallsThrough) {
  FakeSeam seam;
  Hook hook(seam, {});
  ASSERT_EQ(hook.Start(), HookState::kReady);
  CUpti_CallbackData data = ApiEnter();
  {
    // As if the hook itself were calling the driver from inside a callback.
    ReentrancyGuard inside_hook;
    seam.Fire(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data);
  }
  EXPECT_EQ(hook.callbacks_fell_through(), 1u);
  seam.Fire(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data);
  EXPECT_EQ(hook.callbacks_seen(), 2u);
  EXPECT_EQ(hook.callbacks_fell_through(), 1u) << "a callback on a READY hook is handled";
}

TEST(Hook, StopUnsubscribesOnceAndCallbacksFallThroughAfter) {
  FakeSeam seam;
  Hook hook(seam, {});
  ASSERT_EQ(hook.Start(), HookState::kReady);
  hook.Stop();
  hook.Stop();
  EXPECT_EQ(hook.lifecycle().state(), HookState::kStopped);
  EXPECT_THAT(seam.calls(), ElementsAre("Subscribe", "Unsubscribe"));
  CUpti_CallbackData data = ApiEnter();
  Hook::Callback(&hook, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data);
  EXPECT_EQ(hook.callbacks_fell_through(), 1u);
}

TEST(HookConfig, ReadsSessionFromEnvironment) {
  ::setenv("CUPROBE_SESSION", "cuprobe-test-session", 1);
  EXPECT_EQ(HookConfig::FromEnvironment().session, "cuprobe-test-session");
  ::unsetenv("CUPROBE_SESSION");
  EXPECT_EQ(HookConfig::FromEnvironment().session, "");
}

}  // namespace
}  // namespace cuprobe
