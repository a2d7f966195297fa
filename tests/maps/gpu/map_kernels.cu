// File: tests/maps/gpu/map_kernels.cu
//
// Test kernels for the GPU tier of the maps (tests/maps/gpu/maps_gpu*_test.cc)
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
// Specialized entry points (abi.h 8.).
__device__ uint64_t __cuprobe_map_lookup_array(uint64_t map, uint64_t index);
__device__ uint64_t __cuprobe_map_lookup_perthread(uint64_t map, uint64_t index);
__device__ uint64_t __cuprobe_map_lookup_perwarp(uint64_t map, uint64_t index);
__device__ uint64_t __cuprobe_map_lookup_persm(uint64_t map, uint64_t index);
__device__ uint64_t __cuprobe_map_lookup_hash(uint64_t map, uint64_t key);
__device__ uint64_t __cuprobe_map_lookup_hash_word(uint64_t map, uint64_t word);
__device__ uint64_t __cuprobe_map_add_array(uint64_t map, uint64_t index, uint64_t delta);
__device__ uint64_t __cuprobe_map_add_perthread(uint64_t map, uint64_t index, uint64_t delta);
__device__ uint64_t __cuprobe_map_add_perwarp(uint64_t map, uint64_t index, uint64_t delta);
__device__ uint64_t __cuprobe_map_add_persm(uint64_t map, uint64_t index, uint64_t delta);
__device__ uint64_t __cuprobe_map_add_hash(uint64_t map, uint64_t key, uint64_t delta);
__device__ uint64_t __cuprobe_map_add_hash_word(uint64_t map, uint64_t word, uint64_t delta);
__device__ uint64_t __cuprobe_map_add_hash_2word(uint64_t map, uint64_t lo, uint64_t hi,
                                                uint64_t delta);
__device__ uint64_t __cuprobe_hist_add_log2(uint64_t map, uint64_t value, uint64_t count);
__device__ uint64_t __cuprobe_hist_add_linear(uint64_t map, uint64_t value, uint64_t count);
}

#define GID (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x)
// The table as compiled probes read it: one read-only load (ld.global.nc).
// The host fills it before any kernel of the module runs.
#define MAP(i) \
  static_cast<uint64_t>(__ldg(reinterpret_cast<const unsigned long long*>(&__cuprobe_map_table[i])))
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

// ---- Specialized entry points: the calls the probe compiler emits, keys by
// value (no local memory).

extern "C" __global__ void array_add_index(uint32_t map, uint32_t modulo, uint64_t* rc_out) {
  const uint64_t gid = GID;
  const uint64_t rc = __cuprobe_map_add_array(MAP(map), gid % modulo, 1);
  if (rc_out != nullptr) rc_out[gid] = rc;
}

// Key patterns that take each path of the warp grouping (helpers.cu,
// KeyGroup), with deltas that vary per lane: 0 one key for all; 1 distinct
// keys (gid % 1024); 2 runs of 4 neighbouring lanes; 3 alternating keys
// (gid % 2: shared, never by neighbours); 4 partial warps (lanes with
// gid % 3 == 0 skip the call) on runs of 8.
__device__ __forceinline__ bool PatternKey(uint64_t gid, uint32_t pattern, uint32_t* key) {
  switch (pattern) {
    case 0:
      *key = 0;
      return true;
    case 1:
      *key = static_cast<uint32_t>(gid % 1024);
      return true;
    case 2:
      *key = static_cast<uint32_t>((gid / 4) % 1024);
      return true;
    case 3:
      *key = static_cast<uint32_t>(gid % 2);
      return true;
    default:
      *key = static_cast<uint32_t>((gid / 8) % 1024);
      return gid % 3 != 0;
  }
}

extern "C" __global__ void array_add_pattern(uint32_t map, uint32_t pattern) {
  const uint64_t gid = GID;
  uint32_t key;
  if (PatternKey(gid, pattern, &key)) (void)__cuprobe_map_add_array(MAP(map), key, gid + 1);
}

extern "C" __global__ void hash_word_add_pattern(uint32_t map, uint32_t pattern) {
  const uint64_t gid = GID;
  uint32_t key;
  if (PatternKey(gid, pattern, &key)) {
    (void)__cuprobe_map_add_hash_word(MAP(map), uint64_t{key} * 1000003 + 17, gid + 1);
  }
}

extern "C" __global__ void hash_word_add_keys(uint32_t map, const uint64_t* keys, uint32_t nkeys,
                                              uint32_t delta_mode, uint64_t* rc_out) {
  const uint64_t gid = GID;
  const uint64_t delta = delta_mode == 0 ? 1 : gid * 65537u + (uint64_t{1} << 33);
  const uint64_t rc = __cuprobe_map_add_hash_word(MAP(map), keys[gid % nkeys], delta);
  if (rc_out != nullptr) rc_out[gid] = rc;
}

