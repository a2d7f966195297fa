// A memory probe that reads each access's address and almost never acts on
// it (no access is at address 1): what an address-reading probe pays at the
// site itself, before any map update (bench/probe_bench.sh, issue 39's split
// of addr_hist into the site, the warp grouping and the atomics).
#include "cuprobe/probe.h"

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 1);
} odd SEC(".maps");

SEC("cuprobe/mem/*")
int touch_address(struct cuprobe_ctx *ctx) {
  if (ctx->mem_addr == 1) {
    u32 key = 0;
    cuprobe_map_add(&odd, &key, 1);
  }
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
