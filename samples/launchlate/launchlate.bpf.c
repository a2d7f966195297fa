// launchlate, the probe: when each launch's first block starts on the GPU,
// tagged with the launch's grid id, which the trace's kernel records carry
// too (CUPTI's gridId). samples/launchlate/launchlate.py joins the two:
// CPU launch call -> CUPTI kernel start -> block (0,0,0)'s first instruction.
//
//   cuprobe run -p samples/launchlate/launchlate.bpf.c --events json -o late -- ./app
//   python3 samples/launchlate/launchlate.py late
#include "cuprobe/probe.h"

struct launch_start {
  u64 grid_id;       // cuprobe_grid_id(): %gridid, one per launch
  u64 timestamp_ns;  // %globaltimer at block (0,0,0)'s entry
  u32 kernel_id;
  u32 blocks;        // blocks in the grid
};

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);         // bytes: 32,768 launches between drains
  __type(value, struct launch_start);  // names the events' fields
} launch_starts SEC(".maps");

// Blocks that started, per launch: a launch's count is its grid's size.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, u64);    // grid id
  __type(value, u64);  // blocks
  __uint(max_entries, 4096);
} launch_blocks SEC(".maps");

SEC("cuprobe/entry/*")
int launch_entry(struct cuprobe_ctx *ctx) {
  if (!cuprobe_is_block_leader(ctx)) return 0;
  u64 grid = cuprobe_grid_id();
  cuprobe_map_add(&launch_blocks, &grid, 1);
  if ((ctx->block_idx[0] | ctx->block_idx[1] | ctx->block_idx[2]) != 0) return 0;
  struct launch_start *e = bpf_ringbuf_reserve(&launch_starts, sizeof(*e), 0);
  if (!e) return 0;  // full: counted as a drop by the ring buffer
  e->grid_id = grid;
  e->timestamp_ns = ctx->global_timer;
  e->kernel_id = ctx->kernel_id;
  e->blocks = ctx->grid_dim[0] * ctx->grid_dim[1] * ctx->grid_dim[2];
  bpf_ringbuf_submit(e, 0);
  return 0;
}
