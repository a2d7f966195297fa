// cudagraph: threads and blocks per kernel, for kernels launched through a
// CUDA graph. Nothing here is special to graphs: the hook rewrites the module
// when it loads, so a kernel runs instrumented however it is launched
// (stream, graph, cooperative).
//
//   cuprobe run -p samples/cudagraph/cudagraph.bpf.c -- build/samples/cudagraph
#include "cuprobe/probe.h"

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);    // ctx->kernel_id
  __type(value, u64);  // threads that entered the kernel
  __uint(max_entries, 1024);
} threads SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);    // ctx->kernel_id
  __type(value, u64);  // blocks that ran it (counted by each block's first thread)
  __uint(max_entries, 1024);
} blocks SEC(".maps");

SEC("cuprobe/entry/*")
int count_threads_and_blocks(struct cuprobe_ctx *ctx) {
  u32 kernel = ctx->kernel_id;
  cuprobe_map_add(&threads, &kernel, 1);
  if (cuprobe_is_block_leader(ctx)) cuprobe_map_add(&blocks, &kernel, 1);
  return 0;
}
