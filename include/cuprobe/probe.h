/* File: include/cuprobe/probe.h
 *
 * The header probes are written against. A probe is a small C program,
 * compiled with clang -target bpf, verified and lowered to PTX by
 * `cuprobe compile` (loader/compiler), and called from the kernels it attaches
 * to. The ABI underneath is include/cuprobe/abi.h; docs/PROBES.md is the
 * user guide.
 *
 *   #include "cuprobe/probe.h"
 *
 *   struct {
 *     __uint(type, BPF_MAP_TYPE_HASH);
 *     __type(key, u32);     // kernel id
 *     __type(value, u64);   // threads that left it
 *     __uint(max_entries, 1024);
 *   } exits SEC(".maps");
 *
 *   SEC("cuprobe/exit/vec_add*")
 *   int count_exits(struct cuprobe_ctx *ctx) {
 *     u32 kernel = cuprobe_kernel_id(ctx);
 *     cuprobe_map_add(&exits, &kernel, 1);
 *     return 0;
 *   }
 *
 * Compatibility with libbpf's headers: this file defines SEC, __uint, __type,
 * __always_inline and the bpf_* helper names the GPU supports only where
 * <bpf/bpf_helpers.h> did not already, and then marks bpf_helpers.h as
 * included (__BPF_HELPERS__), because libbpf's helper declarations are
 * static definitions that cannot appear twice in one translation unit. So
 * either include order compiles; helpers that only exist in the Linux kernel
 * are then not declared at all (the GPU has none of them). Include
 * <linux/bpf.h> or vmlinux.h, if at all, *before* this file: their map type
 * enums are then used instead of the macros below.
 */
#ifndef CUPROBE_PROBE_H_
#define CUPROBE_PROBE_H_

#include "abi.h"

/* ---- Integer types (the kernel's spellings; repeated typedefs of the same
 * type are legal C11, so vmlinux.h or <linux/types.h> may also be included). */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef signed char s8;
typedef short s16;
typedef int s32;
typedef long long s64;
typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef int __s32;
typedef long long __s64;

#ifndef NULL
#define NULL ((void *)0)
#endif

/* ---- Sections, attributes, map definition macros (libbpf's spellings). */
#ifndef SEC
#define SEC(name) __attribute__((section(name), used))
#endif
#ifndef __uint
#define __uint(name, val) int (*name)[val]
#endif
#ifndef __type
#define __type(name, val) __typeof__(val) *name
#endif
#ifndef __array
#define __array(name, val) __typeof__(val) *name[]
#endif
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

/* Attach points (abi.h "Attach points"): SEC(CUPROBE_ENTRY("vec_add*")). A
 * plain string works as well: SEC("cuprobe/exit/matmul_*"). bpftime's
 * SEC("kprobe/<kernel>"), SEC("kretprobe/<kernel>") and
 * SEC("kprobe/__memcapture") are accepted unchanged. */
#define CUPROBE_ENTRY(glob) "cuprobe/entry/" glob
#define CUPROBE_EXIT(glob) "cuprobe/exit/" glob
#define CUPROBE_MEM(glob) "cuprobe/mem/" glob

/* ---- Map types -------------------------------------------------------- */
#if !defined(_UAPI__LINUX_BPF_H__) && !defined(__LINUX_BPF_H__) && !defined(__VMLINUX_H__)
#define BPF_MAP_TYPE_HASH CUPROBE_MAP_HASH
#define BPF_MAP_TYPE_ARRAY CUPROBE_MAP_ARRAY
#define BPF_MAP_TYPE_PERCPU_HASH 5  /* read as HASH */
#define BPF_MAP_TYPE_PERCPU_ARRAY 6 /* read as PERSM: one array per SM */
#define BPF_MAP_TYPE_RINGBUF CUPROBE_MAP_RINGBUF
#define BPF_ANY CUPROBE_ANY
#define BPF_NOEXIST CUPROBE_NOEXIST
#define BPF_EXIST CUPROBE_EXIST
#endif
#define BPF_MAP_TYPE_PERTHREAD CUPROBE_MAP_PERTHREAD
#define BPF_MAP_TYPE_PERWARP CUPROBE_MAP_PERWARP
#define BPF_MAP_TYPE_PERSM CUPROBE_MAP_PERSM
#define BPF_MAP_TYPE_HIST_LOG2 CUPROBE_MAP_HIST_LOG2
#define BPF_MAP_TYPE_HIST_LINEAR CUPROBE_MAP_HIST_LINEAR
/* HIST_LINEAR buckets: __uint(map_extra, CUPROBE_HIST_LINEAR_RANGE(min, step)),
 * min and step below 65536 (__uint holds 32 bits; the compiler widens them to
 * the bundle's min | step << 32). */
