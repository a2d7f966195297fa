// File: tests/maps/gpu/map_kernels.cu
//
// Test kernels for the GPU tier of the maps (tests/maps/gpu/maps_gpu_test.cc)
// and the maps benchmark (bench/maps_bench.cc). Compiled to PTX with
// `nvcc -rdc=true -ptx` and linked at run time with the helper library PTX
// (nvJitLink), exactly as instrumented modules are: the helpers are only
// declared here, and this module defines __cuprobe_map_table like the
// rewriter's link pass does. Every kernel is a 1-D grid; `gid` is the global
// thread id.
#include <stdint.h>

extern "C" {
__device__ uint64_t __cuprobe_map_table[16];
__device__ uint64_t __cuprobe_map_lookup(uint64_t map, uint64_t key);
__device__ uint64_t __cuprobe_map_update(uint64_t map, uint64_t key, uint64_t value,
                                         uint64_t flags);
__device__ uint64_t __cuprobe_map_delete(uint64_t map, uint64_t key);
__device__ uint64_t __cuprobe_map_add(uint64_t map, uint64_t key, uint64_t delta);
__device__ uint64_t __cuprobe_hist_add(uint64_t map, uint64_t value, uint64_t count);
__device__ uint64_t __cuprobe_ringbuf_output(uint64_t map, uint64_t data, uint64_t size,
                                             uint64_t flags);
__device__ uint64_t __cuprobe_ringbuf_reserve(uint64_t map, uint64_t size, uint64_t flags);
__device__ uint64_t __cuprobe_ringbuf_submit(uint64_t data, uint64_t flags);
__device__ uint64_t __cuprobe_ringbuf_discard(uint64_t data, uint64_t flags);
__device__ uint64_t __cuprobe_pid_tgid();
}

#define GID (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x)
#define MAP(i) (*static_cast<volatile uint64_t*>(&__cuprobe_map_table[i]))
#define ADDR(p) reinterpret_cast<uint64_t>(p)

// A key in a probe's stack, as the compiler passes it: a generic pointer to
// local memory.
extern "C" __global__ void add_u32_key(uint32_t map, uint32_t modulo, uint64_t* rc_out) {
  const uint64_t gid = GID;
  uint32_t key = static_cast<uint32_t>(gid % modulo);
  const uint64_t rc = __cuprobe_map_add(MAP(map), ADDR(&key), 1);
  if (rc_out != nullptr) rc_out[gid] = rc;
}

// HASH with 8-byte keys taken from a table (colliding keys chosen on the
// host), delta varying per thread to exercise the warp sum.
extern "C" __global__ void hash_add_keys(uint32_t map, const uint64_t* keys, uint32_t nkeys,
                                         uint32_t delta_mode, uint64_t* rc_out) {
  const uint64_t gid = GID;
  uint64_t key = keys[gid % nkeys];
  const uint64_t delta = delta_mode == 0 ? 1 : gid * 65537u + (uint64_t{1} << 33);
  const uint64_t rc = __cuprobe_map_add(MAP(map), ADDR(&key), delta);
  if (rc_out != nullptr) rc_out[gid] = rc;
}

// 16-byte keys: the per-lane path of map_add (no key grouping).
extern "C" __global__ void hash_add_wide_keys(uint32_t map, uint32_t modulo) {
  const uint64_t gid = GID;
  uint64_t key[2] = {gid % modulo, ~(gid % modulo)};
  (void)__cuprobe_map_add(MAP(map), ADDR(key), 1);
}

extern "C" __global__ void hash_update(uint32_t map, uint64_t flags, uint64_t* rc_out) {
  const uint64_t gid = GID;
  uint64_t key = gid * 0x9e3779b97f4a7c15ull;
  uint64_t value = gid + 1;
  rc_out[gid] = __cuprobe_map_update(MAP(map), ADDR(&key), ADDR(&value), flags);
}

// out[gid] = the value of gid's key (0 when absent).
extern "C" __global__ void hash_lookup(uint32_t map, uint64_t* out) {
  const uint64_t gid = GID;
  uint64_t key = gid * 0x9e3779b97f4a7c15ull;
  const uint64_t p = __cuprobe_map_lookup(MAP(map), ADDR(&key));
  out[gid] = p == 0 ? 0 : *reinterpret_cast<const uint64_t*>(p);
}

extern "C" __global__ void hash_delete_even(uint32_t map, uint64_t* rc_out) {
  const uint64_t gid = GID;
  if (gid % 2 != 0) return;
  uint64_t key = gid * 0x9e3779b97f4a7c15ull;
  rc_out[gid] = __cuprobe_map_delete(MAP(map), ADDR(&key));
}

extern "C" __global__ void hist_add(uint32_t map, uint32_t modulo) {
  const uint64_t gid = GID;
  (void)__cuprobe_hist_add(MAP(map), modulo == 0 ? gid : gid % modulo, 1);
}

// PER* maps: every thread adds 1 to its own slot of key 0.
extern "C" __global__ void per_id_add(uint32_t map) {
  uint32_t key = 0;
  (void)__cuprobe_map_add(MAP(map), ADDR(&key), 1);
}

// Every thread emits one 16-byte record {gid, gid ^ magic}.
extern "C" __global__ void ring_output(uint32_t map, uint64_t* rc_out) {
  const uint64_t gid = GID;
  uint64_t record[2] = {gid, gid ^ 0x5eed5eed5eed5eedull};
  const uint64_t rc = __cuprobe_ringbuf_output(MAP(map), ADDR(record), sizeof(record), 0);
  if (rc_out != nullptr) rc_out[gid] = rc;
}

// Reserve, write, then submit (even gid) or discard (odd gid).
extern "C" __global__ void ring_reserve_submit(uint32_t map, uint64_t* rc_out) {
  const uint64_t gid = GID;
  const uint64_t p = __cuprobe_ringbuf_reserve(MAP(map), 16, 0);
  rc_out[gid] = p == 0 ? 0 : 1;
  if (p == 0) return;
  uint64_t* record = reinterpret_cast<uint64_t*>(p);
  record[0] = gid;
  record[1] = gid ^ 0x5eed5eed5eed5eedull;
  if (gid % 2 == 0) {
    (void)__cuprobe_ringbuf_submit(p, 0);
  } else {
    (void)__cuprobe_ringbuf_discard(p, 0);
  }
}

extern "C" __global__ void read_pid_tgid(uint64_t* out) { out[GID] = __cuprobe_pid_tgid(); }

// ---- Baselines for the benchmark: the same access patterns, hand-written.

extern "C" __global__ void baseline_atomic_add(uint64_t* counters, uint32_t modulo) {
  atomicAdd(reinterpret_cast<unsigned long long*>(counters) + GID % modulo, 1ull);
}

extern "C" __global__ void baseline_per_thread(uint64_t* counters) {
  counters[GID] += 1;
}

extern "C" __global__ void baseline_hist_log2(uint64_t* buckets) {
  const uint64_t v = GID;
  const uint32_t b = v == 0 ? 0 : 64 - __clzll(static_cast<long long>(v));
  atomicAdd(reinterpret_cast<unsigned long long*>(buckets) + b, 1ull);
}

extern "C" __global__ void empty_kernel() {}
