// The hook's logic against the fake seam and a fake output: init, callbacks,
// tracing, and the teardown order.
#include "cupti_hook/hook.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cupti_hook/outputs.h"
#include "cupti_hook/testing/fake_output.h"
#include "cupti_hook/testing/fake_seam.h"
#include "cupti_hook/tracer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/segment.h"
#include "support/log.h"

namespace cuprobe {
namespace {

using ::testing::Contains;
using ::testing::IsEmpty;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;
using ::testing::UnorderedElementsAre;

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

template <typename T>
T Body(const FakeOutput::Written& w) {
  T t;
  EXPECT_GE(w.bytes.size(), sizeof(T));
  std::memcpy(&t, w.bytes.data(), sizeof(T));
  return t;
}

std::string NameOf(const FakeOutput& out, uint64_t id) {
  for (const auto& w : out.OfType(RecordType::kName)) {
    auto n = Body<NameRecord>(w);
    if (n.name_id == id) {
      return std::string(reinterpret_cast<const char*>(w.bytes.data()) + sizeof(NameRecord),
                         n.length);
    }
  }
  return "<missing>";
}

// A hook wired to a fake seam and output, with a short watcher interval.
struct Rig {
  std::vector<std::string> events;
  FakeSeam seam;
  FakeOutput output{&events};
  HookConfig config;
  Hook hook;

  // A long default interval: no watcher tick touches the fakes while a test
  // reads them (Stop wakes the watcher at once); tests of ticks pass their own.
  // `tweak` changes the configuration further (measuring switches).
  explicit Rig(uint32_t interval_ms = 60000, std::string_view trace = "",
               const std::function<void(HookConfig&)>& tweak = {})
      : hook(seam, MakeConfig(interval_ms, trace, tweak),
             [this](const HookConfig&) -> absl::StatusOr<TraceOutput*> { return &output; }) {
    seam.events = &events;
  }
  static HookConfig MakeConfig(uint32_t interval_ms, std::string_view trace = "",
                               const std::function<void(HookConfig&)>& tweak = {}) {
    HookConfig c;
    c.pid = 4242;
    c.program = "./app";
    c.interval_ms = interval_ms;
    if (tweak) tweak(c);
    if (!trace.empty()) {
      EXPECT_THAT(c.SetTraceSelection(trace), ::testing::IsEmpty());
    }
    return c;
  }
};

// Fires one launch (ENTER then EXIT) as CUPTI would.
void Launch(FakeSeam& seam, CUpti_CallbackId cbid, void* params, uint32_t correlation,
            uint64_t t_enter, uint64_t t_exit) {
  uint64_t scratch = 0;
  CUresult ret = CUDA_SUCCESS;
  CUpti_CallbackData data = {};
  data.functionName = "cuLaunchKernel";
  data.functionParams = params;
  data.functionReturnValue = &ret;
  data.correlationId = correlation;
  data.correlationData = &scratch;
  data.callbackSite = CUPTI_API_ENTER;
  seam.now_ns = t_enter;
  seam.Fire(CUPTI_CB_DOMAIN_DRIVER_API, cbid, &data);
  data.callbackSite = CUPTI_API_EXIT;
  seam.now_ns = t_exit;
  seam.Fire(CUPTI_CB_DOMAIN_DRIVER_API, cbid, &data);
}

// Fires one cuLaunchKernel (ENTER then EXIT) straight into the hook, as
// CUPTI does on the launching thread; unlike Launch, it touches no shared
// fake state, so many threads may call it at once.
void LaunchFromThisThread(Hook& hook, cuLaunchKernel_params* params, uint32_t correlation) {
  uint64_t scratch = 0;
  CUpti_CallbackData data = {};
  data.functionParams = params;
  data.correlationId = correlation;
  data.correlationData = &scratch;
  data.callbackSite = CUPTI_API_ENTER;
  Hook::Callback(&hook, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data);
  data.callbackSite = CUPTI_API_EXIT;
  Hook::Callback(&hook, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data);
}

cuLaunchKernel_params KernelParams(void* f, unsigned gx, unsigned bx, void* stream) {
  cuLaunchKernel_params p = {};
  p.f = static_cast<CUfunction>(f);
  p.gridDimX = gx;
  p.gridDimY = 2;
  p.gridDimZ = 1;
  p.blockDimX = bx;
  p.blockDimY = 1;
  p.blockDimZ = 1;
  p.sharedMemBytes = 128;
  p.hStream = static_cast<CUstream>(stream);
  return p;
}

// With a capture range, the activity stays on from Start until the
// program's first launch returns (Hook::prewarm_pending_): one launch, at
// CUPTI's current clock, so that tests of the ranges' own switching start
// with it off.
void FirstLaunchReturns(Rig& rig) {
  static int k = 0;
  rig.seam.names[&k] = "_Z5firstv";
  auto p = KernelParams(&k, 1, 32, nullptr);
  Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 1, rig.seam.now_ns,
         rig.seam.now_ns);
}

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

// The tracer's measuring switches (CUPROBE_DIAG) choose the launch handler
// once: no-launch-records counts launches and writes no record;
// no-timestamps writes records without an API start time; none: both times.
TEST(Hook, TracerMeasuringSwitchesChooseTheLaunchHandler) {
  for (int mode = 0; mode < 3; ++mode) {
    SCOPED_TRACE(mode);
    Rig rig(60000, "launches", [mode](HookConfig& c) {
      c.tracer_diag.no_launch_records = mode == 1;
      c.tracer_diag.no_timestamps = mode == 2;
    });
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    int k = 0;
    rig.seam.names[&k] = "_Z1kv";
    auto p = KernelParams(&k, 8, 64, nullptr);
    Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 5, 10, 20);
    Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 6, 30, 45);
    rig.hook.Stop();
    EXPECT_EQ(rig.output.last_stats().launches, 2u);
    auto launches = rig.output.OfType(RecordType::kLaunch);
    if (mode == 1) {
      EXPECT_TRUE(launches.empty());
      continue;
    }
    ASSERT_EQ(launches.size(), 2u);
    LaunchRecord r = Body<LaunchRecord>(launches[1]);
    EXPECT_EQ(r.api_end_ns, 45u);
    // Untimed: ENTER left the per-call slot as CUPTI gave it (zero here).
    EXPECT_EQ(r.api_start_ns, mode == 2 ? 0u : 30u);
  }
}

