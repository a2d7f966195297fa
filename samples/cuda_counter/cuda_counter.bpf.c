// cuda_counter: calls and time per kernel, from an entry and an exit probe.
//
//  - @calls: launches per kernel, counted by thread 0 of block (0, 0, 0) at
//    entry (every launch has exactly one).
//  - @blocks and @block_ns: per kernel, the blocks that ran and the sum of
//    their run times, each measured by the block's thread 0 from its entry
//    (%globaltimer kept in its PERTHREAD slot) to its exit. @block_ns /
//    @blocks is the mean block time; @block_time the distribution.
//
//   cuprobe run -p samples/cuda_counter/cuda_counter.bpf.c -- build/samples/vec_add 1048576 10
#include "cuprobe/probe.h"

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, u32);    // kernel id
  __type(value, u64);  // launches
  __uint(max_entries, 1024);
} calls SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, u32);    // kernel id
  __type(value, u64);  // blocks that ran
  __uint(max_entries, 1024);
} blocks SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, u32);    // kernel id
  __type(value, u64);  // nanoseconds, summed over the blocks
  __uint(max_entries, 1024);
} block_ns SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HIST_LOG2);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 64);
} block_time SEC(".maps");  // block run times, ns

// The entry time of each block's thread 0, read back by the same thread at exit.
struct {
  __uint(type, BPF_MAP_TYPE_PERTHREAD);
  __type(key, u32);    // always 0
  __type(value, u64);  // %globaltimer at entry
  __uint(max_entries, 1);
} entered_at SEC(".maps");

SEC("cuprobe/entry/*")
int count_entry(struct cuprobe_ctx *ctx) {
  if (!cuprobe_is_block_leader(ctx)) return 0;
  u32 zero = 0;
  u64 now = ctx->global_timer;
  bpf_map_update_elem(&entered_at, &zero, &now, BPF_ANY);
  if ((ctx->block_idx[0] | ctx->block_idx[1] | ctx->block_idx[2]) == 0) {
    u32 kernel = ctx->kernel_id;
    cuprobe_map_add(&calls, &kernel, 1);
  }
  return 0;
}

SEC("cuprobe/exit/*")
int count_exit(struct cuprobe_ctx *ctx) {
  if (!cuprobe_is_block_leader(ctx)) return 0;
  u32 zero = 0;
  u64 *start = bpf_map_lookup_elem(&entered_at, &zero);
  if (!start) return 0;
  u64 now = ctx->global_timer;
  u64 ns = now > *start ? now - *start : 0;
  u32 kernel = ctx->kernel_id;
  cuprobe_map_add(&blocks, &kernel, 1);
  cuprobe_map_add(&block_ns, &kernel, ns);
  cuprobe_hist_log2(&block_time, ns);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
