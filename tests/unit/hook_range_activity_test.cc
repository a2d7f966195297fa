// File: tests/unit/hook_range_activity_test.cc
//
// How capture ranges switch CUPTI's activity through the hook: on only
// inside ranges, left off past the last range, kept on
// (capture-activity-on) or refused, turned on at the first context
// (activity-at-context), shared by ranges back to back (and switched at
// every stop with no-linger), and left on until the program's first launch
// returns (the pre-warm).
//
// Part of hook_test (tests/unit/CMakeLists.txt); the rig is in hook_test_util.h.

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cupti_hook/hook.h"
#include "cupti_hook/testing/fake_output.h"
#include "cupti_hook/testing/fake_seam.h"
#include "cupti_hook/tracer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/log.h"
#include "tests/unit/hook_test_util.h"

namespace cuprobe {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using ::cuprobe::testing::Body;
using ::cuprobe::testing::FirstLaunchReturns;
using ::cuprobe::testing::KernelParams;
using ::cuprobe::testing::Launch;
using ::cuprobe::testing::ProfilerCall;
using ::cuprobe::testing::QueueStepKernel;
using ::cuprobe::testing::Rig;
using ::cuprobe::testing::StderrCapture;

// With a capture range CUPTI's kernel, memcpy and memset activity is on
// only while a range is open: off from Start (after Start has checked that
// CUPTI can turn it on), on at a start call before the range opens, off at
// the stop call that closes it, and left alone by the nested call of the
// other API. In both ways of recording launches; the launch calls' API
// activity is not switched (only teardown turns it off).
TEST(Hook, CaptureRangeTurnsActivityOnOnlyInsideRanges) {
  for (bool from_activity : {false, true}) {
    SCOPED_TRACE(from_activity ? "launch records from API activity" : "launch callbacks");
    Rig rig(60000, "", [&](HookConfig& c) {
      c.capture_profiler_api = true;
      c.launch_api_activity = from_activity;
    });
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    // The launch calls' API activity (when launch records come from it)
    // stays on: the range filters its records.
    std::set<std::string> apis;
    if (from_activity) {
      for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
        apis.insert(absl::StrCat("driver ", cbid));
      }
      for (CUpti_CallbackId cbid : Tracer::kRuntimeLaunchApis) {
        apis.insert(absl::StrCat("runtime ", cbid));
      }
    }
    std::set<std::string> all = apis;
    for (CUpti_ActivityKind kind : Tracer::kActivityKinds) all.insert(absl::StrCat("kind ", kind));
    EXPECT_THAT(rig.seam.calls(), Contains("ActivityEnable(10)")) << "checked at Start";
    if (!from_activity) {  // (without launch callbacks, no pre-warm)
      EXPECT_EQ(rig.seam.activity_on(), all) << "on until the first launch returns";
      FirstLaunchReturns(rig);
    }
    EXPECT_EQ(rig.seam.activity_on(), apis) << "kinds off before the first start call";
    auto enables = [&] {
      auto calls = rig.seam.calls();
      return std::count(calls.begin(), calls.end(), "ActivityEnable(10)");
    };
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_RUNTIME_API,
                 CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000, 5);
    EXPECT_EQ(rig.seam.activity_on(), all);
    const auto after_start = enables();
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, 5);
    EXPECT_EQ(enables(), after_start) << "the driver's call inside the runtime's";
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop, 9);
    EXPECT_EQ(rig.seam.activity_on(), apis);
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_RUNTIME_API,
                 CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000, 10);
    EXPECT_EQ(rig.seam.activity_on(), apis) << "a stop with no range open";
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, 12);
    EXPECT_EQ(rig.seam.activity_on(), all);
    rig.hook.Stop();  // the range is still open
    EXPECT_THAT(rig.seam.activity_on(), IsEmpty());
    EXPECT_EQ(rig.hook.capture_ranges()->count(), 2);
  }
}

