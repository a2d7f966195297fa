// bench/experiments/ring_latency.cu: what one ring record costs a block of a
// short, memory-bound kernel, part by part. vec_add (16M floats, 65,536
// blocks of 256) where thread 0 of every block first does some of what a
// kernel_trace probe's reservation does (docs/MAPS.md, "Inline
// reservations"), in the order the compiled probe does it:
//
//   LOAD    the 16-byte relaxed load of the ring's head and cached tail
//   ATOM    the fetch-and-add of the record's 40 bytes on the head
//   PERSM   ... on a head of the SM's own (one 128-byte line per SM)
//   STORE   the record: its length, then 32 bytes of fields
//   SYS     the record's bytes in mapped host memory (else device memory)
//   RELEASE the commit word with st.release.sys (else st.relaxed.sys)
//   LINE    (instead of STORE) a 64-byte record in a 64-byte line of its own,
//           four 16-byte stores, no commit word
//   ONE     (instead of STORE) one 8-byte store per record
//   NOSTATS without the cycle counters' atomics (five per block)
//   NOTHING none of the above (the counters alone, unless NOSTATS)
//   QUIET   (instead of LOAD) the consumer's tail from a line that no atomic
//           touches, then the fetch-and-add: a reservation that reserves
//           first and checks after (CUPROBE_RING_DATA=speculative)
//
// Every block delivers (a 64 MiB ring that wraps, with no consumer), so
// the kernel's time over the plain vec_add's, divided by 65,536, is what a
// delivered record costs the GPU; thread 0 also adds the cycles each part
// waited (clock64 around it) into counters. Not part of the build; on a
// GPU machine:
//
//   nvcc -O3 -arch=sm_90 -o ring_latency ring_latency.cu && ./ring_latency
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

enum : unsigned { LOAD = 1, ATOM = 2, STORE = 4, SYS = 8, RELEASE = 16, PERSM = 32, LINE = 64, ONE = 128, NOSTATS = 256, NOTHING = 512, QUIET = 1024 };

struct Stats {
  unsigned long long cycles[4];  // load, atomic, stores, commit
  unsigned long long blocks;
};

__device__ __forceinline__ long long Clock() {
  long long t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}

template <unsigned V>
__global__ void vec_add(const float* a, const float* b, float* c, int n, unsigned long long* ctl,
                        char* ring, unsigned long long mask, Stats* stats) {
  if (V != 0 && threadIdx.x == 0) {
    unsigned long long* head = ctl;
    if (V & PERSM) {
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      head = ctl + 16 * (sm & 255);
    }
    long long t0 = Clock();
    unsigned long long h = 0, tail = 0;
    if (V & LOAD) {
      asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];"
                   : "=l"(h), "=l"(tail) : "l"(head) : "memory");
      if (h == ~0ull || tail == ~0ull) asm volatile("trap;");
    }
    if (V & QUIET) {
      // Line 200 of the control area: no SM's head (H200: SMs 0-131).
      asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(tail) : "l"(ctl + 16 * 200) : "memory");
    }
    long long t1 = Clock();
    // Without the atomic each block writes a place of its own.
    unsigned long long pos = (V & LOAD) ? h : blockIdx.x * 40ull;
    if (V & ATOM) {
      pos = atomicAdd(head, 40ull);
      // The tail (QUIET) is checked only now: its load and the atomic are
      // in flight together, as in the compiled probe.
      if (pos == ~0ull || ((V & QUIET) && tail == ~0ull)) asm volatile("trap;");
    }
    long long t2 = Clock();
    char* rec = ring + (pos & mask);
    if (V & STORE) {
      *reinterpret_cast<volatile unsigned*>(rec) = 32;
      unsigned long long* f = reinterpret_cast<unsigned long long*>(rec + 8);
      f[0] = static_cast<unsigned long long>(t0);
      f[1] = blockIdx.x;
      f[2] = pos;
      f[3] = 0;
    }
    if (V & LINE) {
      ulonglong2* line = reinterpret_cast<ulonglong2*>(ring + ((pos * 64 / 40) & mask & ~63ull));
      line[0] = make_ulonglong2(32, static_cast<unsigned long long>(t0));
      line[1] = make_ulonglong2(blockIdx.x, pos);
      line[2] = make_ulonglong2(0, 0);
      line[3] = make_ulonglong2(0, 1);
    }
    if (V & ONE) *reinterpret_cast<volatile unsigned long long*>(rec) = static_cast<unsigned long long>(t0);
    long long t3 = Clock();
    if (V & STORE) {
      if (V & RELEASE) {
        asm volatile("st.release.sys.b32 [%0], %1;" ::"l"(rec + 4), "r"(0x80000000u) : "memory");
      } else {
        asm volatile("st.relaxed.sys.b32 [%0], %1;" ::"l"(rec + 4), "r"(0x80000000u) : "memory");
      }
    }
    long long t4 = Clock();
    if (V & NOSTATS) {
      if (t4 == 0) asm volatile("trap;");
    } else {
      atomicAdd(&stats->cycles[0], static_cast<unsigned long long>(t1 - t0));
      atomicAdd(&stats->cycles[1], static_cast<unsigned long long>(t2 - t1));
      atomicAdd(&stats->cycles[2], static_cast<unsigned long long>(t3 - t2));
      atomicAdd(&stats->cycles[3], static_cast<unsigned long long>(t4 - t3));
      atomicAdd(&stats->blocks, 1ull);
    }
  }
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e_));                                 \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

