// File: maps/gpu/helpers.cu
//
// The GPU helper library: every CUPROBE_HELPER_SYMBOL_* of
// include/cuprobe/abi.h as an `extern "C" __device__` function whose
// arguments and result are all 64-bit. nvcc compiles this file at build time
// (`-rdc=true -ptx -arch=sm_90`) into generated/cuprobe_helpers.ptx, which the
// rewriter links into instrumented modules (maps/gpu/helpers_ptx.h embeds it).
//
//   // In probe PTX (what the compiler emits):
//   .extern .func (.param .b64 r) __cuprobe_map_add(.param .b64 m, .param .b64 k, .param .b64 d);
//   ld.global.u64 %rd1, [__cuprobe_map_table+8];          // map 1's descriptor
//   call.uni (r), __cuprobe_map_add, (%rd1, %rd2, 1);
//
// The algorithms are those of maps/map_algorithms.h (also compiled for the
// host and tested there); this file adds what only a GPU has:
//  - the ids of PER* maps, from special registers (maps/map_desc.h);
//  - warp aggregation: lanes that add to the same counter (same HASH key, same
//    array slot, same histogram bucket) are grouped with match.any, their
//    deltas summed with redux.sync, and one lane does one atomic; lanes that
//    emit records of the same size to the same ring reserve them with one CAS.
//
// Everything except the exported symbols is force-inlined: the module these
// functions are linked into belongs to the application, so the fewer names
// this library adds the better. One global besides the functions:
// __cuprobe_pid_tgid_value (CUPROBE_PID_TGID_SYMBOL), which the hook fills
// with (pid << 32) | pid after loading the module, like the map table.
#include <stdint.h>

#include "cuprobe/abi.h"
#include "maps/map_algorithms.h"
#include "maps/map_desc.h"

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

// The id of the calling thread for a PER* map (numbering: maps/map_desc.h).
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
  return DescOk(d) ? PerIdOf(d->type) : 0;
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

// Adds `delta` to *target with one atomic per distinct target in the warp.
// Lanes with a null target take part in the grouping (all active lanes must
// reach match.any) and add nothing.
__device__ __forceinline__ void AggregatedAdd(uint64_t* target, uint64_t delta) {
  const uint32_t active = __activemask();
  const uint32_t group = __match_any_sync(
      active, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(target)));
  const uint64_t sum = GroupSum(group, delta);
  if (target != nullptr && LaneId() == static_cast<uint32_t>(__ffs(group) - 1)) {
    AtomicAdd64(target, sum);
  }
}

}  // namespace

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
  const uint32_t type = ok ? d->type : 0;
  int64_t err = kEINVAL;
  if (type == CUPROBE_MAP_PERTHREAD) {
    // Every thread owns its slot: nothing to aggregate.
    uint64_t* target = MapAddTarget(d, Ptr<const void>(key), IdFor(d), &err);
    if (target != nullptr) AtomicAdd64(target, delta);
    return static_cast<uint64_t>(err);
  }
  if (type == CUPROBE_MAP_HASH && d->key_size <= 8) {
    // Group by key before the lookup: one lane per distinct key searches
    // (and inserts), then adds the group's sum.
    const uint32_t active = __activemask();
    const uint64_t word = KeyWord(Ptr<const uint8_t>(key), d->key_size, 0);
    const uint32_t group = __match_any_sync(active, static_cast<unsigned long long>(map)) &
                           __match_any_sync(active, static_cast<unsigned long long>(word));
    const uint64_t sum = GroupSum(group, delta);
    const uint32_t leader = static_cast<uint32_t>(__ffs(group) - 1);
    if (LaneId() == leader) {
      uint64_t* target = MapAddTarget(d, Ptr<const void>(key), 0, &err);
      if (target != nullptr) AtomicAdd64(target, sum);
    }
    return static_cast<uint64_t>(__shfl_sync(group, static_cast<long long>(err), leader));
  }
  uint64_t* target = ok ? MapAddTarget(d, Ptr<const void>(key), IdFor(d), &err) : nullptr;
  AggregatedAdd(target, delta);
  return static_cast<uint64_t>(err);
}

extern "C" __device__ uint64_t __cuprobe_hist_add(uint64_t map, uint64_t value, uint64_t count) {
  uint64_t* target = HistTarget(Ptr<const cuprobe_map_desc>(map), value);
  AggregatedAdd(target, count);
  return target != nullptr ? 0 : static_cast<uint64_t>(kEINVAL);
}

namespace {

// Reserves this lane's record of `size` body bytes, aggregated over the
// lanes that reserve records of the same size in the same ring: one CAS per
// group. Returns the record's position, or ~0 when refused (counted).
__device__ __forceinline__ uint64_t GroupReserve(const cuprobe_map_desc* d, uint64_t map,
                                                 uint64_t size, bool ok) {
  const uint32_t active = __activemask();
  const uint64_t record = ok ? RingRecordSize(size) : 0;
  const uint32_t group = __match_any_sync(active, static_cast<unsigned long long>(ok ? map : 0)) &
                         __match_any_sync(active, static_cast<unsigned long long>(record));
  if (!ok) return ~uint64_t{0};  // groups never mix ok and refused lanes
  const uint32_t leader = static_cast<uint32_t>(__ffs(group) - 1);
  const uint32_t rank = static_cast<uint32_t>(__popc(group & LanesBelow()));
  uint64_t first = 0;
  uint32_t granted = 0;
  if (LaneId() == leader) granted = RingReserveGroup(d, record, __popc(group), &first);
  granted = __shfl_sync(group, granted, leader);
  first = __shfl_sync(group, static_cast<unsigned long long>(first), leader);
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
