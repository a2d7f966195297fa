// kernelretsnoop: one event per GPU thread as it leaves a kernel, with the
// kernel id, the thread's block and thread index and %globaltimer at that
// moment, through a ring buffer. A thread passes one exit site per launch,
// so a launch of N threads gives exactly N events (the ring's summary says
// how many were dropped, if it was too small).
//
//   cuprobe run -p samples/kernelretsnoop/kernelretsnoop.bpf.c --events json \
//       -- build/samples/vec_add 32768 3
#include "cuprobe/probe.h"

struct thread_exit {
  u64 timestamp_ns;  // %globaltimer when the thread left
  u32 kernel_id;
  u32 block_x, block_y, block_z;
  u32 thread_x, thread_y, thread_z;
  u32 reserved;
};

// 16 MiB: 40-byte records and their headers for some 300,000 thread exits
// between two drains of the CLI.
struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 24);
  __type(value, struct thread_exit);  // names the events' fields
} exits SEC(".maps");

SEC("cuprobe/exit/vec_add")
int snoop_thread_exit(struct cuprobe_ctx *ctx) {
  struct thread_exit *e = bpf_ringbuf_reserve(&exits, sizeof(*e), 0);
  if (!e) return 0;  // the ring is full: the drop is counted
  e->timestamp_ns = ctx->global_timer;
  e->kernel_id = ctx->kernel_id;
  e->block_x = ctx->block_idx[0];
  e->block_y = ctx->block_idx[1];
  e->block_z = ctx->block_idx[2];
  e->thread_x = ctx->thread_idx[0];
  e->thread_y = ctx->thread_idx[1];
  e->thread_z = ctx->thread_idx[2];
  e->reserved = 0;
  bpf_ringbuf_submit(e, 0);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
