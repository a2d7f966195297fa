// threadhist: how many times each GPU thread leaves the matched kernels.
// One u64 per (key, global thread id) in a PERTHREAD map, so the count is a
// plain increment of the thread's own slot: no atomics, no contention.
//
//   cuprobe compile samples/probes/threadhist.bpf.c -o threadhist.cpb
//   cuprobe run -p threadhist.cpb -- build/samples/vec_add
#include "cuprobe/probe.h"

struct {
  __uint(type, BPF_MAP_TYPE_PERTHREAD);
  __type(key, u32);    // always 0: one counter per thread
  __type(value, u64);  // exits of this thread
  __uint(max_entries, 1);
} thread_exits SEC(".maps");

SEC("cuprobe/exit/*vec_add*")
int count_thread_exit(struct cuprobe_ctx *ctx) {
  u32 key = 0;
  u64 *count = bpf_map_lookup_elem(&thread_exits, &key);
  if (count) *count += 1;
  return 0;
}
