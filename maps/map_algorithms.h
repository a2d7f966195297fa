// File: maps/map_algorithms.h
//
// The map algorithms, written once for both sides: nvcc compiles them into the
// GPU helper library (maps/gpu/helpers.cu), g++ into host code that reads
// snapshots (maps/map_snapshot.cc) and into the CPU tests, which check the
// semantics of the very code the GPU runs. Everything works on a
// `cuprobe_map_desc` (probe/map_desc.h) whose addresses are device addresses
// on the GPU and host addresses on the host.
//
//   const cuprobe_map_desc* d = ...;          // a descriptor built by MapSet
//   uint64_t key = 7;
//   int64_t rc = mapalgo::MapUpdate(d, &key, &value, CUPROBE_ANY, /*id=*/0);
//   uint64_t* counter = mapalgo::MapAddTarget(d, &key, /*id=*/0, &rc);
//
// What is NOT here: warp aggregation (match/redux/shuffle exist on the GPU
// only; maps/gpu/helpers.cu groups lanes and then calls these per group), and
// reading the special registers that give PER* maps their ids (the caller
// passes the id).
//
// Hazards:
//  - Memory orders are explicit: HASH slots publish key and value with a
//    release store of the state word (GPU scope); ring records commit with a
//    release store at *system* scope because the consumer is a CPU reading
//    host-mapped memory over the bus.
//  - A HASH slot in PENDING state makes a thread looking for the same key
//    (same fingerprint) wait for the inserter, which writes a few words and
//    publishes. Never call these while holding anything the inserter needs.
//  - Keys and values come from generic pointers of any alignment (a probe's
//    stack); loads take the aligned fast path only when it is safe.
#ifndef CUPROBE_MAPS_MAP_ALGORITHMS_H_
#define CUPROBE_MAPS_MAP_ALGORITHMS_H_

#include <sched.h>
#include <stdint.h>
#include <string.h>

#include "probe/map_desc.h"

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

// ---- Keys of HASH maps -------------------------------------------------------
//
// The HASH algorithms read a key through one of two sources that agree word
// for word, so a key hashes, compares and is stored the same whichever way
// it came:
//  - BytesKey: key_size bytes at any alignment (a probe's stack, a map value);
//  - WordKey: a key of at most 8 bytes passed by value, as its little-endian
//    word with the bytes past key_size zero (the specialized entry points of
//    the helper library take small keys this way, so the probe's stack never
//    has to be addressable).

struct BytesKey {
  const uint8_t* bytes;
  uint32_t size;
  CUPROBE_HD uint32_t Words() const { return (size + 7) / 8; }
  CUPROBE_HD uint64_t Word(uint32_t i) const { return KeyWord(bytes, size, i); }
};

struct WordKey {
  uint64_t word;  // zero past `size` bytes (KeyWordOf)
  uint32_t size;  // 1..8
  CUPROBE_HD uint32_t Words() const { return 1; }
  CUPROBE_HD uint64_t Word(uint32_t) const { return word; }
};

// The word of a key of `size` (1..8) bytes: the bytes past `size` cleared.
CUPROBE_HD uint64_t KeyWordOf(uint64_t word, uint32_t size) {
  return size >= 8 ? word : word & ((uint64_t{1} << (8 * size)) - 1);
}

template <typename Key>
CUPROBE_HD_SEARCH uint64_t HashOf(const Key& key) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ key.size;
  const uint32_t words = key.Words();
  CUPROBE_NO_UNROLL
  for (uint32_t i = 0; i < words; ++i) h = Mix64(h + key.Word(i));
  return h;
}

CUPROBE_HD uint64_t HashKey(const uint8_t* key, uint32_t key_size) {
  return HashOf(BytesKey{key, key_size});
}

// ---- Descriptor access ---------------------------------------------------

// A descriptor field. The descriptor is written once, before any kernel of
// the module can run, and never changes while one runs (map_desc.h): the GPU
// reads it through the read-only data cache (ld.global.nc), where the
// fields every helper call needs stay resident.
template <typename T>
CUPROBE_HD T DescField(const T& field) {
#ifdef __CUDA_ARCH__
  return __ldg(&field);
#else
  return field;
#endif
}

// The descriptor's first 16 bytes (magic, version, size | type, flags) as
// two words, loaded together: every helper call checks them, and two
// independent loads wait once where four dependent ones waited four times.
struct DescHead {
  uint64_t w0;  // magic | version << 32 | size << 48
  uint64_t w1;  // type | flags << 32
};

CUPROBE_HD DescHead LoadDescHead(const cuprobe_map_desc* d) {
#ifdef __CUDA_ARCH__
  const auto* p = reinterpret_cast<const ulonglong2*>(d);
  const ulonglong2 v = __ldg(p);
  return DescHead{v.x, v.y};
#else
  DescHead h;
  memcpy(&h, d, sizeof(h));
  return h;
#endif
}

CUPROBE_HD bool DescHeadOk(const DescHead& h) {
  return (h.w0 & 0xffffffffffffull) ==
         (CUPROBE_MAP_DESC_MAGIC | (static_cast<uint64_t>(CUPROBE_MAP_DESC_VERSION) << 32));
}

CUPROBE_HD bool DescOk(const cuprobe_map_desc* d) {
  return d != nullptr && DescHeadOk(LoadDescHead(d));
}

// A usable descriptor of `type`: the specialized entry points refuse any
// other one as a bad map (lookup 0, updates -EINVAL).
CUPROBE_HD bool DescIs(const cuprobe_map_desc* d, uint32_t type) {
  if (d == nullptr) return false;
  const DescHead h = LoadDescHead(d);
  return DescHeadOk(h) & (static_cast<uint32_t>(h.w1) == type);
}

CUPROBE_HD cuprobe_map_control* Control(const cuprobe_map_desc* d) {
  return Ptr<cuprobe_map_control>(DescField(d->control));
}

CUPROBE_HD bool IsPerId(uint32_t type) {
  return type == CUPROBE_MAP_PERTHREAD || type == CUPROBE_MAP_PERWARP || type == CUPROBE_MAP_PERSM;
}

