// mixed: one program whose kernels come in two modules, as in a PyTorch
// program that runs its own Triton kernels and cuBLAS's: add_one ships PTX
// (built for compute_90 and sm_90), add_two ships SASS only (mixed_sass.cu,
// built for sm_90 alone). What `cuprobe run --backend auto` rewrites and
// patches side by side.
//
//   mixed [n] [iterations]      (defaults: 1048576 elements, 3 iterations)
//
// Each iteration launches add_one and add_two once over n ints; every
// element ends at 3 x iterations, checked on the host (exit 1 otherwise).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

void LaunchAddTwo(int* data, int n);  // mixed_sass.cu

__global__ void add_one(int* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 1;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1 << 20;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 3;
  if (n <= 0 || iterations <= 0) {
    std::fprintf(stderr, "usage: mixed [n > 0] [iterations > 0]\n");
    return 2;
  }
  int* data = nullptr;
  if (cudaMalloc(&data, sizeof(int) * n) != cudaSuccess ||
      cudaMemset(data, 0, sizeof(int) * n) != cudaSuccess) {
    std::fprintf(stderr, "mixed: cannot allocate %d ints on the GPU\n", n);
    return 2;
  }
  for (int it = 0; it < iterations; ++it) {
    add_one<<<(n + 255) / 256, 256>>>(data, n);
    LaunchAddTwo(data, n);
  }
  std::vector<int> host(n);
  if (cudaMemcpy(host.data(), data, sizeof(int) * n, cudaMemcpyDeviceToHost) != cudaSuccess) {
    std::fprintf(stderr, "mixed: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 2;
  }
  cudaFree(data);
  for (int i = 0; i < n; ++i) {
    if (host[i] != 3 * iterations) {
      std::fprintf(stderr, "mixed: element %d is %d, expected %d\n", i, host[i], 3 * iterations);
      return 1;
    }
  }
  std::printf("mixed: OK n=%d iterations=%d launches=%d\n", n, iterations, 2 * iterations);
  return 0;
}
