// File: tests/unit/hook_capture_range_test.cc
//
// --capture-range cudaProfilerApi through the hook: which launches, kernels,
// copies and sets are traced (the calls between a start and a stop, in
// either API), --capture-range-end (stop, repeat:N, none), a CUPTI that will
// not call back on the profiler calls, a range never started, no profiler
// callback without a range, and the published stats (SessionOutput) the CLI
// reads the ranges from. How the ranges switch CUPTI's activity is in
// hook_range_activity_test.cc.
//
// Part of hook_test (tests/unit/CMakeLists.txt); the rig is in hook_test_util.h.

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cupti_hook/hook.h"
#include "cupti_hook/outputs.h"
#include "cupti_hook/testing/fake_output.h"
#include "cupti_hook/testing/fake_seam.h"
#include "cupti_hook/tracer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/segment.h"
#include "support/log.h"
#include "tests/unit/hook_test_util.h"

namespace cuprobe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::cuprobe::testing::Body;
using ::cuprobe::testing::KernelParams;
using ::cuprobe::testing::Launch;
using ::cuprobe::testing::ProfilerCall;
using ::cuprobe::testing::QueueStepKernel;
using ::cuprobe::testing::Rig;
using ::cuprobe::testing::StderrCapture;

// --capture-range cudaProfilerApi: launches, kernels, copies and sets are
// traced when the call that made them lies between a start and a stop, in
// either API, alone or one inside the other; a kernel that ran after the
// stop but was launched before it counts, and one launched after the stop
// does not. A launch whose ENTER came before another thread's start
// callback, and its EXIT after, keeps the start time its ENTER took.
TEST(Hook, CaptureRangeTracesOnlyCallsBetweenStartAndStop) {
  for (auto [from_activity, activity_on] :
       {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
    SCOPED_TRACE(from_activity ? "launch records from API activity" : "launch callbacks");
    // Activity on the whole run: CUPTI writes the kernels, copies and sets
    // outside the ranges too, and the range check alone keeps them out.
    SCOPED_TRACE(activity_on ? "capture-activity-on" : "activity switched by the ranges");
    Rig rig(60000, "", [&](HookConfig& c) {
      c.capture_profiler_api = true;
      c.launch_api_activity = from_activity;
      c.capture_activity_on = activity_on;
    });
    int k = 0;
    rig.seam.names[&k] = "_Z4stepv";
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    ASSERT_NE(rig.hook.capture_ranges(), nullptr);
    for (CUpti_CallbackId cbid : Hook::kProfilerDriverCallbacks) {
      EXPECT_TRUE(rig.seam.enabled().count({CUPTI_CB_DOMAIN_DRIVER_API, cbid})) << cbid;
    }
    for (CUpti_CallbackId cbid : Hook::kProfilerRuntimeCallbacks) {
      EXPECT_TRUE(rig.seam.enabled().count({CUPTI_CB_DOMAIN_RUNTIME_API, cbid})) << cbid;
    }
    auto p = KernelParams(&k, 1, 32, nullptr);
    // What CUPTI writes for a launch call, in the mode that asks for it.
    auto api = [&](uint32_t correlation) {
      if (!from_activity) return;
      CUpti_ActivityAPI a = {};
      a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
      a.cbid = CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000;
      a.start = 100 * correlation;
      a.end = 100 * correlation + 50;
      a.threadId = 4242;
      a.correlationId = correlation;
      rig.seam.QueueActivity(&a, sizeof(a));
    };
    auto kernel = [&](uint32_t correlation, uint64_t start) {
      QueueStepKernel(rig.seam, correlation, start);
    };
    auto launch = [&](uint32_t correlation) {
      Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, correlation, 100 * correlation,
             100 * correlation + 50);
      api(correlation);
      kernel(correlation, 100 * correlation + 60);
    };
    auto runtime = [&](CUpti_CallbackId cbid, uint32_t correlation) {
      ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_RUNTIME_API, cbid, correlation);
    };
    auto driver = [&](CUpti_CallbackId cbid, uint32_t correlation) {
      ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, cbid, correlation);
    };
    launch(1);  // before any range
    // Range 1: cudaProfilerStart with the driver's cuProfilerStart inside
    // it; closed by the driver's stop alone.
    runtime(CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000, 5);
    driver(CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, 5);
    launch(6);
    CUpti_ActivityMemcpy6 m = {};
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.correlationId = 7;
    rig.seam.QueueActivity(&m, sizeof(m));
    Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 8, 800, 850);
    api(8);
    // Launched while the activity was on, runs after the stop: CUPTI hands
    // its record over later.
    kernel(8, 2000);
    driver(CUPTI_DRIVER_TRACE_CBID_cuProfilerStop, 9);
    launch(10);
    CUpti_ActivityMemset4 s = {};
    s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    s.correlationId = 11;
    rig.seam.QueueActivity(&s, sizeof(s));
    // Range 2: the runtime's start alone; its stop with the driver's inside.
    runtime(CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000, 12);
    launch(13);
    runtime(CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000, 14);
    driver(CUPTI_DRIVER_TRACE_CBID_cuProfilerStop, 14);
    launch(15);
    // Range 3, never closed: the driver's start (id 16) is called back
    // between the ENTER and the EXIT of another thread's launch 18.
    uint64_t scratch = 0;
    CUresult ret = CUDA_SUCCESS;
    CUpti_CallbackData enter_exit = {};
    enter_exit.functionParams = &p;
    enter_exit.functionReturnValue = &ret;
    enter_exit.correlationId = 18;
    enter_exit.correlationData = &scratch;
    enter_exit.callbackSite = CUPTI_API_ENTER;
    rig.seam.now_ns = 1800;
    rig.seam.Fire(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &enter_exit);
    driver(CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, 16);
    enter_exit.callbackSite = CUPTI_API_EXIT;
    rig.seam.now_ns = 1850;
    rig.seam.Fire(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &enter_exit);
    api(18);
    kernel(18, 1900);
    launch(19);
    rig.hook.Stop();

    auto correlations = [&](RecordType type) {
      std::vector<uint64_t> ids;
      for (const auto& w : rig.output.OfType(type)) {
        uint64_t id = 0;  // every record of these types opens with its correlation id
        std::memcpy(&id, w.bytes.data(), sizeof(id));
        ids.push_back(id - ProcessQualifiedId(4242, 0));
      }
      return ids;
    };
    EXPECT_THAT(correlations(RecordType::kLaunch), ElementsAre(6, 8, 13, 18, 19));
    EXPECT_THAT(correlations(RecordType::kKernel), ElementsAre(6, 8, 13, 18, 19));
    EXPECT_THAT(correlations(RecordType::kMemcpy), ElementsAre(7));
    EXPECT_TRUE(rig.output.OfType(RecordType::kMemset).empty());
    EXPECT_EQ(rig.output.last_stats().launches, 5u) << "only captured launches are counted";
    EXPECT_EQ(rig.hook.capture_ranges()->count(), 3);
    EXPECT_EQ(rig.output.last_stats().capture_ranges, 3u) << "published for the CLI";
    EXPECT_TRUE(rig.hook.capture_ranges()->open());
    auto launches = rig.output.OfType(RecordType::kLaunch);
    ASSERT_EQ(launches.size(), 5u);
    EXPECT_EQ(Body<LaunchRecord>(launches[3]).api_start_ns, 1800u) << "the time ENTER took";
  }
}