CUPROBE_HD bool IsIndexed(uint32_t type) {  // u32 key = index
  return type == CUPROBE_MAP_ARRAY || type == CUPROBE_MAP_HIST_LOG2 ||
         type == CUPROBE_MAP_HIST_LINEAR || IsPerId(type);
}

#ifdef __CUDA_ARCH__
__device__ __forceinline__ uint32_t CurrentSm() {
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  return sm;
}
#endif

#ifdef __CUDA_ARCH__
// Field `shard_offset` (a CUPROBE_MAP_SHARD_*) of the calling SM's counter
// shard, or null for a descriptor without shards.
__device__ __forceinline__ uint64_t* ShardField(const cuprobe_map_desc* d, uint32_t shard_offset) {
  const uint64_t aux = DescField(d->aux);
  if (aux == 0) return nullptr;
  return Ptr<uint64_t>(aux +
                       static_cast<uint64_t>(CurrentSm() & (CUPROBE_MAP_COUNTER_SHARDS - 1)) *
                           CUPROBE_MAP_COUNTER_SHARD_STRIDE +
                       shard_offset);
}
#endif

// Adds to one of the map's counters: on the GPU to the calling SM's counter
// shard (`shard_offset`, a CUPROBE_MAP_SHARD_*), on the host (or for a
// descriptor without shards) to the control block's field.
CUPROBE_HD void AddToCounter(const cuprobe_map_desc* d, uint32_t shard_offset, uint64_t* field,
                             uint64_t v) {
#ifdef __CUDA_ARCH__
  if (uint64_t* shard = ShardField(d, shard_offset); shard != nullptr) field = shard;
#endif
  AtomicAdd64(field, v);
}

// Counts a refused update or out-of-range id. On the GPU: one atomic per
// warp (the leader of the lanes counting here adds for all of them) on this
// SM's error shard (probe/map_desc.h), so a kernel whose every thread is out
// of range does not serialize on one counter; the host folds the shards.
CUPROBE_HD void CountError(const cuprobe_map_desc* d) {
#ifdef __CUDA_ARCH__
  // The lanes here count for the same map at every typed call site; the
  // generic helpers' lanes may not: then each lane counts its own.
  const uint32_t active = __activemask();
  const uint32_t leader = static_cast<uint32_t>(__ffs(active) - 1);
  const uint64_t leader_d =
      __shfl_sync(active, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(d)),
                  static_cast<int>(leader));
  const bool same = __all_sync(active, leader_d == reinterpret_cast<uintptr_t>(d));
  uint32_t lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  if (same && lane != leader) return;
  AddToCounter(d, CUPROBE_MAP_SHARD_ERRORS, &Control(d)->errors,
               same ? static_cast<uint64_t>(__popc(active)) : 1);
#else
  AtomicAdd64(&Control(d)->errors, 1);
#endif
}

// The copy of the u64 at `target` (a value of map d) that this lane adds
// to: an add-only map's values are spread over copies by SM
// (probe/map_desc.h); other maps have one. The host folds them.
// How far this SM's copy of a value lies from the value (0 without copies).
CUPROBE_HD uint64_t ValueShardOffset(const cuprobe_map_desc* d) {
#ifdef __CUDA_ARCH__
  const uint64_t bytes = DescField(d->shard_bytes);
  if (bytes == 0) return 0;
  return static_cast<uint64_t>(CurrentSm() & DescField(d->shard_mask)) * bytes;
#else
  (void)d;
  return 0;
#endif
}

CUPROBE_HD uint64_t* ValueShard(const cuprobe_map_desc* d, uint64_t* target) {
  return Ptr<uint64_t>(reinterpret_cast<uintptr_t>(target) + ValueShardOffset(d));
}

// The value of key `index` of an indexed map of `type` (and `id` for PER*
// maps), or null when out of range (PER* out-of-range ids are counted in
// control.errors).
CUPROBE_HD uint8_t* IndexedValueOf(const cuprobe_map_desc* d, uint32_t type, uint32_t index,
                                   uint64_t id) {
  if (index >= DescField(d->max_entries)) return nullptr;
  uint64_t slot = index;
  if (IsPerId(type)) {
    const uint64_t ids = DescField(d->id_slots);
    if (id >= ids) {
      CountError(d);
      return nullptr;
    }
    slot = static_cast<uint64_t>(index) * ids + id;
  }
  return Ptr<uint8_t>(DescField(d->values)) + slot * DescField(d->value_stride);
}

CUPROBE_HD uint8_t* IndexedValue(const cuprobe_map_desc* d, uint32_t index, uint64_t id) {
  return IndexedValueOf(d, DescField(d->type), index, id);
}

// ---- Indexed maps: typed operations ---------------------------------------
//
// What the specialized entry points (and the generic operations, once they
// know the type) do for ARRAY, PER* and HIST_* maps. `type` is a constant at
// every specialized call, so the type tests fold away.

// lookup: the value's address, or 0 (BPF: NULL).
CUPROBE_HD uint64_t IndexedLookup(const cuprobe_map_desc* d, uint32_t type, uint32_t index,
                                  uint64_t id) {
  if (!DescIs(d, type)) return 0;
  return reinterpret_cast<uintptr_t>(IndexedValueOf(d, type, index, id));
}

// map_add: the u64 to add to, or null with *err set (-EINVAL: bad map or a
// value under 8 bytes; -E2BIG: index or id out of range, counted once).
CUPROBE_HD uint64_t* IndexedAddTarget(const cuprobe_map_desc* d, uint32_t type, uint32_t index,
                                      uint64_t id, int64_t* err) {
  *err = kEINVAL;
  if (!DescIs(d, type) || DescField(d->value_size) < 8) return nullptr;
  uint8_t* value = IndexedValueOf(d, type, index, id);
  if (value == nullptr) {
    if (index >= DescField(d->max_entries)) CountError(d);
    *err = kE2BIG;
    return nullptr;
  }
  *err = 0;
  return reinterpret_cast<uint64_t*>(value);
}

