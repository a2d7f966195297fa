// File: tests/unit/hook_test_util.cc
//
// The helpers hook_test_util.h declares.
#include "tests/unit/hook_test_util.h"

#include <cstdint>
#include <cstring>
#include <string>

namespace cuprobe::testing {

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

void FirstLaunchReturns(Rig& rig) {
  static int k = 0;
  rig.seam.names[&k] = "_Z5firstv";
  auto p = KernelParams(&k, 1, 32, nullptr);
  Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 1, rig.seam.now_ns,
         rig.seam.now_ns);
}

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

}  // namespace cuprobe::testing
