// File: maps/gpu/helpers.cu
//
// The GPU helper library: every CUPROBE_HELPER_SYMBOL_* of
// include/cuprobe/abi.h as an `extern "C" __device__` function whose
// arguments and result are all 64-bit. nvcc compiles this file at build time
// (`-rdc=true -ptx -arch=sm_90`) into generated/cuprobe_helpers.ptx, which the
// rewriter links into instrumented modules (maps/gpu/helpers_ptx.h embeds it).
//
//   // In probe PTX (what the compiler emits for cuprobe_map_add on a HASH
//   // map with an 8-byte key held in %rd2):
//   .extern .func (.param .b64 r) __cuprobe_map_add_hash_word(.param .b64 m, .param .b64 k,
//                                                             .param .b64 d);
//   ld.global.nc.u64 %rd1, [__cuprobe_map_table+8];          // map 1's descriptor
//   call.uni (r), __cuprobe_map_add_hash_word, (%rd1, %rd2, 1);
//
// Two families of entry points (abi.h):
//  - generic ones (__cuprobe_map_lookup, _add, ...) take the key by address
//    and dispatch on the descriptor's type;
//  - specialized ones (__cuprobe_map_lookup_array, __cuprobe_map_add_hash_word,
//    __cuprobe_hist_add_log2, ...) serve one map type, which the probe
//    compiler knows at every call site, and take small keys by value. They
//    refuse a descriptor of another type as a bad map.
//
// The algorithms are those of maps/map_algorithms.h (also compiled for the
// host and tested there); this file adds what only a GPU has:
//  - the ids of PER* maps, from special registers (probe/map_desc.h);
//  - warp aggregation (KeyGroup): lanes that add to the same counter (same
//    HASH key, same array slot, same histogram bucket) are grouped, their
//    deltas summed with redux.sync, and one lane does one atomic; lanes that
//    emit records of the same size to the same ring reserve them with one atomic.
//    PERTHREAD adds are never grouped: each thread owns its slot.
//
// Register budget: nvJitLink compiles each function of an instrumented
// module separately and gives the kernel the largest register count of its
// call graph, so a helper that needs 100 registers costs every instrumented
// kernel its occupancy even if it runs once per block. Hence: the common
// paths are short and loop-free, byte loops stay rolled (CUPROBE_NO_UNROLL),
// no 64-bit division sits on a reachable path, and the rare HASH slow path
// (probing, inserts) is one out-of-line function (HashFind).
// helpers_ptx_test checks every exported function against a budget.
//
// Everything except the exported symbols is force-inlined or internal: the
// module these functions are linked into belongs to the application, so the
// fewer names this library adds the better. One global besides the
// functions: __cuprobe_pid_tgid_value (CUPROBE_PID_TGID_SYMBOL), which the
// hook fills with (pid << 32) | pid after loading the module, like the map
// table.
#include <stdint.h>

#include "cuprobe/abi.h"
#include "maps/map_algorithms.h"
#include "probe/map_desc.h"

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 800
// redux.sync (warp sums) needs sm_80; the library targets sm_90.
#if defined(__CUDA_ARCH__)
#error "the cuprobe helper library needs sm_80 or newer"
#endif
#endif

extern "C" __device__ uint64_t __cuprobe_pid_tgid_value;
__device__ uint64_t __cuprobe_pid_tgid_value = 0;

namespace {

using namespace ::cuprobe::mapalgo;

constexpr uint32_t kFullWarp = 0xffffffffu;

__device__ __forceinline__ uint32_t LaneId() {
  uint32_t lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}

__device__ __forceinline__ uint32_t LanesBelow() {
  uint32_t mask;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(mask));
  return mask;
}

__device__ __forceinline__ uint32_t SmId() {
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  return sm;
}

