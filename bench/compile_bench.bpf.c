// The probe of bench/compile_bench: 216 eBPF instructions of typical
// probe work (context reads, map updates, a histogram, a ring-buffer event,
// a bounded loop over the kernel arguments).
#include "cuprobe/probe.h"

struct event {
  u64 ts, clock, arg_sum;
  u32 kernel_id, sm, warp, lane, block[3], thread[3];
};
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 1 << 20); } events SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u32); __type(value, u64);
         __uint(max_entries, 1024); } per_kernel SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HIST_LOG2); __type(key, u32); __type(value, u64);
         __uint(max_entries, 64); } latency SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, u32); __type(value, u64[8]);
         __uint(max_entries, 32); } per_sm SEC(".maps");
u64 total_calls = 0;
const volatile u32 sample_lane = 0;

SEC("cuprobe/exit/*")
int bench_probe(struct cuprobe_ctx *ctx) {
  __sync_fetch_and_add(&total_calls, 1);
  u32 k = ctx->kernel_id;
  cuprobe_map_add(&per_kernel, &k, 1);
  cuprobe_hist_log2(&latency, ctx->global_timer - ctx->clock);
  u32 sm = ctx->sm_id & 31;
  u64 *slots = bpf_map_lookup_elem(&per_sm, &sm);
  if (slots) {
    u32 w = ctx->warp_id;
    if (w < 8) __sync_fetch_and_add(&slots[w], 1);
  }
  for (u32 i = 0; i < 6; i++) {
    u32 key = (k << 4) | i;
    cuprobe_map_add(&per_kernel, &key, ctx->args[i] & 0xff);
  }
  if (ctx->lane_id != sample_lane) return 0;
  u64 sum = 0;
  for (int i = 0; i < 16; i++) sum += ctx->args[i] * (u64)(i + 1);
  struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) return 0;
  e->ts = ctx->global_timer;
  e->clock = ctx->clock;
  e->arg_sum = sum;
  e->kernel_id = ctx->kernel_id;
  e->sm = ctx->sm_id;
  e->warp = ctx->warp_id;
  e->lane = ctx->lane_id;
  e->block[0] = ctx->block_idx[0];
  e->block[1] = ctx->block_idx[1];
  e->block[2] = ctx->block_idx[2];
  e->thread[0] = ctx->thread_idx[0];
  e->thread[1] = ctx->thread_idx[1];
  e->thread[2] = ctx->thread_idx[2];
  bpf_ringbuf_submit(e, 0);
  if (sum > 1000) bpf_printk("kernel %u sum %llu", k, sum);
  return 0;
}
