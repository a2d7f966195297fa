// File: tests/unit/hook_test.cc
//
// The hook's logic against the fake seam and a fake output: what Start
// enables for each trace selection and measuring switch, a second Start,
// the ways Start disables the hook (another tool owns CUPTI, no driver, the
// output or an enable fails), and the configuration read from the
// environment. Launch records, teardown, threads and capture ranges are in
// the other hook_*_test.cc files of this binary.
//
// Part of hook_test (tests/unit/CMakeLists.txt); the rig is in hook_test_util.h.

#include "cupti_hook/hook.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
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
using ::testing::IsSupersetOf;
using ::cuprobe::testing::Body;
using ::cuprobe::testing::KernelParams;
using ::cuprobe::testing::Launch;
using ::cuprobe::testing::NameOf;
using ::cuprobe::testing::Rig;
using ::cuprobe::testing::StderrCapture;

TEST(Hook, StartEnablesOnlyWhatTracingNeeds) {
  Rig rig;
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  std::set<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> want;
  for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) want.insert({CUPTI_CB_DOMAIN_DRIVER_API, cbid});
  want.insert({CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED});
  want.insert({CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING});
  want.insert({CUPTI_CB_DOMAIN_STATE, CUPTI_CBID_STATE_FATAL_ERROR});
  EXPECT_EQ(rig.seam.enabled(), want);
  EXPECT_THAT(rig.seam.calls(), IsSupersetOf({"Subscribe", "ActivityRegisterCallbacks",
                                              "ActivityEnable(10)", "ActivityEnable(1)",
                                              "ActivityEnable(2)"}));
  EXPECT_THAT(rig.seam.calls(), ::testing::Not(Contains(HasSubstr("EnableDomain"))))
      << "never a whole domain";
  EXPECT_THAT(rig.events, Contains("Status(READY)"));
  // The process record and the program's name.
  auto procs = rig.output.OfType(RecordType::kProcess);
  ASSERT_EQ(procs.size(), 1u);
  ProcessRecord p = Body<ProcessRecord>(procs[0]);
  EXPECT_EQ(p.pid, 4242u);
  EXPECT_EQ(NameOf(rig.output, p.name_id), "./app");
  rig.hook.Stop();
}

TEST(Hook, TraceSelectionLaunchesOnlyEnablesNoActivity) {
  Rig rig(60000, "launches");
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
    EXPECT_TRUE(rig.seam.enabled().count({CUPTI_CB_DOMAIN_DRIVER_API, cbid})) << cbid;
  }
  EXPECT_THAT(rig.seam.calls(), ::testing::Not(Contains(HasSubstr("ActivityEnable"))));
  int k = 0;
  rig.seam.names[&k] = "_Z1kv";
  auto p = KernelParams(&k, 1, 32, nullptr);
  Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 1, 10, 20);
  EXPECT_EQ(rig.output.OfType(RecordType::kLaunch).size(), 1u);
  rig.hook.Stop();
  EXPECT_THAT(rig.seam.calls(), ::testing::Not(Contains(HasSubstr("ActivityDisable"))));
}

TEST(Hook, TraceSelectionKernelsOnlyHasNoLaunchCallbacks) {
  Rig rig(60000, "kernels");
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
    EXPECT_FALSE(rig.seam.enabled().count({CUPTI_CB_DOMAIN_DRIVER_API, cbid})) << cbid;
  }
  EXPECT_THAT(rig.seam.calls(), Contains("ActivityEnable(10)"));
  EXPECT_THAT(rig.seam.calls(), ::testing::Not(Contains("ActivityEnable(1)")));
  EXPECT_THAT(rig.seam.calls(), ::testing::Not(Contains("ActivityEnable(2)")));
  rig.hook.Stop();
  EXPECT_THAT(rig.seam.calls(), Contains("ActivityDisable(10)"));
}

// The measuring switch CUPROBE_DIAG=serial-kernels: kernels timed by the
// serialized kernel activity (kind 3) instead of the concurrent one (10),
// enabled and disabled alike; memory activity unchanged.
TEST(Hook, SerialKernelsSwitchTheKernelActivityKind) {
  Rig rig(60000, "", [](HookConfig& c) { c.serial_kernels = true; });
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  EXPECT_THAT(rig.seam.calls(), Contains("ActivityEnable(3)"));
  EXPECT_THAT(rig.seam.calls(), ::testing::Not(Contains("ActivityEnable(10)")));
  EXPECT_THAT(rig.seam.calls(), Contains("ActivityEnable(1)"));
  rig.hook.Stop();
  EXPECT_THAT(rig.seam.calls(), Contains("ActivityDisable(3)"));
  EXPECT_THAT(rig.seam.calls(), ::testing::Not(Contains("ActivityDisable(10)")));
}

