// arglogger: the arguments of every kernel launch, read at kernel entry by
// thread 0 of block (0, 0, 0) and printed with bpf_printk (one line for the
// launch, one per argument), plus the last value of each argument in a map.
// Arguments of at most 8 bytes arrive zero-extended to 64 bits: an int -3
// reads 0xfffffffd, a float its IEEE bits; a struct passed by value gives
// its first 8 bytes.
//
//   cuprobe run -p samples/arglogger/arglogger.bpf.c -- build/samples/arglogger
#include "cuprobe/probe.h"

#define MAX_LOGGED_ARGS 8

struct arg_key {
  u32 kernel_id;
  u32 index;
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, struct arg_key);
  __type(value, u64);  // the argument's value at the last launch
  __uint(max_entries, 4096);
} last_arg SEC(".maps");

SEC("cuprobe/entry/*")
int log_kernel_args(struct cuprobe_ctx *ctx) {
  if ((ctx->block_idx[0] | ctx->block_idx[1] | ctx->block_idx[2]) != 0) return 0;
  if (!cuprobe_is_block_leader(ctx)) return 0;
  u32 kernel = ctx->kernel_id;
  u32 count = ctx->num_args;
  bpf_printk("kernel %u: %u args", kernel, count);
  // A loop index is not a constant offset: cuprobe_get_arg reads argument i
  // (cuprobe_arg(ctx, 2) is the cheaper form for a constant index).
  for (u32 i = 0; i < MAX_LOGGED_ARGS; i++) {
    if (i >= count) break;
    u64 value = cuprobe_get_arg(ctx, i);
    struct arg_key key = {.kernel_id = kernel, .index = i};
    bpf_map_update_elem(&last_arg, &key, &value, BPF_ANY);
    bpf_printk("kernel %u arg%u = 0x%llx", kernel, i, value);
  }
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