// ---- HASH -------------------------------------------------------------------
//
// Open addressing, linear probing over slots = 2^k >= 2 * max_entries. A
// slot's key never changes once written (until the whole map is cleared), so
// a key has exactly one slot: the first one on its probe path that holds it
// or was EMPTY when it was claimed. Delete marks DELETED and keeps the key; the
// same key can revive the slot, other keys skip it. BPF's limit holds: at most
// max_entries keys are LIVE at once (-E2BIG beyond, counted in errors); an
// insert that finds no EMPTY slot on the whole table also gets -E2BIG (only
// possible after many deletes of distinct keys; clearing the map resets it).
//
// Register budget (maps/gpu/helpers.cu): the search is inline in each
// helper and keeps little live across its loop (the descriptor pointer, the
// key, the slot); table addresses are re-read from the descriptor, which
// sits in the read-only cache, rather than held in registers.

struct HashSlots {  // for readers of snapshots (maps/map_snapshot.cc)
  uint32_t* states;
  uint8_t* keys;
  uint8_t* values;
  uint64_t mask;
  uint32_t key_size;
  uint32_t key_stride;
  uint32_t value_stride;
};

CUPROBE_HD HashSlots Slots(const cuprobe_map_desc* d) {
  return HashSlots{Ptr<uint32_t>(DescField(d->states)),
                   Ptr<uint8_t>(DescField(d->keys)),
                   Ptr<uint8_t>(DescField(d->values)),
                   DescField(d->slot_mask),
                   DescField(d->key_size),
                   DescField(d->key_stride),
                   DescField(d->value_stride)};
}

// An 8-aligned u64 of the map's own memory.
CUPROBE_HD uint64_t LoadAligned64(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint64_t*>(p);
#else
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
#endif
}

// Whether the key stored at `stored` (8-aligned, zero-padded) is `key`.
template <typename Key>
CUPROBE_HD bool StoredKeyIs(const uint8_t* stored, const Key& key) {
  const uint32_t words = key.Words();
  CUPROBE_NO_UNROLL
  for (uint32_t i = 0; i < words; ++i) {
    if (LoadAligned64(stored + 8 * i) != key.Word(i)) return false;
  }
  return true;
}

// For readers of snapshots: `key` is key_size bytes.
CUPROBE_HD bool KeyEquals(const HashSlots& s, uint64_t slot, const uint8_t* key) {
  return StoredKeyIs(s.keys + slot * s.key_stride, BytesKey{key, s.key_size});
}

// Writes the key's words (zero-padded to key_stride) into its slot.
template <typename Key>
CUPROBE_HD void StoreKey(uint8_t* dst, const Key& key) {
  const uint32_t words = key.Words();
  CUPROBE_NO_UNROLL
  for (uint32_t i = 0; i < words; ++i) StoreU64(dst + 8 * i, key.Word(i));
}

CUPROBE_HD uint32_t StateWord(uint32_t fingerprint, uint32_t state) {
  return (fingerprint << 2) | state;
}

CUPROBE_HD uint32_t Fingerprint(uint64_t hash) { return static_cast<uint32_t>(hash >> 34); }

CUPROBE_HD uint32_t* StateOf(const cuprobe_map_desc* d, uint64_t slot) {
  return Ptr<uint32_t>(DescField(d->states)) + slot;
}
CUPROBE_HD uint8_t* KeyOf(const cuprobe_map_desc* d, uint64_t slot) {
  return Ptr<uint8_t>(DescField(d->keys)) + slot * DescField(d->key_stride);
}
CUPROBE_HD uint8_t* ValueOf(const cuprobe_map_desc* d, uint64_t slot) {
  return Ptr<uint8_t>(DescField(d->values)) + slot * DescField(d->value_stride);
}

// Takes one more live key unless max_entries are live.
CUPROBE_HD bool TakeCount(const cuprobe_map_desc* d) {
  cuprobe_map_control* c = Control(d);
  if (AtomicAdd64(&c->count, 1) < DescField(d->max_entries)) return true;
  AtomicAdd64(&c->count, ~uint64_t{0});  // -1
  return false;
}

struct HashHit {
  int64_t slot;  // >= 0: the LIVE slot; else -ENOENT / -E2BIG
  bool created;  // the call inserted the key
};

enum class HashMode {
  kFind,         // -ENOENT when absent
  kInsertZero,   // insert an absent key with a zero value (map_add)
  kInsertValue,  // insert an absent key with `init` (map_update)
};

// Claimed slot `slot` (PENDING, key written) for a new key: takes a count,
// writes the value and publishes LIVE, or gives the slot back as `fallback`
// (DELETED with this key, so probe paths stay intact) and reports -E2BIG.
template <HashMode kMode>
CUPROBE_HD HashHit HashPublish(const cuprobe_map_desc* d, uint64_t slot, uint32_t fp,
                               uint32_t fallback, const uint8_t* init) {
  uint32_t* state = StateOf(d, slot);
  if (!TakeCount(d)) {
    StoreRelease32(state, fallback);
    CountError(d);
    return HashHit{kE2BIG, false};
  }
  uint8_t* value = ValueOf(d, slot);
  if (kMode == HashMode::kInsertValue) {
    CopyToAligned(value, init, DescField(d->value_size));
  } else {
    ZeroAligned(value, DescField(d->value_stride));
  }
  StoreRelease32(state, StateWord(fp, CUPROBE_HASH_LIVE));
  return HashHit{static_cast<int64_t>(slot), true};
}