#define CUPROBE_HIST_LINEAR_RANGE(min, step) \
  ((((unsigned int)(step) & 0xffffu) << 16) | ((unsigned int)(min) & 0xffffu))

/* ---- Helpers ----------------------------------------------------------
 * The call number is the helper id of abi.h; the compiler turns the call into
 * a call of the GPU helper library or into inline code. Pointers passed to
 * helpers may point to the stack or into a map value. */
static void *(*const cuprobe_map_lookup_elem)(void *map, const void *key) =
    (void *)CUPROBE_HELPER_MAP_LOOKUP_ELEM;
static long (*const cuprobe_map_update_elem)(void *map, const void *key, const void *value,
                                             u64 flags) = (void *)CUPROBE_HELPER_MAP_UPDATE_ELEM;
static long (*const cuprobe_map_delete_elem)(void *map, const void *key) =
    (void *)CUPROBE_HELPER_MAP_DELETE_ELEM;
/* Atomically adds delta to the u64 value of key (created as 0 if absent). */
static long (*const cuprobe_map_add)(void *map, const void *key, u64 delta) =
    (void *)CUPROBE_HELPER_MAP_ADD;
/* HIST_LOG2 / HIST_LINEAR maps: the bucket of value gets count added. */
static long (*const cuprobe_hist_add)(void *map, u64 value, u64 count) =
    (void *)CUPROBE_HELPER_HIST_ADD;
static long (*const cuprobe_ringbuf_output)(void *ringbuf, const void *data, u64 size,
                                            u64 flags) = (void *)CUPROBE_HELPER_RINGBUF_OUTPUT;
static void *(*const cuprobe_ringbuf_reserve)(void *ringbuf, u64 size, u64 flags) =
    (void *)CUPROBE_HELPER_RINGBUF_RESERVE;
static void (*const cuprobe_ringbuf_submit)(void *data, u64 flags) =
    (void *)CUPROBE_HELPER_RINGBUF_SUBMIT;
static void (*const cuprobe_ringbuf_discard)(void *data, u64 flags) =
    (void *)CUPROBE_HELPER_RINGBUF_DISCARD;
/* The format must be a string constant; at most 3 arguments. */
static long (*const cuprobe_trace_printk)(const char *fmt, u32 fmt_size, ...) =
    (void *)CUPROBE_HELPER_TRACE_PRINTK;
static u64 (*const cuprobe_ktime_get_ns)(void) = (void *)CUPROBE_HELPER_KTIME_GET_NS;
static u32 (*const cuprobe_get_smp_processor_id)(void) =
    (void *)CUPROBE_HELPER_GET_SMP_PROCESSOR_ID;
static u64 (*const cuprobe_get_current_pid_tgid)(void) =
    (void *)CUPROBE_HELPER_GET_CURRENT_PID_TGID;
/* Argument `index` of the kernel, for an index known only at run time (0 when
 * index >= the kernel's parameter count). cuprobe_arg() is cheaper. */
static u64 (*const cuprobe_get_arg)(const struct cuprobe_ctx *ctx, u64 index) =
    (void *)CUPROBE_HELPER_GET_ARG;
static void (*const cuprobe_grid_dim)(u64 *x, u64 *y, u64 *z) = (void *)CUPROBE_HELPER_GRID_DIM;
static u64 (*const cuprobe_global_thread_id)(void) = (void *)CUPROBE_HELPER_GLOBAL_THREAD_ID;
/* The lanes of this warp that run this call together and pass the same
 * `value` (a bit per lane, this lane's included): __match_any_sync over the
 * active lanes. The lowest lane of the mask can stand for the group, e.g.
 * count each 32-byte sector a warp's access touches once:
 *   u32 same = cuprobe_warp_match(ctx->mem_addr >> 5);
 *   if (cuprobe_is_lowest_lane(ctx, same)) cuprobe_map_add(&sectors, &key, 1); */
static u32 (*const cuprobe_warp_match)(u64 value) = (void *)CUPROBE_HELPER_WARP_MATCH;
/* This launch's grid id (%gridid): the same for every thread of one launch,
 * different for each launch in a context. CUPTI reports it as the kernel
 * record's gridId, so the trace joins a probe's events to their launch
 * (name, stream, CPU launch time): key maps by it to count per launch. */
