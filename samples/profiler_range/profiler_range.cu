// profiler_range: known launches inside and outside cudaProfilerStart /
// cudaProfilerStop ranges, for `cuprobe trace --capture-range cudaProfilerApi`.
//
//   profiler_range [steps]                        (default: 3)
//
// Outside any range: 10 `warmup` launches and a host-to-device copy, then 2
// `between` launches after each step. Each step is one range opened with
// cudaProfilerStart: 5 `step` launches, a memset, a device-to-host copy,
// then one `spin` that runs for about 2 ms and one `late` queued behind it,
// launched right before cudaProfilerStop: `late` starts on the GPU about
// 2 ms after the range has closed, and counts, because it was launched
// inside it. A last range is opened with the driver's cuProfilerStart,
// holds one `tail` launch, and is never closed: the program exits inside it.
//
// Captured: steps*5 `step`, steps `spin`, steps `late`, 1 `tail`, steps
// memsets and steps+1 device-to-host copies (one per step, and the last
// range's check); nothing of `warmup` or `between`, and no host-to-device
// copy.
#include <cuda.h>
#include <cudaProfiler.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

__global__ void warmup(int* x) { atomicAdd(x, 1); }
__global__ void step(int* x) { atomicAdd(x, 10); }
__global__ void between(int* x) { atomicAdd(x, 100); }
__global__ void tail(int* x) { atomicAdd(x, 1000); }
__global__ void late(int* x) { atomicAdd(x, 10000); }
__global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

#define CHECK(call)                                                              \
  do {                                                                           \
    cudaError_t e = (call);                                                      \
    if (e != cudaSuccess) {                                                      \
      std::fprintf(stderr, "profiler_range: %s: %s\n", #call, cudaGetErrorString(e)); \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

int main(int argc, char** argv) {
  int steps = argc > 1 ? std::atoi(argv[1]) : 3;
  if (steps <= 0) {
    std::fprintf(stderr, "usage: profiler_range [steps > 0]\n");
    return 64;
  }
  int* x = nullptr;
  CHECK(cudaMalloc(&x, sizeof(int)));
  int zero = 0;
  CHECK(cudaMemcpy(x, &zero, sizeof(zero), cudaMemcpyHostToDevice));
  for (int i = 0; i < 10; ++i) warmup<<<1, 1>>>(x);
  int* scratch = nullptr;
  CHECK(cudaMalloc(&scratch, 4096));
  int host = 0;
  for (int s = 0; s < steps; ++s) {
    CHECK(cudaProfilerStart());
    for (int i = 0; i < 5; ++i) step<<<1, 1>>>(x);
    CHECK(cudaMemsetAsync(scratch, 0, 4096));
    CHECK(cudaMemcpy(&host, x, sizeof(host), cudaMemcpyDeviceToHost));
    spin<<<1, 1>>>(4000000);  // ~2 ms at 2 GHz
    late<<<1, 1>>>(x);        // runs after spin, so after the stop below
    CHECK(cudaProfilerStop());
    for (int i = 0; i < 2; ++i) between<<<1, 1>>>(x);
  }
  if (cuProfilerStart() != CUDA_SUCCESS) {
    std::fprintf(stderr, "profiler_range: cuProfilerStart failed\n");
    return 1;
  }
  tail<<<1, 1>>>(x);
  CHECK(cudaMemcpy(&host, x, sizeof(host), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(scratch));
  CHECK(cudaFree(x));
  const int want = 10 + steps * (50 + 200 + 10000) + 1000;
  if (host != want) {
    std::fprintf(stderr, "profiler_range: counted %d, want %d\n", host, want);
    return 1;
  }
  std::printf("profiler_range: OK steps=%d\n", steps);
  return 0;
}
