// divergence: how many lanes of each warp are active when it enters a kernel
// and when it leaves it, per exit site. The lowest active lane of the warp
// reports the size of its active mask, so each map entry counts warps (or,
// at an exit that only part of the warp takes, that part of a warp): a
// count at lanes < 32 is a warp that diverged before it left.
//
//   cuprobe run -p samples/divergence/divergence.bpf.c -- build/samples/divergence
#include "cuprobe/probe.h"

struct mask_key {
  u32 kernel_id;
  u32 kind;   // CUPROBE_ATTACH_ENTRY (1) or CUPROBE_ATTACH_EXIT (2)
  u32 site;   // exit: which ret/exit of the kernel; entry: 0
  u32 lanes;  // active lanes when the warp passed there
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, struct mask_key);
  __type(value, u64);  // warps (or parts of warps) that passed with that many lanes
  __uint(max_entries, 4096);
} lanes SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, u32);    // kernel id
  __type(value, u64);  // exits with fewer than 32 lanes active
  __uint(max_entries, 1024);
} partial_exits SEC(".maps");

// The lowest active lane of the warp: the one that reports for it.
static __always_inline int is_lowest_active_lane(u32 mask, u32 lane) {
  return (mask & (~mask + 1)) == (1u << lane);
}

static __always_inline void record(struct cuprobe_ctx *ctx) {
  u32 mask = ctx->active_mask;
  if (!is_lowest_active_lane(mask, ctx->lane_id)) return;
  struct mask_key key = {
      .kernel_id = ctx->kernel_id,
      .kind = ctx->kind,
      .site = ctx->site_index,
      .lanes = __builtin_popcount(mask),
  };
  cuprobe_map_add(&lanes, &key, 1);
  if (ctx->kind == CUPROBE_ATTACH_EXIT && key.lanes < 32) {
    u32 kernel = ctx->kernel_id;
    cuprobe_map_add(&partial_exits, &kernel, 1);
  }
}

SEC("cuprobe/entry/*")
int mask_at_entry(struct cuprobe_ctx *ctx) {
  record(ctx);
  return 0;
}

SEC("cuprobe/exit/*")
int mask_at_exit(struct cuprobe_ctx *ctx) {
  record(ctx);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