// Launch records from API activity (CUPROBE_LAUNCH_TIMES=activity): no
// launch callback is enabled; the driver API activity of each driver launch
// call and the runtime API activity of each runtime launch call are, one by
// one, after the activity kinds, and disabled at Stop. A launch call's
// activity record, driver or runtime, becomes a launch record with its
// times, thread and result and an unknown stream (the kernel record fills
// the rest when the trace is read); other calls' records are ignored, and a
// launch callback (as late attach enables them) writes no second record.
TEST(Hook, LaunchRecordsFromApiActivity) {
  Rig rig(60000, "", [](HookConfig& c) { c.launch_api_activity = true; });
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
    EXPECT_FALSE(rig.seam.enabled().count({CUPTI_CB_DOMAIN_DRIVER_API, cbid})) << cbid;
    EXPECT_THAT(rig.seam.calls(), Contains(absl::StrCat("ActivityEnableDriverApi(", cbid, ",1)")));
  }
  for (CUpti_CallbackId cbid : Tracer::kRuntimeLaunchApis) {
    EXPECT_THAT(rig.seam.calls(), Contains(absl::StrCat("ActivityEnableRuntimeApi(", cbid, ",1)")));
  }
  // CUPTI's thread ids are the OS's (gettid) before any activity is enabled.
  const std::vector<std::string> calls = rig.seam.calls();
  auto position = [&](const std::string& call) {
    return std::find(calls.begin(), calls.end(), call) - calls.begin();
  };
  ASSERT_THAT(calls, Contains("ActivityEnable(10)"));
  ASSERT_THAT(calls, Contains("ActivityUseSystemThreadIds()"));
  EXPECT_LT(position("ActivityUseSystemThreadIds()"), position("ActivityEnable(10)"));
  EXPECT_LT(position("ActivityEnable(10)"),
            position(absl::StrCat("ActivityEnableDriverApi(", Tracer::kLaunchCallbacks[0], ",1)")));
  EXPECT_LT(position("ActivityEnable(10)"),
            position(absl::StrCat("ActivityEnableRuntimeApi(", Tracer::kRuntimeLaunchApis[0], ",1)")));
  int k = 0;
  rig.seam.names[&k] = "_Z1kv";
  auto p = KernelParams(&k, 8, 64, nullptr);
  Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 5, 10, 20);
  EXPECT_TRUE(rig.output.OfType(RecordType::kLaunch).empty()) << "no record from a callback";
  // An API activity record as CUPTI writes it: kind, call, times, thread,
  // correlation id and result.
  auto queue_api = [&](CUpti_ActivityKind kind, CUpti_CallbackId cbid, uint64_t start,
                       uint64_t end, uint32_t tid, uint32_t correlation, uint32_t result) {
    CUpti_ActivityAPI a = {};
    a.kind = kind;
    a.cbid = cbid;
    a.start = start;
    a.end = end;
    a.processId = 4242;
    a.threadId = tid;
    a.correlationId = correlation;
    a.returnValue = result;
    rig.seam.QueueActivity(&a, sizeof(a));
  };
  queue_api(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, 300, 340,
            4243, 9, 1);
  queue_api(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2, 300, 340, 4243,
            10, 1);
  // <<<>>> in CUDA 13: the runtime's __cudaLaunchKernel, failing with
  // cudaErrorInvalidConfiguration (9).
  queue_api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000, 500,
            560, 4244, 11, 9);
  queue_api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000, 500,
            560, 4244, 12, 0);
  queue_api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, 500, 560, 4244,
            13, 9);
  rig.hook.Stop();
  auto launches = rig.output.OfType(RecordType::kLaunch);
  ASSERT_EQ(launches.size(), 3u);
  LaunchRecord r = Body<LaunchRecord>(launches[1]);
  EXPECT_EQ(r.correlation_id, ProcessQualifiedId(4242, 11));
  EXPECT_EQ(r.api_start_ns, 500u);
  EXPECT_EQ(r.api_end_ns, 560u);
  EXPECT_EQ(r.stream, kUnknownStream);
  EXPECT_EQ(r.tid, 4244u);
  EXPECT_EQ(r.api, static_cast<uint16_t>(LaunchApi::kCudaLaunchKernel));
  EXPECT_EQ(r.result, 9u);
  EXPECT_TRUE(IsRuntimeLaunch(r.api));
  LaunchRecord g = Body<LaunchRecord>(launches[2]);
  EXPECT_EQ(g.api, static_cast<uint16_t>(LaunchApi::kCudaGraphLaunch));
  EXPECT_TRUE(IsGraphLaunch(g.api));
  LaunchRecord l = Body<LaunchRecord>(launches[0]);
  EXPECT_EQ(l.correlation_id, ProcessQualifiedId(4242, 9));
  EXPECT_EQ(l.api_start_ns, 300u);
  EXPECT_EQ(l.api_end_ns, 340u);
  EXPECT_EQ(l.stream, kUnknownStream);
  EXPECT_EQ(l.pid, 4242u);
  EXPECT_EQ(l.tid, 4243u);
  EXPECT_EQ(l.api, static_cast<uint16_t>(LaunchApi::kLaunchKernelEx));
  EXPECT_EQ(l.result, 1u);
  EXPECT_EQ(l.name_id, 0u);
  EXPECT_EQ(l.grid[0], 0u);
  EXPECT_EQ(rig.output.last_stats().launches, 3u);
  for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
    EXPECT_THAT(rig.seam.calls(), Contains(absl::StrCat("ActivityEnableDriverApi(", cbid, ",0)")));
  }
  for (CUpti_CallbackId cbid : Tracer::kRuntimeLaunchApis) {
    EXPECT_THAT(rig.seam.calls(), Contains(absl::StrCat("ActivityEnableRuntimeApi(", cbid, ",0)")));
  }
}

