// vec_add: the smallest bundled workload. Adds two vectors on the GPU with a
// known number of launches of each of two kernels, checks every result on the
// host, and exits non-zero if anything is wrong.
//
//   vec_add [n] [iterations] [pause_ms]
//       (defaults: 1048576 elements, 10 iterations, no pause)
//
// pause_ms makes the host sleep that long after each launch, so that a run
// lasts long enough for tests to act on it while it runs (kill the CLI,
// remove the session).
// Per run it launches `vec_add` `iterations` times and `scale` once, so a
// tracer must count exactly iterations + 1 kernel launches.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

__global__ void vec_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void scale(float* c, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] *= factor;
}

#define CHECK(call)                                                                  \
  do {                                                                               \
    cudaError_t err_ = (call);                                                       \
    if (err_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "vec_add: %s failed: %s\n", #call, cudaGetErrorString(err_)); \
      return 2;                                                                      \
    }                                                                                \
  } while (0)

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 1 << 20;
  int iterations = argc > 2 ? std::atoi(argv[2]) : 10;
  int pause_ms = argc > 3 ? std::atoi(argv[3]) : 0;
  if (n <= 0 || iterations <= 0 || pause_ms < 0) {
    std::fprintf(stderr, "usage: vec_add [n > 0] [iterations > 0] [pause_ms >= 0]\n");
    return 64;
  }
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = static_cast<float>(2 * i);
  }
  float *da, *db, *dc;
  size_t bytes = static_cast<size_t>(n) * sizeof(float);
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  int threads = 256;
  int blocks = (n + threads - 1) / threads;
  for (int it = 0; it < iterations; ++it) {
    vec_add<<<blocks, threads>>>(da, db, dc, n);
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
  scale<<<blocks, threads>>>(dc, 0.5f, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    float want = 0.5f * (a[i] + b[i]);
    if (std::fabs(c[i] - want) > 1e-3f * std::fabs(want) + 1e-6f) {
      if (bad < 5) std::fprintf(stderr, "vec_add: c[%d] = %g, want %g\n", i, c[i], want);
      ++bad;
    }
  }
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  if (bad != 0) {
    std::fprintf(stderr, "vec_add: FAILED: %d of %d results wrong\n", bad, n);
    return 1;
  }
  std::printf("vec_add: OK n=%d iterations=%d launches=%d\n", n, iterations, iterations + 1);
  return 0;
}
