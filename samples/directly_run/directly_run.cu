// directly_run: a test kernel that exists only to run probes on, with no
// application around it. Every launch has a known shape and known
// arguments, so a probe's results can be checked exactly (the probe's own
// unit test, on the GPU):
//
//   directly_run [grid] [block] [launches] [arg0] [arg1] [stride]
//                                            (defaults: 4, 64, 3, 7, 1000, 1)
//
//   cuprobe run -p my_probe.bpf.c -- build/samples/directly_run 2 32 1 5 6
//
// harness(arg0, arg1, out, stride) runs grid x block threads; each stores
// arg0 * global_id + arg1 into out[global_id * stride] (one 8-byte global
// store per thread, nothing else touches memory), so entry, exit and memory
// probes all have one site, and a warp's store touches 8 32-byte sectors
// with stride 1, 32 with stride 4 or more. The program checks every value
// and prints one line.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void harness(uint64_t arg0, uint64_t arg1, uint64_t* out, uint32_t stride) {
  const uint64_t id = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  out[id * stride] = arg0 * id + arg1;
}

int main(int argc, char** argv) {
  const long grid = argc > 1 ? std::atol(argv[1]) : 4;
  const long block = argc > 2 ? std::atol(argv[2]) : 64;
  const long launches = argc > 3 ? std::atol(argv[3]) : 3;
  const uint64_t arg0 = argc > 4 ? std::strtoull(argv[4], nullptr, 0) : 7;
  const uint64_t arg1 = argc > 5 ? std::strtoull(argv[5], nullptr, 0) : 1000;
  const long stride = argc > 6 ? std::atol(argv[6]) : 1;
  if (grid < 1 || grid > 65535 || block < 1 || block > 1024 || launches < 1 || stride < 1 ||
      stride > 64) {
    std::fprintf(stderr,
                 "usage: directly_run [grid 1..65535] [block 1..1024] [launches] [arg0] [arg1] "
                 "[stride 1..64]\n");
    return 2;
  }
  const size_t n = static_cast<size_t>(grid * block);
  uint64_t* out = nullptr;
  if (cudaMalloc(&out, n * stride * sizeof(uint64_t)) != cudaSuccess) {
    std::fprintf(stderr, "directly_run: no device memory\n");
    return 1;
  }
  for (long i = 0; i < launches; ++i) {
    harness<<<grid, block>>>(arg0, arg1, out, static_cast<uint32_t>(stride));
  }
  std::vector<uint64_t> host(n * stride);
  if (cudaMemcpy(host.data(), out, host.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost) !=
      cudaSuccess) {
    std::fprintf(stderr, "directly_run: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  size_t wrong = 0;
  for (size_t id = 0; id < n; ++id) wrong += host[id * stride] != arg0 * id + arg1;
  std::printf("directly_run: %ld launches of harness<<<%ld, %ld>>>(%llu, %llu): %s\n", launches,
              grid, block, static_cast<unsigned long long>(arg0),
              static_cast<unsigned long long>(arg1), wrong == 0 ? "OK" : "WRONG");
  cudaFree(out);
  return wrong == 0 ? 0 : 1;
}
