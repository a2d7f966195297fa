// gpu_shared_map's workload: phases of kernel launches with a pause between
// them, in which another process can change what the probes read.
//
//   gpu_shared_map [phases] [launches-per-phase] [blocks] [wait]   (defaults: 3, 10, 64, 0)
//
// Prints "gpu_shared_map: pid N" first, and "phase K done" after each phase.
// With wait = 1 it reads a line from stdin before each phase after the
// first (samples/gpu_shared_map/run.sh sends one after each host write; at
// end of input it goes straight on). Every launch adds 1 to each of
// blocks x 256 floats; the last line checks them all.
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void bump(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

int main(int argc, char** argv) {
  const int phases = argc > 1 ? std::atoi(argv[1]) : 3;
  const int launches = argc > 2 ? std::atoi(argv[2]) : 10;
  const int blocks = argc > 3 ? std::atoi(argv[3]) : 64;
  const bool wait = argc > 4 && std::atoi(argv[4]) == 1;
  if (phases < 1 || launches < 1 || blocks < 1) {
    std::fprintf(stderr, "usage: gpu_shared_map [phases] [launches-per-phase] [blocks] [wait]\n");
    return 2;
  }
  std::printf("gpu_shared_map: pid %d\n", static_cast<int>(::getpid()));
  std::fflush(stdout);
  const int n = blocks * 256;
  float* x = nullptr;
  if (cudaMalloc(&x, n * sizeof(float)) != cudaSuccess ||
      cudaMemset(x, 0, n * sizeof(float)) != cudaSuccess) {
    std::fprintf(stderr, "gpu_shared_map: no device memory\n");
    return 1;
  }
  for (int phase = 0; phase < phases; ++phase) {
    if (phase > 0 && wait) {
      char line[64];
      (void)std::fgets(line, sizeof(line), stdin);
    }
    for (int i = 0; i < launches; ++i) bump<<<blocks, 256>>>(x, n);
    if (cudaDeviceSynchronize() != cudaSuccess) {
      std::fprintf(stderr, "gpu_shared_map: %s\n", cudaGetErrorString(cudaGetLastError()));
      return 1;
    }
    std::printf("phase %d done: %d launches of %d blocks\n", phase, launches, blocks);
    std::fflush(stdout);
  }
  std::vector<float> host(n);
  cudaMemcpy(host.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (float v : host) wrong += v != static_cast<float>(phases * launches);
  std::printf("gpu_shared_map: %s (%d values of %d)\n", wrong == 0 ? "OK" : "WRONG", n - wrong, n);
  cudaFree(x);
  return wrong == 0 ? 0 : 1;
}