// The id of the calling thread for a PER* map (numbering: probe/map_desc.h).
__device__ __forceinline__ uint64_t PerIdOf(uint32_t type) {
  const uint64_t threads_per_block = static_cast<uint64_t>(blockDim.x) * blockDim.y * blockDim.z;
  const uint64_t block =
      (static_cast<uint64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const uint64_t thread =
      (static_cast<uint64_t>(threadIdx.z) * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  switch (type) {
    case CUPROBE_MAP_PERTHREAD:
      return block * threads_per_block + thread;
    case CUPROBE_MAP_PERWARP:
      return block * ((threads_per_block + 31) / 32) + thread / 32;
    case CUPROBE_MAP_PERSM:
      return SmId();
    default:
      return 0;
  }
}

__device__ __forceinline__ uint64_t IdFor(const cuprobe_map_desc* d) {
  return DescOk(d) ? PerIdOf(DescField(d->type)) : 0;
}

__device__ __forceinline__ uint64_t Shfl64(uint32_t mask, uint64_t v, uint32_t lane) {
  return __shfl_sync(mask, static_cast<unsigned long long>(v), static_cast<int>(lane));
}

__device__ __forceinline__ uint64_t ShflUp64(uint64_t v) {
  return __shfl_up_sync(kFullWarp, static_cast<unsigned long long>(v), 1);
}

// The lanes of `active` that hold the same key (a, b) as this lane, found
// the cheapest way that is exact. Every lane of `active` must call it.
//  1. Every active lane holds the first active lane's key: the group is
//     `active` (a hot key, or a PERWARP/PERSM slot: one atomic per warp).
//     Two shuffles per word and one vote.
//  2. A full warp in which no lane holds its lower neighbour's key: this lane
//     alone (uniformly spread keys, where aggregation would find nothing and
//     match.any, by far the costliest instruction here, would only slow
//     every call down). Lanes that share a key without being neighbours then
//     add separately: exact, only less aggregated. Runs of one key over
//     neighbouring lanes, the usual shape of a hot key (per block, per
//     kernel, per bucket of a monotonic value), go to 3.
//  3. Otherwise match.any on both words.
// The shuffles are never short-circuited: every lane of the mask must
// execute each of them.
__device__ __forceinline__ uint32_t KeyGroup(uint32_t active, uint64_t a, uint64_t b) {
  const uint32_t first = static_cast<uint32_t>(__ffs(active) - 1);
  const uint64_t first_a = Shfl64(active, a, first);
  const uint64_t first_b = Shfl64(active, b, first);
  if (__all_sync(active, a == first_a && b == first_b)) return active;
  if (active == kFullWarp) {
    const uint64_t prev_a = ShflUp64(a);
    const uint64_t prev_b = ShflUp64(b);
    const bool as_prev = LaneId() != 0 && a == prev_a && b == prev_b;
    if (!__any_sync(kFullWarp, as_prev)) return 1u << LaneId();
  }
  return __match_any_sync(active, static_cast<unsigned long long>(a)) &
         __match_any_sync(active, static_cast<unsigned long long>(b));
}

// KeyGroup for a one-word key (a counter's address).
__device__ __forceinline__ uint32_t KeyGroup(uint32_t active, uint64_t a) {
  const uint32_t first = static_cast<uint32_t>(__ffs(active) - 1);
  const uint64_t first_a = Shfl64(active, a, first);
  if (__all_sync(active, a == first_a)) return active;
  if (active == kFullWarp) {
    const uint64_t prev_a = ShflUp64(a);
    if (!__any_sync(kFullWarp, LaneId() != 0 && a == prev_a)) return 1u << LaneId();
  }
  return __match_any_sync(active, static_cast<unsigned long long>(a));
}

// Sum of v over the lanes of `group`; every lane of the group calls it with
// the same group. redux.sync adds 32-bit values: three partial sums (16 + 16
// + 32 bits) are exact modulo 2^64 for 32 lanes.
__device__ __forceinline__ uint64_t GroupSum(uint32_t group, uint64_t v) {
  if (__popc(group) == 1) return v;
  const uint32_t lo = __reduce_add_sync(group, static_cast<uint32_t>(v & 0xffff));
  const uint32_t mid = __reduce_add_sync(group, static_cast<uint32_t>((v >> 16) & 0xffff));
  const uint32_t hi = __reduce_add_sync(group, static_cast<uint32_t>(v >> 32));
  return static_cast<uint64_t>(lo) + (static_cast<uint64_t>(mid) << 16) +
         (static_cast<uint64_t>(hi) << 32);
}

__device__ __forceinline__ bool IsGroupLeader(uint32_t group) {
  return LaneId() == static_cast<uint32_t>(__ffs(group) - 1);
}

// Adds `delta` to *target with one relaxed atomic per group of lanes that
// add to the same target (KeyGroup). Lanes with a null target take part in
// the grouping (every active lane must) and add nothing.
__device__ __forceinline__ void GroupedAdd(const cuprobe_map_desc* d, uint64_t* target,
                                           uint64_t delta) {
  const uint32_t group = KeyGroup(__activemask(), reinterpret_cast<uintptr_t>(target));
  const uint64_t sum = GroupSum(group, delta);
  if (target != nullptr && IsGroupLeader(group)) AtomicAdd64(ValueShard(d, target), sum);
}

// map_add on an indexed map of `type` (ARRAY or PER*): the u32 key is
// `index`.
template <uint32_t kType>
__device__ __forceinline__ uint64_t IndexedAdd(uint64_t map, uint32_t index, uint64_t delta) {
  int64_t err;
  uint64_t* target = IndexedAddTarget(Ptr<const cuprobe_map_desc>(map), kType, index,
                                      kType == CUPROBE_MAP_ARRAY ? 0 : PerIdOf(kType), &err);
  if (kType == CUPROBE_MAP_PERTHREAD) {
    // Every thread owns its slot: nothing to aggregate. The add stays an
    // atomic (a fire-and-forget red.add): two launches running at once on
    // different streams share the map, and their threads of the same id
    // share a slot.
    if (target != nullptr) AtomicAdd64(target, delta);
  } else {
    // ARRAY: hot keys are common. PERWARP / PERSM: all lanes of a warp
    // share the slot of a key, so KeyGroup's first case makes it one atomic.
    GroupedAdd(Ptr<const cuprobe_map_desc>(map), target, delta);
  }
  return static_cast<uint64_t>(err);
}

// The value of a key that is LIVE within kCachedProbes slots of its home,
// read through L1, or null (the caller then searches). A key's slot never
// changes while it is LIVE or DELETED (HASH slots are key-stable,
// map_algorithms.h), so a state word that says LIVE with this key's
// fingerprint, and a stored key equal to this one, identify the key's slot
// even when the loads are not ordered: a stale state only sends the caller
// to the search. An EMPTY slot ends the walk (the key is absent, or being
// inserted: the search decides).
//
// The search's loads are acquire loads, and on sm_90 each one invalidates
// the SM's L1 (CCTL.IVALL): a lane searching for a key 9 slots from home
// took every other warp's cached slots with it (Nsight Compute on the
// uniform-key benchmark: 21% L1 hits, a quarter of all stall samples on
// the search's 17 iterations for under 1% of the lanes). At a load factor
// of 1/2 almost every key lies within 32 slots of its home, so the walk goes
// that far. Each slot's state and key are loaded together (the key's load
// does not wait for the state's), and the descriptor's fields are read once
// before the walk (the uniform-key add: 108 -> 42 us under Nsight Compute,
// L1 hits 21% -> 69%).
constexpr uint32_t kCachedProbes = 32;

// Whether the stored key at `stored` is `key`, with plain loads that are
// all issued before any is compared.
__device__ __forceinline__ bool CachedKeyIs(const uint8_t* stored, const WordKey& key) {
  return *reinterpret_cast<const uint64_t*>(stored) == key.word;
}
__device__ __forceinline__ bool CachedKeyIs(const uint8_t* stored, const PairKey& key) {
  const auto* words = reinterpret_cast<const uint64_t*>(stored);
  return (words[0] == key.lo) & (words[1] == key.hi);
}

template <typename Key>
__device__ __forceinline__ uint64_t* HashCachedValue(const cuprobe_map_desc* d, const Key& key) {
  const uint64_t h = HashOf(key);
  const uint64_t mask = DescField(d->slot_mask);
  const uint32_t* states = Ptr<const uint32_t>(DescField(d->states));
  const uint8_t* keys = Ptr<const uint8_t>(DescField(d->keys));
  const uint64_t key_stride = DescField(d->key_stride);
  const uint32_t live = StateWord(Fingerprint(h), CUPROBE_HASH_LIVE);
  uint64_t slot = h & mask;
  CUPROBE_NO_UNROLL
  for (uint32_t i = 0; i < kCachedProbes; ++i, slot = (slot + 1) & mask) {
    const uint32_t state = states[slot];
    // Both conditions evaluated (not short-circuited), so that the state's
    // and the key's loads are issued before either is waited for.
    const bool hit = (state == live) & CachedKeyIs(keys + slot * key_stride, key);
    if (hit) return reinterpret_cast<uint64_t*>(ValueOf(d, slot));
    if (state == CUPROBE_HASH_EMPTY) return nullptr;
  }
  return nullptr;
}

// map_add on a HASH map whose keys have at most 8 bytes, the key as a word.
// Lanes are grouped by (map, key) before the lookup, so one lane per distinct
// key of the warp searches (and inserts), then adds the group's sum.
__device__ __forceinline__ uint64_t HashAddWord(uint64_t map, uint64_t word, uint64_t delta) {
  const auto* d = Ptr<const cuprobe_map_desc>(map);
  const bool ok =
      DescIs(d, CUPROBE_MAP_HASH) && DescField(d->value_size) >= 8 && DescField(d->key_size) <= 8;
  const uint32_t key_size = ok ? DescField(d->key_size) : 0;
  const uint64_t key = ok ? KeyWordOf(word, key_size) : 0;
  const uint32_t group = KeyGroup(__activemask(), ok ? map : 0, key);
  const uint64_t sum = GroupSum(group, delta);
  int64_t err = kEINVAL;
  if (ok && IsGroupLeader(group)) {
    // Read before the walk, so that its loads overlap the walk's.
    const uint64_t shard = ValueShardOffset(d);
    uint64_t* target = HashCachedValue(d, WordKey{key, key_size});
    if (target != nullptr) {
      err = 0;
    } else {
      target = HashAddTarget(d, WordKey{key, key_size}, &err);
    }
    if (target != nullptr) {
      AtomicAdd64(Ptr<uint64_t>(reinterpret_cast<uintptr_t>(target) + shard), sum);
    }
  }
  // A lane alone in its group has its own result (uniform keys: nearly
  // every lane); the shuffle over a partial mask costs a convergence check.
  if (__popc(group) == 1) return static_cast<uint64_t>(err);
  return static_cast<uint64_t>(__shfl_sync(group, static_cast<long long>(err), __ffs(group) - 1));
}

// map_add on a HASH map whose keys have 9 to 16 bytes, the key as two
// words: as HashAddWord, the lanes grouped by both words.
__device__ __forceinline__ uint64_t HashAddPair(uint64_t map, uint64_t lo, uint64_t hi,
                                                uint64_t delta) {
  const auto* d = Ptr<const cuprobe_map_desc>(map);
  // The descriptor's type is checked before any other field is read.
  bool ok = DescIs(d, CUPROBE_MAP_HASH) && DescField(d->value_size) >= 8;
  const uint32_t key_size = ok ? DescField(d->key_size) : 0;
  ok = ok && key_size > 8 && key_size <= 16;
  const PairKey key{lo, ok ? KeyWordOf(hi, key_size - 8) : 0, key_size};
  // Lanes that reach this body from call sites with different maps never
  // share a group: they are split by map first (free when the map is uniform).
  const uint32_t same_map = KeyGroup(__activemask(), map);
  const uint32_t group = KeyGroup(same_map, key.lo, key.hi);
  const uint64_t sum = GroupSum(group, delta);
  int64_t err = kEINVAL;
  if (ok && IsGroupLeader(group)) {
    const uint64_t shard = ValueShardOffset(d);
    uint64_t* target = HashCachedValue(d, key);
    if (target != nullptr) {
      err = 0;
    } else {
      target = HashAddTarget(d, key, &err);
    }
    if (target != nullptr) {
      AtomicAdd64(Ptr<uint64_t>(reinterpret_cast<uintptr_t>(target) + shard), sum);
    }
  }
  if (__popc(group) == 1) return static_cast<uint64_t>(err);
  return static_cast<uint64_t>(__shfl_sync(group, static_cast<long long>(err), __ffs(group) - 1));
}

__device__ __forceinline__ uint64_t HashLookupWord(uint64_t map, uint64_t word) {
  const auto* d = Ptr<const cuprobe_map_desc>(map);
  if (!DescIs(d, CUPROBE_MAP_HASH) || DescField(d->key_size) > 8) return 0;
  const uint32_t key_size = DescField(d->key_size);
  return HashLookup(d, WordKey{KeyWordOf(word, key_size), key_size});
}

template <uint32_t kType>
__device__ __forceinline__ uint64_t HistAdd(uint64_t map, uint64_t value, uint64_t count) {
  const auto* d = Ptr<const cuprobe_map_desc>(map);
  uint64_t* target = HistTargetOf(d, kType, value);
  GroupedAdd(d, target, count);
  return target != nullptr ? 0 : static_cast<uint64_t>(kEINVAL);
}

}  // namespace

// ---- Generic entry points (key by address, any map type) -------------------

extern "C" __device__ uint64_t __cuprobe_map_lookup(uint64_t map, uint64_t key) {
  const auto* d = Ptr<const cuprobe_map_desc>(map);
  return MapLookup(d, Ptr<const void>(key), IdFor(d));
}

extern "C" __device__ uint64_t __cuprobe_map_update(uint64_t map, uint64_t key, uint64_t value,
                                                    uint64_t flags) {
  const auto* d = Ptr<const cuprobe_map_desc>(map);
  return static_cast<uint64_t>(
      MapUpdate(d, Ptr<const void>(key), Ptr<const void>(value), flags, IdFor(d)));
}

extern "C" __device__ uint64_t __cuprobe_map_delete(uint64_t map, uint64_t key) {
  return static_cast<uint64_t>(MapDelete(Ptr<const cuprobe_map_desc>(map), Ptr<const void>(key)));
}

extern "C" __device__ uint64_t __cuprobe_map_add(uint64_t map, uint64_t key, uint64_t delta) {
  const auto* d = Ptr<const cuprobe_map_desc>(map);
  const bool ok = DescOk(d) && key != 0;
  const uint32_t type = ok ? DescField(d->type) : 0;
  if (type == CUPROBE_MAP_HASH && DescField(d->key_size) <= 8) {
    return HashAddWord(map, KeyWord(Ptr<const uint8_t>(key), DescField(d->key_size), 0), delta);
  }
  if (type == CUPROBE_MAP_PERTHREAD) {
    return IndexedAdd<CUPROBE_MAP_PERTHREAD>(map, LoadU32(Ptr<const void>(key)), delta);
  }
  // Every other case (ARRAY, PERWARP, PERSM, wide HASH keys, bad maps and
  // keys): the target per lane, then one grouped add.
  int64_t err = kEINVAL;
  uint64_t* target = ok ? MapAddTarget(d, Ptr<const void>(key), IdFor(d), &err) : nullptr;
  GroupedAdd(d, target, delta);
  return static_cast<uint64_t>(err);
}

extern "C" __device__ uint64_t __cuprobe_hist_add(uint64_t map, uint64_t value, uint64_t count) {
  const auto* d = Ptr<const cuprobe_map_desc>(map);
  uint64_t* target = HistTarget(d, value);
  GroupedAdd(d, target, count);
  return target != nullptr ? 0 : static_cast<uint64_t>(kEINVAL);
}

// ---- Specialized entry points (abi.h: one map type each) -------------------
// Indexed maps take the u32 key by value (the low 32 bits of `index`); HASH
// maps with keys of at most 8 bytes take the key as its little-endian word
// (`_hash_word`; the bytes past key_size are ignored), adds of keys of 9 to
// 16 bytes its two words (`_hash_2word`), wider keys by address (`_hash`).

extern "C" __device__ uint64_t __cuprobe_map_lookup_array(uint64_t map, uint64_t index) {
  return IndexedLookup(Ptr<const cuprobe_map_desc>(map), CUPROBE_MAP_ARRAY,
                       static_cast<uint32_t>(index), 0);
}

extern "C" __device__ uint64_t __cuprobe_map_lookup_perthread(uint64_t map, uint64_t index) {
  return IndexedLookup(Ptr<const cuprobe_map_desc>(map), CUPROBE_MAP_PERTHREAD,
                       static_cast<uint32_t>(index), PerIdOf(CUPROBE_MAP_PERTHREAD));
}

extern "C" __device__ uint64_t __cuprobe_map_lookup_perwarp(uint64_t map, uint64_t index) {
  return IndexedLookup(Ptr<const cuprobe_map_desc>(map), CUPROBE_MAP_PERWARP,
                       static_cast<uint32_t>(index), PerIdOf(CUPROBE_MAP_PERWARP));
}

extern "C" __device__ uint64_t __cuprobe_map_lookup_persm(uint64_t map, uint64_t index) {
  return IndexedLookup(Ptr<const cuprobe_map_desc>(map), CUPROBE_MAP_PERSM,
                       static_cast<uint32_t>(index), PerIdOf(CUPROBE_MAP_PERSM));
}

extern "C" __device__ uint64_t __cuprobe_map_lookup_hash(uint64_t map, uint64_t key) {
  const auto* d = Ptr<const cuprobe_map_desc>(map);
  if (!DescIs(d, CUPROBE_MAP_HASH) || key == 0) return 0;
  return HashLookup(d, BytesKey{Ptr<const uint8_t>(key), DescField(d->key_size)});
}

extern "C" __device__ uint64_t __cuprobe_map_lookup_hash_word(uint64_t map, uint64_t word) {
  return HashLookupWord(map, word);
}

extern "C" __device__ uint64_t __cuprobe_map_add_array(uint64_t map, uint64_t index,
                                                       uint64_t delta) {
  return IndexedAdd<CUPROBE_MAP_ARRAY>(map, static_cast<uint32_t>(index), delta);
}

extern "C" __device__ uint64_t __cuprobe_map_add_perthread(uint64_t map, uint64_t index,
                                                           uint64_t delta) {
  return IndexedAdd<CUPROBE_MAP_PERTHREAD>(map, static_cast<uint32_t>(index), delta);
}

extern "C" __device__ uint64_t __cuprobe_map_add_perwarp(uint64_t map, uint64_t index,
                                                         uint64_t delta) {
  return IndexedAdd<CUPROBE_MAP_PERWARP>(map, static_cast<uint32_t>(index), delta);
}

extern "C" __device__ uint64_t __cuprobe_map_add_persm(uint64_t map, uint64_t index,
                                                       uint64_t delta) {
  return IndexedAdd<CUPROBE_MAP_PERSM>(map, static_cast<uint32_t>(index), delta);
}

extern "C" __device__ uint64_t __cuprobe_map_add_hash(uint64_t map, uint64_t key, uint64_t delta) {
  // Wide keys: the lookup per lane (grouping 16+ byte keys would cost more
  // shuffles than it saves), then one grouped add per counter.
  const auto* d = Ptr<const cuprobe_map_desc>(map);
  int64_t err = kEINVAL;
  uint64_t* target = nullptr;
  if (DescIs(d, CUPROBE_MAP_HASH) && DescField(d->value_size) >= 8 && key != 0) {
    target = HashAddTarget(d, BytesKey{Ptr<const uint8_t>(key), DescField(d->key_size)}, &err);
  }
  GroupedAdd(d, target, delta);
  return static_cast<uint64_t>(err);
}

extern "C" __device__ uint64_t __cuprobe_map_add_hash_word(uint64_t map, uint64_t word,
                                                           uint64_t delta) {
  return HashAddWord(map, word, delta);
}

extern "C" __device__ uint64_t __cuprobe_map_add_hash_2word(uint64_t map, uint64_t lo,
                                                            uint64_t hi, uint64_t delta) {
  return HashAddPair(map, lo, hi, delta);
}

extern "C" __device__ uint64_t __cuprobe_hist_add_log2(uint64_t map, uint64_t value,
                                                       uint64_t count) {
  return HistAdd<CUPROBE_MAP_HIST_LOG2>(map, value, count);
}

extern "C" __device__ uint64_t __cuprobe_hist_add_linear(uint64_t map, uint64_t value,
                                                         uint64_t count) {
  return HistAdd<CUPROBE_MAP_HIST_LINEAR>(map, value, count);
}

// ---- Ring buffers ---------------------------------------------------------------

namespace {

// Reserves this lane's record of `size` body bytes, aggregated over the
// lanes that reserve records of the same size in the same ring: one
// reservation per group. Returns the record's position, or ~0 when refused (counted).
__device__ __forceinline__ uint64_t GroupReserve(const cuprobe_map_desc* d, uint64_t map,
                                                 uint64_t size, bool ok) {
  const uint64_t record = ok ? RingRecordSize(size) : 0;
  const uint32_t group = KeyGroup(__activemask(), ok ? map : 0, record);
  if (!ok) return ~uint64_t{0};  // groups never mix ok and refused lanes
  const uint32_t leader = static_cast<uint32_t>(__ffs(group) - 1);
  const uint32_t rank = static_cast<uint32_t>(__popc(group & LanesBelow()));
  uint64_t first = 0;
  uint32_t granted = 0;
  if (LaneId() == leader) granted = RingReserveGroup(d, record, __popc(group), &first);
  granted = __shfl_sync(group, granted, leader);
  first = Shfl64(group, first, leader);
  if (rank >= granted) return ~uint64_t{0};
  return first + static_cast<uint64_t>(rank) * record;
}

}  // namespace

extern "C" __device__ uint64_t __cuprobe_ringbuf_output(uint64_t map, uint64_t data, uint64_t size,
                                                        uint64_t flags) {
  const auto* d = Ptr<const cuprobe_map_desc>(map);
  const bool ok = RingUsable(d) && (flags & ~uint64_t{3}) == 0 && size <= CUPROBE_RING_LEN_MASK &&
                  (size == 0 || data != 0);
  const uint64_t position = GroupReserve(d, map, size, ok);
  if (!ok) return static_cast<uint64_t>(kEINVAL);
  if (position == ~uint64_t{0}) return static_cast<uint64_t>(kEAGAIN);
  RingWriteAndCommit(d, position, Ptr<const void>(data), static_cast<uint32_t>(size));
  return 0;
}

extern "C" __device__ uint64_t __cuprobe_ringbuf_reserve(uint64_t map, uint64_t size,
                                                         uint64_t flags) {
  const auto* d = Ptr<const cuprobe_map_desc>(map);
  const bool ok = RingUsable(d) && flags == 0 && size <= CUPROBE_RING_LEN_MASK;
  const uint64_t position = GroupReserve(d, map, size, ok);
  if (!ok || position == ~uint64_t{0}) return 0;
  return RingBeginRecord(d, position, static_cast<uint32_t>(size));
}

// (ABI version 5) The end of the compiler's inline reservation: see
// RingReserveAt. Called only after the caller's fetch-and-add on a ring it
// checked (type, data, flags, size); `position` is what the fetch-and-add
// returned, `tail` the cached tail it compared against.
extern "C" __device__ uint64_t __cuprobe_ringbuf_reserve_at(uint64_t map, uint64_t size,
                                                            uint64_t position, uint64_t tail) {
  return RingReserveAt(Ptr<const cuprobe_map_desc>(map), size, position, tail);
}

extern "C" __device__ uint64_t __cuprobe_ringbuf_submit(uint64_t data, uint64_t flags) {
  if (data == 0) return static_cast<uint64_t>(kEINVAL);
  RingFinishRecord(data, /*discard=*/false);
  return 0;
}

extern "C" __device__ uint64_t __cuprobe_ringbuf_discard(uint64_t data, uint64_t flags) {
  if (data == 0) return static_cast<uint64_t>(kEINVAL);
  RingFinishRecord(data, /*discard=*/true);
  return 0;
}

extern "C" __device__ uint64_t __cuprobe_pid_tgid() {
  return *static_cast<volatile uint64_t*>(&__cuprobe_pid_tgid_value);
}
