// mem_trace: global loads and stores counted per kernel with the map_add
// helper (one atomic add per access; the helper aggregates within a warp),
// plus the bytes moved.
//
//   cuprobe compile samples/mem_trace/mem_trace.bpf.c -o mem_trace.cpb
#include "cuprobe/probe.h"

struct access_key {
  u32 kernel_id;
  u32 kind;  // CUPROBE_ACCESS_LOAD / _STORE / _ATOMIC
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, struct access_key);
  __type(value, u64);  // accesses
  __uint(max_entries, 4096);
} accesses SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, struct access_key);
  __type(value, u64);  // bytes
  __uint(max_entries, 4096);
} bytes SEC(".maps");

SEC("cuprobe/mem/*")
int count_global_access(struct cuprobe_ctx *ctx) {
  if (ctx->mem_space != CUPROBE_SPACE_GLOBAL && ctx->mem_space != CUPROBE_SPACE_GENERIC)
    return 0;
  struct access_key key = {.kernel_id = ctx->kernel_id, .kind = ctx->mem_kind};
  cuprobe_map_add(&accesses, &key, 1);
  cuprobe_map_add(&bytes, &key, ctx->mem_size);
  return 0;
}