// With launch records from activity, late attach's redirection enables the
// launch callbacks only once an attach request arrives: the watcher turns
// them on before acting on it.
TEST(Hook, LateAttachEnablesLaunchCallbacksWhenARequestArrives) {
  absl::StatusOr<Session> program = Session::Create();
  ASSERT_TRUE(program.ok()) << program.status();
  Rig rig(5, "", [](HookConfig& c) { c.launch_api_activity = true; });
  rig.output.attach_session = &*program;
  auto launch_callbacks_on = [&] {
    return rig.seam.enabled().count(
               {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel}) > 0;
  };
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // ten ticks, no request
  EXPECT_FALSE(launch_callbacks_on());
  ASSERT_TRUE(program->RequestAttach("cuprobe-no-such-session").ok());
  for (int i = 0; i < 400 && !launch_callbacks_on(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(launch_callbacks_on());
  for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
    EXPECT_TRUE(rig.seam.enabled().count({CUPTI_CB_DOMAIN_DRIVER_API, cbid})) << cbid;
  }
  rig.hook.Stop();
  (void)program->Remove();
}

// Without kernel records there is nothing to join a launch's shape from:
// `--trace launches` keeps the callbacks whatever the setting.
TEST(Hook, LaunchRecordsFromActivityNeedKernelsTraced) {
  Rig rig(60000, "launches,memory", [](HookConfig& c) { c.launch_api_activity = true; });
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
    EXPECT_TRUE(rig.seam.enabled().count({CUPTI_CB_DOMAIN_DRIVER_API, cbid})) << cbid;
  }
  EXPECT_THAT(rig.seam.calls(), ::testing::Not(Contains(HasSubstr("ActivityEnableDriverApi"))));
  rig.hook.Stop();
}

