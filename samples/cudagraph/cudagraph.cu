// cudagraph: kernels launched through a CUDA graph. A stream capture records
// `scale_add` twice and `bump` once; the graph is then launched `launches`
// times. Probes reach these kernels because the module itself is rewritten
// at load: nothing is special about graph launches.
//
//   cudagraph [n] [launches]     (defaults: 65536, 20)
//
// Per graph launch: 2 * n threads run scale_add and n threads run bump, so an
// entry probe counts launches * 2n and launches * n entries.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void scale_add(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = a * x[i] + 1.0f;
}

__global__ void bump(int* counter, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(counter, 1);
}

#define CHECK(call)                                                                    \
  do {                                                                                 \
    cudaError_t e = (call);                                                            \
    if (e != cudaSuccess) {                                                            \
      std::fprintf(stderr, "cudagraph: %s: %s\n", #call, cudaGetErrorString(e));      \
      return 2;                                                                        \
    }                                                                                  \
  } while (0)

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 65536;
  int launches = argc > 2 ? std::atoi(argv[2]) : 20;
  if (n <= 0 || n % 256 != 0 || launches <= 0) {
    std::fprintf(stderr, "usage: cudagraph [n: a multiple of 256] [launches > 0]\n");
    return 64;
  }
  float* x;
  int* counter;
  CHECK(cudaMalloc(&x, n * sizeof(float)));
  CHECK(cudaMalloc(&counter, sizeof(int)));
  CHECK(cudaMemset(x, 0, n * sizeof(float)));
  CHECK(cudaMemset(counter, 0, sizeof(int)));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  scale_add<<<n / 256, 256, 0, stream>>>(x, 1.0f, n);
  scale_add<<<n / 256, 256, 0, stream>>>(x, 2.0f, n);
  bump<<<n / 256, 256, 0, stream>>>(counter, n);
  CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < launches; ++i) CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  int count = 0;
  std::vector<float> host(n);
  CHECK(cudaMemcpy(&count, counter, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(host.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
  // x -> 2 * (x + 1) + 1 per launch, from 0.
  double want = 0;
  for (int i = 0; i < launches; ++i) want = 2.0 * (want + 1.0) + 1.0;
  bool ok = count == launches * n;
  for (int i = 0; i < n && ok; ++i) ok = host[i] == static_cast<float>(want);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaFree(x));
  CHECK(cudaFree(counter));
  std::printf("cudagraph: %s n=%d launches=%d count=%d\n", ok ? "OK" : "FAILED", n, launches,
              count);
  return ok ? 0 : 1;
}