// Past the last range a start call opens nothing, and turns nothing on.
TEST(Hook, CaptureRangePastTheLastRangeLeavesActivityOff) {
  Rig rig(60000, "", [](HookConfig& c) { c.capture_profiler_api = true; });
  StderrCapture capture;
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  uint32_t id = 10;
  for (int i = 0; i < CaptureRanges::kMaxRanges; ++i, id += 2) {
    // Not back to back: each stop turns the activity off.
    rig.seam.now_ns += 2 * RangeActivity::kBackToBackNs;
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, id);
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop,
                 id + 1);
  }
  EXPECT_THAT(rig.seam.activity_on(), IsEmpty());
  for (int i = 0; i < 2; ++i, id += 2) {
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, id);
    EXPECT_THAT(rig.seam.activity_on(), IsEmpty()) << "start " << i << " past the last range";
  }
  EXPECT_EQ(rig.hook.capture_ranges()->count(), CaptureRanges::kMaxRanges);
  rig.hook.Stop();
  EXPECT_THAT(capture.Take(), HasSubstr("4096 ranges traced; later ranges are not"));
}

// CUPROBE_DIAG=capture-activity-on: the activity stays on, only records are
// filtered. A CUPTI that refuses to turn it on at a start call gets one
// warning, and the range still counts its launches.
TEST(Hook, CaptureRangeActivitySwitchOffOrRefused) {
  {
    Rig rig(60000, "", [](HookConfig& c) {
      c.capture_profiler_api = true;
      c.capture_activity_on = true;
    });
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    EXPECT_EQ(rig.seam.activity_on().size(), Tracer::kActivityKinds.size());
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, 5);
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop, 9);
    EXPECT_EQ(rig.seam.activity_on().size(), Tracer::kActivityKinds.size());
    rig.hook.Stop();
    EXPECT_THAT(rig.seam.activity_on(), IsEmpty());
  }
  Rig rig(60000, "", [](HookConfig& c) { c.capture_profiler_api = true; });
  StderrCapture capture;
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  FirstLaunchReturns(rig);  // so that both ranges turn the activity on
  rig.seam.activity_enable_status = absl::InternalError("CUPTI_ERROR_NOT_COMPATIBLE");
  int k = 0;
  rig.seam.names[&k] = "_Z4stepv";
  auto p = KernelParams(&k, 1, 32, nullptr);
  for (uint32_t id : {10u, 20u}) {
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, id);
    Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, id + 1, 300, 350);
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop,
                 id + 2);
  }
  rig.hook.Stop();
  EXPECT_EQ(rig.output.OfType(RecordType::kLaunch).size(), 2u);
  const std::string err = capture.Take();
  const std::string warning =
      "CUPROBE_CAPTURE_RANGE=cudaProfilerApi: cannot turn CUPTI's activity on at cuProfilerStart "
      "(CUPTI_ERROR_NOT_COMPATIBLE); kernels, copies and sets of the range may be missing";
  EXPECT_THAT(err, HasSubstr(warning));
  EXPECT_EQ(err.find(warning), err.rfind(warning)) << "said once: " << err;
}

// CUPROBE_DIAG=activity-at-context: the activity kinds are off after
// Start and on from the first context's creation; a second context changes
// nothing, and teardown turns them off.
TEST(Hook, ActivityAtContextTurnsKindsOnAtTheFirstContext) {
  Rig rig(60000, "", [](HookConfig& c) { c.activity_at_context = true; });
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  EXPECT_THAT(rig.seam.calls(), Contains("ActivityEnable(10)")) << "checked at Start";
  EXPECT_THAT(rig.seam.activity_on(), IsEmpty());
  CUpti_ResourceData r = {};
  rig.seam.Fire(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED, &r);
  EXPECT_EQ(rig.seam.activity_on().size(), Tracer::kActivityKinds.size());
  auto calls = rig.seam.calls();
  const auto enables = std::count(calls.begin(), calls.end(), "ActivityEnable(10)");
  rig.seam.Fire(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED, &r);
  calls = rig.seam.calls();
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "ActivityEnable(10)"), enables);
  rig.hook.Stop();
  EXPECT_THAT(rig.seam.activity_on(), IsEmpty());
}

