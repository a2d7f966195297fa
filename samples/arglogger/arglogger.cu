// arglogger: the workload of samples/arglogger. Two kernels with arguments
// of different types and known values, each launched `iterations` times:
//
//   axpy(float a = 2.5f, const float* x, float* y, int n)
//   stamp(unsigned long long* out, unsigned long long seed = 0x0123456789abcdef,
//         int offset = -3, unsigned char tag = 0x7f, double scale = 0.5, int n)
//
// The device pointers differ from run to run: they are printed on stderr
// ("arglogger: x=0x... y=0x... out=0x...") so that a test can compare them
// with what a probe read. stdout only has the checked result.
//
//   arglogger [n] [iterations]      (defaults: 4096 elements, 3 iterations)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}

__global__ void stamp(unsigned long long* out, unsigned long long seed, int offset,
                      unsigned char tag, double scale, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = seed + static_cast<unsigned long long>(i + offset) * tag +
                      static_cast<unsigned long long>(scale * i);
}

#define CHECK(call)                                                                    \
  do {                                                                                 \
    cudaError_t err_ = (call);                                                         \
    if (err_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "arglogger: %s failed: %s\n", #call, cudaGetErrorString(err_)); \
      return 2;                                                                        \
    }                                                                                  \
  } while (0)

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 4096;
  int iterations = argc > 2 ? std::atoi(argv[2]) : 3;
  if (n <= 0 || iterations <= 0) {
    std::fprintf(stderr, "usage: arglogger [n > 0] [iterations > 0]\n");
    return 64;
  }
  const float a = 2.5f;
  const unsigned long long seed = 0x0123456789abcdefull;
  const int offset = -3;
  const unsigned char tag = 0x7f;
  const double scale = 0.5;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 13);
    y[i] = 1.0f;
  }
  float *dx, *dy;
  unsigned long long* dout;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMalloc(&dout, n * sizeof(unsigned long long)));
  std::fprintf(stderr, "arglogger: x=%p y=%p out=%p\n", static_cast<void*>(dx),
               static_cast<void*>(dy), static_cast<void*>(dout));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  const int threads = 256, blocks = (n + threads - 1) / threads;
  for (int it = 0; it < iterations; ++it) {
    axpy<<<blocks, threads>>>(a, dx, dy, n);
    stamp<<<blocks, threads>>>(dout, seed, offset, tag, scale, n);
  }
  CHECK(cudaGetLastError());
  std::vector<unsigned long long> out(n);
  CHECK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(out.data(), dout, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    float want_y = 1.0f + iterations * a * x[i];
    unsigned long long want_out = seed + static_cast<unsigned long long>(i + offset) * tag +
                                  static_cast<unsigned long long>(scale * i);
    if (y[i] != want_y || out[i] != want_out) ++bad;
  }
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  CHECK(cudaFree(dout));
  if (bad != 0) {
    std::fprintf(stderr, "arglogger: FAILED: %d of %d results wrong\n", bad, n);
    return 1;
  }
  std::printf("arglogger: OK n=%d iterations=%d launches=%d\n", n, iterations, 2 * iterations);
  return 0;
}
