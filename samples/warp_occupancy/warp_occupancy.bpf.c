// warp_occupancy: warps resident on the GPU over time. The lowest active
// lane of each warp reports when the warp enters and when it leaves:
//
//  - @started / @ended: when warps entered and left, in microseconds since
//    the first warp of the run entered (5 us buckets; the last bucket also
//    holds everything later). Warps resident at time t = warps started
//    before t - warps ended before t.
//  - @resident: how many warps were resident on the whole GPU (counting
//    itself) each time a warp entered, in buckets of 256 warps.
//  - @warps_per_sm: warps that entered on each SM.
//
//   cuprobe run -p samples/warp_occupancy/warp_occupancy.bpf.c -- build/samples/matmul 512 3
#include "cuprobe/probe.h"

#define BUCKET_US 5

// Shared by all threads (a one-entry map): updated atomically.
u64 first_entry_ns;  // %globaltimer of the first warp that entered, 0 before
s64 resident_warps;  // warps entered and not yet left

struct {
  __uint(type, BPF_MAP_TYPE_HIST_LINEAR);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 202);  // [0, 5) ... [995, 1000) us, then [1000, ...)
  __uint(map_extra, CUPROBE_HIST_LINEAR_RANGE(0, BUCKET_US));
} started SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HIST_LINEAR);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 202);
  __uint(map_extra, CUPROBE_HIST_LINEAR_RANGE(0, BUCKET_US));
} ended SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HIST_LINEAR);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 66);  // up to 16,384 warps (H200: 132 SMs x 64)
  __uint(map_extra, CUPROBE_HIST_LINEAR_RANGE(0, 256));
} resident SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, u32);    // SM id
  __type(value, u64);  // warps that entered there
  __uint(max_entries, 1024);
} warps_per_sm SEC(".maps");

static __always_inline int is_lowest_active_lane(const struct cuprobe_ctx *ctx) {
  u32 mask = ctx->active_mask;
  return (mask & (~mask + 1)) == (1u << ctx->lane_id);
}

// Microseconds since the first warp entered (which sets that time).
static __always_inline u64 since_first_entry_us(u64 now) {
  u64 first = cuprobe_atomic_cmpxchg(&first_entry_ns, 0, now);
  if (first == 0 || now < first) return 0;
  return (now - first) / 1000;
}

SEC("cuprobe/entry/*")
int warp_enters(struct cuprobe_ctx *ctx) {
  if (!is_lowest_active_lane(ctx)) return 0;
  u64 now = ctx->global_timer;
  cuprobe_hist_linear(&started, since_first_entry_us(now));
  s64 before = cuprobe_atomic_add(&resident_warps, 1);
  cuprobe_hist_linear(&resident, before < 0 ? 1 : before + 1);
  u32 sm = ctx->sm_id;
  cuprobe_map_add(&warps_per_sm, &sm, 1);
  return 0;
}

SEC("cuprobe/exit/*")
int warp_leaves(struct cuprobe_ctx *ctx) {
  if (!is_lowest_active_lane(ctx)) return 0;
  u64 now = ctx->global_timer;
  cuprobe_hist_linear(&ended, since_first_entry_us(now));
  cuprobe_atomic_add(&resident_warps, -1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