// Where CUPTI will not call back on the profiler calls, the whole run is
// traced, with one warning; the hook itself stays READY.
TEST(Hook, CaptureRangeWithoutProfilerCallbacksTracesTheWholeRun) {
  Rig rig(60000, "", [](HookConfig& c) { c.capture_profiler_api = true; });
  rig.seam.enable_status = absl::InternalError("CUPTI_ERROR_INVALID_PARAMETER");
  rig.seam.enable_status_domain = CUPTI_CB_DOMAIN_RUNTIME_API;
  StderrCapture capture;
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  EXPECT_EQ(rig.hook.capture_ranges(), nullptr);
  EXPECT_EQ(rig.seam.activity_on().size(), Tracer::kActivityKinds.size()) << "left on";
  int k = 0;
  rig.seam.names[&k] = "_Z4stepv";
  auto p = KernelParams(&k, 1, 32, nullptr);
  Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 3, 300, 350);
  QueueStepKernel(rig.seam, 3, 400);
  rig.hook.Stop();
  EXPECT_EQ(rig.output.OfType(RecordType::kLaunch).size(), 1u);
  EXPECT_EQ(rig.output.OfType(RecordType::kKernel).size(), 1u);
  const std::string err = capture.Take();
  EXPECT_THAT(err, HasSubstr("cannot watch the profiler start and stop calls "
                             "(CUPTI_ERROR_INVALID_PARAMETER); tracing the whole run"));
  EXPECT_THAT(err, ::testing::Not(HasSubstr("never called")));
}