// Finds the LIVE slot of `key` (whose hash is h = HashOf(key)); in the
// insert modes, inserts it when absent. -ENOENT: absent (kFind); -E2BIG:
// full (counted).
template <HashMode kMode, typename Key>
CUPROBE_HD_SEARCH HashHit HashFind(const cuprobe_map_desc* d, const Key& key, uint64_t h,
                                   const uint8_t* init) {
  constexpr bool kCreate = kMode != HashMode::kFind;
  const uint64_t mask = DescField(d->slot_mask);
  const uint32_t fp = Fingerprint(h);  // 30 bits
  uint64_t slot = h & mask;
  CUPROBE_NO_UNROLL
  for (uint64_t left = mask + 1; left != 0; --left, slot = (slot + 1) & mask) {
    uint32_t state = LoadAcquire32(StateOf(d, slot));
    for (;;) {
      if (state == CUPROBE_HASH_EMPTY) {
        if (!kCreate) return HashHit{kENOENT, false};
        const uint32_t seen =
            AtomicCas32(StateOf(d, slot), CUPROBE_HASH_EMPTY, StateWord(fp, CUPROBE_HASH_PENDING));
        if (seen != CUPROBE_HASH_EMPTY) {
          state = seen;  // lost the race: look at what the winner put there
          continue;
        }
        // Ours: write the key, then take a count.
        StoreKey(KeyOf(d, slot), key);
        return HashPublish<kMode>(d, slot, fp, StateWord(fp, CUPROBE_HASH_DELETED), init);
      }
      if ((state >> 2) != fp) break;  // another key: next slot
      const uint32_t kind = state & 3u;
      if (kind == CUPROBE_HASH_PENDING) {  // maybe our key, being written
        Pause();
        state = LoadAcquire32(StateOf(d, slot));
        continue;
      }
      if (!StoredKeyIs(KeyOf(d, slot), key)) break;
      if (kind == CUPROBE_HASH_LIVE) return HashHit{static_cast<int64_t>(slot), false};
      // DELETED, our key: revive it (or report it absent).
      if (!kCreate) return HashHit{kENOENT, false};
      const uint32_t seen =
          AtomicCas32(StateOf(d, slot), state, StateWord(fp, CUPROBE_HASH_PENDING));
      if (seen != state) {
        state = seen;
        continue;
      }
      return HashPublish<kMode>(d, slot, fp, state, init);
    }
  }
  if (kCreate) CountError(d);
  return HashHit{kCreate ? kE2BIG : kENOENT, false};
}

// lookup on a HASH descriptor (checked by the caller): the value's address or 0.
template <typename Key>
CUPROBE_HD uint64_t HashLookup(const cuprobe_map_desc* d, const Key& key) {
  const int64_t slot = HashFind<HashMode::kFind>(d, key, HashOf(key), nullptr).slot;
  return slot < 0 ? 0 : reinterpret_cast<uintptr_t>(ValueOf(d, static_cast<uint64_t>(slot)));
}

// map_add on a HASH descriptor (checked by the caller, value_size >= 8): the
// u64 to add to (a new key is inserted with a zero value), or null with *err.
template <typename Key>
CUPROBE_HD uint64_t* HashAddTarget(const cuprobe_map_desc* d, const Key& key, int64_t* err) {
  const int64_t slot = HashFind<HashMode::kInsertZero>(d, key, HashOf(key), nullptr).slot;
  if (slot < 0) {
    *err = slot;
    return nullptr;
  }
  *err = 0;
  return reinterpret_cast<uint64_t*>(ValueOf(d, static_cast<uint64_t>(slot)));
}

CUPROBE_HD int64_t HashDelete(const cuprobe_map_desc* d, const uint8_t* key) {
  const BytesKey k{key, DescField(d->key_size)};
  const uint64_t h = HashOf(k);
  for (;;) {
    const int64_t slot = HashFind<HashMode::kFind>(d, k, h, nullptr).slot;
    if (slot < 0) return slot;
    uint32_t* word = StateOf(d, static_cast<uint64_t>(slot));
    const uint32_t live = LoadAcquire32(word);
    if ((live & 3u) != CUPROBE_HASH_LIVE) continue;  // changed under us: look again
    if (AtomicCas32(word, live, (live & ~3u) | CUPROBE_HASH_DELETED) == live) {
      AtomicAdd64(&Control(d)->count, ~uint64_t{0});
      return 0;
    }
  }
}

// ---- Generic operations (the helpers, per lane) ---------------------------

// Address of the value of `key`, or 0 (BPF: NULL).
CUPROBE_HD uint64_t MapLookup(const cuprobe_map_desc* d, const void* key, uint64_t id) {
  if (!DescOk(d) || key == nullptr) return 0;
  const auto* k = static_cast<const uint8_t*>(key);
  const uint32_t type = DescField(d->type);
  if (IsIndexed(type)) return reinterpret_cast<uintptr_t>(IndexedValueOf(d, type, LoadU32(k), id));
  if (type == CUPROBE_MAP_HASH) return HashLookup(d, BytesKey{k, DescField(d->key_size)});
  return 0;
}

CUPROBE_HD int64_t MapUpdate(const cuprobe_map_desc* d, const void* key, const void* value,
                             uint64_t flags, uint64_t id) {
  if (!DescOk(d) || key == nullptr || value == nullptr) return kEINVAL;
  if (flags > CUPROBE_EXIST) return kEINVAL;
  const auto* k = static_cast<const uint8_t*>(key);
  const auto* v = static_cast<const uint8_t*>(value);
  const uint32_t type = DescField(d->type);
  const uint32_t value_size = DescField(d->value_size);
  if (IsIndexed(type)) {
    const uint32_t index = LoadU32(k);
    if (index >= DescField(d->max_entries)) {
      CountError(d);
      return kE2BIG;
    }
    if (flags == CUPROBE_NOEXIST) return kEEXIST;  // array slots always exist
    uint8_t* dst = IndexedValueOf(d, type, index, id);
    if (dst == nullptr) return kE2BIG;
    CopyToAligned(dst, v, value_size);
    return 0;
  }
  if (type == CUPROBE_MAP_HASH) {
    const BytesKey bk{k, DescField(d->key_size)};
    const uint64_t h = HashOf(bk);
    if (flags == CUPROBE_EXIST) {
      const int64_t slot = HashFind<HashMode::kFind>(d, bk, h, nullptr).slot;
      if (slot < 0) return slot;
      CopyToAligned(ValueOf(d, static_cast<uint64_t>(slot)), v, value_size);
      return 0;
    }
    const HashHit hit = HashFind<HashMode::kInsertValue>(d, bk, h, v);
    if (hit.slot < 0) return hit.slot;
    if (hit.created) return 0;
    if (flags == CUPROBE_NOEXIST) return kEEXIST;
    // Replaces in place: not atomic with respect to concurrent readers of
    // this key (as BPF's in-place array update).
    CopyToAligned(ValueOf(d, static_cast<uint64_t>(hit.slot)), v, value_size);
    return 0;
  }
  return kEINVAL;
}