// Ranges back to back share one switch: the first range turns the
// activity off at its stop; a range that opens less than kBackToBackNs
// after the one before leaves it on at its stop (the next start finds it
// on), and the watcher turns it off once no range has opened for that long.
// The gaps' kernels, recorded meanwhile, stay out of the trace; a range
// after a longer gap turns it off at its stop again.
TEST(Hook, CaptureRangesBackToBackShareOneSwitch) {
  Rig rig(60000, "", [](HookConfig& c) { c.capture_profiler_api = true; });
  StderrCapture capture;
  const LogLevel level = CurrentLogLevel();
  SetLogLevel(LogLevel::kDebug);
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  FirstLaunchReturns(rig);
  auto count = [&](const std::string& call) {
    auto calls = rig.seam.calls();
    return std::count(calls.begin(), calls.end(), call);
  };
  const auto enables_at_start = count("ActivityEnable(10)");
  const size_t all = Tracer::kActivityKinds.size();
  constexpr uint64_t kMs = 1'000'000;
  // One range: a start at `at`, a kernel inside, a stop 0.2 ms later, and a
  // kernel launched after the stop.
  auto range = [&](uint64_t at, uint32_t id) {
    rig.seam.now_ns = at;
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, id);
    QueueStepKernel(rig.seam, id + 1, at + 10);
    rig.seam.now_ns = at + kMs / 5;
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop,
                 id + 2);
    QueueStepKernel(rig.seam, id + 3, at + 20);
  };
  // CUPTI's clock moves to `at`; the watcher, which wakes 1 ms after a
  // lingering close (and again while the clock says it is not yet due),
  // gets `real_ms` of real time to act on it.
  auto wait = [&](uint64_t at, int real_ms) {
    rig.seam.now_ns = at;
    const absl::Time deadline = absl::Now() + absl::Milliseconds(real_ms);
    while (!rig.seam.activity_on().empty() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  };

  range(10 * kMs, 10);  // the first range: off at its stop
  EXPECT_THAT(rig.seam.activity_on(), IsEmpty());
  EXPECT_EQ(count("ActivityEnable(10)"), enables_at_start + 1);
  range(10 * kMs + kMs / 5 + kMs / 2, 20);  // 0.5 ms after: lingers
  EXPECT_EQ(rig.seam.activity_on().size(), all);
  EXPECT_EQ(count("ActivityEnable(10)"), enables_at_start + 2);
  const auto disables = count("ActivityDisable(10)");
  range(11 * kMs, 30);  // 0.3 ms after: found on, left on
  EXPECT_EQ(count("ActivityEnable(10)"), enables_at_start + 2) << "no switch for this range";
  EXPECT_EQ(count("ActivityDisable(10)"), disables);
  EXPECT_EQ(rig.seam.activity_on().size(), all);
  const uint64_t closed = 11 * kMs + kMs / 5;
  wait(closed + kMs / 2, 50);
  EXPECT_EQ(rig.seam.activity_on().size(), all) << "0.5 ms since the close";
  wait(closed + kMs, 10000);
  EXPECT_THAT(rig.seam.activity_on(), IsEmpty()) << "1 ms since the close";
  EXPECT_EQ(rig.hook.watcher()->ticks(), 0u) << "woken, not ticked (interval 60 s)";
  EXPECT_GT(rig.hook.watcher()->wakes(), 0u);
  range(20 * kMs, 40);  // 8.8 ms after: off at its stop
  EXPECT_THAT(rig.seam.activity_on(), IsEmpty());
  EXPECT_EQ(count("ActivityEnable(10)"), enables_at_start + 3);
  rig.hook.Stop();
  // Every range's kernel, none of the gaps' (those of ranges 2 and 3 were
  // recorded by CUPTI while the activity lingered, and filtered out).
  std::vector<uint64_t> ids;
  for (const auto& w : rig.output.OfType(RecordType::kKernel)) {
    ids.push_back(Body<KernelRecord>(w).correlation_id - ProcessQualifiedId(4242, 0));
  }
  EXPECT_THAT(ids, UnorderedElementsAre(11, 21, 31, 41));
  EXPECT_EQ(rig.hook.capture_ranges()->count(), 4);
  // The switches the ranges made (on: ranges 1, 2 and 4; off: the stops of
  // ranges 1 and 4, and the watcher), for CUPROBE_LOG=debug.
  const std::string err = capture.Take();
  EXPECT_THAT(err, HasSubstr("capture ranges: CUPTI's activity turned on 3 time(s)"));
  EXPECT_THAT(err, HasSubstr("; off 3 time(s)"));
  SetLogLevel(level);
}

