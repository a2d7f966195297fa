// multistream: 4 host threads, each launching on its own stream, with known
// launch counts, then a clean exit while nothing is left running.
//
//   multistream [threads] [launches-per-thread]      (defaults: 4, 50)
//
// Each thread launches `work` N times and `tail` once and checks its result,
// so a tracer must count exactly threads*N `work` and `threads` `tail`.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

__global__ void work(int* counter, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(counter, 1);
}

__global__ void tail(int* counter, int* out) { *out = *counter; }

int RunThread(int id, int launches) {
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 1;
  int *counter = nullptr, *out = nullptr;
  if (cudaMalloc(&counter, sizeof(int)) != cudaSuccess) return 1;
  if (cudaMalloc(&out, sizeof(int)) != cudaSuccess) return 1;
  cudaMemsetAsync(counter, 0, sizeof(int), stream);
  const int n = 1024;
  for (int i = 0; i < launches; ++i) work<<<n / 256, 256, 0, stream>>>(counter, n);
  tail<<<1, 1, 0, stream>>>(counter, out);
  int host = 0;
  cudaMemcpyAsync(&host, out, sizeof(int), cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  cudaFree(counter);
  cudaFree(out);
  cudaStreamDestroy(stream);
  if (host != n * launches) {
    std::fprintf(stderr, "multistream: thread %d counted %d, want %d\n", id, host, n * launches);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 4;
  int launches = argc > 2 ? std::atoi(argv[2]) : 50;
  if (threads <= 0 || launches <= 0) {
    std::fprintf(stderr, "usage: multistream [threads > 0] [launches > 0]\n");
    return 64;
  }
  if (cudaFree(nullptr) != cudaSuccess) {  // initialize CUDA before the threads race
    std::fprintf(stderr, "multistream: no usable CUDA device\n");
    return 2;
  }
  std::vector<int> results(threads, 1);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] { results[t] = RunThread(t, launches); });
  }
  for (auto& t : pool) t.join();
  for (int r : results) {
    if (r != 0) return 1;
  }
  std::printf("multistream: OK threads=%d launches=%d work=%d tail=%d\n", threads, launches,
              threads * launches, threads);
  return 0;
}
