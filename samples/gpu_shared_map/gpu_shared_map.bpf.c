// gpu_shared_map: one map that the host and the GPU both update.
//
//  - @shared[0] is the epoch. The host sets it while the program runs
//    (`cuprobe maps --set 'shared[0]=N' PID`); the probe reads it on the GPU
//    at every block's entry.
//  - @shared[1] is written by the GPU: the last epoch a block saw.
//  - @blocks_per_epoch counts the blocks that ran under each epoch, so the
//    moment each host write reached the GPU shows in the counts.
//
//   samples/gpu_shared_map/run.sh          (drives a workload in three epochs)
#include "cuprobe/probe.h"

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 2);
} shared SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, u64);    // epoch
  __type(value, u64);  // blocks
  __uint(max_entries, 64);
} blocks_per_epoch SEC(".maps");

SEC("cuprobe/entry/*")
int on_block_entry(struct cuprobe_ctx *ctx) {
  if (!cuprobe_is_block_leader(ctx)) return 0;
  u32 host_slot = 0, gpu_slot = 1;
  u64 *epoch = bpf_map_lookup_elem(&shared, &host_slot);
  if (!epoch) return 0;
  u64 seen = *epoch;
  cuprobe_map_add(&blocks_per_epoch, &seen, 1);
  bpf_map_update_elem(&shared, &gpu_slot, &seen, BPF_ANY);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