CUPROBE_HD int64_t MapDelete(const cuprobe_map_desc* d, const void* key) {
  if (!DescOk(d) || key == nullptr) return kEINVAL;
  if (DescField(d->type) == CUPROBE_MAP_HASH) {
    return HashDelete(d, static_cast<const uint8_t*>(key));
  }
  return kEINVAL;  // BPF: array elements cannot be deleted
}

// The u64 that MAP_ADD(map, key, delta) adds to (the first 8 bytes of the
// value; HASH inserts a zero value for a new key), or null with *err set.
CUPROBE_HD uint64_t* MapAddTarget(const cuprobe_map_desc* d, const void* key, uint64_t id,
                                  int64_t* err) {
  *err = kEINVAL;
  if (!DescOk(d) || key == nullptr) return nullptr;
  const auto* k = static_cast<const uint8_t*>(key);
  const uint32_t type = DescField(d->type);
  if (IsIndexed(type)) return IndexedAddTarget(d, type, LoadU32(k), id, err);
  if (type == CUPROBE_MAP_HASH && DescField(d->value_size) >= 8) {
    return HashAddTarget(d, BytesKey{k, DescField(d->key_size)}, err);
  }
  return nullptr;
}

// The histogram bucket of `value` in a map of `type`:
//   HIST_LOG2:   0 for 0, else floor(log2(value)) + 1 (bucket k >= 1 holds
//                [2^(k-1), 2^k)); clamped to the last bucket.
//   HIST_LINEAR: min = (int32) low 32 bits of map_extra, step = high 32 bits
//                (>= 1); value read as int64. Bucket 0 holds value < min,
//                bucket b in [1, n-2] holds [min + (b-1)*step, min + b*step),
//                bucket n-1 holds everything from min + (n-2)*step up.
CUPROBE_HD uint32_t HistBucketOf(const cuprobe_map_desc* d, uint32_t type, uint64_t value) {
  const uint32_t last = DescField(d->max_entries) - 1;
  uint64_t bucket;
  if (type == CUPROBE_MAP_HIST_LOG2) {
    bucket = value == 0 ? 0 : 64 - CountLeadingZeros64(value);
  } else {
    const uint64_t extra = DescField(d->map_extra);
    const int64_t min = static_cast<int32_t>(static_cast<uint32_t>(extra));
    const uint32_t step = static_cast<uint32_t>(extra >> 32);
    const int64_t v = static_cast<int64_t>(value);
    if (v < min || step == 0) {
      bucket = 0;
    } else {
      // bucket = 1 + diff / step, clamped to `last`. Values at or past the
      // last bucket's start are decided by one multiply; the rest divide in
      // 32 bits when they fit (64-bit division is a long subroutine on the
      // GPU).
      const uint64_t diff = static_cast<uint64_t>(v) - static_cast<uint64_t>(min);
      const uint64_t last_start = last == 0 ? 0 : static_cast<uint64_t>(last - 1) * step;
      if (diff >= last_start) {
        bucket = last;
      } else if (diff <= 0xffffffffull) {
        bucket = 1 + static_cast<uint32_t>(diff) / step;
      } else {
        bucket = 1 + diff / step;
      }
    }
  }
  return static_cast<uint32_t>(bucket < last ? bucket : last);
}

CUPROBE_HD uint32_t HistBucket(const cuprobe_map_desc* d, uint64_t value) {
  return HistBucketOf(d, DescField(d->type), value);
}

// The bucket counter HIST_ADD(map, value, count) adds to in a map of `type`
// (HIST_LOG2 or HIST_LINEAR), or null.
CUPROBE_HD uint64_t* HistTargetOf(const cuprobe_map_desc* d, uint32_t type, uint64_t value) {
  if (!DescIs(d, type) || DescField(d->max_entries) == 0) return nullptr;
  return Ptr<uint64_t>(DescField(d->values) +
                       static_cast<uint64_t>(HistBucketOf(d, type, value)) * 8);
}

// The bucket counter HIST_ADD(map, value, count) adds to, or null.
CUPROBE_HD uint64_t* HistTarget(const cuprobe_map_desc* d, uint64_t value) {
  if (!DescOk(d)) return nullptr;
  const uint32_t type = DescField(d->type);
  if (type != CUPROBE_MAP_HIST_LOG2 && type != CUPROBE_MAP_HIST_LINEAR) return nullptr;
  return HistTargetOf(d, type, value);
}

// ---- RINGBUF ------------------------------------------------------------------
//
// Producers reserve on control.ring_head (device memory: atomics there cost
// nanoseconds, unlike host-mapped memory) with a fetch-and-add, and check
// the space against control.ring_tail_cache, reading the consumer's real
// tail over the bus only when the cache says the ring is full. A record
// never wraps: bytes
// reserved across the end of the data become one committed PAD record (it
// may wrap: the consumer skips it whole, and nothing is written past the
// end). The consumer (maps/map_ring.h) reads committed records in position
// order.

CUPROBE_HD uint64_t RingRecordSize(uint64_t body) {
  return (CUPROBE_RING_HEADER_SIZE + body + 7) & ~uint64_t{7};
}

// The record at `position` (reserved by RingReserveGroup): its header.
CUPROBE_HD uint32_t* RingHeaderAt(const cuprobe_map_desc* d, uint64_t position) {
  return Ptr<uint32_t>(DescField(d->ring_data) + (position & DescField(d->slot_mask)));
}

