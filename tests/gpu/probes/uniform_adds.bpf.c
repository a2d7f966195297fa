// The compiler's warp-uniform add (loader/compiler/lower_map.cc UniformAdd)
// against the helpers' grouped add, on every vec_add thread's entry: ARRAY
// adds and HIST_LINEAR / HIST_LOG2 adds whose key is the same across a warp
// (the first lane adds for all) and whose key differs per lane (grouped by
// counter inline, or, with deltas that differ or a few lanes' keys out of
// range, the helper), with a warp-uniform key out of range (refused),
// values below min, in range and past the last bucket, and a step that is
// not a power of two (a division); HASH adds of keys of one, two and three
// words, uniform and per lane, and into maps too small for their keys,
// whose refused adds are counted as the helpers count them
// (Run.UniformAddsAreExact).
#include "cuprobe/probe.h"

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 8);
} warp_slots SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 8);
} lane_slots SEC(".maps");

// Keys that differ per lane with a delta the same in every lane yet not a
// constant (the lanes vote on it), and with a delta that differs per lane
// (the helper).
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 8);
} voted_slots SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 8);
} lane_delta_slots SEC(".maps");

// Per-lane keys of which lanes 30 and 31 are out of range (refused).
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 30);
} some_refused SEC(".maps");

// A step of 12: the bucket is a division.
struct {
  __uint(type, BPF_MAP_TYPE_HIST_LINEAR);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 12);
  __uint(map_extra, CUPROBE_HIST_LINEAR_RANGE(10, 12));
} divided_linear SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HIST_LINEAR);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 10);
  __uint(map_extra, CUPROBE_HIST_LINEAR_RANGE(40, 16));
} warp_linear SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HIST_LINEAR);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 10);
  __uint(map_extra, CUPROBE_HIST_LINEAR_RANGE(40, 16));
} lane_linear SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HIST_LOG2);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 12);
} warp_log2 SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 16);
} warp_hash SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 16);
} lane_hash SEC(".maps");

struct wide_key {
  u64 warp;
  u32 tag;
  u32 lane_bit;  // 0 for the uniform map's key, lane % 2 for the other's
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, struct wide_key);
  __type(value, u64);
  __uint(max_entries, 16);
} wide_hash SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, struct wide_key);
  __type(value, u64);
  __uint(max_entries, 32);
} wide_lane_hash SEC(".maps");

// Room for 4 of the 8 warps' keys: the other 4 are refused.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 4);
} full_hash SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, struct wide_key);
  __type(value, u64);
  __uint(max_entries, 4);
} full_wide_hash SEC(".maps");

// Values that differ per lane, in one log2 bucket per warp.
struct {
  __uint(type, BPF_MAP_TYPE_HIST_LOG2);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 16);
} bucket_log2 SEC(".maps");

// A 24-byte key (passed by address): the full map's refusals are counted
// per lane.
struct big_key {
  u64 warp;
  u64 tag;
  u64 zero;
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, struct big_key);
  __type(value, u64);
  __uint(max_entries, 4);
} full_big_hash SEC(".maps");

SEC("cuprobe/entry/vec_add")
int uniform_adds(struct cuprobe_ctx *ctx) {
  u32 t = ctx->thread_idx[0];
  u32 w = t >> 5;  // the warp in its block: the same for all its lanes
  u32 slot = w;
  if (ctx->block_idx[0] == 0 && w == 7) slot = 100;  // out of range: refused
  cuprobe_map_add(&warp_slots, &slot, 1);
  u32 lane_slot = t % 5;
  cuprobe_map_add(&lane_slots, &lane_slot, 2);
  cuprobe_map_add(&voted_slots, &lane_slot, ctx->block_idx[0] % 3 + 1);
  cuprobe_map_add(&lane_delta_slots, &lane_slot, (t & 3) + 1);
  u32 lane = t & 31;
  cuprobe_map_add(&some_refused, &lane, 1);
  cuprobe_hist_linear(&divided_linear, t);
  cuprobe_hist_linear(&warp_linear, (u64)w * 40 + 4);
  cuprobe_hist_linear(&lane_linear, t);
  cuprobe_hist_log2(&warp_log2, w);
  cuprobe_hist_log2(&bucket_log2, ((u64)1 << (w + 5)) + (t & 31));
  cuprobe_map_add(&warp_hash, &w, 3);
  u32 lane_key = t % 3;
  cuprobe_map_add(&lane_hash, &lane_key, 1);
  struct wide_key wide = {.warp = w, .tag = 7, .lane_bit = 0};
  cuprobe_map_add(&wide_hash, &wide, 2);
  cuprobe_map_add(&full_hash, &w, 1);
  cuprobe_map_add(&full_wide_hash, &wide, 1);
  struct big_key big = {.warp = w, .tag = 9, .zero = 0};
  cuprobe_map_add(&full_big_hash, &big, 1);
  wide.lane_bit = t & 1;
  cuprobe_map_add(&wide_lane_hash, &wide, 1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
