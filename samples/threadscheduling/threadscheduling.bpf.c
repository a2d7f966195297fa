// threadscheduling: where the GPU placed the blocks and warps of a kernel.
//
//  - @blocks_per_sm: blocks that started on each SM (%smid), counted by
//    each block's thread 0;
//  - @warps_per_sm: warps that started on each SM, counted by lane 0;
//  - @warp_slot: the hardware warp slot (%warpid) each warp ran in;
//  - @lane: the lane (%laneid) of every thread that entered.
//
//   cuprobe run -p samples/threadscheduling/threadscheduling.bpf.c \
//       -- build/samples/threadscheduling 528 10
#include "cuprobe/probe.h"

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, u32);    // SM id
  __type(value, u64);  // blocks
  __uint(max_entries, 1024);
} blocks_per_sm SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, u32);    // SM id
  __type(value, u64);  // warps
  __uint(max_entries, 1024);
} warps_per_sm SEC(".maps");

// Buckets [0, 1), [1, 2), ... [63, 64) (an SM holds at most 64 warps).
struct {
  __uint(type, BPF_MAP_TYPE_HIST_LINEAR);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 66);
  __uint(map_extra, CUPROBE_HIST_LINEAR_RANGE(0, 1));
} warp_slot SEC(".maps");

// Buckets [0, 1) ... [31, 32): one per lane.
struct {
  __uint(type, BPF_MAP_TYPE_HIST_LINEAR);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 34);
  __uint(map_extra, CUPROBE_HIST_LINEAR_RANGE(0, 1));
} lane SEC(".maps");

SEC("cuprobe/entry/*")
int place_at_entry(struct cuprobe_ctx *ctx) {
  u32 lane_id = ctx->lane_id;
  cuprobe_hist_linear(&lane, lane_id);
  if (lane_id != 0) return 0;
  u32 sm = ctx->sm_id;
  cuprobe_map_add(&warps_per_sm, &sm, 1);
  cuprobe_hist_linear(&warp_slot, ctx->warp_id);
  if (cuprobe_is_block_leader(ctx)) cuprobe_map_add(&blocks_per_sm, &sm, 1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