static u64 (*const cuprobe_grid_id)(void) = (void *)CUPROBE_HELPER_GRID_ID;
/* The leading zero bits of `value` (64 for 0): one instruction on the GPU,
 * where eBPF has none, so floor(log2(v)) of a nonzero v is
 * 63 - cuprobe_clz(v) without a loop of shifts. */
static u32 (*const cuprobe_clz)(u64 value) = (void *)CUPROBE_HELPER_CLZ;
#define cuprobe_is_lowest_lane(ctx, mask) \
  (((mask) & ((1u << (ctx)->lane_id) - 1u)) == 0)

/* bpftime's GPU helpers, by bpftime's names. */
static long (*const bpf_get_globaltimer)(void) = (void *)CUPROBE_HELPER_BPFTIME_GLOBALTIMER;
static long (*const bpf_get_block_idx)(u64 *x, u64 *y, u64 *z) =
    (void *)CUPROBE_HELPER_BPFTIME_BLOCK_IDX;
static long (*const bpf_get_block_dim)(u64 *x, u64 *y, u64 *z) =
    (void *)CUPROBE_HELPER_BPFTIME_BLOCK_DIM;
static long (*const bpf_get_thread_idx)(u64 *x, u64 *y, u64 *z) =
    (void *)CUPROBE_HELPER_BPFTIME_THREAD_IDX;
static long (*const bpf_gpu_membar)(void) = (void *)CUPROBE_HELPER_BPFTIME_MEMBAR;
static long (*const bpf_puts)(const char *str) = (void *)CUPROBE_HELPER_BPFTIME_PUTS;
static long (*const bpf_get_grid_dim)(u64 *x, u64 *y, u64 *z) =
    (void *)CUPROBE_HELPER_BPFTIME_GRID_DIM;
static u64 (*const bpf_get_sm_id)(void) = (void *)CUPROBE_HELPER_BPFTIME_SM_ID;
static u64 (*const bpf_get_warp_id)(void) = (void *)CUPROBE_HELPER_BPFTIME_WARP_ID;
static u64 (*const bpf_get_lane_id)(void) = (void *)CUPROBE_HELPER_BPFTIME_LANE_ID;
/* Ends the calling thread (PTX exit): the rest of the kernel does not run in
 * it, nor do its exit probes. */
static long (*const bpf_cuda_exit)(void) = (void *)CUPROBE_HELPER_BPFTIME_EXIT;

#define cuprobe_printk(fmt, ...)                                    \
  ({                                                                \
    static const char cuprobe_fmt_[] = fmt;                         \
    cuprobe_trace_printk(cuprobe_fmt_, sizeof(cuprobe_fmt_), ##__VA_ARGS__); \
  })

/* libbpf's names of the helpers above, unless <bpf/bpf_helpers.h> came first. */
#ifndef __BPF_HELPERS__
#define __BPF_HELPERS__ /* a later #include <bpf/bpf_helpers.h> is now a no-op */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) =
    (void *)CUPROBE_HELPER_MAP_LOOKUP_ELEM;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, u64 flags) =
    (void *)CUPROBE_HELPER_MAP_UPDATE_ELEM;
static long (*bpf_map_delete_elem)(void *map, const void *key) =
    (void *)CUPROBE_HELPER_MAP_DELETE_ELEM;
static u64 (*bpf_ktime_get_ns)(void) = (void *)CUPROBE_HELPER_KTIME_GET_NS;
static long (*bpf_trace_printk)(const char *fmt, u32 fmt_size, ...) =
    (void *)CUPROBE_HELPER_TRACE_PRINTK;
static u32 (*bpf_get_smp_processor_id)(void) = (void *)CUPROBE_HELPER_GET_SMP_PROCESSOR_ID;
static u64 (*bpf_get_current_pid_tgid)(void) = (void *)CUPROBE_HELPER_GET_CURRENT_PID_TGID;
static long (*bpf_perf_event_output)(void *ctx, void *map, u64 flags, void *data, u64 size) =
    (void *)CUPROBE_HELPER_PERF_EVENT_OUTPUT;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, u64 size, u64 flags) =
    (void *)CUPROBE_HELPER_RINGBUF_OUTPUT;
static void *(*bpf_ringbuf_reserve)(void *ringbuf, u64 size, u64 flags) =
    (void *)CUPROBE_HELPER_RINGBUF_RESERVE;
static void (*bpf_ringbuf_submit)(void *data, u64 flags) = (void *)CUPROBE_HELPER_RINGBUF_SUBMIT;
static void (*bpf_ringbuf_discard)(void *data, u64 flags) =
    (void *)CUPROBE_HELPER_RINGBUF_DISCARD;
