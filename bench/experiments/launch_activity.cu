// bench/experiments/launch_activity.cu: which CUPTI activity records a kernel
// launch leaves when launch records come from API activity
// (CUPROBE_LAUNCH_TIMES=activity), and what each way of recording launches
// costs a launch-bound loop, in isolation from the rest of the hook.
//
//   launch_activity count
//     Enables kernel activity and, per call id, the driver API activity of
//     the 8 driver launch calls and the runtime API activity of the 10
//     runtime launch calls; then makes 100 launches each way: <<<>>>,
//     cudaLaunchKernel, cuLaunchKernel. Prints, per way, the kernels seen
//     and how many of them a DRIVER record, a RUNTIME record, or both share
//     the correlation id with, and whether the records' thread ids are the
//     OS's (cuptiSetThreadIdType SYSTEM). Exit 0 when every kernel has at
//     least one launch record.
//
//   launch_activity time MODE [LAUNCHES]
//     Times LAUNCHES (default 100000) <<<>>> launches of an empty kernel
//     under MODE, one of: native, kernels (kernel activity), api (kernel
//     activity + per-call driver and runtime API activity of the launch
//     calls), callbacks (kernel activity + driver launch callbacks taking a
//     timestamp at ENTER and EXIT), callbacks_only, callbacks_empty (launch
//     callbacks that only count: CUPTI's own price for calling a tracer at
//     every launch), subscribed (a subscriber with no callback enabled),
//     api_only (the launch calls' API activity without kernel activity).
//     Prints "MODE seconds records=N callbacks=M" (and seconds=S on stderr, for
//     bench/launch_activity.sh), or fails when the mode recorded less than it
//     asked for (a record per kernel, per launch call; two callbacks per
//     launch).
//     Run each mode in its own process, rounds interleaved:
//       for r in 1 2 3; do for m in native kernels api callbacks; do
//         ./launch_activity time $m; done; done
//
// Not part of the build; on a GPU machine:
//   nvcc -O2 -arch=sm_90 -I/usr/local/cuda/extras/CUPTI/include \
//     -o launch_activity launch_activity.cu -lcuda -lcupti && ./launch_activity count
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#define CHECK_CUPTI(call)                                                      \
  do {                                                                         \
    CUptiResult s_ = (call);                                                   \
    if (s_ != CUPTI_SUCCESS) {                                                 \
      const char* m_ = nullptr;                                                \
      cuptiGetResultString(s_, &m_);                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, m_); \
      std::exit(2);                                                            \
    }                                                                          \
  } while (0)

#define CHECK_CUDA(call)                                                     \
  do {                                                                       \
    cudaError_t e_ = (call);                                                 \
    if (e_ != cudaSuccess) {                                                 \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,    \
                   cudaGetErrorString(e_));                                  \
      std::exit(2);                                                          \
    }                                                                        \
  } while (0)

__global__ void empty_kernel() {}

namespace {

const CUpti_CallbackId kDriverLaunches[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,          CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,           CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz};
const CUpti_CallbackId kRuntimeLaunches[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000};

// What the buffers delivered: correlation ids by record kind, and the
// cbids and thread ids of the API records.
struct Seen {
  std::mutex mu;  // BufferCompleted may run on CUPTI's thread
  std::set<uint32_t> kernels, driver, runtime;
  std::map<std::string, int> api_calls;  // "DRIVER cbid 307" -> count
  std::set<uint32_t> thread_ids;
  std::atomic<uint64_t> records{0};
};
Seen g_seen;
bool g_collect = false;  // count mode keeps every record; time mode only counts

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    g_seen.records.fetch_add(1, std::memory_order_relaxed);
    if (!g_collect) continue;
    std::lock_guard<std::mutex> lock(g_seen.mu);
    if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      g_seen.kernels.insert(reinterpret_cast<CUpti_ActivityKernel10*>(r)->correlationId);
    } else if (r->kind == CUPTI_ACTIVITY_KIND_DRIVER || r->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      auto* a = reinterpret_cast<CUpti_ActivityAPI*>(r);
      const bool driver = r->kind == CUPTI_ACTIVITY_KIND_DRIVER;
      (driver ? g_seen.driver : g_seen.runtime).insert(a->correlationId);
      g_seen.api_calls[std::string(driver ? "DRIVER" : "RUNTIME") + " cbid " +
                       std::to_string(a->cbid)]++;
      g_seen.thread_ids.insert(a->threadId);
    }
  }
  std::free(buffer);
}