struct Env {
  float *a, *b, *c;
  int n;
  unsigned long long* ctl;
  char* dev_ring;
  char* sys_ring;  // device address of the mapped host ring
  unsigned long long mask;
  Stats* stats;
};

template <unsigned V>
int Measure(const Env& e, const char* name, float native_ms, float* out_ms) {
  const int launches = 50;
  cudaEvent_t s, t;
  CK(cudaEventCreate(&s));
  CK(cudaEventCreate(&t));
  char* ring = (V & SYS) ? e.sys_ring : e.dev_ring;
  int blocks = (e.n + 255) / 256;
  vec_add<V><<<blocks, 256>>>(e.a, e.b, e.c, e.n, e.ctl, ring, e.mask, e.stats);
  CK(cudaDeviceSynchronize());
  CK(cudaMemset(e.stats, 0, sizeof(Stats)));
  std::vector<float> rounds;
  for (int r = 0; r < 3; ++r) {
    CK(cudaEventRecord(s));
    for (int i = 0; i < launches; ++i) {
      vec_add<V><<<blocks, 256>>>(e.a, e.b, e.c, e.n, e.ctl, ring, e.mask, e.stats);
    }
    CK(cudaEventRecord(t));
    CK(cudaEventSynchronize(t));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, s, t));
    rounds.push_back(ms / launches);
  }
  std::sort(rounds.begin(), rounds.end());
  float ms = rounds[1];
  Stats st;
  CK(cudaMemcpy(&st, e.stats, sizeof(st), cudaMemcpyDeviceToHost));
  double nb = st.blocks ? static_cast<double>(st.blocks) : 1.0;
  std::printf("%-34s %8.1f us/launch  ratio %.3f  %6.2f ns/record  cycles: load %6.0f  atom %6.0f"
              "  stores %5.0f  commit %6.0f\n",
              name, ms * 1e3, native_ms > 0 ? ms / native_ms : 1.0,
              native_ms > 0 ? (ms - native_ms) * 1e6 / blocks : 0.0, st.cycles[0] / nb,
              st.cycles[1] / nb, st.cycles[2] / nb, st.cycles[3] / nb);
  *out_ms = ms;
  return 0;
}