// Standalone mode (no session) says at exit that no range was opened; under
// `cuprobe trace` the CLI says it, from the published count (0 here).
TEST(Hook, CaptureRangeNeverStartedSaysSoAtExit) {
  for (const char* session : {"", "cuprobe-test-session"}) {
    SCOPED_TRACE(*session == '\0' ? "standalone" : "session");
    Rig rig(60000, "", [&](HookConfig& c) {
      c.capture_profiler_api = true;
      c.session = session;
    });
    StderrCapture capture;
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    int k = 0;
    rig.seam.names[&k] = "_Z4stepv";
    auto p = KernelParams(&k, 1, 32, nullptr);
    Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 3, 300, 350);
    rig.hook.Stop();
    EXPECT_TRUE(rig.output.OfType(RecordType::kLaunch).empty());
    EXPECT_EQ(rig.output.last_stats().capture_ranges, 0u);
    const bool said = capture.Take().find(
                          "CUPROBE_CAPTURE_RANGE=cudaProfilerApi: the program never called "
                          "cudaProfilerStart or cuProfilerStart; nothing was traced") !=
                      std::string::npos;
    EXPECT_EQ(said, *session == '\0');
  }
}

// The stats reach the session's header as sums over the processes that
// share it, each adding what it counted since its last publication: the
// CLI reads the capture ranges from there.
TEST(SessionOutput, PublishesStatsAsSumsOverProcesses) {
  absl::StatusOr<Session> session = Session::Create();
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<TraceOutput*> a = SessionOutput::Open(session->name(), 101);
  absl::StatusOr<TraceOutput*> b = SessionOutput::Open(session->name(), 102);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  std::unique_ptr<TraceOutput> first(*a), second(*b);
  TracerStats s;
  s.launches = 10;
  s.capture_ranges = 2;
  first->PublishStats(s, 1000);
  s.launches = 15;
  s.capture_ranges = 3;
  first->PublishStats(s, 2000);  // adds 5 and 1
  first->PublishStats(s, 3000);  // adds nothing
  s.launches = 7;
  s.capture_ranges = 4;
  second->PublishStats(s, 4000);
  const SegmentHeader& h = session->header();
  EXPECT_EQ(h.launches_seen.load(), 22u);
  EXPECT_EQ(h.capture_ranges.load(), 7u);
  EXPECT_EQ(h.heartbeat_ns.load(), 4000u);
  EXPECT_EQ(h.heartbeat_count.load(), 4u);
  first.reset();
  second.reset();
  EXPECT_TRUE(session->Remove().ok());
}

