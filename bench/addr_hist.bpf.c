// The patch backend's address-reading benchmark probe: every global access
// of every kernel lands in a histogram of its address's 4 KiB page within a
// 1 MiB window (what a locality study reads), one hist_add per access.
//
//   cuprobe run --backend patch -p bench/addr_hist.bpf.c -- python3 bench/sgemm_loop.py
#include "cuprobe/probe.h"

// Buckets [0, 1) ... [255, 256): the access's page in its 1 MiB window.
struct {
  __uint(type, BPF_MAP_TYPE_HIST_LINEAR);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 258);
  __uint(map_extra, CUPROBE_HIST_LINEAR_RANGE(0, 1));
} pages SEC(".maps");

SEC("cuprobe/mem/*")
int page_of_access(struct cuprobe_ctx *ctx) {
  if (ctx->mem_space != CUPROBE_SPACE_GLOBAL && ctx->mem_space != CUPROBE_SPACE_GENERIC)
    return 0;
  cuprobe_hist_linear(&pages, (ctx->mem_addr >> 12) & 0xff);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
