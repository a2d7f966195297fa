// launch_loop: a launch-bound loop of empty kernels, timed on the host.
//
//   launch_loop [launches]     (default 100000)
//
// Prints "launch_loop: launches=N seconds=S per_launch_us=U".
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

__global__ void empty_kernel() {}

int main(int argc, char** argv) {
  int launches = argc > 1 ? std::atoi(argv[1]) : 100000;
  if (cudaFree(nullptr) != cudaSuccess) return 2;
  empty_kernel<<<1, 1>>>();  // load the module before timing
  if (cudaDeviceSynchronize() != cudaSuccess) return 2;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < launches; ++i) empty_kernel<<<1, 32>>>();
  if (cudaDeviceSynchronize() != cudaSuccess) return 2;
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "launch_loop: launches=%d seconds=%.6f per_launch_us=%.3f\n", launches, s,
              s * 1e6 / launches);
  return 0;
}
