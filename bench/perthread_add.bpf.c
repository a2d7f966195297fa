// The per-thread map add of bench/probe_bench.sh (issue 6: "per-thread maps
// within 1.2x of a hand-written kernel doing the same"): at the exit of
// probe_workload's empty `touch` kernel, each thread adds its lane + 1 to
// its own slot of a PERTHREAD map, as probe_workload's per_thread_add kernel
// does by hand with an atomicAdd. 4M threads: at 1M a launch takes about
// what an empty launch takes, and the ratio was mostly noise. The delta is
// not a constant of the site, so the add is the compiler's inline one (no
// site or thread-range counter).
#include "cuprobe/probe.h"

struct {
  __uint(type, BPF_MAP_TYPE_PERTHREAD);
  __type(key, u32);
  __type(value, u64);
  __uint(max_entries, 1);
  __uint(map_extra, 1 << 22);  // ids: one per thread of a 4M-thread launch
} per_thread SEC(".maps");

SEC("cuprobe/exit/*touch*")
int add_lane(struct cuprobe_ctx *ctx) {
  u32 key = 0;
  cuprobe_map_add(&per_thread, &key, ctx->lane_id + 1);
  return 0;
}
