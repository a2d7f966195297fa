// File: maps/map_algo_desc.h
//
// How every map algorithm reads its descriptor (probe/map_desc.h) and counts
// into its control block (maps/map_algorithms.h includes this): descriptor
// fields through the read-only cache, the magic/version/type check every
// helper makes, the map-type predicates, and the per-SM shards that
// counters and add-only values are spread over (the host folds them).
//
//   if (!mapalgo::DescIs(d, CUPROBE_MAP_ARRAY)) return 0;   // a bad map
//   mapalgo::CountError(d);                                   // one refusal
#ifndef CUPROBE_MAPS_MAP_ALGO_DESC_H_
#define CUPROBE_MAPS_MAP_ALGO_DESC_H_

#include <stdint.h>
#include <string.h>

#include "maps/map_algo_primitives.h"
#include "probe/map_desc.h"

namespace cuprobe::mapalgo {

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

}  // namespace cuprobe::mapalgo

#endif  // CUPROBE_MAPS_MAP_ALGO_DESC_H_