// A CUPTI that cannot give driver or runtime API activity per call: the
// callbacks record launches instead, what was enabled is turned off again,
// and tracing goes on.
TEST(Hook, LaunchRecordsFallBackToCallbacksWhenActivityIsRefused) {
  for (bool runtime_refused : {false, true}) {
    SCOPED_TRACE(runtime_refused ? "runtime API activity refused" : "driver API activity refused");
    Rig rig(60000, "", [](HookConfig& c) { c.launch_api_activity = true; });
    (runtime_refused ? rig.seam.runtime_api_activity_status
                     : rig.seam.driver_api_activity_status) =
        absl::UnavailableError("CUPTI_ERROR_NOT_SUPPORTED");
    ASSERT_EQ(rig.hook.Start(), HookState::kReady);
    for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
      EXPECT_TRUE(rig.seam.enabled().count({CUPTI_CB_DOMAIN_DRIVER_API, cbid})) << cbid;
      EXPECT_THAT(rig.seam.calls(),
                  Contains(absl::StrCat("ActivityEnableDriverApi(", cbid, ",0)")));
    }
    for (CUpti_CallbackId cbid : Tracer::kRuntimeLaunchApis) {
      EXPECT_THAT(rig.seam.calls(),
                  Contains(absl::StrCat("ActivityEnableRuntimeApi(", cbid, ",0)")));
    }
    int k = 0;
    rig.seam.names[&k] = "_Z1kv";
    auto p = KernelParams(&k, 8, 64, nullptr);
    Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 5, 10, 20);
    auto launches = rig.output.OfType(RecordType::kLaunch);
    ASSERT_EQ(launches.size(), 1u);
    EXPECT_EQ(Body<LaunchRecord>(launches[0]).grid[0], 8u);
    rig.hook.Stop();
  }
}

// A CUPTI that cannot give OS thread ids would label activity launches with
// pthread_self() values: the callbacks record launches instead.
TEST(Hook, LaunchRecordsFromCallbacksWhenSystemThreadIdsAreRefused) {
  Rig rig(60000, "", [](HookConfig& c) { c.launch_api_activity = true; });
  rig.seam.system_thread_ids_status = absl::UnavailableError("CUPTI_ERROR_NOT_SUPPORTED");
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
    EXPECT_TRUE(rig.seam.enabled().count({CUPTI_CB_DOMAIN_DRIVER_API, cbid})) << cbid;
  }
  EXPECT_THAT(rig.seam.calls(), ::testing::Not(Contains(HasSubstr("ActivityEnableDriverApi"))));
  EXPECT_THAT(rig.seam.calls(), ::testing::Not(Contains(HasSubstr("ActivityEnableRuntimeApi"))));
  EXPECT_THAT(rig.seam.calls(), Contains("ActivityEnable(10)"));
  int k = 0;
  rig.seam.names[&k] = "_Z1kv";
  auto p = KernelParams(&k, 8, 64, nullptr);
  Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 5, 10, 20);
  ASSERT_EQ(rig.output.OfType(RecordType::kLaunch).size(), 1u);
  rig.hook.Stop();
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

