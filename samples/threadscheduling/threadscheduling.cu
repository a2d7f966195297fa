// threadscheduling: the workload of samples/threadscheduling. Launches
// `place` `iterations` times on `blocks` blocks of 256 threads (8 warps);
// each thread runs a short arithmetic loop so that blocks stay resident long
// enough to spread over the SMs, and stores its result, which the host checks.
//
//   threadscheduling [blocks] [iterations]      (defaults: 528 blocks, 10 iterations)
//
// Per launch: blocks blocks, 8 * blocks warps, 256 * blocks threads (each
// lane index 0-31 in 8 * blocks warps).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

constexpr int kThreadsPerBlock = 256;
constexpr int kRounds = 256;

__global__ void place(unsigned* out) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned x = i;
  for (int r = 0; r < kRounds; ++r) x = x * 1664525u + 1013904223u;
  out[i] = x;
}

unsigned Expected(unsigned i) {
  unsigned x = i;
  for (int r = 0; r < kRounds; ++r) x = x * 1664525u + 1013904223u;
  return x;
}

#define CHECK(call)                                                                           \
  do {                                                                                        \
    cudaError_t err_ = (call);                                                                \
    if (err_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "threadscheduling: %s failed: %s\n", #call, cudaGetErrorString(err_)); \
      return 2;                                                                               \
    }                                                                                         \
  } while (0)

int main(int argc, char** argv) {
  int blocks = argc > 1 ? std::atoi(argv[1]) : 528;
  int iterations = argc > 2 ? std::atoi(argv[2]) : 10;
  if (blocks <= 0 || blocks > 65535 || iterations <= 0) {
    std::fprintf(stderr, "usage: threadscheduling [blocks: 1-65535] [iterations > 0]\n");
    return 64;
  }
  int n = blocks * kThreadsPerBlock;
  unsigned* dout;
  CHECK(cudaMalloc(&dout, n * sizeof(unsigned)));
  for (int it = 0; it < iterations; ++it) place<<<blocks, kThreadsPerBlock>>>(dout);
  CHECK(cudaGetLastError());
  std::vector<unsigned> out(n);
  CHECK(cudaMemcpy(out.data(), dout, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CHECK(cudaFree(dout));
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += out[i] != Expected(static_cast<unsigned>(i));
  if (bad != 0) {
    std::fprintf(stderr, "threadscheduling: FAILED: %d of %d results wrong\n", bad, n);
    return 1;
  }
  std::printf("threadscheduling: OK blocks=%d warps=%d iterations=%d\n", blocks,
              blocks * (kThreadsPerBlock / 32), iterations);
  return 0;
}