TEST(HookConfig, TraceSelectionParsing) {
  HookConfig c;
  EXPECT_TRUE(c.trace_launches && c.trace_kernels && c.trace_memory) << "default: everything";
  EXPECT_THAT(c.SetTraceSelection("memory, launches"), ::testing::IsEmpty());
  EXPECT_TRUE(c.trace_launches);
  EXPECT_FALSE(c.trace_kernels);
  EXPECT_TRUE(c.trace_memory);
  EXPECT_THAT(c.SetTraceSelection("kernels,bogus"), ::testing::ElementsAre("bogus"));
  EXPECT_TRUE(c.trace_kernels);
  EXPECT_FALSE(c.trace_launches);
  EXPECT_THAT(c.SetTraceSelection("all"), ::testing::IsEmpty());
  EXPECT_TRUE(c.trace_launches && c.trace_kernels && c.trace_memory);
}

TEST(Hook, SecondStartIsANoOp) {
  Rig rig;
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  EXPECT_EQ(rig.hook.Start(), HookState::kReady);
  std::vector<std::string> calls = rig.seam.calls();
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "Subscribe"), 1);
  rig.hook.Stop();
}

TEST(Hook, AnotherToolOwnsCuptiDisablesWithItsName) {
  Rig rig;
  rig.seam.subscribe_status = absl::AlreadyExistsError("cuptiSubscribe_v2 failed");
  rig.seam.other_tool = "Nsight Systems";
  StderrCapture capture;
  EXPECT_EQ(rig.hook.Start(), HookState::kDisabled);
  std::string err = capture.Take();
  EXPECT_THAT(err, HasSubstr("CUPTI is already in use by 'Nsight Systems'"));
  EXPECT_THAT(err, HasSubstr("the application runs unchanged"));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_THAT(rig.events, Contains(HasSubstr("Status(DISABLED,CUPTI is already in use")));
  EXPECT_FALSE(rig.seam.subscribed());
  rig.hook.Stop();
  EXPECT_THAT(rig.seam.calls(), ElementsAre("Subscribe")) << "a disabled hook leaves CUPTI alone";
  EXPECT_THAT(rig.events, Contains("Release"));
}

TEST(Hook, NoDriverDisablesWithOneLine) {
  Rig rig;
  rig.seam.subscribe_status = absl::UnavailableError("cuptiSubscribe_v2 failed: CUPTI_ERROR_UNKNOWN");
  StderrCapture capture;
  EXPECT_EQ(rig.hook.Start(), HookState::kDisabled);
  std::string err = capture.Take();
  EXPECT_THAT(err, HasSubstr("cannot subscribe to CUPTI"));
  EXPECT_THAT(err, HasSubstr("is the NVIDIA driver installed?"));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  rig.hook.Stop();
  EXPECT_EQ(rig.hook.lifecycle().state(), HookState::kStopped);
}

TEST(Hook, OutputFailureDisablesBeforeTouchingCupti) {
  FakeSeam seam;
  Hook hook(seam, Rig::MakeConfig(100), [](const HookConfig&) -> absl::StatusOr<TraceOutput*> {
    return absl::FailedPreconditionError("segment 'x' is not a cuprobe session (magic 0x0)");
  });
  StderrCapture capture;
  EXPECT_EQ(hook.Start(), HookState::kDisabled);
  EXPECT_THAT(capture.Take(), HasSubstr("is not a cuprobe session"));
  EXPECT_TRUE(seam.calls().empty());
  hook.Stop();
}

TEST(Hook, EnableFailureDisables) {
  Rig rig;
  rig.seam.enable_status = absl::InternalError("cuptiEnableCallback failed");
  StderrCapture capture;
  EXPECT_EQ(rig.hook.Start(), HookState::kDisabled);
  EXPECT_THAT(capture.Take(), HasSubstr("cannot enable tracing"));
  rig.hook.Stop();
  EXPECT_THAT(rig.seam.calls(), Contains("Unsubscribe"));
}

