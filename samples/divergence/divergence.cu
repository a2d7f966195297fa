// divergence: a kernel with a data-dependent early return, the workload of
// samples/divergence. Thread i returns early when flags[i] is set; the host
// sets the flags so that in warp w (global warp index) the lowest
// 8 * (w % 4) lanes return early:
//
//   w % 4 == 0: no lane returns early  (the warp leaves with 32 lanes)
//   w % 4 == 1: lanes 0-7 return early (8 lanes leave early, 24 at the end)
//   w % 4 == 2: lanes 0-15             (16 and 16)
//   w % 4 == 3: lanes 0-23             (24 and 8)
//
// The rest compute a short polynomial and store it. The early return is a
// PTX `exit` of its own, so the lanes that take it leave the kernel there,
// whatever the compiler does with reconvergence at the end of the kernel.
//
//   divergence [warps] [iterations]      (defaults: 4096 warps, 10 iterations)
//
// warps must be a multiple of 8 (256-thread blocks).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

constexpr int kThreadsPerBlock = 256;

__global__ void diverge(const int* flags, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (flags[i] != 0) asm volatile("exit;");
  float x = static_cast<float>(i % 97);
  out[i] = (x * x + 3.0f) * x + 1.0f;
}

#define CHECK(call)                                                                     \
  do {                                                                                  \
    cudaError_t err_ = (call);                                                          \
    if (err_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "divergence: %s failed: %s\n", #call, cudaGetErrorString(err_)); \
      return 2;                                                                         \
    }                                                                                   \
  } while (0)

int main(int argc, char** argv) {
  int warps = argc > 1 ? std::atoi(argv[1]) : 4096;
  int iterations = argc > 2 ? std::atoi(argv[2]) : 10;
  if (warps <= 0 || warps % (kThreadsPerBlock / 32) != 0 || warps > (1 << 20) ||
      iterations <= 0) {
    std::fprintf(stderr, "usage: divergence [warps: a multiple of 8] [iterations > 0]\n");
    return 64;
  }
  int n = warps * 32;
  std::vector<int> flags(n);
  for (int i = 0; i < n; ++i) flags[i] = (i % 32) < 8 * ((i / 32) % 4) ? 1 : 0;
  int *dflags;
  float* dout;
  CHECK(cudaMalloc(&dflags, n * sizeof(int)));
  CHECK(cudaMalloc(&dout, n * sizeof(float)));
  CHECK(cudaMemcpy(dflags, flags.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dout, 0, n * sizeof(float)));
  for (int it = 0; it < iterations; ++it) {
    diverge<<<n / kThreadsPerBlock, kThreadsPerBlock>>>(dflags, dout, n);
  }
  CHECK(cudaGetLastError());
  std::vector<float> out(n);
  CHECK(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  int bad = 0, early = 0;
  for (int i = 0; i < n; ++i) {
    float x = static_cast<float>(i % 97);
    float want = flags[i] != 0 ? 0.0f : (x * x + 3.0f) * x + 1.0f;
    if (out[i] != want) ++bad;
    early += flags[i];
  }
  CHECK(cudaFree(dflags));
  CHECK(cudaFree(dout));
  if (bad != 0) {
    std::fprintf(stderr, "divergence: FAILED: %d of %d results wrong\n", bad, n);
    return 1;
  }
  std::printf("divergence: OK warps=%d iterations=%d early_lanes=%d\n", warps, iterations, early);
  return 0;
}
