// The tiled matmul kernel shared by samples/matmul and bench/probe_workload:
// C = A * B for n x n floats, n a multiple of kTile, one thread per element.
// Every thread does exactly 2 * (n / kTile) global loads and one global store.
#ifndef CUPROBE_SAMPLES_MATMUL_MATMUL_KERNEL_CUH_
#define CUPROBE_SAMPLES_MATMUL_MATMUL_KERNEL_CUH_

constexpr int kTile = 16;

__global__ void matmul_tiled(const float* a, const float* b, float* c, int n) {
  __shared__ float ta[kTile][kTile];
  __shared__ float tb[kTile][kTile];
  int row = blockIdx.y * kTile + threadIdx.y;
  int col = blockIdx.x * kTile + threadIdx.x;
  float sum = 0.0f;
  for (int t = 0; t < n / kTile; ++t) {
    ta[threadIdx.y][threadIdx.x] = a[row * n + t * kTile + threadIdx.x];
    tb[threadIdx.y][threadIdx.x] = b[(t * kTile + threadIdx.y) * n + col];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTile; ++k) sum += ta[threadIdx.y][k] * tb[k][threadIdx.x];
    __syncthreads();
  }
  c[row * n + col] = sum;
}

#endif  // CUPROBE_SAMPLES_MATMUL_MATMUL_KERNEL_CUH_