TEST(HookConfig, ReadsEnvironment) {
  ::setenv("CUPROBE_SESSION", "cuprobe-test-session", 1);
  ::setenv("CUPROBE_OUTPUT", "/tmp/x.json", 1);
  ::setenv("CUPROBE_INTERVAL_MS", "25", 1);
  HookConfig c = HookConfig::FromEnvironment();
  EXPECT_EQ(c.session, "cuprobe-test-session");
  EXPECT_EQ(c.output, "/tmp/x.json");
  EXPECT_EQ(c.interval_ms, 25u);
  EXPECT_EQ(c.pid, static_cast<uint32_t>(::getpid()));
  EXPECT_THAT(c.program, HasSubstr("hook_test"));
  ::unsetenv("CUPROBE_SESSION");
  ::unsetenv("CUPROBE_OUTPUT");
  ::setenv("CUPROBE_INTERVAL_MS", "0", 1);  // out of range: default
  c = HookConfig::FromEnvironment();
  EXPECT_EQ(c.session, "");
  EXPECT_EQ(c.output, absl::StrCat("cuprobe-", ::getpid(), ".pftrace"));
  EXPECT_EQ(c.interval_ms, 100u);
  ::unsetenv("CUPROBE_INTERVAL_MS");
  EXPECT_FALSE(c.launch_api_activity) << "launch callbacks by default";
  ::setenv("CUPROBE_LAUNCH_TIMES", "activity", 1);
  EXPECT_TRUE(HookConfig::FromEnvironment().launch_api_activity);
  ::setenv("CUPROBE_LAUNCH_TIMES", "bogus", 1);  // a warning; the default
  EXPECT_FALSE(HookConfig::FromEnvironment().launch_api_activity);
  ::unsetenv("CUPROBE_LAUNCH_TIMES");
  EXPECT_FALSE(c.no_linger) << "ranges back to back share one switch by default";
  ::setenv("CUPROBE_DIAG", "no-linger", 1);
  EXPECT_TRUE(HookConfig::FromEnvironment().no_linger);
  EXPECT_FALSE(c.no_prewarm) << "a capture range's activity is pre-warmed by default";
  ::setenv("CUPROBE_DIAG", "no-prewarm,no-linger", 1);
  EXPECT_TRUE(HookConfig::FromEnvironment().no_prewarm);
  ::unsetenv("CUPROBE_DIAG");
  EXPECT_FALSE(c.list_kernels) << "module loads publish their kernels only for `cuprobe list`";
  ::setenv("CUPROBE_LIST", "1", 1);
  EXPECT_TRUE(HookConfig::FromEnvironment().list_kernels);
  ::setenv("CUPROBE_LIST", "yes", 1);
  EXPECT_FALSE(HookConfig::FromEnvironment().list_kernels);
  ::unsetenv("CUPROBE_LIST");
  EXPECT_FALSE(c.capture_profiler_api) << "the whole run by default";
  ::setenv("CUPROBE_CAPTURE_RANGE", "cudaProfilerApi", 1);
  EXPECT_TRUE(HookConfig::FromEnvironment().capture_profiler_api);
  ::setenv("CUPROBE_CAPTURE_RANGE", "none", 1);
  EXPECT_FALSE(HookConfig::FromEnvironment().capture_profiler_api);
  ::setenv("CUPROBE_CAPTURE_RANGE", "nvtx", 1);  // a warning; the whole run
  {
    StderrCapture capture;
    EXPECT_FALSE(HookConfig::FromEnvironment().capture_profiler_api);
    EXPECT_THAT(capture.Take(), HasSubstr("CUPROBE_CAPTURE_RANGE: ignoring unknown value 'nvtx' "
                                          "(expected cudaProfilerApi or none); using none"));
  }
  ::unsetenv("CUPROBE_CAPTURE_RANGE");
  EXPECT_EQ(c.capture_range_end.max_ranges, CaptureRanges::kMaxRanges) << "repeat by default";
  EXPECT_FALSE(c.capture_range_end.ignore_stop);
  ::setenv("CUPROBE_CAPTURE_RANGE_END", "stop", 1);  // without a range: a warning
  {
    StderrCapture capture;
    EXPECT_EQ(HookConfig::FromEnvironment().capture_range_end.max_ranges,
              CaptureRanges::kMaxRanges);
    EXPECT_THAT(capture.Take(), HasSubstr("CUPROBE_CAPTURE_RANGE_END has no effect without "
                                          "CUPROBE_CAPTURE_RANGE=cudaProfilerApi"));
  }
  ::setenv("CUPROBE_CAPTURE_RANGE", "cudaProfilerApi", 1);
  ::setenv("CUPROBE_CAPTURE_RANGE_END", "repeat:3", 1);
  EXPECT_EQ(HookConfig::FromEnvironment().capture_range_end.max_ranges, 3);
  ::setenv("CUPROBE_CAPTURE_RANGE_END", "none", 1);
  EXPECT_TRUE(HookConfig::FromEnvironment().capture_range_end.ignore_stop);
  ::setenv("CUPROBE_CAPTURE_RANGE_END", "", 1);  // what the CLI sets without a range
  {
    StderrCapture capture;
    EXPECT_EQ(HookConfig::FromEnvironment().capture_range_end.max_ranges,
              CaptureRanges::kMaxRanges);
    EXPECT_EQ(capture.Take(), "");
  }
  ::setenv("CUPROBE_CAPTURE_RANGE_END", "repeat:x", 1);  // a warning; repeat
  {
    StderrCapture capture;
    EXPECT_EQ(HookConfig::FromEnvironment().capture_range_end.max_ranges,
              CaptureRanges::kMaxRanges);
    EXPECT_THAT(capture.Take(),
                HasSubstr("CUPROBE_CAPTURE_RANGE_END: 'repeat:x': the number of ranges must be 1 "
                          "to 4096; using repeat"));
  }
  ::unsetenv("CUPROBE_CAPTURE_RANGE_END");
  ::unsetenv("CUPROBE_CAPTURE_RANGE");
}

}  // namespace
}  // namespace cuprobe
