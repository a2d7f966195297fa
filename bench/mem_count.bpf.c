// Every global access counted in one ARRAY slot (key 0): one add per
// access, which the helper aggregates across the warp (bench/probe_bench.sh,
// the patch rows; mem_trace keeps two HASH maps keyed by kernel and kind).
#include "cuprobe/probe.h"

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);
  __type(value, u64);  // accesses
  __uint(max_entries, 1);
} accesses SEC(".maps");

SEC("cuprobe/mem/*")
int count_access(struct cuprobe_ctx *ctx) {
  u32 key = 0;
  cuprobe_map_add(&accesses, &key, 1);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