// Reservations are one fetch-and-add of a group's bytes on the head, taken
// only while the cached tail says they fit with a slack of capacity / 8 to
// spare; otherwise the consumer's tail is read (at most once a microsecond
// per ring on the GPU) and, if the ring is still that full, the group is
// dropped and counted. No CAS loop: under contention a CAS loop serializes
// its producers on the atomic's round trip (about a microsecond per record
// on an H200; a full ring then cost tens of milliseconds per launch).
// Producers that passed the check together overshoot the ring only if they
// hold more than the slack between them; an overshooting producer gives its
// bytes back with a CAS once no producer holds bytes after it (they are in
// the same situation, and the last one gives back first).
//   kRingGranted: [*position, *position + total) is this group's;
//   kRingPadded:  the bytes crossed the end of the data and became one pad
//                 record (the consumer skips it, wrap included): try again;
//   kRingFull:    nothing is held: drop.
enum RingFast : uint32_t { kRingFull = 0, kRingGranted = 1, kRingPadded = 2 };

// Whether this producer may read the consumer's tail over the bus now. A
// full ring would otherwise have every producer of every SM read host memory
// once per record: on the GPU, one read per microsecond is enough (the
// consumer frees space at the host's pace); the host always may.
CUPROBE_HD bool RingMayRefresh(const cuprobe_map_desc* d) {
#ifdef __CUDA_ARCH__
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  // One producer per window wins the CAS: the tail's cache line is written
  // by the consumer's CPU, so every read of it over the bus waits for that
  // line (hundreds of nanoseconds, one after another).
  uint64_t* next = &Control(d)->ring_refresh_ns;
  const uint64_t until = LoadRelaxed64(next);
  if (now < until) return false;
  return AtomicCas64(next, until, now + 1000) == until;
#else
  (void)d;
  return true;
#endif
}

// The consumer's tail (over the bus, from host memory).
CUPROBE_HD uint64_t RingConsumerTail(const cuprobe_map_desc* d) {
  return LoadAcquireSystem64(&Ptr<cuprobe_ring_host>(DescField(d->ring_host))->tail);
}

// On the GPU: whether this SM's producers were told, less than
// CUPROBE_RING_FULL_HINT_NS ago, that the ring is full; and telling them.
// Every producer of a full ring reading its control line, one L2 line that
// every SM hammers, cost more than the records it dropped; the hint lives in
// the SM's own hint line (map_desc.h), which no atomic evicts from its L1.
CUPROBE_HD bool RingFullHinted(const cuprobe_map_desc* d) {
#ifdef __CUDA_ARCH__
  const uint64_t* hint = ShardField(d, CUPROBE_MAP_SHARD_RING_FULL_UNTIL);
  if (hint == nullptr) return false;
  const uint64_t until = LoadRelaxed64(hint);
  if (until == 0) return false;
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now < until;
#else
  (void)d;
  return false;
#endif
}

// The hint lasts the SM's span (map_desc.h), which doubles each time up
// to CUPROBE_RING_FULL_HINT_MAX_NS; RingHintReset shortens it again.
CUPROBE_HD void RingHintFull(const cuprobe_map_desc* d) {
#ifdef __CUDA_ARCH__
  uint64_t* hint = ShardField(d, CUPROBE_MAP_SHARD_RING_FULL_UNTIL);
  if (hint == nullptr) return;
  uint64_t* span_field = ShardField(d, CUPROBE_MAP_SHARD_RING_FULL_SPAN);
  const uint64_t last = LoadRelaxed64(span_field);
  const uint64_t span = last < CUPROBE_RING_FULL_HINT_NS ? CUPROBE_RING_FULL_HINT_NS
                        : last >= CUPROBE_RING_FULL_HINT_MAX_NS / 2
                            ? CUPROBE_RING_FULL_HINT_MAX_NS
                            : 2 * last;
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  asm volatile("st.relaxed.gpu.b64 [%0], %1;" ::"l"(span_field), "l"(span) : "memory");
  asm volatile("st.relaxed.gpu.b64 [%0], %1;" ::"l"(hint), "l"(now + span) : "memory");
#else
  (void)d;
#endif
}

// After a reservation of this SM succeeded: the next full ring is hinted for
// the shortest span again (0: RingHintFull starts at CUPROBE_RING_FULL_HINT_NS;
// a store, which the producer does not wait for).
CUPROBE_HD void RingHintReset(const cuprobe_map_desc* d) {
#ifdef __CUDA_ARCH__
  uint64_t* span_field = ShardField(d, CUPROBE_MAP_SHARD_RING_FULL_SPAN);
  if (span_field == nullptr) return;
  asm volatile("st.relaxed.gpu.b64 [%0], %1;" ::"l"(span_field), "l"(uint64_t{0}) : "memory");
#else
  (void)d;
#endif
}

// Bytes [p, p + total) as one committed pad record (the consumer skips it
// whole; it may wrap, and nothing is written past its header).
CUPROBE_HD void RingWritePad(const cuprobe_map_desc* d, uint64_t p, uint64_t total) {
  StoreReleaseSystem32(RingHeaderAt(d, p),
                       CUPROBE_RING_COMMIT | CUPROBE_RING_PAD |
                           static_cast<uint32_t>(total - CUPROBE_RING_HEADER_SIZE));
}

// Granted bytes [p, p + total) in a data area of `area` bytes: the record's
// position, or (across the end of the area) a pad, after which the caller
// tries again.
CUPROBE_HD uint32_t RingGrant(const cuprobe_map_desc* d, uint64_t p, uint64_t total, uint64_t area,
                              uint64_t* position) {
  if ((p & (area - 1)) + total > area) {
    RingWritePad(d, p, total);
    return kRingPadded;
  }
  *position = p;
  return kRingGranted;
}

// The second half of RingReserveFast: `p` is what the fetch-and-add of
// `total` bytes on the head returned, `tail` the cached tail the producer
// checked before it. Also the end of the compiler's inline reservation
// (RingReserveAt), which makes the fetch-and-add itself.
CUPROBE_HD uint32_t RingAfterFetchAdd(const cuprobe_map_desc* d, uint64_t total, uint64_t p,
                                      uint64_t tail, uint64_t* position) {
  cuprobe_map_control* c = Control(d);
  const uint64_t capacity = DescField(d->slot_mask) + 1;
  for (;;) {
    if (p + total - tail <= capacity) return RingGrant(d, p, total, capacity, position);
    // Overshot by the cached tail: the consumer's real one (over the bus).
    // It never passes p, whose header is not committed.
    const uint64_t real = RingConsumerTail(d);
    if (real > tail && real <= p) {
      AtomicMax64(&c->ring_tail_cache, real);
      tail = real;
      continue;
    }
    if (AtomicCas64(&c->ring_head, p + total, p) == p + total) return kRingFull;
    Pause();  // producers after us are giving their bytes back
  }
}

