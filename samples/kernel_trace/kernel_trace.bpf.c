// kernel_trace: one event per block when it starts (thread 0 of the block),
// with the global timer and the SM it runs on, into a ring buffer.
//
//   cuprobe compile samples/kernel_trace/kernel_trace.bpf.c -o kernel_trace.cpb
#include "cuprobe/probe.h"

struct block_start {
  u64 timestamp_ns;  // %globaltimer
  u32 kernel_id;
  u32 sm_id;
  u32 block_x, block_y, block_z;
  u32 reserved;
};

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 22);        // bytes
  __type(value, struct block_start);  // names the events' fields
} block_events SEC(".maps");

SEC("cuprobe/entry/*")
int trace_block_start(struct cuprobe_ctx *ctx) {
  if (!cuprobe_is_block_leader(ctx)) return 0;
  struct block_start *e = bpf_ringbuf_reserve(&block_events, sizeof(*e), 0);
  if (!e) return 0;  // full: the drop is counted by the ring buffer
  e->timestamp_ns = ctx->global_timer;
  e->kernel_id = ctx->kernel_id;
  e->sm_id = ctx->sm_id;
  e->block_x = ctx->block_idx[0];
  e->block_y = ctx->block_idx[1];
  e->block_z = ctx->block_idx[2];
  e->reserved = 0;
  bpf_ringbuf_submit(e, 0);
  return 0;
}
