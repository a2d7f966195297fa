// addr_trace_lanes: samples/mem_trace/addr_trace's full address trace with
// one event per lane's access instead of one per group of a warp's lanes
// (bench/probe_bench.sh compares the two). The lanes of a warp that emit
// together reserve their records with one atomic.
//
//   cuprobe run -p bench/addr_trace_lanes.bpf.c --events json -o t -- build/samples/vec_add
#include "cuprobe/probe.h"

struct access {
  u64 addr;
  u32 kernel_id;
  u32 warp;  // global warp id: block (linear) * warps per block + warp in the block
  u16 sm;
  u8 size;   // bytes
  u8 kind;   // CUPROBE_ACCESS_LOAD / _STORE / _ATOMIC
  u8 lane;
  u8 reserved[3];
};

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 28);  // bytes: 8M events of 32 bytes with their headers
  __type(value, struct access);  // names the events' fields
} accesses SEC(".maps");

SEC("cuprobe/mem/*")
int trace_access(struct cuprobe_ctx *ctx) {
  if (ctx->mem_space != CUPROBE_SPACE_GLOBAL && ctx->mem_space != CUPROBE_SPACE_GENERIC)
    return 0;
  u32 threads = ctx->block_dim[0] * ctx->block_dim[1] * ctx->block_dim[2];
  u32 block = (ctx->block_idx[2] * ctx->grid_dim[1] + ctx->block_idx[1]) * ctx->grid_dim[0] +
              ctx->block_idx[0];
  u32 thread = (ctx->thread_idx[2] * ctx->block_dim[1] + ctx->thread_idx[1]) * ctx->block_dim[0] +
               ctx->thread_idx[0];
  struct access a = {
      .addr = ctx->mem_addr,
      .kernel_id = ctx->kernel_id,
      .warp = block * ((threads + 31) >> 5) + (thread >> 5),
      .sm = ctx->sm_id,
      .size = ctx->mem_size,
      .kind = ctx->mem_kind,
      .lane = ctx->lane_id,
  };
  bpf_ringbuf_output(&accesses, &a, sizeof(a), 0);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
