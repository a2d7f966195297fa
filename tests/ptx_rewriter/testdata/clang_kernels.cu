// Corpus and fixture source compiled by clang-19 (LLVM's NVPTX backend, the
// same backend that compiles probes) with -nocudainc: clang 19 cannot read
// CUDA 13's headers, so the few CUDA keywords used here are defined below.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __noinline__ __attribute__((noinline))

struct Pair { double a; int b; };

__device__ unsigned lane() { return __nvvm_read_ptx_sreg_tid_x() & 31; }
__device__ __noinline__ int twice(int x) { return 2 * x; }

extern "C" __global__ void clang_saxpy(float a, const float* x, float* y, int n) {
  unsigned i = __nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() +
               __nvvm_read_ptx_sreg_tid_x();
  if (i >= static_cast<unsigned>(n)) return;
  y[i] = a * x[i] + y[i];
}

__global__ void clang_shared(int* out, Pair p) {
  __shared__ int s[64];
  unsigned t = __nvvm_read_ptx_sreg_tid_x();
  s[t & 63] = twice(static_cast<int>(t)) + p.b;
  __syncthreads();
  out[t] = s[(t + 1) & 63] + s[3] + static_cast<int>(p.a);
  __nvvm_atom_add_gen_i(out + 100, 1);
}

__global__ void clang_local_array(long* out, int k) {
  long buf[16];
  for (int i = 0; i < 16; ++i) buf[i] = i * k;
  out[lane()] = buf[k & 15];
}
