// File: maps/map_algorithms.h
//
// The map algorithms, written once for both sides: nvcc compiles them into the
// GPU helper library (maps/gpu/helpers.cu), g++ into host code that reads
// snapshots (maps/map_snapshot.cc) and into the CPU tests, which check the
// semantics of the very code the GPU runs. Everything works on a
// `cuprobe_map_desc` (maps/map_desc.h) whose addresses are device addresses
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

#include "maps/map_desc.h"

#if defined(__CUDACC__)
#define CUPROBE_HD __host__ __device__ __forceinline__
// Large and called from several helpers: one out-of-line copy per module,
// with internal linkage so the helper library exports nothing more.
#define CUPROBE_HD_OUTLINE static __host__ __device__ __noinline__
#else
#define CUPROBE_HD inline
#define CUPROBE_HD_OUTLINE inline
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
  for (; i + 8 <= n; i += 8) StoreU64(dst + i, LoadU64(src + i));
  if (i < n) StoreU64(dst + i, LoadBytes(src + i, n - i));
}

CUPROBE_HD void ZeroAligned(uint8_t* dst, uint32_t n) {  // n a multiple of 8
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

CUPROBE_HD uint64_t HashKey(const uint8_t* key, uint32_t key_size) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ key_size;
  const uint32_t words = (key_size + 7) / 8;
  for (uint32_t i = 0; i < words; ++i) h = Mix64(h + KeyWord(key, key_size, i));
  return h;
}

// ---- Descriptor access ---------------------------------------------------

CUPROBE_HD bool DescOk(const cuprobe_map_desc* d) {
  return d != nullptr && d->magic == CUPROBE_MAP_DESC_MAGIC &&
         d->version == CUPROBE_MAP_DESC_VERSION;
}

CUPROBE_HD cuprobe_map_control* Control(const cuprobe_map_desc* d) {
  return Ptr<cuprobe_map_control>(d->control);
}

CUPROBE_HD bool IsPerId(uint32_t type) {
  return type == CUPROBE_MAP_PERTHREAD || type == CUPROBE_MAP_PERWARP || type == CUPROBE_MAP_PERSM;
}

CUPROBE_HD bool IsIndexed(uint32_t type) {  // u32 key = index
  return type == CUPROBE_MAP_ARRAY || type == CUPROBE_MAP_HIST_LOG2 ||
         type == CUPROBE_MAP_HIST_LINEAR || IsPerId(type);
}

CUPROBE_HD void CountError(const cuprobe_map_desc* d) { AtomicAdd64(&Control(d)->errors, 1); }