// ---- Rings that reserve first (CUPROBE_MAP_F_RING_SPECULATIVE) -------------
//
// A ring in device memory that the hook's pump consumes (maps/map_set.h,
// RingData::kDeviceSpeculative): the consumer's tail is device memory on a
// line only the pump writes, so a producer reads the tail itself, and makes
// the fetch-and-add on the head without loading the head's line first (on
// an H200 that load, queued behind every SM's atomics on the line, was most
// of what a delivered record cost: docs/PERFORMANCE.md). Its data area is
// twice its capacity (map_desc.h). Bytes that end within a capacity of the
// tail are granted; bytes that end within two are free but not granted: the
// producer makes them a committed pad, which the pump skips, and drops its
// record. So no producer waits for others to give their bytes back, nor for
// the host. An SM whose last reservation found the ring full (its full-ring
// span is set) checks the head first, as RingReserveFast does, so a ring
// that stays full is not filled with pads.

CUPROBE_HD bool RingIsSpeculative(const cuprobe_map_desc* d) {
  return (DescField(d->flags) & CUPROBE_MAP_F_RING_SPECULATIVE) != 0;
}

// The bytes a ring holds: its data area's, or half of it for a
// speculative ring.
CUPROBE_HD uint64_t RingCapacity(const cuprobe_map_desc* d) {
  return (DescField(d->slot_mask) + 1) >> (RingIsSpeculative(d) ? 1 : 0);
}

// On the GPU: whether this SM's last reservation found the ring full (its
// full-ring span is set; RingHintReset clears it on a success).
CUPROBE_HD bool RingFoundFull(const cuprobe_map_desc* d) {
#ifdef __CUDA_ARCH__
  const uint64_t* span = ShardField(d, CUPROBE_MAP_SHARD_RING_FULL_SPAN);
  return span != nullptr && LoadRelaxed64(span) != 0;
#else
  (void)d;
  return false;
#endif
}

// The second half of a speculative reservation: `p` is what the
// fetch-and-add of `total` bytes on the head returned, `tail` the consumer's
// tail as read with it (a tail never passes p: p's bytes are not committed
// yet). Returns as RingAfterFetchAdd does.
CUPROBE_HD uint32_t RingAfterSpeculativeAdd(const cuprobe_map_desc* d, uint64_t total, uint64_t p,
                                            uint64_t tail, uint64_t* position) {
  const uint64_t area = DescField(d->slot_mask) + 1;
  const uint64_t capacity = area / 2;
  for (;;) {
    if (p + total - tail <= capacity) return RingGrant(d, p, total, area, position);
    const uint64_t real = RingConsumerTail(d);
    if (real > tail && real <= p) {
      tail = real;
      continue;
    }
    if (p + total - tail <= area) {
      RingWritePad(d, p, total);  // in the data area's free half
      RingHintFull(d);
      return kRingFull;
    }
    if (AtomicCas64(&Control(d)->ring_head, p + total, p) == p + total) {
      RingHintFull(d);
      return kRingFull;
    }
    Pause();  // producers after us give their bytes back, or leave bytes we may pad
  }
}

// RingReserveFast for a speculative ring.
CUPROBE_HD uint32_t RingReserveSpeculative(const cuprobe_map_desc* d, uint64_t total,
                                           uint64_t* position) {
  if (RingFullHinted(d)) return kRingFull;
  cuprobe_map_control* c = Control(d);
  const uint64_t capacity = RingCapacity(d);
  const uint64_t tail = RingConsumerTail(d);
  if (RingFoundFull(d) && LoadRelaxed64(&c->ring_head) + total - tail > capacity) {
    RingHintFull(d);
    return kRingFull;
  }
  return RingAfterSpeculativeAdd(d, total, AtomicAdd64(&c->ring_head, total), tail, position);
}

CUPROBE_HD uint32_t RingReserveFast(const cuprobe_map_desc* d, uint64_t total,
                                    uint64_t* position) {
  if (RingIsSpeculative(d)) return RingReserveSpeculative(d, total, position);
  if (RingFullHinted(d)) return kRingFull;
  cuprobe_map_control* c = Control(d);
  const uint64_t capacity = DescField(d->slot_mask) + 1;
  const uint64_t room = capacity - capacity / 8;
  uint64_t tail = LoadRelaxed64(&c->ring_tail_cache);
  const uint64_t head = LoadRelaxed64(&c->ring_head);
  if (head - tail > room - total) {
    bool full = !RingMayRefresh(d);
    if (!full) {
      const uint64_t real = RingConsumerTail(d);
      if (real <= tail || real > head) {
        full = true;
      } else {
        AtomicMax64(&c->ring_tail_cache, real);
        tail = real;
        full = head - tail > room - total;
      }
    }
    if (full) {
      RingHintFull(d);
      return kRingFull;
    }
  } else if (head - tail > capacity / 2 && RingMayRefresh(d)) {
    // Half full by the cached tail: one producer per microsecond refreshes
    // it ahead of time, so that while the consumer keeps up the cache never
    // says full (a full cache drops the producers that do not win the
    // refresh, though the ring has room).
    const uint64_t real = RingConsumerTail(d);
    if (real > tail && real <= head) {
      AtomicMax64(&c->ring_tail_cache, real);
      tail = real;
    }
  }
  return RingAfterFetchAdd(d, total, AtomicAdd64(&c->ring_head, total), tail, position);
}