// Ranges back to back still switch off at the stop of the last range the
// run may open (repeat:2), and of a range CUPTI refused to turn the activity
// on for, so that the next start tries again.
TEST(Hook, CaptureRangesBackToBackSwitchOffAtTheLastRangeAndAfterARefusal) {
  auto enables = [](const Rig& rig) {
    auto calls = rig.seam.calls();
    return std::count(calls.begin(), calls.end(), "ActivityEnable(10)");
  };
  auto start = [](Rig& rig, uint32_t id) {
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, id);
  };
  auto stop = [](Rig& rig, uint32_t id) {
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop, id);
  };
  {
    Rig rig(60000, "", [](HookConfig& c) {
      c.capture_profiler_api = true;
      c.capture_range_end = *ParseCaptureRangeEnd("repeat:2");
    });
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    start(rig, 10);  // CUPTI's clock stands still: every range back to back
    stop(rig, 11);
    start(rig, 12);
    stop(rig, 13);
    EXPECT_THAT(rig.seam.activity_on(), IsEmpty()) << "no range can open again";
    start(rig, 14);
    EXPECT_THAT(rig.seam.activity_on(), IsEmpty());
    rig.hook.Stop();
  }
  Rig rig(60000, "", [](HookConfig& c) { c.capture_profiler_api = true; });
  StderrCapture capture;
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  FirstLaunchReturns(rig);
  const auto at_start = enables(rig);
  start(rig, 10);
  stop(rig, 11);
  rig.seam.activity_enable_status = absl::InternalError("CUPTI_ERROR_NOT_READY");
  start(rig, 12);  // back to back, and refused
  EXPECT_EQ(enables(rig), at_start + 2);
  stop(rig, 13);
  rig.seam.activity_enable_status = absl::OkStatus();
  start(rig, 14);  // back to back: tries again, as the range before did not linger
  EXPECT_EQ(enables(rig), at_start + 3);
  EXPECT_EQ(rig.seam.activity_on().size(), Tracer::kActivityKinds.size());
  rig.hook.Stop();
  EXPECT_THAT(capture.Take(), HasSubstr("cannot turn CUPTI's activity on"));
}

// CUPROBE_DIAG=no-linger (what bench/range_switch.sh compares with): every
// stop switches the activity off, back to back or not.
TEST(Hook, CaptureRangesSwitchAtEveryStopWithNoLinger) {
  Rig rig(60000, "", [](HookConfig& c) {
    c.capture_profiler_api = true;
    c.no_linger = true;
  });
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  FirstLaunchReturns(rig);
  auto count = [&](const std::string& call) {
    auto calls = rig.seam.calls();
    return std::count(calls.begin(), calls.end(), call);
  };
  const auto enables = count("ActivityEnable(10)");
  const auto disables = count("ActivityDisable(10)");
  for (uint32_t id = 10; id < 40; id += 10) {  // CUPTI's clock stands still
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, id);
    EXPECT_EQ(rig.seam.activity_on().size(), Tracer::kActivityKinds.size());
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop,
                 id + 1);
    EXPECT_THAT(rig.seam.activity_on(), IsEmpty()) << "range " << id / 10;
  }
  EXPECT_EQ(count("ActivityEnable(10)"), enables + 3);
  EXPECT_EQ(count("ActivityDisable(10)"), disables + 3);
  rig.hook.Stop();
}

