// cublas_probe: what the kernels of a PyTorch matmul do, cuBLAS's included.
// cuBLAS ships SASS only, so this runs under `cuprobe run --backend patch`:
// per kernel, the blocks it ran and the bytes its global loads and stores
// moved.
//
//   cuprobe run --backend patch -p samples/cublas_probe/cublas_probe.bpf.c \
//       -- python3 samples/cublas_probe/mm.py
#include "cuprobe/probe.h"

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, u32);    // ctx->kernel_id
  __type(value, u64);  // blocks that started
  __uint(max_entries, 1024);
} blocks SEC(".maps");

struct access_key {
  u32 kernel_id;
  u32 kind;  // CUPROBE_ACCESS_LOAD / _STORE / _ATOMIC
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __type(key, struct access_key);
  __type(value, u64);  // bytes
  __uint(max_entries, 4096);
} global_bytes SEC(".maps");

SEC("cuprobe/entry/*")
int block_start(struct cuprobe_ctx *ctx) {
  if (!cuprobe_is_block_leader(ctx)) return 0;
  u32 kernel = ctx->kernel_id;
  cuprobe_map_add(&blocks, &kernel, 1);
  return 0;
}

SEC("cuprobe/mem/*")
int global_access(struct cuprobe_ctx *ctx) {
  if (ctx->mem_space != CUPROBE_SPACE_GLOBAL && ctx->mem_space != CUPROBE_SPACE_GENERIC)
    return 0;
  struct access_key key = {.kernel_id = ctx->kernel_id, .kind = ctx->mem_kind};
  cuprobe_map_add(&global_bytes, &key, ctx->mem_size);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
