// coalescing: how well each kernel's global memory accesses use the 32-byte
// sectors they touch, per kernel and kind of access (load, store, atomic).
//
//  - @requests: warp-level accesses: each group of lanes that runs one
//    access together counts once (its lowest lane);
//  - @bytes: the bytes those lanes asked for;
//  - @sectors: the distinct 32-byte sectors each request touched, each
//    counted once by the lowest lane that touched it (cuprobe_warp_match on
//    the sector number); an access that crosses a sector boundary counts its
//    last sector too.
//
// Efficiency = @bytes / (32 x @sectors): 100% when a warp's lanes read
// neighbouring addresses, 12.5% when each 4-byte access has a sector of its
// own. scripts/mem-coalescing.sh prints it per kernel.
//
//   cuprobe run -p samples/coalescing/coalescing.bpf.c -- build/samples/directly_run 4 64 3 7 1000 4
#include "cuprobe/probe.h"

struct access_key {
  u32 kernel_id;
  u32 kind;  // CUPROBE_ACCESS_LOAD / _STORE / _ATOMIC
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, struct access_key);
  __type(value, u64);
  __uint(max_entries, 4096);
} requests SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, struct access_key);
  __type(value, u64);
  __uint(max_entries, 4096);
} bytes SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, struct access_key);
  __type(value, u64);
  __uint(max_entries, 4096);
} sectors SEC(".maps");

SEC("cuprobe/mem/*")
int count_sectors(struct cuprobe_ctx *ctx) {
  if (ctx->mem_space != CUPROBE_SPACE_GLOBAL && ctx->mem_space != CUPROBE_SPACE_GENERIC)
    return 0;
  struct access_key key = {.kernel_id = ctx->kernel_id, .kind = ctx->mem_kind};
  u64 first = ctx->mem_addr >> 5;
  u64 last = (ctx->mem_addr + ctx->mem_size - 1) >> 5;
  u32 here = cuprobe_warp_match(0);  // every lane running this access
  u32 same_first = cuprobe_warp_match(first);
  u32 same_last = cuprobe_warp_match(last);
  if (cuprobe_is_lowest_lane(ctx, here)) cuprobe_map_add(&requests, &key, 1);
  cuprobe_map_add(&bytes, &key, ctx->mem_size);
  u64 mine = 0;
  if (cuprobe_is_lowest_lane(ctx, same_first)) mine += 1;
  if (last != first && cuprobe_is_lowest_lane(ctx, same_last)) mine += 1;
  if (mine) cuprobe_map_add(&sectors, &key, mine);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
