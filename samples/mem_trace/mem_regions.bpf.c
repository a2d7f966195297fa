// mem_regions: where each kernel's global accesses land. Accesses are counted
// per kernel, per kind (load, store, atomic) and per 2 MiB region of the
// address space (address >> 21): each buffer a kernel reads or writes shows
// up as its own rows, with how often the kernel touched it.
//
//   cuprobe run -p samples/mem_trace/mem_regions.bpf.c -- build/samples/vec_add
#include "cuprobe/probe.h"

struct region_key {
  u32 kernel_id;
  u32 kind;    // CUPROBE_ACCESS_LOAD / _STORE / _ATOMIC
  u64 region;  // address >> 21: the 2 MiB region the access falls in
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, struct region_key);
  __type(value, u64);  // accesses
  __uint(max_entries, 65536);
} regions SEC(".maps");

SEC("cuprobe/mem/*")
int count_region(struct cuprobe_ctx *ctx) {
  if (ctx->mem_space != CUPROBE_SPACE_GLOBAL && ctx->mem_space != CUPROBE_SPACE_GENERIC)
    return 0;
  struct region_key key = {
      .kernel_id = ctx->kernel_id, .kind = ctx->mem_kind, .region = ctx->mem_addr >> 21};
  cuprobe_map_add(&regions, &key, 1);
  return 0;
}
