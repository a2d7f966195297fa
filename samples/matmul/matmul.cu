// matmul: a compute-bound tiled matrix multiply (shared-memory tiles), the
// second reference workload of the probes' tests and benchmarks. C = A * B
// for N x N float matrices with N a multiple of the tile (16).
//
//   matmul [n] [iterations]      (defaults: 1024, 10)
//
// Per launch, every one of the n*n threads does exactly 2 * (n / 16) global
// loads (one element of A and one of B per tile) and 1 global store, so a
// memory probe must count 2*n*n*(n/16) loads and n*n stores per launch.
// The result is checked exactly: A and B hold small integers, so every sum
// is exact in float.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "matmul_kernel.cuh"

#define CHECK(call)                                                                  \
  do {                                                                               \
    cudaError_t err_ = (call);                                                       \
    if (err_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "matmul: %s failed: %s\n", #call, cudaGetErrorString(err_)); \
      return 2;                                                                      \
    }                                                                                \
  } while (0)

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 1024;
  int iterations = argc > 2 ? std::atoi(argv[2]) : 10;
  if (n <= 0 || n % kTile != 0 || n > 8192 || iterations <= 0) {
    std::fprintf(stderr, "usage: matmul [n: a multiple of %d up to 8192] [iterations > 0]\n",
                 kTile);
    return 64;
  }
  size_t count = static_cast<size_t>(n) * n;
  std::vector<float> a(count), b(count), c(count);
  for (size_t i = 0; i < count; ++i) {
    a[i] = static_cast<float>(i % 7) - 3.0f;
    b[i] = static_cast<float>(i % 5) - 2.0f;
  }
  float *da, *db, *dc;
  size_t bytes = count * sizeof(float);
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  dim3 block(kTile, kTile);
  dim3 grid(n / kTile, n / kTile);
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start));
  for (int it = 0; it < iterations; ++it) matmul_tiled<<<grid, block>>>(da, db, dc, n);
  CHECK(cudaEventRecord(stop));
  CHECK(cudaGetLastError());
  CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
  // Check every 97th row exactly (integer arithmetic in double).
  int bad = 0;
  double checksum = 0;
  for (int r = 0; r < n; r += 97) {
    for (int col = 0; col < n; ++col) {
      double want = 0;
      for (int k = 0; k < n; ++k) {
        want += static_cast<double>(a[static_cast<size_t>(r) * n + k]) * b[static_cast<size_t>(k) * n + col];
      }
      float got = c[static_cast<size_t>(r) * n + col];
      if (got != static_cast<float>(want)) {
        if (bad < 5) std::fprintf(stderr, "matmul: c[%d][%d] = %g, want %g\n", r, col, got, want);
        ++bad;
      }
    }
  }
  for (size_t i = 0; i < count; ++i) checksum += c[i];
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  if (bad != 0) {
    std::fprintf(stderr, "matmul: FAILED: %d results wrong\n", bad);
    return 1;
  }
  std::printf("matmul: OK n=%d iterations=%d checksum=%.1f\n", n, iterations, checksum);
  // Timing on stderr so that stdout stays identical between runs.
  std::fprintf(stderr, "matmul: seconds=%.6f per_launch_us=%.3f\n", ms / 1e3,
               ms * 1e3 / iterations);
  return 0;
}
