// Test probe: reads vec_add's fourth argument (n) at kernel entry, counts
// launches per value of n, and prints it with bpf_printk, from one thread
// per launch.
#include "cuprobe/probe.h"

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, u64);    // n, as the kernel received it
  __type(value, u64);  // launches
  __uint(max_entries, 64);
} n_seen SEC(".maps");

SEC("cuprobe/entry/vec_add")
int record_n(struct cuprobe_ctx *ctx) {
  if (ctx->block_idx[0] != 0 || ctx->thread_idx[0] != 0) return 0;
  u64 n = (u32)cuprobe_arg(ctx, 3);
  cuprobe_map_add(&n_seen, &n, 1);
  bpf_printk("vec_add launched with n=%d\n", n);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