// CUPTI sets itself up at the first launch after its activity is first on
// in a context (1.5-3.5 ms on the H100): with a capture range the activity
// stays on from Start until the program's first launch returns, so that
// this is not paid inside the first range. A range opened before then
// keeps it; CUPROBE_DIAG=no-prewarm turns it off at Start.
TEST(Hook, CaptureRangeLeavesActivityOnUntilTheFirstLaunchReturns) {
  const size_t all = Tracer::kActivityKinds.size();
  auto count = [](const Rig& rig, const std::string& call) {
    auto calls = rig.seam.calls();
    return std::count(calls.begin(), calls.end(), call);
  };
  int k = 0;
  auto p = KernelParams(&k, 1, 32, nullptr);
  auto site = [&](Rig& rig, CUpti_ApiCallbackSite where, uint32_t correlation) {
    uint64_t scratch = 0;
    CUpti_CallbackData data = {};
    data.functionParams = &p;
    data.correlationId = correlation;
    data.correlationData = &scratch;
    data.callbackSite = where;
    rig.seam.Fire(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data);
  };
  {
    SCOPED_TRACE("the first launch outside any range");
    Rig rig(60000, "", [](HookConfig& c) { c.capture_profiler_api = true; });
    rig.seam.names[&k] = "_Z1kv";
    StderrCapture capture;
    const LogLevel level = CurrentLogLevel();
    SetLogLevel(LogLevel::kDebug);
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    EXPECT_EQ(rig.seam.activity_on().size(), all);
    EXPECT_EQ(count(rig, "ActivityDisable(10)"), 0);
    site(rig, CUPTI_API_ENTER, 1);
    EXPECT_EQ(rig.seam.activity_on().size(), all) << "the launch is under way";
    site(rig, CUPTI_API_EXIT, 1);
    EXPECT_THAT(rig.seam.activity_on(), IsEmpty()) << "the first launch returned";
    EXPECT_EQ(count(rig, "ActivityDisable(10)"), 1);
    Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 2, 10, 20);
    EXPECT_EQ(count(rig, "ActivityDisable(10)"), 1) << "once";
    EXPECT_EQ(count(rig, "ActivityEnable(10)"), 1) << "Start's";
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, 3);
    EXPECT_EQ(rig.seam.activity_on().size(), all);
    Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 4, 30, 40);
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop, 5);
    EXPECT_THAT(rig.seam.activity_on(), IsEmpty());
    rig.hook.Stop();
    // Only the range's launch is traced; the pre-warm's switch is not
    // counted as the ranges'.
    std::vector<uint64_t> ids;
    for (const auto& w : rig.output.OfType(RecordType::kLaunch)) {
      ids.push_back(Body<LaunchRecord>(w).correlation_id - ProcessQualifiedId(4242, 0));
    }
    EXPECT_THAT(ids, ElementsAre(4));
    const std::string err = capture.Take();
    EXPECT_THAT(err, HasSubstr("CUPTI's activity turned on 1 time(s)"));
    EXPECT_THAT(err, HasSubstr("; off 1 time(s)"));
    SetLogLevel(level);
  }
  {
    SCOPED_TRACE("a range opened before the first launch");
    Rig rig(60000, "", [](HookConfig& c) { c.capture_profiler_api = true; });
    rig.seam.names[&k] = "_Z1kv";
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, 1);
    Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 2, 10, 20);
    EXPECT_EQ(rig.seam.activity_on().size(), all) << "the range's launch returned";
    EXPECT_EQ(count(rig, "ActivityEnable(10)"), 1) << "found on: not turned on again";
    ProfilerCall(rig.seam, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop, 3);
    EXPECT_THAT(rig.seam.activity_on(), IsEmpty()) << "the first range's stop";
    Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 4, 30, 40);
    EXPECT_EQ(count(rig, "ActivityDisable(10)"), 1);
    rig.hook.Stop();
  }
  {
    SCOPED_TRACE("--trace launches: no activity to pre-warm");
    Rig rig(60000, "launches", [](HookConfig& c) { c.capture_profiler_api = true; });
    rig.seam.names[&k] = "_Z1kv";
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    EXPECT_THAT(rig.seam.activity_on(), IsEmpty());
    Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 1, 10, 20);
    EXPECT_EQ(count(rig, "ActivityDisable(10)"), 0);
    EXPECT_EQ(count(rig, "ActivityEnable(10)"), 0);
    rig.hook.Stop();
  }
  {
    SCOPED_TRACE("CUPROBE_DIAG=no-prewarm");
    Rig rig(60000, "", [](HookConfig& c) {
      c.capture_profiler_api = true;
      c.no_prewarm = true;
    });
    rig.seam.names[&k] = "_Z1kv";
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    EXPECT_THAT(rig.seam.activity_on(), IsEmpty());
    const auto disables = count(rig, "ActivityDisable(10)");
    Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 1, 10, 20);
    EXPECT_EQ(count(rig, "ActivityDisable(10)"), disables);
    rig.hook.Stop();
  }
}

}  // namespace
}  // namespace cuprobe
