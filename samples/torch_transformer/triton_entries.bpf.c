// triton_entries: per instrumented kernel (Inductor's Triton kernels, with
// -k 'triton_*'), the threads that entered it and the blocks that started.
// Both are exact: the GPU test checks them against the grid and block of
// every Triton launch in the timeline.
//
//   cuprobe run -p samples/torch_transformer/triton_entries.bpf.c -k 'triton_*' \
//       -- python3 samples/torch_transformer/train_step.py --compile
#include "cuprobe/probe.h"

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);    // ctx->kernel_id
  __type(value, u64);  // threads that entered
  __uint(max_entries, 1024);
} entries SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);    // ctx->kernel_id
  __type(value, u64);  // blocks that started (their thread 0 entered)
  __uint(max_entries, 1024);
} blocks SEC(".maps");

SEC("cuprobe/entry/*")
int triton_entry(struct cuprobe_ctx *ctx) {
  u32 key = ctx->kernel_id;
  cuprobe_map_add(&entries, &key, 1);
  if (cuprobe_is_block_leader(ctx)) cuprobe_map_add(&blocks, &key, 1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
