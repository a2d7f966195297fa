// addr_trace: a full address trace. Every global access of every kernel is
// in a ring-buffer event with its address, size, kind, kernel, SM and
// global warp: what a coalescing, working-set or reuse-distance analysis
// reads offline. One event stands for the lanes of a warp whose accesses
// are consecutive elements (lane i at base + i * size), as a coalesced
// access is: a warp reading 32 consecutive floats is one event, a warp
// whose lanes scatter is one event per lane. Past the ring's capacity
// (what the host drains while the kernels run) events are dropped and
// counted: the report says "N records delivered, M dropped".
//
//   cuprobe run -p samples/mem_trace/addr_trace.bpf.c --events json -o t -- build/samples/vec_add
#include "cuprobe/probe.h"

struct access {
  u64 base;       // lane i of `lanes` accessed base + i * size
  u32 kernel_id;
  u32 warp;       // global warp id: block (linear) * warps per block + warp in the block
  u32 lanes;      // the lanes this event stands for, a bit each
  u16 sm;
  u8 size;        // bytes
  u8 kind;        // CUPROBE_ACCESS_LOAD / _STORE / _ATOMIC
};

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 28);  // bytes: 8M events of 24 bytes with their headers
  __type(value, struct access);  // names the events' fields
} accesses SEC(".maps");

SEC("cuprobe/mem/*")
int trace_access(struct cuprobe_ctx *ctx) {
  if (ctx->mem_space != CUPROBE_SPACE_GLOBAL && ctx->mem_space != CUPROBE_SPACE_GENERIC)
    return 0;
  // The lanes that share a base (every lane of the warp runs this access
  // together, with the same size) are one event, sent by the lowest.
  u64 base = ctx->mem_addr - (u64)ctx->lane_id * ctx->mem_size;
  u32 lanes = cuprobe_warp_match(base);
  if (!cuprobe_is_lowest_lane(ctx, lanes)) return 0;
  u32 threads = ctx->block_dim[0] * ctx->block_dim[1] * ctx->block_dim[2];
  u32 block = (ctx->block_idx[2] * ctx->grid_dim[1] + ctx->block_idx[1]) * ctx->grid_dim[0] +
              ctx->block_idx[0];
  u32 thread = (ctx->thread_idx[2] * ctx->block_dim[1] + ctx->thread_idx[1]) * ctx->block_dim[0] +
               ctx->thread_idx[0];
  // Reserved and written in place: the lowest lane alone reserves, inline
  // (one atomic), and no copy goes through the stack.
  struct access *a = bpf_ringbuf_reserve(&accesses, sizeof(*a), 0);
  if (!a) return 0;  // full: the drop is counted by the ring buffer
  a->base = base;
  a->kernel_id = ctx->kernel_id;
  a->warp = block * ((threads + 31) >> 5) + (thread >> 5);
  a->lanes = lanes;
  a->sm = ctx->sm_id;
  a->size = ctx->mem_size;
  a->kind = ctx->mem_kind;
  bpf_ringbuf_submit(a, 0);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
