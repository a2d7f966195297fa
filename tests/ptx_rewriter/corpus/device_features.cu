// Corpus for the PTX rewriter: device features whose PTX is unusual --
// cooperative groups (grid sync, tiled partitions, reductions), wmma and mma
// tensor-core instructions, cp.async pipelines, warp shuffles and votes,
// dynamic shared memory, atomics of several widths, early returns, printf.
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cooperative_groups/reduce.h>
#include <cuda/pipeline>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdio>

namespace cg = cooperative_groups;

__global__ void grid_sync_sum(const int* in, int* out, int n) {
  cg::grid_group grid = cg::this_grid();
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  int v = grid.thread_rank() < static_cast<unsigned long long>(n) ? in[grid.thread_rank()] : 0;
  v = cg::reduce(warp, v, cg::plus<int>());
  if (warp.thread_rank() == 0) atomicAdd(out, v);
  grid.sync();
  if (grid.thread_rank() == 0) out[1] = out[0];
}

__global__ void tile_shuffles(float* data) {
  cg::thread_block_tile<16> tile = cg::tiled_partition<16>(cg::this_thread_block());
  float v = data[threadIdx.x];
  for (int o = tile.size() / 2; o > 0; o /= 2) v += tile.shfl_down(v, o);
  v = tile.shfl(v, 0);
  data[threadIdx.x] = v + tile.any(v > 1.f) + tile.all(v > 0.f);
}

__global__ void warp_intrinsics(unsigned* data) {
  unsigned v = data[threadIdx.x];
  unsigned mask = __ballot_sync(0xffffffffu, v & 1);
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_up_sync(0xffffffffu, v, 2);
  v += __popc(mask) + __match_any_sync(0xffffffffu, v);
  v = __reduce_add_sync(0xffffffffu, v);
  data[threadIdx.x] = v;
}

__global__ void wmma_gemm(const half* a, const half* b, float* c) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

__global__ void mma_inline(const unsigned* a, const unsigned* b, float* c) {
  float d[4] = {0, 0, 0, 0};
  unsigned ra[4] = {a[0], a[1], a[2], a[3]}, rb[2] = {b[0], b[1]};
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
  for (int i = 0; i < 4; ++i) c[threadIdx.x * 4 + i] = d[i];
}

__global__ void cp_async_pipeline(const float4* in, float4* out, int n) {
  extern __shared__ float4 stage[];
  auto block = cg::this_thread_block();
  cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    pipe.producer_acquire();
    cuda::memcpy_async(&stage[threadIdx.x], &in[i], sizeof(float4), pipe);
    pipe.producer_commit();
    pipe.consumer_wait();
    float4 v = stage[threadIdx.x];
    v.x += 1.f;
    out[i] = v;
    pipe.consumer_release();
  }
  cg::memcpy_async(block, stage, in, sizeof(float4) * blockDim.x);
  cg::wait(block);
}

__global__ void dynamic_smem_transpose(const double* in, double* out, int w) {
  extern __shared__ double tile[];
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  if (x >= w || y >= w) return;  // early return
  tile[threadIdx.y * 33 + threadIdx.x] = in[y * w + x];
  __syncthreads();
  out[x * w + y] = tile[threadIdx.x * 33 + threadIdx.y];
}

__global__ void atomics_mix(unsigned long long* u64, float* f, double* d, __half2* h,
                            unsigned short* u16) {
  atomicAdd(u64, 1ull);
  atomicMax(u64 + 1, static_cast<unsigned long long>(threadIdx.x));
  atomicCAS(u64 + 2, 0ull, 5ull);
  atomicAdd(f, 1.f);
  atomicAdd(d, 2.0);
  atomicAdd(h, __floats2half2_rn(1.f, 2.f));
  atomicCAS(u16, static_cast<unsigned short>(0), static_cast<unsigned short>(1));
  __shared__ int s;
  if (threadIdx.x == 0) s = 0;
  __syncthreads();
  atomicAdd(&s, 1);
  __syncthreads();
  if (threadIdx.x == 0) atomicExch(reinterpret_cast<int*>(u64 + 3), s);
}

__global__ void vector_loads(const float4* a, const double2* b, int4* c, const char* bytes) {
  float4 x = __ldg(a + threadIdx.x);
  double2 y = b[threadIdx.x];
  int z = bytes[threadIdx.x];
  c[threadIdx.x] = make_int4(static_cast<int>(x.x + y.x), static_cast<int>(x.w + y.y), z, 0);
}

__device__ __noinline__ int device_call(int* p, int i) { return p[i] * 2; }

__global__ void calls_and_exits(int* p, int n) {
  if (threadIdx.x >= n) return;
  if (p[threadIdx.x] < 0) asm volatile("exit;");
  p[threadIdx.x] = device_call(p, threadIdx.x);
  if (threadIdx.x == 0) printf("n=%d p0=%d\n", n, p[0]);
}

struct Big { double a[5]; int b; };
__global__ void __launch_bounds__(128, 2) struct_param(Big big, char c, short s, float* out) {
  out[threadIdx.x] = big.a[threadIdx.x % 5] + big.b + c + s;
}

__constant__ float kCoeffs[16];
__device__ int g_counter;
__global__ void globals_and_constants(float* out) {
  out[threadIdx.x] = kCoeffs[threadIdx.x % 16];
  atomicAdd(&g_counter, 1);
}
