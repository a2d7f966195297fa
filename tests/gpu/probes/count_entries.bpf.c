// Test probe: counts thread entries per instrumented kernel (by kernel id).
#include "cuprobe/probe.h"

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);    // ctx->kernel_id
  __type(value, u64);  // threads that entered
  __uint(max_entries, 1024);
} entries SEC(".maps");

SEC("cuprobe/entry/*")
int count_entry(struct cuprobe_ctx *ctx) {
  u32 key = ctx->kernel_id;
  cuprobe_map_add(&entries, &key, 1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
