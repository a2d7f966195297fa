// A memory probe that does nothing: what calling a probe at every global
// access costs by itself (bench/probe_bench.sh, the patch rows).
#include "cuprobe/probe.h"

SEC("cuprobe/mem/*")
int empty_access(struct cuprobe_ctx *ctx) { return 0; }

char LICENSE[] SEC("license") = "GPL";
