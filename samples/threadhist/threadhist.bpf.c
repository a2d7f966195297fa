// threadhist: how many times each GPU thread leaves the matched kernels.
// One u64 per (key, global thread id) in a PERTHREAD map: each thread adds
// 1 to its own slot when it exits.
//
// cuprobe_map_add of a constant at exit is a thread-range add: every thread
// of a launch adds the same, so the rewriter has the launch's first thread
// record the launch's size once and the host adds 1 to each of its thread
// ids (docs/REWRITER.md, "Thread-range counters"). Written as
// `u64 *c = bpf_map_lookup_elem(...); if (c) *c += 1;` the same probe
// loads and stores every thread's slot.
//
//   cuprobe compile samples/threadhist/threadhist.bpf.c -o threadhist.cpb
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
  cuprobe_map_add(&thread_exits, &key, 1);
  return 0;
}