// The value of key `index` (and `id` for PER* maps), or null when out of
// range (PER* out-of-range ids are counted in control.errors).
CUPROBE_HD uint8_t* IndexedValue(const cuprobe_map_desc* d, uint32_t index, uint64_t id) {
  if (index >= d->max_entries) return nullptr;
  uint64_t slot = index;
  if (IsPerId(d->type)) {
    if (id >= d->id_slots) {
      CountError(d);
      return nullptr;
    }
    slot = static_cast<uint64_t>(index) * d->id_slots + id;
  }
  return Ptr<uint8_t>(d->values) + slot * d->value_stride;
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

struct HashSlots {
  uint32_t* states;
  uint8_t* keys;
  uint8_t* values;
  uint64_t mask;
  uint32_t key_size;
  uint32_t key_stride;
  uint32_t value_stride;
};

CUPROBE_HD HashSlots Slots(const cuprobe_map_desc* d) {
  return HashSlots{Ptr<uint32_t>(d->states),
                   Ptr<uint8_t>(d->keys),
                   Ptr<uint8_t>(d->values),
                   d->slot_mask,
                   d->key_size,
                   d->key_stride,
                   d->value_stride};
}

CUPROBE_HD bool KeyEquals(const HashSlots& s, uint64_t slot, const uint8_t* key) {
  const uint8_t* stored = s.keys + slot * s.key_stride;
  const uint32_t words = (s.key_size + 7) / 8;
  for (uint32_t i = 0; i < words; ++i) {
    if (LoadU64(stored + 8 * i) != KeyWord(key, s.key_size, i)) return false;
  }
  return true;
}

CUPROBE_HD uint32_t StateWord(uint32_t fingerprint, uint32_t state) {
  return (fingerprint << 2) | state;
}

// Takes one more live key unless max_entries are live.
CUPROBE_HD bool TakeCount(const cuprobe_map_desc* d) {
  cuprobe_map_control* c = Control(d);
  if (AtomicAdd64(&c->count, 1) < d->max_entries) return true;
  AtomicAdd64(&c->count, ~uint64_t{0});  // -1
  return false;
}

// Finds the LIVE slot of `key`; with `create`, inserts it (value = `init`, or
// zero when init is null) when absent. Returns the slot, or a negative errno:
// -ENOENT (absent, !create), -E2BIG (full). *created tells an insert.
CUPROBE_HD_OUTLINE int64_t HashFind(const cuprobe_map_desc* d, const uint8_t* key, bool create,
                                    const uint8_t* init, bool* created) {
  const HashSlots s = Slots(d);
  const uint64_t h = HashKey(key, s.key_size);
  const uint32_t fp = static_cast<uint32_t>(h >> 34);  // 30 bits
  uint64_t slot = h & s.mask;
  *created = false;
  for (uint64_t probe = 0; probe <= s.mask; ++probe, slot = (slot + 1) & s.mask) {
    uint32_t state = LoadAcquire32(&s.states[slot]);
    for (;;) {
      if (state == CUPROBE_HASH_EMPTY) {
        if (!create) return kENOENT;
        const uint32_t seen =
            AtomicCas32(&s.states[slot], CUPROBE_HASH_EMPTY, StateWord(fp, CUPROBE_HASH_PENDING));
        if (seen != CUPROBE_HASH_EMPTY) {
          state = seen;  // lost the race: look at what the winner put there
          continue;
        }
        // Ours: write the key, then take a count. Without one the slot still
        // ends up DELETED with this key, so the probe path stays intact.
        CopyToAligned(s.keys + slot * s.key_stride, key, s.key_size);
        uint8_t* value = s.values + slot * s.value_stride;
        if (!TakeCount(d)) {
          StoreRelease32(&s.states[slot], StateWord(fp, CUPROBE_HASH_DELETED));
          CountError(d);
          return kE2BIG;
        }
        if (init != nullptr) {
          CopyToAligned(value, init, d->value_size);
        } else {
          ZeroAligned(value, s.value_stride);
        }
        StoreRelease32(&s.states[slot], StateWord(fp, CUPROBE_HASH_LIVE));
        *created = true;
        return static_cast<int64_t>(slot);
      }
      if ((state >> 2) != fp) break;  // another key: next slot
      const uint32_t kind = state & 3u;
      if (kind == CUPROBE_HASH_PENDING) {  // maybe our key, being written
        Pause();
        state = LoadAcquire32(&s.states[slot]);
        continue;
      }
      if (!KeyEquals(s, slot, key)) break;
      if (kind == CUPROBE_HASH_LIVE) return static_cast<int64_t>(slot);
      // DELETED, our key: revive it (or report it absent).
      if (!create) return kENOENT;
      const uint32_t seen =
          AtomicCas32(&s.states[slot], state, StateWord(fp, CUPROBE_HASH_PENDING));
      if (seen != state) {
        state = seen;
        continue;
      }
      uint8_t* value = s.values + slot * s.value_stride;
      if (!TakeCount(d)) {
        StoreRelease32(&s.states[slot], state);
        CountError(d);
        return kE2BIG;
      }
      if (init != nullptr) {
        CopyToAligned(value, init, d->value_size);
      } else {
        ZeroAligned(value, s.value_stride);
      }
      StoreRelease32(&s.states[slot], StateWord(fp, CUPROBE_HASH_LIVE));
      *created = true;
      return static_cast<int64_t>(slot);
    }
  }
  if (create) CountError(d);
  return create ? kE2BIG : kENOENT;
}

CUPROBE_HD int64_t HashDelete(const cuprobe_map_desc* d, const uint8_t* key) {
  const HashSlots s = Slots(d);
  bool created = false;
  for (;;) {
    const int64_t slot = HashFind(d, key, /*create=*/false, nullptr, &created);
    if (slot < 0) return slot;
    uint32_t* word = &s.states[slot];
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
  if (IsIndexed(d->type)) {
    return reinterpret_cast<uintptr_t>(IndexedValue(d, LoadU32(k), id));
  }
  if (d->type == CUPROBE_MAP_HASH) {
    bool created = false;
    const int64_t slot = HashFind(d, k, false, nullptr, &created);
    if (slot < 0) return 0;
    return d->values + static_cast<uint64_t>(slot) * d->value_stride;
  }
  return 0;
}

CUPROBE_HD int64_t MapUpdate(const cuprobe_map_desc* d, const void* key, const void* value,
                             uint64_t flags, uint64_t id) {
  if (!DescOk(d) || key == nullptr || value == nullptr) return kEINVAL;
  if (flags > CUPROBE_EXIST) return kEINVAL;
  const auto* k = static_cast<const uint8_t*>(key);
  const auto* v = static_cast<const uint8_t*>(value);
  if (IsIndexed(d->type)) {
    const uint32_t index = LoadU32(k);
    if (index >= d->max_entries) {
      CountError(d);
      return kE2BIG;
    }
    if (flags == CUPROBE_NOEXIST) return kEEXIST;  // array slots always exist
    uint8_t* dst = IndexedValue(d, index, id);
    if (dst == nullptr) return kE2BIG;
    CopyToAligned(dst, v, d->value_size);
    return 0;
  }
  if (d->type == CUPROBE_MAP_HASH) {
    bool created = false;
    if (flags == CUPROBE_EXIST) {
      const int64_t slot = HashFind(d, k, false, nullptr, &created);
      if (slot < 0) return slot;
      CopyToAligned(Ptr<uint8_t>(d->values) + slot * d->value_stride, v, d->value_size);
      return 0;
    }
    const int64_t slot = HashFind(d, k, true, v, &created);
    if (slot < 0) return slot;
    if (created) return 0;
    if (flags == CUPROBE_NOEXIST) return kEEXIST;
    // Replaces in place: not atomic with respect to concurrent readers of
    // this key (as BPF's in-place array update).
    CopyToAligned(Ptr<uint8_t>(d->values) + slot * d->value_stride, v, d->value_size);
    return 0;
  }
  return kEINVAL;
}

CUPROBE_HD int64_t MapDelete(const cuprobe_map_desc* d, const void* key) {
  if (!DescOk(d) || key == nullptr) return kEINVAL;
  if (d->type == CUPROBE_MAP_HASH) return HashDelete(d, static_cast<const uint8_t*>(key));
  return kEINVAL;  // BPF: array elements cannot be deleted
}

// The u64 that MAP_ADD(map, key, delta) adds to (the first 8 bytes of the
// value; HASH inserts a zero value for a new key), or null with *err set.
CUPROBE_HD uint64_t* MapAddTarget(const cuprobe_map_desc* d, const void* key, uint64_t id,
                                  int64_t* err) {
  *err = kEINVAL;
  if (!DescOk(d) || key == nullptr || d->value_size < 8) return nullptr;
  const auto* k = static_cast<const uint8_t*>(key);
  if (IsIndexed(d->type)) {
    const uint32_t index = LoadU32(k);
    uint8_t* value = IndexedValue(d, index, id);
    if (value == nullptr) {
      if (index >= d->max_entries) CountError(d);
      *err = kE2BIG;
      return nullptr;
    }
    *err = 0;
    return reinterpret_cast<uint64_t*>(value);
  }
  if (d->type == CUPROBE_MAP_HASH) {
    bool created = false;
    const int64_t slot = HashFind(d, k, true, nullptr, &created);
    if (slot < 0) {
      *err = slot;
      return nullptr;
    }
    *err = 0;
    return Ptr<uint64_t>(d->values + static_cast<uint64_t>(slot) * d->value_stride);
  }
  return nullptr;
}

// The histogram bucket of `value`:
//   HIST_LOG2:   0 for 0, else floor(log2(value)) + 1 (bucket k >= 1 holds
//                [2^(k-1), 2^k)); clamped to the last bucket.
//   HIST_LINEAR: min = (int32) low 32 bits of map_extra, step = high 32 bits
//                (>= 1); value read as int64. Bucket 0 holds value < min,
//                bucket b in [1, n-2] holds [min + (b-1)*step, min + b*step),
//                bucket n-1 holds everything from min + (n-2)*step up.
CUPROBE_HD uint32_t HistBucket(const cuprobe_map_desc* d, uint64_t value) {
  const uint32_t last = d->max_entries - 1;
  uint64_t bucket;
  if (d->type == CUPROBE_MAP_HIST_LOG2) {
    bucket = value == 0 ? 0 : 64 - CountLeadingZeros64(value);
  } else {
    const int64_t min = static_cast<int32_t>(static_cast<uint32_t>(d->map_extra));
    const uint64_t step = static_cast<uint32_t>(d->map_extra >> 32);
    const int64_t v = static_cast<int64_t>(value);
    if (v < min || step == 0) {
      bucket = 0;
    } else {
      bucket = 1 + (static_cast<uint64_t>(v) - static_cast<uint64_t>(min)) / step;
    }
  }
  return static_cast<uint32_t>(bucket < last ? bucket : last);
}

// The bucket counter HIST_ADD(map, value, count) adds to, or null.
CUPROBE_HD uint64_t* HistTarget(const cuprobe_map_desc* d, uint64_t value) {
  if (!DescOk(d) || d->max_entries == 0 ||
      (d->type != CUPROBE_MAP_HIST_LOG2 && d->type != CUPROBE_MAP_HIST_LINEAR)) {
    return nullptr;
  }
  return Ptr<uint64_t>(d->values + static_cast<uint64_t>(HistBucket(d, value)) * 8);
}

// ---- RINGBUF ------------------------------------------------------------------
//
// Producers reserve with a CAS on control.ring_head (device memory: atomics
// there cost nanoseconds, unlike host-mapped memory) and check the space
// against control.ring_tail_cache, reading the consumer's real tail over the
// bus only when the cache says the ring is full. A record never wraps: when
// the records of a group do not fit before the end of the data, a committed
// PAD record fills the end and the group starts at 0. The consumer
// (maps/ring_reader.h) reads committed records in position order.

CUPROBE_HD uint64_t RingRecordSize(uint64_t body) {
  return (CUPROBE_RING_HEADER_SIZE + body + 7) & ~uint64_t{7};
}

// Reserves up to `n` consecutive records of `record_size` bytes (a multiple
// of 8) for a group of producers: returns how many it got (k <= n, the first
// k lanes), and the byte position of the first. The n - k refused records
// are counted as dropped. With n = 1 this is the plain per-thread reserve.
CUPROBE_HD uint32_t RingReserveGroup(const cuprobe_map_desc* d, uint64_t record_size, uint32_t n,
                                     uint64_t* first_position) {
  cuprobe_map_control* c = Control(d);
  auto* host = Ptr<cuprobe_ring_host>(d->ring_host);
  const uint64_t capacity = d->slot_mask + 1;
  uint32_t granted = 0;
  bool refreshed = false;
  // tail before head: the cached tail never passes the head loaded after it.
  uint64_t tail = LoadRelaxed64(&c->ring_tail_cache);
  uint64_t head = LoadRelaxed64(&c->ring_head);
  for (;;) {
    const uint64_t used = head - tail;
    if (used > capacity || (head & 7) != 0 || record_size == 0 || record_size > capacity) break;
    const uint64_t free = capacity - used;
    const uint64_t index = head & d->slot_mask;
    const uint64_t room = capacity - index;  // bytes before the end
    uint64_t k = Min64(n, Min64(free, room) / record_size);
    uint64_t pad = 0;
    if (k < n && free > room) {
      const uint64_t wrapped = Min64(n, (free - room) / record_size);
      if (wrapped > k) {
        k = wrapped;
        pad = room;
      }
    }
    if (k < n && !refreshed) {
      // Maybe the consumer moved on: read its tail (over the bus) once.
      refreshed = true;
      const uint64_t real = LoadAcquireSystem64(&host->tail);
      if (real != tail && real - tail <= capacity && head - real <= capacity) {
        AtomicMax64(&c->ring_tail_cache, real);
        tail = real;
        continue;
      }
    }
    if (k == 0) break;
    const uint64_t total = pad + k * record_size;
    const uint64_t seen = AtomicCas64(&c->ring_head, head, head + total);
    if (seen != head) {
      tail = LoadRelaxed64(&c->ring_tail_cache);
      head = LoadRelaxed64(&c->ring_head);
      continue;
    }
    if (pad != 0) {
      StoreReleaseSystem32(Ptr<uint32_t>(d->ring_data + index),
                           CUPROBE_RING_COMMIT | CUPROBE_RING_PAD |
                               static_cast<uint32_t>(pad - CUPROBE_RING_HEADER_SIZE));
    }
    *first_position = head + pad;
    granted = static_cast<uint32_t>(k);
    break;
  }
  if (granted < n) {
    AtomicAdd64(&c->ring_dropped, n - granted);
    AtomicAdd64(&c->ring_dropped_bytes, (n - granted) * record_size);
  }
  if (granted > 0) AtomicAdd64(&c->ring_reserved, granted);
  return granted;
}

// The record at `position` (returned by RingReserveGroup): its header.
CUPROBE_HD uint32_t* RingHeaderAt(const cuprobe_map_desc* d, uint64_t position) {
  return Ptr<uint32_t>(d->ring_data + (position & d->slot_mask));
}

CUPROBE_HD bool RingUsable(const cuprobe_map_desc* d) {
  return DescOk(d) && d->type == CUPROBE_MAP_RINGBUF && d->ring_data != 0 && d->ring_host != 0;
}

// Copies the body and commits: one record of ringbuf_output.
CUPROBE_HD void RingWriteAndCommit(const cuprobe_map_desc* d, uint64_t position, const void* data,
                                   uint32_t size) {
  uint32_t* header = RingHeaderAt(d, position);
  auto* body = reinterpret_cast<uint8_t*>(header) + CUPROBE_RING_HEADER_SIZE;
  CopyToAligned(body, static_cast<const uint8_t*>(data), size);
  StoreReleaseSystem32(header, CUPROBE_RING_COMMIT | size);
}

// bpf_ringbuf_reserve's second half: marks the record reserved (length,
// not committed) and returns its body's address.
CUPROBE_HD uint64_t RingBeginRecord(const cuprobe_map_desc* d, uint64_t position, uint32_t size) {
  uint32_t* header = RingHeaderAt(d, position);
  header[0] = size;  // not committed: the consumer waits here
  return reinterpret_cast<uintptr_t>(header) + CUPROBE_RING_HEADER_SIZE;
}

// bpf_ringbuf_submit / discard on a body address from RingBeginRecord.
CUPROBE_HD void RingFinishRecord(uint64_t body, bool discard) {
  auto* header = Ptr<uint32_t>(body - CUPROBE_RING_HEADER_SIZE);
  const uint32_t size = LoadRelaxedSystem32(header) & CUPROBE_RING_LEN_MASK;
  StoreReleaseSystem32(header, CUPROBE_RING_COMMIT | (discard ? CUPROBE_RING_DISCARD : 0u) | size);
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