std::atomic<uint64_t> g_callback_ns{0};
std::atomic<uint64_t> g_callbacks{0};

void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  auto* d = static_cast<const CUpti_CallbackData*>(data);
  uint64_t t = 0;
  cuptiGetTimestamp(&t);
  g_callbacks.fetch_add(1, std::memory_order_relaxed);
  if (d->callbackSite == CUPTI_API_ENTER) {
    if (d->correlationData != nullptr) *d->correlationData = t;
  } else if (d->correlationData != nullptr) {
    g_callback_ns.fetch_add(t - *d->correlationData, std::memory_order_relaxed);
  }
}

// The floor of any tracer built on callbacks: CUPTI calls this at ENTER and
// EXIT of every launch, and it only counts.
void CUPTIAPI OnCallbackEmpty(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {
  g_callbacks.fetch_add(1, std::memory_order_relaxed);
}

void EnableLaunchApiActivity() {
  for (CUpti_CallbackId id : kDriverLaunches) CHECK_CUPTI(cuptiActivityEnableDriverApi(id, 1));
  for (CUpti_CallbackId id : kRuntimeLaunches) CHECK_CUPTI(cuptiActivityEnableRuntimeApi(id, 1));
}

CUpti_SubscriberHandle Subscribe(CUpti_CallbackFunc callback) {
  CUpti_SubscriberHandle subscriber;
  CHECK_CUPTI(cuptiSubscribe(&subscriber, callback, nullptr));
  return subscriber;
}

void EnableLaunchCallbacks(CUpti_CallbackFunc callback = OnCallback) {
  CUpti_SubscriberHandle subscriber = Subscribe(callback);
  for (CUpti_CallbackId id : kDriverLaunches) {
    CHECK_CUPTI(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id));
  }
}

int Count() {
  g_collect = true;
  CHECK_CUPTI(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM));
  CHECK_CUPTI(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted));
  CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  EnableLaunchApiActivity();
  CHECK_CUDA(cudaFree(nullptr));
  cudaFunction_t rt_function;
  CHECK_CUDA(cudaGetFuncBySymbol(&rt_function, reinterpret_cast<const void*>(empty_kernel)));
  CUfunction function = reinterpret_cast<CUfunction>(rt_function);

  const char* ways[] = {"<<<>>>", "cudaLaunchKernel", "cuLaunchKernel"};
  bool every_kernel_has_a_record = true;
  const uint32_t os_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  std::printf("%-18s %8s %8s %8s %8s %8s\n", "launched with", "kernels", "driver", "runtime",
              "both", "neither");
  for (int way = 0; way < 3; ++way) {
    {
      std::lock_guard<std::mutex> lock(g_seen.mu);
      g_seen.kernels.clear();
      g_seen.driver.clear();
      g_seen.runtime.clear();
    }
    for (int i = 0; i < 100; ++i) {
      if (way == 0) {
        empty_kernel<<<1, 32>>>();
      } else if (way == 1) {
        CHECK_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(empty_kernel), dim3(1),
                                    dim3(32), nullptr, 0, nullptr));
      } else if (cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr) !=
                 CUDA_SUCCESS) {
        std::fprintf(stderr, "cuLaunchKernel failed\n");
        return 2;
      }
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUPTI(cuptiActivityFlushAll(1));
    std::lock_guard<std::mutex> lock(g_seen.mu);
    int driver = 0, runtime = 0, both = 0, neither = 0;
    for (uint32_t c : g_seen.kernels) {
      const bool d = g_seen.driver.count(c) > 0, r = g_seen.runtime.count(c) > 0;
      driver += d && !r;
      runtime += r && !d;
      both += d && r;
      neither += !d && !r;
    }
    std::printf("%-18s %8zu %8d %8d %8d %8d\n", ways[way], g_seen.kernels.size(), driver, runtime,
                both, neither);
    every_kernel_has_a_record = every_kernel_has_a_record && neither == 0 && !g_seen.kernels.empty();
  }
  std::lock_guard<std::mutex> lock(g_seen.mu);
  std::printf("API records by kind and cbid:\n");
  for (const auto& [what, n] : g_seen.api_calls) std::printf("  %-22s %d\n", what.c_str(), n);
  std::printf("thread ids in API records: %zu distinct; the OS's (gettid %u) %s\n",
              g_seen.thread_ids.size(), os_tid,
              g_seen.thread_ids.count(os_tid) ? "among them" : "NOT among them");
  std::printf("%s\n", every_kernel_has_a_record ? "every kernel has a launch record"
                                                : "SOME KERNELS HAVE NO LAUNCH RECORD");
  return every_kernel_has_a_record ? 0 : 1;
}