TEST(Hook, LaunchBecomesALaunchRecordWithCachedName) {
  Rig rig;
  int k1 = 0, k2 = 0, stream = 0;
  rig.seam.names[&k1] = "_Z7vec_addPKfS0_Pfi";
  rig.seam.names[&k2] = "_Z5scalePffi";
  rig.seam.kernel_handles.insert(&k2);  // a CUkernel: cuFuncGetName fails on it
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);

  auto p1 = KernelParams(&k1, 4096, 256, &stream);
  Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p1, 7, 1000, 1500);
  Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p1, 8, 2000, 2300);
  auto p2 = KernelParams(&k2, 8, 32, nullptr);
  Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, &p2, 9, 3000, 3100);

  auto launches = rig.output.OfType(RecordType::kLaunch);
  ASSERT_EQ(launches.size(), 3u);
  LaunchRecord a = Body<LaunchRecord>(launches[0]);
  EXPECT_EQ(a.correlation_id, ProcessQualifiedId(4242, 7));
  EXPECT_EQ(a.api_start_ns, 1000u);
  EXPECT_EQ(a.api_end_ns, 1500u);
  EXPECT_EQ(a.grid[0], 4096u);
  EXPECT_EQ(a.grid[1], 2u);
  EXPECT_EQ(a.block[0], 256u);
  EXPECT_EQ(a.shared_mem_bytes, 128u);
  EXPECT_EQ(a.stream, reinterpret_cast<uint64_t>(&stream));
  EXPECT_EQ(a.pid, 4242u);
  EXPECT_EQ(a.tid, static_cast<uint32_t>(CurrentThreadId()));
  EXPECT_EQ(a.api, static_cast<uint16_t>(LaunchApi::kLaunchKernel));
  EXPECT_EQ(NameOf(rig.output, a.name_id), "_Z7vec_addPKfS0_Pfi");
  LaunchRecord b = Body<LaunchRecord>(launches[1]);
  EXPECT_EQ(b.name_id, a.name_id);
  LaunchRecord c = Body<LaunchRecord>(launches[2]);
  EXPECT_EQ(NameOf(rig.output, c.name_id), "_Z5scalePffi") << "CUkernel named by cuKernelGetName";

  // Each handle was named once; each name was published once.
  std::vector<std::string> calls = rig.seam.calls();
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "FunctionName"), 2);
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "KernelName"), 1);
  EXPECT_EQ(rig.output.OfType(RecordType::kName).size(), 3u);  // ./app + 2 kernels
  EXPECT_EQ(rig.hook.tracer()->stats().launches, 3u);
  rig.hook.Stop();
}

TEST(Hook, LaunchKernelExAndGraphLaunch) {
  Rig rig;
  int k = 0, stream = 0, graph = 0;
  rig.seam.names[&k] = "gemm";
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  CUlaunchConfig config = {};
  config.gridDimX = 132;
  config.gridDimY = 1;
  config.gridDimZ = 1;
  config.blockDimX = 384;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = 200000;
  config.hStream = reinterpret_cast<CUstream>(&stream);
  cuLaunchKernelEx_params ex = {};
  ex.config = &config;
  ex.f = reinterpret_cast<CUfunction>(&k);
  Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, &ex, 11, 10, 20);
  cuGraphLaunch_params g = {};
  g.hGraph = reinterpret_cast<CUgraphExec>(&graph);
  g.hStream = reinterpret_cast<CUstream>(&stream);
  Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, &g, 12, 30, 40);
  auto launches = rig.output.OfType(RecordType::kLaunch);
  ASSERT_EQ(launches.size(), 2u);
  LaunchRecord a = Body<LaunchRecord>(launches[0]);
  EXPECT_EQ(a.api, static_cast<uint16_t>(LaunchApi::kLaunchKernelEx));
  EXPECT_EQ(a.grid[0], 132u);
  EXPECT_EQ(a.block[0], 384u);
  EXPECT_EQ(a.shared_mem_bytes, 200000u);
  EXPECT_EQ(NameOf(rig.output, a.name_id), "gemm");
  LaunchRecord b = Body<LaunchRecord>(launches[1]);
  EXPECT_EQ(b.api, static_cast<uint16_t>(LaunchApi::kGraphLaunch));
  EXPECT_EQ(b.name_id, 0u);
  EXPECT_EQ(b.stream, reinterpret_cast<uint64_t>(&stream));
  rig.hook.Stop();
}

