// empty: an entry and an exit probe that do nothing, on every kernel. What
// attaching a probe costs by itself (the call, the context), measured by
// bench/probe_bench.sh against the uninstrumented run.
//
//   cuprobe run -p samples/probes/empty.bpf.c -- ./app
#include "cuprobe/probe.h"

SEC("cuprobe/entry/*")
int empty_entry(struct cuprobe_ctx *ctx) { return 0; }

SEC("cuprobe/exit/*")
int empty_exit(struct cuprobe_ctx *ctx) { return 0; }

char LICENSE[] SEC("license") = "GPL";