int main() {
  Env e;
  e.n = 16 << 20;
  size_t bytes = static_cast<size_t>(e.n) * sizeof(float);
  CK(cudaMalloc(&e.a, bytes));
  CK(cudaMalloc(&e.b, bytes));
  CK(cudaMalloc(&e.c, bytes));
  CK(cudaMemset(e.a, 0, bytes));
  CK(cudaMemset(e.b, 0, bytes));
  CK(cudaMalloc(&e.ctl, 256 * 128));
  CK(cudaMemset(e.ctl, 0, 256 * 128));
  const size_t ring_bytes = 64u << 20;
  e.mask = ring_bytes - 1;
  CK(cudaMalloc(&e.dev_ring, ring_bytes + 64));
  void* host = nullptr;
  CK(cudaHostAlloc(&host, ring_bytes + 64, cudaHostAllocMapped));
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&e.sys_ring), host, 0));
  CK(cudaMalloc(&e.stats, sizeof(Stats)));
  float native = 0, ms = 0;
  if (Measure<0>(e, "native", 0, &native)) return 1;
  Measure<NOTHING>(e, "counters only", native, &ms);
  Measure<NOTHING | NOSTATS>(e, "clock reads only", native, &ms);
  Measure<ATOM | NOSTATS>(e, "atom, no counters", native, &ms);
  Measure<LOAD | ATOM | STORE | NOSTATS>(e, "load+atom+store dev, relaxed, no ctr", native, &ms);
  Measure<LOAD | ATOM | STORE | RELEASE | NOSTATS>(e, "load+atom+store dev, release, no ctr", native, &ms);
  Measure<PERSM | ATOM | STORE | RELEASE | NOSTATS>(e, "per-SM atom+store dev, release, no ctr", native, &ms);
  Measure<QUIET | ATOM | STORE | RELEASE | NOSTATS>(e, "quiet tail+atom+store dev, release, no ctr", native, &ms);
  Measure<LOAD | ATOM | STORE | SYS | RELEASE | NOSTATS>(e, "load+atom+store sys, release, no ctr", native, &ms);
  Measure<STORE | SYS | NOSTATS>(e, "store sys relaxed (no atom), no ctr", native, &ms);
  Measure<ONE | SYS | NOSTATS>(e, "one 8-B store sys, no ctr", native, &ms);
  Measure<LINE | SYS | NOSTATS>(e, "64-B line sys, no ctr", native, &ms);
  Measure<ATOM>(e, "atom", native, &ms);
  Measure<LOAD | ATOM>(e, "load+atom", native, &ms);
  Measure<LOAD | ATOM | STORE>(e, "load+atom+store dev, relaxed", native, &ms);
  Measure<LOAD | ATOM | STORE | RELEASE>(e, "load+atom+store dev, release.sys", native, &ms);
  Measure<LOAD | ATOM | STORE | SYS>(e, "load+atom+store sys, relaxed", native, &ms);
  Measure<LOAD | ATOM | STORE | SYS | RELEASE>(e, "load+atom+store sys, release (ships)", native,
                                                &ms);
  Measure<ATOM | STORE | SYS | RELEASE>(e, "atom+store sys, release", native, &ms);
  Measure<PERSM | ATOM | STORE | SYS | RELEASE>(e, "per-SM atom+store sys, release", native, &ms);
  Measure<PERSM | ATOM | STORE | SYS>(e, "per-SM atom+store sys, relaxed", native, &ms);
  Measure<STORE | SYS | RELEASE>(e, "store sys, release (no atom)", native, &ms);
  Measure<STORE | SYS>(e, "store sys, relaxed (no atom)", native, &ms);
  Measure<LINE | SYS>(e, "64-B line sys (no atom)", native, &ms);
  Measure<ONE | SYS>(e, "one 8-B store sys (no atom)", native, &ms);
  Measure<ATOM | LINE>(e, "atom + 64-B line dev", native, &ms);
  Measure<PERSM | ATOM | STORE | RELEASE>(e, "per-SM atom+store dev, release.sys", native, &ms);
  Measure<PERSM | ATOM | STORE>(e, "per-SM atom+store dev, relaxed", native, &ms);
  Measure<0>(e, "native again", native, &ms);
  return 0;
}
