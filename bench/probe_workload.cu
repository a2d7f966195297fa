// probe_workload: the two workloads of the probe benchmarks, timed on the GPU.
//
//   probe_workload vec_add [n] [iterations]     (defaults: 16M floats, 50)
//   probe_workload matmul  [n] [iterations]     (defaults: 2048, 10)
//
// One warm-up launch first (the module loads, and under `cuprobe run` is
// instrumented, before timing), then `iterations` launches timed with CUDA
// events. Prints "probe_workload: kernel=K seconds=S per_launch_us=U" on
// stderr; stdout carries only a checksum, so runs can be compared.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "samples/matmul/matmul_kernel.cuh"

__global__ void vec_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

#define CHECK(call)                                                                      \
  do {                                                                                   \
    cudaError_t e = (call);                                                              \
    if (e != cudaSuccess) {                                                              \
      std::fprintf(stderr, "probe_workload: %s: %s\n", #call, cudaGetErrorString(e));    \
      return 2;                                                                          \
    }                                                                                    \
  } while (0)

int main(int argc, char** argv) {
  const bool matmul = argc > 1 && std::strcmp(argv[1], "matmul") == 0;
  if (argc < 2 || (!matmul && std::strcmp(argv[1], "vec_add") != 0)) {
    std::fprintf(stderr, "usage: probe_workload vec_add|matmul [n] [iterations]\n");
    return 64;
  }
  int n = argc > 2 ? std::atoi(argv[2]) : (matmul ? 2048 : 16 << 20);
  int iterations = argc > 3 ? std::atoi(argv[3]) : (matmul ? 10 : 50);
  if (n <= 0 || iterations <= 0 || (matmul && n % kTile != 0)) return 64;
  size_t count = matmul ? static_cast<size_t>(n) * n : static_cast<size_t>(n);
  std::vector<float> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>(i % 7) - 3.0f;
  float *a, *b, *c;
  CHECK(cudaMalloc(&a, count * sizeof(float)));
  CHECK(cudaMalloc(&b, count * sizeof(float)));
  CHECK(cudaMalloc(&c, count * sizeof(float)));
  CHECK(cudaMemcpy(a, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  auto launch = [&] {
    if (matmul) {
      matmul_tiled<<<dim3(n / kTile, n / kTile), dim3(kTile, kTile)>>>(a, b, c, n);
    } else {
      vec_add<<<(n + 255) / 256, 256>>>(a, b, c, n);
    }
  };
  launch();
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start));
  for (int i = 0; i < iterations; ++i) launch();
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  CHECK(cudaGetLastError());
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(cudaMemcpy(host.data(), c, count * sizeof(float), cudaMemcpyDeviceToHost));
  double checksum = 0;
  for (float v : host) checksum += v;
  std::printf("probe_workload: %s checksum=%.1f\n", argv[1], checksum);
  std::fprintf(stderr, "probe_workload: kernel=%s seconds=%.6f per_launch_us=%.3f\n", argv[1],
               ms / 1e3, ms * 1e3 / iterations);
  return 0;
}
