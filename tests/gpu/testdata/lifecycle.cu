// lifecycle: process and context events that a tool injected into a CUDA
// program must survive (tests/gpu/lifecycle_test.cc runs each mode natively,
// under `cuprobe trace` and under `cuprobe run`, and compares).
//
//   lifecycle fork N          N launches, fork (the child exits with 3
//                             through exit(), running atexit handlers), N more
//   lifecycle exit_thread N   N launches, then a second thread calls exit(7)
//                             while the main thread keeps launching
//   lifecycle reset N         N launches, cudaDeviceReset, N more on new memory
//   lifecycle contexts N      two contexts made with cuCtxCreate, N launches
//                             in each, made current in turn
//   lifecycle fork_exec N     N launches, fork; the child execs this program
//                             (`launches N`: a second CUDA process), then N more
//   lifecycle launches N      N launches (the child of fork_exec)
//   lifecycle cupti_owner N   subscribes to CUPTI itself before any CUDA call,
//                             as a profiler would, then N launches
//   lifecycle launch_first N  the first CUDA call is a launch (the runtime
//                             loads the module before a context is
//                             current), then N launches
//   lifecycle free_first N    the same after a cudaFree(0): the reference
//   lifecycle library_first N driver API: cuLibraryLoadData of a PTX kernel
//                             before any context exists, then a context
//                             and N launches of it
//   lifecycle context_first N the same with the context made first: the
//                             reference
//   lifecycle library_thread N  the context is made on the main thread,
//                             the library loaded on a second thread where
//                             no context is current, and launched N times
//                             on the main thread
//
// Every mode checks its results and prints one line; the exit code is 0
// (exit_thread: 7) when all went well.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

__global__ void bump(unsigned* counts, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) counts[i] += 1;
}

namespace {

constexpr int kThreads = 4096;

// The driver-API modes' kernel: bump, by hand, so that a library can be
// loaded from memory before any context exists.
constexpr char kBumpPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry drv_bump(.param .u64 counts, .param .u32 n)
{
  .reg .pred %p<2>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [counts];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.s32 %p1, %r5, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.s32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r6, [%rd4];
  add.s32 %r7, %r6, 1;
  st.global.u32 [%rd4], %r7;
DONE:
  ret;
}
)";