// The end of a group's reservation: granted, it resets the SM's full-ring
// span and counts n records reserved (returns n); otherwise it counts n
// records and their bytes dropped (returns 0).
CUPROBE_HD uint32_t RingCountGroup(const cuprobe_map_desc* d, uint32_t fast, uint32_t n,
                                   uint64_t record_size) {
  cuprobe_map_control* c = Control(d);
  if (fast == kRingGranted) {
    RingHintReset(d);
    AddToCounter(d, CUPROBE_MAP_SHARD_RING_RESERVED, &c->ring_reserved, n);
    return n;
  }
  AddToCounter(d, CUPROBE_MAP_SHARD_RING_DROPPED, &c->ring_dropped, n);
  AddToCounter(d, CUPROBE_MAP_SHARD_RING_DROPPED_BYTES, &c->ring_dropped_bytes, n * record_size);
  return 0;
}

// Reserves `n` consecutive records of `record_size` bytes (a multiple of 8)
// for a group of producers, all or none: returns n with the byte position
// of the first, or 0 (the n records are counted as dropped). With n = 1
// this is the plain per-thread reserve.
CUPROBE_HD uint32_t RingReserveGroup(const cuprobe_map_desc* d, uint64_t record_size, uint32_t n,
                                     uint64_t* first_position) {
  const uint64_t capacity = RingCapacity(d);
  const uint64_t total = static_cast<uint64_t>(n) * record_size;
  uint32_t fast = kRingFull;
  // (A group's bytes may become one pad, whose length has 29 bits.)
  if (record_size != 0 && (record_size & 7) == 0 && total <= capacity - capacity / 8 &&
      total - CUPROBE_RING_HEADER_SIZE <= CUPROBE_RING_LEN_MASK) {
    fast = RingReserveFast(d, total, first_position);
    if (fast == kRingPadded) fast = RingReserveFast(d, total, first_position);
  }
  return RingCountGroup(d, fast, n, record_size);
}

CUPROBE_HD bool RingUsable(const cuprobe_map_desc* d) {
  return DescIs(d, CUPROBE_MAP_RINGBUF) && DescField(d->ring_data) != 0 &&
         DescField(d->ring_host) != 0;
}

// Copies the body and commits: one record of ringbuf_output.
CUPROBE_HD void RingWriteAndCommit(const cuprobe_map_desc* d, uint64_t position, const void* data,
                                   uint32_t size) {
  uint32_t* header = RingHeaderAt(d, position);
  auto* body = reinterpret_cast<uint8_t*>(header) + CUPROBE_RING_HEADER_SIZE;
  CopyToAligned(body, static_cast<const uint8_t*>(data), size);
  StoreReleaseSystem32(header, CUPROBE_RING_COMMIT | size);
}

// bpf_ringbuf_reserve's second half: writes the record's length (word 0,
// not committed: the consumer waits here) and returns its body's address.
CUPROBE_HD uint64_t RingBeginRecord(const cuprobe_map_desc* d, uint64_t position, uint32_t size) {
  uint32_t* header = RingHeaderAt(d, position);
  header[0] = size;
  return reinterpret_cast<uintptr_t>(header) + CUPROBE_RING_HEADER_SIZE;
}

// A reservation whose fetch-and-add the caller made: `p` is what it
// returned for `size` body bytes (one record, RingRecordSize(size) <=
// 3/8 of the data area: of the capacity, or 3/4 for a speculative ring),
// `tail` the cached tail the caller checked first (a speculative ring: the
// consumer's tail it read). Ends the reservation as RingReserve would (pad
// and retry, pad or give back refused bytes, count) and returns the body's
// address, or 0 (counted as dropped).
// The compiler's inline path for a lone producer (loader/compiler/lower_ring.cc):
// it reads the cursors from the descriptor's constant copy, so a block
// leader's successful reservation waits on one load of the head and the
// cached tail (and the refresh window over half full) and the atomic, not on
// the descriptor's loads and the helper's checks before them.
CUPROBE_HD uint64_t RingReserveAt(const cuprobe_map_desc* d, uint64_t size, uint64_t p,
                                  uint64_t tail) {
  const uint64_t record = RingRecordSize(size);
  uint64_t position = 0;
  uint32_t fast = RingIsSpeculative(d) ? RingAfterSpeculativeAdd(d, record, p, tail, &position)
                                       : RingAfterFetchAdd(d, record, p, tail, &position);
  if (fast == kRingPadded) fast = RingReserveFast(d, record, &position);
  if (RingCountGroup(d, fast, 1, record) == 0) return 0;
  return RingBeginRecord(d, position, static_cast<uint32_t>(size));
}

// bpf_ringbuf_submit / discard on a body address from RingBeginRecord:
// commits through the header's word 1 (map_desc.h), so the length need not
// be read back. On the GPU that read crossed the bus, about a microsecond
// that the producer's warp waited for every record.
CUPROBE_HD void RingFinishRecord(uint64_t body, bool discard) {
  auto* header = Ptr<uint32_t>(body - CUPROBE_RING_HEADER_SIZE);
  StoreReleaseSystem32(header + 1, CUPROBE_RING_COMMIT | (discard ? CUPROBE_RING_DISCARD : 0u));
}

// Host-side equivalents of the helpers (n = 1 groups), for tests and tools.
CUPROBE_HD int64_t RingOutput(const cuprobe_map_desc* d, const void* data, uint64_t size,
                              uint64_t flags) {
  if (!RingUsable(d) || (flags & ~uint64_t{3}) != 0) return kEINVAL;
  if (size > CUPROBE_RING_LEN_MASK || (size != 0 && data == nullptr)) return kEINVAL;
  uint64_t position = 0;
  if (RingReserveGroup(d, RingRecordSize(size), 1, &position) == 0) return kEAGAIN;
  RingWriteAndCommit(d, position, data, static_cast<uint32_t>(size));
  return 0;
}

CUPROBE_HD uint64_t RingReserve(const cuprobe_map_desc* d, uint64_t size, uint64_t flags) {
  if (!RingUsable(d) || flags != 0 || size > CUPROBE_RING_LEN_MASK) return 0;
  uint64_t position = 0;
  if (RingReserveGroup(d, RingRecordSize(size), 1, &position) == 0) return 0;
  return RingBeginRecord(d, position, static_cast<uint32_t>(size));
}

}  // namespace cuprobe::mapalgo

#endif  // CUPROBE_MAPS_MAP_ALGORITHMS_H_
