// probe_workload: the two workloads of the probe benchmarks, timed on the GPU.
//
//   probe_workload vec_add [n] [iterations]     (defaults: 16M floats, 50)
//   probe_workload matmul  [n] [iterations]     (defaults: 2048, 10)
//   probe_workload per_thread_add [n] [iterations]   (defaults: 1M threads, 50)
//   probe_workload touch   [n] [iterations]     (defaults: 1M threads, 50)
//
// per_thread_add is the hand-written kernel that a per-thread map is held
// to (issue 6): each thread adds its lane + 1 to its own u64 counter with
// an atomic. touch does nothing; under bench/perthread_add.bpf.c its exit
// probe does the same add into a PERTHREAD map.
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

__global__ void per_thread_add(unsigned long long* counters, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&counters[i], static_cast<unsigned long long>(threadIdx.x % 32 + 1));
}

__global__ void touch(int n) {}

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
  const bool per_thread = argc > 1 && std::strcmp(argv[1], "per_thread_add") == 0;
  const bool touching = argc > 1 && std::strcmp(argv[1], "touch") == 0;
  if (argc < 2 || (!matmul && !per_thread && !touching && std::strcmp(argv[1], "vec_add") != 0)) {
    std::fprintf(stderr,
                 "usage: probe_workload vec_add|matmul|per_thread_add|touch [n] [iterations]\n");
    return 64;
  }
  int n = argc > 2 ? std::atoi(argv[2])
                   : (matmul ? 2048 : (per_thread || touching) ? 1 << 20 : 16 << 20);
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
  unsigned long long* counters = nullptr;
  if (per_thread) {
    CHECK(cudaMalloc(&counters, static_cast<size_t>(n) * sizeof(unsigned long long)));
    CHECK(cudaMemset(counters, 0, static_cast<size_t>(n) * sizeof(unsigned long long)));
  }
  auto launch = [&] {
    if (per_thread) {
      per_thread_add<<<(n + 255) / 256, 256>>>(counters, n);
    } else if (touching) {
      touch<<<(n + 255) / 256, 256>>>(n);
    } else if (matmul) {
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
  // PROBE_WORKLOAD_LAUNCH_TIMES=1: an event after every launch too, and
  // each launch's time printed (where a probe's cost falls over the run).
  const char* per_launch_env = std::getenv("PROBE_WORKLOAD_LAUNCH_TIMES");
  const bool per_launch = per_launch_env != nullptr && *per_launch_env == '1';
  std::vector<cudaEvent_t> marks(per_launch ? iterations : 0);
  for (cudaEvent_t& m : marks) CHECK(cudaEventCreate(&m));
  CHECK(cudaEventRecord(start));
  for (int i = 0; i < iterations; ++i) {
    launch();
    if (per_launch) CHECK(cudaEventRecord(marks[i]));
  }
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  CHECK(cudaGetLastError());
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  if (per_launch) {
    std::fprintf(stderr, "probe_workload: launch_us");
    for (int i = 0; i < iterations; ++i) {
      float l = 0;
      CHECK(cudaEventElapsedTime(&l, i == 0 ? start : marks[i - 1], marks[i]));
      std::fprintf(stderr, " %.1f", l * 1e3);
    }
    std::fprintf(stderr, "\n");
  }
  CHECK(cudaMemcpy(host.data(), c, count * sizeof(float), cudaMemcpyDeviceToHost));
  double checksum = 0;
  for (float v : host) checksum += v;
  std::printf("probe_workload: %s checksum=%.1f\n", argv[1], checksum);
  std::fprintf(stderr, "probe_workload: kernel=%s seconds=%.6f per_launch_us=%.3f\n", argv[1],
               ms / 1e3, ms * 1e3 / iterations);
  return 0;
}