#define CHECK(call)                                                                       \
  do {                                                                                    \
    cudaError_t err_ = (call);                                                            \
    if (err_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "lifecycle: %s failed: %s\n", #call, cudaGetErrorString(err_)); \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

#define CU_CHECK(call)                                                 \
  do {                                                                 \
    CUresult r_ = (call);                                              \
    if (r_ != CUDA_SUCCESS) {                                          \
      std::fprintf(stderr, "lifecycle: %s failed: %d\n", #call, r_); \
      std::exit(2);                                                    \
    }                                                                  \
  } while (0)

// N launches of bump on fresh memory; returns false unless every count is N.
bool Launches(int n) {
  unsigned* d = nullptr;
  CHECK(cudaMalloc(&d, kThreads * sizeof(unsigned)));
  CHECK(cudaMemset(d, 0, kThreads * sizeof(unsigned)));
  for (int i = 0; i < n; ++i) bump<<<kThreads / 256, 256>>>(d, kThreads);
  CHECK(cudaGetLastError());
  std::vector<unsigned> h(kThreads);
  CHECK(cudaMemcpy(h.data(), d, kThreads * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(d));
  for (unsigned v : h) {
    if (v != static_cast<unsigned>(n)) return false;
  }
  return true;
}

int Fork(int n) {
  bool ok = Launches(n);
  std::fflush(stdout);
  pid_t child = ::fork();
  if (child == 0) std::exit(3);  // no CUDA in the child; atexit handlers run
  int status = 0;
  ::waitpid(child, &status, 0);
  ok = Launches(n) && ok;
  const int child_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::printf("lifecycle fork: %s launches=%d child_exit=%d\n", ok ? "OK" : "WRONG", 2 * n,
              child_code);
  return ok && child_code == 3 ? 0 : 1;
}

int ForkExec(const char* self, int n) {
  bool ok = Launches(n);
  std::fflush(stdout);
  pid_t child = ::fork();
  if (child == 0) {
    const std::string count = std::to_string(n);
    ::execl(self, self, "launches", count.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ok = Launches(n) && ok;
  const int child_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::printf("lifecycle fork_exec: %s launches=%d child_exit=%d\n", ok ? "OK" : "WRONG", 2 * n,
              child_code);
  return ok && child_code == 0 ? 0 : 1;
}

int LaunchesOnly(int n) {
  const bool ok = Launches(n);
  std::printf("lifecycle launches: %s launches=%d\n", ok ? "OK" : "WRONG", n);
  return ok ? 0 : 1;
}

void CUPTIAPI OwnerCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

// A profiler of the program's own: it subscribes to CUPTI before the first
// CUDA call. Prints whether its subscription was taken, and the launches.
int CuptiOwner(int n) {
  CUpti_SubscriberHandle subscriber = nullptr;
  CUpti_SubscriberParams params = {};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "lifecycle-owner";
  const CUptiResult r = cuptiSubscribe_v2(&subscriber, OwnerCallback, nullptr, &params);
  const bool ok = Launches(n);
  if (r == CUPTI_SUCCESS) cuptiUnsubscribe(subscriber);
  std::printf("lifecycle cupti_owner: %s launches=%d subscribed=%s\n", ok ? "OK" : "WRONG", n,
              r == CUPTI_SUCCESS ? "yes" : "no");
  return ok ? 0 : 1;
}

int ExitFromThread(int n) {
  if (!Launches(n)) return 1;
  std::printf("lifecycle exit_thread: OK launches=%d, exiting from a second thread\n", n);
  std::fflush(stdout);
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::exit(7);
  }).detach();
  // Keeps launching until the process ends; errors after exit() began are
  // the runtime shutting down and are not reported.
  unsigned* d = nullptr;
  if (cudaMalloc(&d, kThreads * sizeof(unsigned)) != cudaSuccess) ::pause();
  for (;;) {
    bump<<<kThreads / 256, 256>>>(d, kThreads);
    if (cudaDeviceSynchronize() != cudaSuccess) ::pause();
  }
}

int Reset(int n) {
  bool ok = Launches(n);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaDeviceReset());
  ok = Launches(n) && ok;
  std::printf("lifecycle reset: %s launches=%d\n", ok ? "OK" : "WRONG", 2 * n);
  return ok ? 0 : 1;
}

int Contexts(int n) {
  CU_CHECK(cuInit(0));
  CUdevice dev = 0;
  CU_CHECK(cuDeviceGet(&dev, 0));
  CUcontext a = nullptr, b = nullptr;
  CU_CHECK(cuCtxCreate(&a, nullptr, 0, dev));
  CU_CHECK(cuCtxCreate(&b, nullptr, 0, dev));
  bool ok = true;
  for (CUcontext c : {a, b, a}) {
    CU_CHECK(cuCtxSetCurrent(c));
    ok = Launches(n) && ok;
  }
  // The first context goes while the second still has work to do.
  CU_CHECK(cuCtxSetCurrent(nullptr));
  CU_CHECK(cuCtxDestroy(a));
  CU_CHECK(cuCtxSetCurrent(b));
  ok = Launches(n) && ok;
  CU_CHECK(cuCtxSetCurrent(nullptr));
  CU_CHECK(cuCtxDestroy(b));
  std::printf("lifecycle contexts: %s launches=%d contexts=2\n", ok ? "OK" : "WRONG", 4 * n);
  return ok ? 0 : 1;
}

// The first CUDA call launches bump (it writes nothing with n = 0); with
// `free_first`, a cudaFree(0) comes first and makes the context current.
int LaunchFirst(int n, bool free_first) {
  if (free_first) CHECK(cudaFree(nullptr));
  bump<<<kThreads / 256, 256>>>(nullptr, 0);
  CHECK(cudaDeviceSynchronize());
  const bool ok = Launches(n);
  std::printf("lifecycle %s: %s launches=%d\n", free_first ? "free_first" : "launch_first",
              ok ? "OK" : "WRONG", n + 1);
  return ok ? 0 : 1;
}

// N launches of the library's drv_bump in the current context.
bool DriverLaunches(CUlibrary library, int n) {
  CUkernel kernel = nullptr;
  CU_CHECK(cuLibraryGetKernel(&kernel, library, "drv_bump"));
  CUdeviceptr d = 0;
  CU_CHECK(cuMemAlloc(&d, kThreads * sizeof(unsigned)));
  CU_CHECK(cuMemsetD32(d, 0, kThreads));
  int count = kThreads;
  void* args[] = {&d, &count};
  for (int i = 0; i < n; ++i) {
    CU_CHECK(cuLaunchKernel(reinterpret_cast<CUfunction>(kernel), kThreads / 256, 1, 1, 256, 1,
                            1, 0, nullptr, args, nullptr));
  }
  std::vector<unsigned> h(kThreads);
  CU_CHECK(cuMemcpyDtoH(h.data(), d, kThreads * sizeof(unsigned)));
  CU_CHECK(cuMemFree(d));
  for (unsigned v : h) {
    if (v != static_cast<unsigned>(n)) return false;
  }
  return true;
}

CUlibrary LoadBumpLibrary() {
  CUlibrary library = nullptr;
  CU_CHECK(cuLibraryLoadData(&library, kBumpPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  return library;
}

CUcontext MakeCurrentContext() {
  CUdevice dev = 0;
  CU_CHECK(cuDeviceGet(&dev, 0));
  CUcontext context = nullptr;
  CU_CHECK(cuDevicePrimaryCtxRetain(&context, dev));
  CU_CHECK(cuCtxSetCurrent(context));
  return context;
}

// `order`: library_first, context_first or library_thread (see the top).
int DriverOrder(const std::string& order, int n) {
  CU_CHECK(cuInit(0));
  CUcontext none = nullptr;
  CU_CHECK(cuCtxGetCurrent(&none));
  if (none != nullptr) {
    std::fprintf(stderr, "lifecycle: a context is current before any was made\n");
    return 2;
  }
  CUlibrary library = nullptr;
  CUcontext context = nullptr;
  if (order == "library_first") {
    library = LoadBumpLibrary();
    context = MakeCurrentContext();
  } else if (order == "context_first") {
    context = MakeCurrentContext();
    library = LoadBumpLibrary();
  } else {
    context = MakeCurrentContext();
    std::thread([&] {
      CUcontext current = nullptr;
      CU_CHECK(cuCtxGetCurrent(&current));
      if (current != nullptr) std::exit(2);
      library = LoadBumpLibrary();
    }).join();
  }
  const bool ok = DriverLaunches(library, n);
  CU_CHECK(cuLibraryUnload(library));
  CUdevice dev = 0;
  CU_CHECK(cuCtxGetDevice(&dev));
  CU_CHECK(cuCtxSetCurrent(nullptr));
  CU_CHECK(cuDevicePrimaryCtxRelease(dev));
  (void)context;
  std::printf("lifecycle %s: %s launches=%d\n", order.c_str(), ok ? "OK" : "WRONG", n);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  const int n = argc > 2 ? std::atoi(argv[2]) : 10;
  if (n <= 0) return 64;
  if (std::strcmp(mode, "fork") == 0) return Fork(n);
  if (std::strcmp(mode, "exit_thread") == 0) return ExitFromThread(n);
  if (std::strcmp(mode, "reset") == 0) return Reset(n);
  if (std::strcmp(mode, "contexts") == 0) return Contexts(n);
  if (std::strcmp(mode, "fork_exec") == 0) return ForkExec(argv[0], n);
  if (std::strcmp(mode, "launches") == 0) return LaunchesOnly(n);
  if (std::strcmp(mode, "cupti_owner") == 0) return CuptiOwner(n);
  if (std::strcmp(mode, "launch_first") == 0) return LaunchFirst(n, /*free_first=*/false);
  if (std::strcmp(mode, "free_first") == 0) return LaunchFirst(n, /*free_first=*/true);
  if (std::strcmp(mode, "library_first") == 0 || std::strcmp(mode, "context_first") == 0 ||
      std::strcmp(mode, "library_thread") == 0) {
    return DriverOrder(mode, n);
  }
  std::fprintf(stderr,
               "usage: lifecycle fork|exit_thread|reset|contexts|fork_exec|launches|cupti_owner|"
               "launch_first|free_first|library_first|context_first|library_thread [N]\n");
  return 64;
}