TEST(Hook, ActivityRecordsAreConvertedAtFlush) {
  Rig rig;
  ASSERT_EQ(rig.hook.Start(), HookState::kReady);
  CUpti_ActivityKernel10 k = {};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = "_Z7vec_addPKfS0_Pfi";
  k.start = 5000;
  k.end = 9000;
  k.correlationId = 7;
  k.deviceId = 0;
  k.streamId = 13;
  k.gridX = 4096;
  k.gridY = 1;
  k.gridZ = 1;
  k.blockX = 256;
  k.blockY = 1;
  k.blockZ = 1;
  k.registersPerThread = 16;
  k.dynamicSharedMemory = 128;
  k.gridId = 77;
  rig.seam.QueueActivity(&k, sizeof(k));
  CUpti_ActivityMemcpy6 m = {};
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  m.bytes = 4 << 20;
  m.start = 100;
  m.end = 900;
  m.correlationId = 3;
  m.streamId = 7;
  rig.seam.QueueActivity(&m, sizeof(m));
  CUpti_ActivityMemset4 s = {};
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.bytes = 1024;
  s.value = 0;
  s.start = 50;
  s.end = 60;
  rig.seam.QueueActivity(&s, sizeof(s));
  rig.hook.Stop();  // teardown flushes

  auto kernels = rig.output.OfType(RecordType::kKernel);
  ASSERT_EQ(kernels.size(), 1u);
  KernelRecord kr = Body<KernelRecord>(kernels[0]);
  EXPECT_EQ(kr.correlation_id, ProcessQualifiedId(4242, 7));
  EXPECT_EQ(kr.start_ns, 5000u);
  EXPECT_EQ(kr.end_ns, 9000u);
  EXPECT_EQ(kr.stream_id, 13u);
  EXPECT_EQ(kr.grid[0], 4096u);
  EXPECT_EQ(kr.block[0], 256u);
  EXPECT_EQ(kr.registers_per_thread, 16u);
  EXPECT_EQ(kr.dynamic_shared_bytes, 128u);
  EXPECT_EQ(kr.grid_id, 77u);
  EXPECT_EQ(NameOf(rig.output, kr.name_id), "_Z7vec_addPKfS0_Pfi");
  auto memcpys = rig.output.OfType(RecordType::kMemcpy);
  ASSERT_EQ(memcpys.size(), 1u);
  MemcpyRecord mr = Body<MemcpyRecord>(memcpys[0]);
  EXPECT_EQ(mr.bytes, 4u << 20);
  EXPECT_EQ(mr.copy_kind, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD);
  EXPECT_EQ(rig.output.OfType(RecordType::kMemset).size(), 1u);
  EXPECT_EQ(rig.output.last_stats().activity_records, 3u);
}

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
  EXPECT_EQ(c.output, absl::StrCat("cuprobe-", ::getpid(), ".json"));
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

// A `step` kernel's activity record (10 ns long, stream 7), queued as CUPTI
// writes it.
void QueueStepKernel(FakeSeam& seam, uint32_t correlation, uint64_t start) {
  CUpti_ActivityKernel10 a = {};
  a.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  a.name = "_Z4stepv";
  a.start = start;
  a.end = start + 10;
  a.correlationId = correlation;
  a.streamId = 7;
  seam.QueueActivity(&a, sizeof(a));
}

// A profiler call fired as CUPTI fires it (ENTER and EXIT).
void ProfilerCall(FakeSeam& seam, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                  uint32_t correlation) {
  const bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  const bool start = runtime ? cbid == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000
                             : cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStart;
  CUpti_CallbackData data = {};
  data.functionName = runtime ? (start ? "cudaProfilerStart" : "cudaProfilerStop")
                              : (start ? "cuProfilerStart" : "cuProfilerStop");
  data.correlationId = correlation;
  data.callbackSite = CUPTI_API_ENTER;
  seam.Fire(domain, cbid, &data);
  data.callbackSite = CUPTI_API_EXIT;
  seam.Fire(domain, cbid, &data);
}

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
