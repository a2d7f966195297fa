// Kernels of the GPU test of offline instrumentation
// (tests/gpu/instrument_gpu_test.cc), compiled to PTX at build time. Their
// events are known exactly for a given launch:
//   fill:      every thread enters and leaves once (early return or not);
//              threads with i < n store once.
//   divergent: every thread enters and leaves once (return, exit or end);
//              threads with tid % 3 != 1 store once.
extern "C" __global__ void fill(int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = i;
}

extern "C" __global__ void divergent(int* out) {
  const unsigned t = threadIdx.x;
  if (t % 3 == 0) {
    out[t] = 1;
    return;
  }
  if (t % 3 == 1) asm volatile("exit;");
  out[t] = 2;
}
