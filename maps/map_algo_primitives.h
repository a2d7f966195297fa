// File: maps/map_algo_primitives.h
//
// The building blocks of the map algorithms (maps/map_algorithms.h, which
// includes this): the macros that make a function both host and device code,
// the negative errno values the helpers return, atomics and loads/stores
// with explicit memory orders, unaligned-safe key and value loads, and the
// hash mixer. Nothing here knows a map descriptor.
//
//   uint64_t word = mapalgo::LoadU64(key);          // any alignment
//   mapalgo::StoreRelease32(&state, live);          // publishes at GPU scope
//
// Hazards:
//  - Memory orders are explicit: the *System* variants are for host-mapped
//    memory that a CPU reads or writes over the bus (ring records and the
//    consumer's tail); the others are GPU scope.
//  - Keys and values come from generic pointers of any alignment (a probe's
//    stack); loads take the aligned fast path only when it is safe.
#ifndef CUPROBE_MAPS_MAP_ALGO_PRIMITIVES_H_
#define CUPROBE_MAPS_MAP_ALGO_PRIMITIVES_H_

#include <sched.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
// Everything is inlined into the helper library's exported functions: a
// call between device functions of a separately compiled module costs the
// callee's live registers on top of the caller's (maps/gpu/helpers.cu).
#define CUPROBE_HD __host__ __device__ __forceinline__
#define CUPROBE_HD_SEARCH __host__ __device__ __forceinline__
#else
#define CUPROBE_HD inline
// The HASH hash and search stay out of line on the host: inlined into a
// generic operation on a map of another type, GCC warns about key reads past
// a u32 index on a path that never runs.
#define CUPROBE_HD_SEARCH inline __attribute__((noinline))
#endif

// Loops over key and value bytes run a handful of times; unrolled, ptxas
// keeps every iteration's loads live at once and the helper's register count
// (which the whole instrumented kernel inherits: nvJitLink takes the maximum
// over the call graph) doubles. Keep them rolled on the GPU.
#if defined(__CUDA_ARCH__)
#define CUPROBE_NO_UNROLL _Pragma("unroll 1")
#else
#define CUPROBE_NO_UNROLL
#endif

namespace cuprobe::mapalgo {

// Negative errno values, as eBPF helpers return them.
inline constexpr int64_t kENOENT = -2;
inline constexpr int64_t kE2BIG = -7;
inline constexpr int64_t kEAGAIN = -11;
inline constexpr int64_t kEEXIST = -17;
inline constexpr int64_t kEINVAL = -22;

// ---- Primitives -----------------------------------------------------------

template <typename T>
CUPROBE_HD T* Ptr(uint64_t address) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(address));
}

CUPROBE_HD uint64_t AtomicAdd64(uint64_t* p, uint64_t v) {
#ifdef __CUDA_ARCH__
  return atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
#else
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
#endif
}

CUPROBE_HD uint64_t AtomicCas64(uint64_t* p, uint64_t expected, uint64_t desired) {
#ifdef __CUDA_ARCH__
  return atomicCAS(reinterpret_cast<unsigned long long*>(p), expected, desired);
#else
  __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return expected;
#endif
}

