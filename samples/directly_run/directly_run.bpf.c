// directly_run: a probe of every kind on the harness kernel
// (samples/directly_run/directly_run.cu), each with a result the harness's
// shape makes exact:
//
//  - @launches: 1 per launch (block (0,0,0)'s thread 0 at entry);
//  - @args[0], @args[1]: arg0 and arg1, summed over launches (read with
//    cuprobe_arg at entry, same thread);
//  - @exits: one per thread and launch (exit probe);
//  - @stores: global stores seen by the memory probe, one per thread and
//    launch, and @store_bytes their bytes (8 each).
//
//   cuprobe run -p samples/directly_run/directly_run.bpf.c -- build/samples/directly_run 4 64 3 7 1000
#include "cuprobe/probe.h"

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 1);
} launches SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);    // argument index
  __type(value, u64);  // sum over launches
  __uint(max_entries, 2);
} args SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 1);
} exits SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 1);
} stores SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 1);
} store_bytes SEC(".maps");

SEC("cuprobe/entry/harness")
int on_entry(struct cuprobe_ctx *ctx) {
  if ((ctx->block_idx[0] | ctx->block_idx[1] | ctx->block_idx[2]) != 0) return 0;
  if (!cuprobe_is_block_leader(ctx)) return 0;
  u32 zero = 0, one = 1;
  cuprobe_map_add(&launches, &zero, 1);
  cuprobe_map_add(&args, &zero, cuprobe_arg(ctx, 0));
  cuprobe_map_add(&args, &one, cuprobe_arg(ctx, 1));
  return 0;
}

SEC("cuprobe/exit/harness")
int on_exit(struct cuprobe_ctx *ctx) {
  u32 zero = 0;
  cuprobe_map_add(&exits, &zero, 1);
  return 0;
}

SEC("cuprobe/mem/harness")
int on_store(struct cuprobe_ctx *ctx) {
  if (ctx->mem_kind != CUPROBE_ACCESS_STORE) return 0;
  u32 zero = 0;
  cuprobe_map_add(&stores, &zero, 1);
  cuprobe_map_add(&store_bytes, &zero, ctx->mem_size);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
