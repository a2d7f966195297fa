// mixed's SASS-only half (samples/CMakeLists.txt builds it for sm_90 alone,
// in a module of its own): the kernel a library without PTX would bring.
#include <cuda_runtime.h>

__global__ void add_two(int* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 2;
}

void LaunchAddTwo(int* data, int n) { add_two<<<(n + 255) / 256, 256>>>(data, n); }
