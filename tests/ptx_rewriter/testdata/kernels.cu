// Source of the image-reader fixtures: tests/ptx_rewriter/CMakeLists.txt
// compiles it with nvcc into PTX, cubins, fatbins (zstd, LZ4, uncompressed,
// -G, several archs) and host executables. The tests expect exactly these
// four kernels:
//   _Z7add_onePfi  _ZN2ns5scaleIfEEvPT_S1_  plain_c  _Z11uses_helperPi
__global__ void add_one(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.f;
}

namespace ns {
template <typename T>
__global__ void scale(T* x, T s) { x[threadIdx.x] *= s; }
}  // namespace ns
template __global__ void ns::scale<float>(float*, float);

extern "C" __global__ void plain_c(int* p) { *p = 42; }

// Not a kernel: a function symbol (local in whole-program cubins, global with
// -rdc) that the kernel-name listing must leave out.
__device__ __noinline__ int helper(int a) { return a * 3; }

__global__ void uses_helper(int* p) { *p = helper(*p); }

// The host executable fixtures need a main; it never touches the GPU.
int main() { return 0; }