int Time(const std::string& mode, long launches) {
  if (mode != "native" && mode != "kernels" && mode != "api" && mode != "callbacks" &&
      mode != "callbacks_only" && mode != "api_only" && mode != "callbacks_empty" &&
      mode != "subscribed") {
    std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
    return 2;
  }
  const bool kernels = mode == "kernels" || mode == "api" || mode == "callbacks";
  if (mode != "native") {
    CHECK_CUPTI(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM));
    CHECK_CUPTI(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted));
  }
  if (kernels) CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  if (mode == "api" || mode == "api_only") EnableLaunchApiActivity();
  if (mode == "callbacks" || mode == "callbacks_only") EnableLaunchCallbacks();
  if (mode == "callbacks_empty") EnableLaunchCallbacks(OnCallbackEmpty);
  if (mode == "subscribed") (void)Subscribe(OnCallbackEmpty);
  CHECK_CUDA(cudaFree(nullptr));
  for (int i = 0; i < 1000; ++i) empty_kernel<<<1, 32>>>();  // warm up
  CHECK_CUDA(cudaDeviceSynchronize());
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < launches; ++i) empty_kernel<<<1, 32>>>();
  CHECK_CUDA(cudaDeviceSynchronize());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (mode != "native") CHECK_CUPTI(cuptiActivityFlushAll(1));
  // A mode that recorded nothing is cheap for the wrong reason: each mode
  // checks it saw what it asked for (1,000 warm-up launches included).
  const uint64_t records = g_seen.records.load(), callbacks = g_callbacks.load();
  const uint64_t n = static_cast<uint64_t>(launches) + 1000;
  uint64_t want_records = 0, want_callbacks = 0;
  if (kernels) want_records += n;
  if (mode == "api" || mode == "api_only") want_records += n;
  if (mode == "callbacks" || mode == "callbacks_only" || mode == "callbacks_empty") {
    want_callbacks = 2 * n;
  }
  std::printf("%s %.4f records=%llu callbacks=%llu\n", mode.c_str(), seconds,
              static_cast<unsigned long long>(records), static_cast<unsigned long long>(callbacks));
  if (records < want_records || callbacks < want_callbacks) {
    std::fprintf(stderr, "%s: %llu records and %llu callbacks, expected at least %llu and %llu\n",
                 mode.c_str(), static_cast<unsigned long long>(records),
                 static_cast<unsigned long long>(callbacks),
                 static_cast<unsigned long long>(want_records),
                 static_cast<unsigned long long>(want_callbacks));
    return 1;
  }
  std::fprintf(stderr, "seconds=%.6f\n", seconds);  // for bench/lib.sh
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "count") return Count();
  if (what == "time" && argc > 2) return Time(argv[2], argc > 3 ? std::atol(argv[3]) : 100000);
  std::fprintf(stderr,
               "usage: launch_activity count\n"
               "       launch_activity time "
               "native|kernels|api|callbacks|callbacks_only|callbacks_empty|subscribed|api_only "
               "[LAUNCHES]\n");
  return 2;
}