// --capture-range-end: `stop` (and repeat:N) traces the first range(s) and
// nothing after, turning the activity on for none of the later starts; `none`
// ignores the stop calls, so everything from the first start on is traced.
TEST(Hook, CaptureRangeEndStopAndNone) {
  int k = 0;
  auto p = KernelParams(&k, 1, 32, nullptr);
  // Two ranges (ids 10-12 and 20-22), a launch inside each and one after
  // each; how many activity kinds are on after each start and each stop.
  std::vector<size_t> activity_after_start, activity_after_stop;
  const size_t all = Tracer::kActivityKinds.size();
  auto run = [&](Rig& rig) {
    activity_after_start.clear();
    activity_after_stop.clear();
    rig.seam.names[&k] = "_Z4stepv";
    for (uint32_t id : {10u, 20u}) {
      ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_RUNTIME_API,
                   CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000, id);
      // The driver's start inside the runtime's, as CUDA calls it.
      ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart,
                   id);
      activity_after_start.push_back(rig.seam.activity_on().size());
      Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, id + 1, 100, 150);
      ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_RUNTIME_API,
                   CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000, id + 2);
      ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop,
                   id + 2);
      activity_after_stop.push_back(rig.seam.activity_on().size());
      Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, id + 3, 100, 150);
    }
    rig.hook.Stop();
    std::vector<uint64_t> ids;
    for (const auto& w : rig.output.OfType(RecordType::kLaunch)) {
      ids.push_back(Body<LaunchRecord>(w).correlation_id - ProcessQualifiedId(4242, 0));
    }
    return ids;
  };
  {
    Rig rig(60000, "", [](HookConfig& c) {
      c.capture_profiler_api = true;
      c.capture_range_end = *ParseCaptureRangeEnd("stop");
    });
    StderrCapture capture;
    const LogLevel level = CurrentLogLevel();
    SetLogLevel(LogLevel::kInfo);
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    EXPECT_THAT(run(rig), ElementsAre(11));
    EXPECT_THAT(activity_after_start, ElementsAre(all, 0u)) << "the second start: nothing on";
    EXPECT_THAT(activity_after_stop, ElementsAre(0u, 0u));
    EXPECT_EQ(rig.hook.capture_ranges()->count(), 1);
    EXPECT_EQ(rig.output.last_stats().capture_ranges, 1u);
    const std::string err = capture.Take();
    EXPECT_THAT(err, HasSubstr("capture range: 1 range(s) traced, as --capture-range-end "
                               "(CUPROBE_CAPTURE_RANGE_END) asks; later ranges are not"));
    EXPECT_THAT(err, ::testing::Not(HasSubstr("4096")));
    SetLogLevel(level);
  }
  {
    Rig rig(60000, "", [](HookConfig& c) {
      c.capture_profiler_api = true;
      c.capture_range_end = *ParseCaptureRangeEnd("none");
    });
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    EXPECT_THAT(run(rig), ElementsAre(11, 13, 21, 23));
    EXPECT_THAT(activity_after_start, ElementsAre(all, all));
    EXPECT_THAT(activity_after_stop, ElementsAre(all, all)) << "stop calls are ignored";
    EXPECT_EQ(rig.hook.capture_ranges()->count(), 1);
    EXPECT_TRUE(rig.hook.capture_ranges()->open()) << "never closed";
  }
  {
    Rig rig(60000, "", [](HookConfig& c) {
      c.capture_profiler_api = true;
      c.capture_range_end = *ParseCaptureRangeEnd("repeat:2");
    });
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    EXPECT_THAT(run(rig), ElementsAre(11, 21));
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, 30);
    EXPECT_EQ(rig.hook.capture_ranges()->count(), 2) << "a third start opens nothing";
  }
}

TEST(Hook, NoCaptureRangeEnablesNoProfilerCallback) {
  Rig rig;
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  EXPECT_EQ(rig.hook.capture_ranges(), nullptr);
  for (CUpti_CallbackId cbid : Hook::kProfilerDriverCallbacks) {
    EXPECT_FALSE(rig.seam.enabled().count({CUPTI_CB_DOMAIN_DRIVER_API, cbid})) << cbid;
  }
  for (CUpti_CallbackId cbid : Hook::kProfilerRuntimeCallbacks) {
    EXPECT_FALSE(rig.seam.enabled().count({CUPTI_CB_DOMAIN_RUNTIME_API, cbid})) << cbid;
  }
  rig.hook.Stop();
}

}  // namespace
}  // namespace cuprobe
