// File: tests/unit/hook_launch_test.cc
//
// Launch records through the hook: from the launch callbacks (names looked
// up once per handle, cuLaunchKernelEx and graph launches, the tracer's
// measuring switches) and from CUPTI's API activity
// (CUPROBE_LAUNCH_TIMES=activity: what is enabled, the records converted,
// the fallbacks to callbacks, late attach's callbacks), and activity records
// (kernels, copies, sets) converted at the flush.
//
// Part of hook_test (tests/unit/CMakeLists.txt); the rig is in hook_test_util.h.

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cupti_hook/hook.h"
#include "cupti_hook/testing/fake_output.h"
#include "cupti_hook/testing/fake_seam.h"
#include "cupti_hook/tracer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/segment.h"
#include "tests/unit/hook_test_util.h"

namespace cuprobe {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::cuprobe::testing::Body;
using ::cuprobe::testing::KernelParams;
using ::cuprobe::testing::Launch;
using ::cuprobe::testing::NameOf;
using ::cuprobe::testing::Rig;

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

}  // namespace
}  // namespace cuprobe