CUPROBE_HD void AtomicMax64(uint64_t* p, uint64_t v) {
#ifdef __CUDA_ARCH__
  atomicMax(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
#else
  uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (cur < v &&
         !__atomic_compare_exchange_n(p, &cur, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
#endif
}

// CAS on a HASH state word. Acquire on success and failure: the caller may
// read the key the winner published.
CUPROBE_HD uint32_t AtomicCas32(uint32_t* p, uint32_t expected, uint32_t desired) {
#ifdef __CUDA_ARCH__
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.cas.b32 %0, [%1], %2, %3;"
               : "=r"(old)
               : "l"(p), "r"(expected), "r"(desired)
               : "memory");
  return old;
#else
  __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  return expected;
#endif
}

CUPROBE_HD uint32_t LoadAcquire32(const uint32_t* p) {
#ifdef __CUDA_ARCH__
  uint32_t v;
  asm volatile("ld.acquire.gpu.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

CUPROBE_HD void StoreRelease32(uint32_t* p, uint32_t v) {
#ifdef __CUDA_ARCH__
  asm volatile("st.release.gpu.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

CUPROBE_HD uint64_t LoadRelaxed64(const uint64_t* p) {
#ifdef __CUDA_ARCH__
  uint64_t v;
  asm volatile("ld.relaxed.gpu.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#else
  return __atomic_load_n(p, __ATOMIC_RELAXED);
#endif
}

// Host-mapped memory, written by the CPU consumer.
CUPROBE_HD uint64_t LoadAcquireSystem64(const uint64_t* p) {
#ifdef __CUDA_ARCH__
  uint64_t v;
  asm volatile("ld.acquire.sys.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

CUPROBE_HD uint32_t LoadRelaxedSystem32(const uint32_t* p) {
#ifdef __CUDA_ARCH__
  uint32_t v;
  asm volatile("ld.relaxed.sys.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  return __atomic_load_n(p, __ATOMIC_RELAXED);
#endif
}

// The commit of a ring record: every earlier write of this thread (the body)
// becomes visible to the CPU before this word does.
CUPROBE_HD void StoreReleaseSystem32(uint32_t* p, uint32_t v) {
#ifdef __CUDA_ARCH__
  asm volatile("st.release.sys.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

CUPROBE_HD void Pause() {
#ifdef __CUDA_ARCH__
  __nanosleep(64);
#else
  sched_yield();
#endif
}

CUPROBE_HD uint32_t CountLeadingZeros64(uint64_t v) {  // v != 0
#ifdef __CUDA_ARCH__
  return static_cast<uint32_t>(__clzll(static_cast<long long>(v)));
#else
  return static_cast<uint32_t>(__builtin_clzll(v));
#endif
}

CUPROBE_HD uint64_t Min64(uint64_t a, uint64_t b) { return a < b ? a : b; }

// Unaligned-safe loads from a generic pointer.
CUPROBE_HD uint64_t LoadBytes(const uint8_t* p, uint32_t n) {  // n <= 8, little-endian
  uint64_t w = 0;
  CUPROBE_NO_UNROLL
  for (uint32_t j = 0; j < n; ++j) w |= static_cast<uint64_t>(p[j]) << (8 * j);
  return w;
}

CUPROBE_HD uint64_t LoadU64(const void* src) {
  const auto* p = static_cast<const uint8_t*>(src);
  if ((reinterpret_cast<uintptr_t>(p) & 7) == 0) {
#ifdef __CUDA_ARCH__
    return *reinterpret_cast<const uint64_t*>(p);
#else
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#endif
  }
  return LoadBytes(p, 8);
}

CUPROBE_HD uint32_t LoadU32(const void* src) {
  const auto* p = static_cast<const uint8_t*>(src);
  if ((reinterpret_cast<uintptr_t>(p) & 3) == 0) {
#ifdef __CUDA_ARCH__
    return *reinterpret_cast<const uint32_t*>(p);
#else
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
  }
  return static_cast<uint32_t>(LoadBytes(p, 4));
}

CUPROBE_HD void StoreU64(void* dst, uint64_t v) {  // dst 8-aligned
#ifdef __CUDA_ARCH__
  *reinterpret_cast<uint64_t*>(dst) = v;
#else
  memcpy(dst, &v, 8);
#endif
}

// Word i (8 bytes, zero-padded past key_size) of a key.
CUPROBE_HD uint64_t KeyWord(const uint8_t* key, uint32_t key_size, uint32_t i) {
  const uint32_t offset = 8 * i;
  const uint32_t n = key_size - offset < 8 ? key_size - offset : 8;
  if (n == 8) return LoadU64(key + offset);
  if (n == 4) return LoadU32(key + offset);
  return LoadBytes(key + offset, n);
}

// Copies n bytes from any alignment into 8-aligned dst; bytes past n up to
// the next multiple of 8 are zeroed (strides are zero-padded).
CUPROBE_HD void CopyToAligned(uint8_t* dst, const uint8_t* src, uint32_t n) {
  uint32_t i = 0;
  CUPROBE_NO_UNROLL
  for (; i + 8 <= n; i += 8) StoreU64(dst + i, LoadU64(src + i));
  if (i < n) StoreU64(dst + i, LoadBytes(src + i, n - i));
}

CUPROBE_HD void ZeroAligned(uint8_t* dst, uint32_t n) {  // n a multiple of 8
  CUPROBE_NO_UNROLL
  for (uint32_t i = 0; i < n; i += 8) StoreU64(dst + i, 0);
}

// 64-bit mixer (the finalizer of MurmurHash3): every input bit reaches every
// output bit, so both the slot index (low bits) and the fingerprint (high
// bits) are well spread.
CUPROBE_HD uint64_t Mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace cuprobe::mapalgo

#endif  // CUPROBE_MAPS_MAP_ALGO_PRIMITIVES_H_