extern "C" __global__ void hash_add_wide_keys_typed(uint32_t map, uint32_t modulo) {
  const uint64_t gid = GID;
  uint64_t key[2] = {gid % modulo, ~(gid % modulo)};
  (void)__cuprobe_map_add_hash(MAP(map), ADDR(key), 1);
}

// hash_add_wide_keys_typed's keys by value, as two words.
extern "C" __global__ void hash_add_wide_keys_2word(uint32_t map, uint32_t modulo) {
  const uint64_t gid = GID;
  (void)__cuprobe_map_add_hash_2word(MAP(map), gid % modulo, ~(gid % modulo), 1);
}

// out[gid] = the value of gid's key (0 when absent), by word and by address.
extern "C" __global__ void hash_lookup_typed(uint32_t map, uint32_t by_word, uint64_t* out) {
  const uint64_t gid = GID;
  uint64_t key = gid * 0x9e3779b97f4a7c15ull;
  const uint64_t p = by_word ? __cuprobe_map_lookup_hash_word(MAP(map), key)
                             : __cuprobe_map_lookup_hash(MAP(map), ADDR(&key));
  out[gid] = p == 0 ? 0 : *reinterpret_cast<const uint64_t*>(p);
}

// PER* maps through their typed entry points: add 1 to the thread's slot of
// key 0, then read it back (out[gid] = the value, ~0 when the lookup fails).
extern "C" __global__ void per_id_typed(uint32_t map, uint32_t type, uint64_t* out) {
  const uint64_t gid = GID;
  uint64_t p = 0;
  switch (type) {
    case 0x4001:
      (void)__cuprobe_map_add_perthread(MAP(map), 0, 1);
      p = __cuprobe_map_lookup_perthread(MAP(map), 0);
      break;
    case 0x4002:
      (void)__cuprobe_map_add_perwarp(MAP(map), 0, 1);
      p = __cuprobe_map_lookup_perwarp(MAP(map), 0);
      break;
    case 0x4003:
      (void)__cuprobe_map_add_persm(MAP(map), 0, 1);
      p = __cuprobe_map_lookup_persm(MAP(map), 0);
      break;
    default:
      p = __cuprobe_map_lookup_array(MAP(map), gid % 2048);
      break;
  }
  if (out != nullptr) out[gid] = p == 0 ? ~uint64_t{0} : *reinterpret_cast<const uint64_t*>(p);
}

extern "C" __global__ void per_thread_add_typed(uint32_t map) {
  (void)__cuprobe_map_add_perthread(MAP(map), 0, 1);
}

extern "C" __global__ void hist_add_typed(uint32_t map, uint32_t modulo, uint32_t linear) {
  const uint64_t gid = GID;
  const uint64_t v = modulo == 0 ? gid : gid % modulo;
  (void)(linear ? __cuprobe_hist_add_linear(MAP(map), v, 1)
                : __cuprobe_hist_add_log2(MAP(map), v, 1));
}

// ---- Baselines for the benchmark: the same access patterns, hand-written.

extern "C" __global__ void baseline_atomic_add(uint64_t* counters, uint32_t modulo) {
  atomicAdd(reinterpret_cast<unsigned long long*>(counters) + GID % modulo, 1ull);
}

// The uniform-key pattern of a hash table without its bookkeeping: each
// thread loads its key (as hash_word_add_keys does) and adds to the counter
// its hash picks among 2 * nkeys (a HASH map's slot count), so the warp's
// atomics scatter over lines as the map's do; collisions simply share.
extern "C" __global__ void baseline_atomic_add_hashed(uint64_t* counters, const uint64_t* keys,
                                                      uint32_t nkeys) {
  const uint64_t key = keys[GID % nkeys];
  const uint64_t slot = (key * 0x9E3779B97F4A7C15ull) >> 32;
  atomicAdd(reinterpret_cast<unsigned long long*>(counters) + slot % (2 * nkeys), 1ull);
}

// A PERTHREAD add is an atomic (two launches on different streams share the
// map's slots), so the hand-written kernel doing the same adds atomically.
extern "C" __global__ void baseline_per_thread(uint64_t* counters) {
  atomicAdd(reinterpret_cast<unsigned long long*>(counters) + GID, 1ull);
}

extern "C" __global__ void baseline_hist_log2(uint64_t* buckets) {
  const uint64_t v = GID;
  const uint32_t b = v == 0 ? 0 : 64 - __clzll(static_cast<long long>(v));
  atomicAdd(reinterpret_cast<unsigned long long*>(buckets) + b, 1ull);
}

extern "C" __global__ void empty_kernel() {}