#define bpf_printk(fmt, ...) cuprobe_printk(fmt, ##__VA_ARGS__)
#endif

/* ---- Context accessors -------------------------------------------------
 * Each is one load of a whole context field, which the compiler turns into a
 * special-register read or a parameter of the probe. */
#define CUPROBE_CTX_GETTER_(type, name, expr)                                  \
  static __always_inline type cuprobe_##name(const struct cuprobe_ctx *ctx) { \
    return expr;                                                              \
  }
CUPROBE_CTX_GETTER_(u32, kind, ctx->kind)
CUPROBE_CTX_GETTER_(u32, kernel_id, ctx->kernel_id)
CUPROBE_CTX_GETTER_(u32, block_idx_x, ctx->block_idx[0])
CUPROBE_CTX_GETTER_(u32, block_idx_y, ctx->block_idx[1])
CUPROBE_CTX_GETTER_(u32, block_idx_z, ctx->block_idx[2])
CUPROBE_CTX_GETTER_(u32, thread_idx_x, ctx->thread_idx[0])
CUPROBE_CTX_GETTER_(u32, thread_idx_y, ctx->thread_idx[1])
CUPROBE_CTX_GETTER_(u32, thread_idx_z, ctx->thread_idx[2])
CUPROBE_CTX_GETTER_(u32, block_dim_x, ctx->block_dim[0])
CUPROBE_CTX_GETTER_(u32, block_dim_y, ctx->block_dim[1])
CUPROBE_CTX_GETTER_(u32, block_dim_z, ctx->block_dim[2])
CUPROBE_CTX_GETTER_(u32, grid_dim_x, ctx->grid_dim[0])
CUPROBE_CTX_GETTER_(u32, grid_dim_y, ctx->grid_dim[1])
CUPROBE_CTX_GETTER_(u32, grid_dim_z, ctx->grid_dim[2])
CUPROBE_CTX_GETTER_(u32, sm_id, ctx->sm_id)
CUPROBE_CTX_GETTER_(u32, warp_id, ctx->warp_id)
CUPROBE_CTX_GETTER_(u32, lane_id, ctx->lane_id)
CUPROBE_CTX_GETTER_(u32, active_mask, ctx->active_mask)
CUPROBE_CTX_GETTER_(u64, global_timer, ctx->global_timer)
CUPROBE_CTX_GETTER_(u64, clock, ctx->clock)
CUPROBE_CTX_GETTER_(u64, mem_addr, ctx->mem_addr)
CUPROBE_CTX_GETTER_(u32, mem_size, ctx->mem_size)
CUPROBE_CTX_GETTER_(u32, mem_space, ctx->mem_space)
CUPROBE_CTX_GETTER_(u32, mem_kind, ctx->mem_kind)
CUPROBE_CTX_GETTER_(u32, site_index, ctx->site_index)
CUPROBE_CTX_GETTER_(u32, num_args, ctx->num_args)
#undef CUPROBE_CTX_GETTER_

/* Kernel argument i (a constant 0..15): zero-extended, 0 past num_args. */
#define cuprobe_arg(ctx, i) ((ctx)->args[(i)])

/* Thread 0 of its block? (the usual "once per block" filter) */
static __always_inline int cuprobe_is_block_leader(const struct cuprobe_ctx *ctx) {
  return (ctx->thread_idx[0] | ctx->thread_idx[1] | ctx->thread_idx[2]) == 0;
}

/* Histogram shorthands (the map must be HIST_LOG2 / HIST_LINEAR). */
#define cuprobe_hist_log2(map, value) cuprobe_hist_add((map), (value), 1)
#define cuprobe_hist_linear(map, value) cuprobe_hist_add((map), (value), 1)

/* Atomic read-modify-write on map values (eBPF atomics; lowered to PTX atom). */
#define cuprobe_atomic_add(ptr, v) __sync_fetch_and_add((ptr), (v))
#define cuprobe_atomic_or(ptr, v) __sync_fetch_and_or((ptr), (v))
#define cuprobe_atomic_and(ptr, v) __sync_fetch_and_and((ptr), (v))
#define cuprobe_atomic_xor(ptr, v) __sync_fetch_and_xor((ptr), (v))
#define cuprobe_atomic_xchg(ptr, v) __sync_lock_test_and_set((ptr), (v))
#define cuprobe_atomic_cmpxchg(ptr, old, v) __sync_val_compare_and_swap((ptr), (old), (v))

#endif /* CUPROBE_PROBE_H_ */
