/* File: include/vmlinux.h
 *
 * A small stand-in for the vmlinux.h that bpftool generates from a Linux
 * kernel's BTF, for probes written for bpftime's GPU support, which start
 * with `#include <vmlinux.h>` and then include <bpf/bpf_helpers.h> and
 * <bpf/bpf_tracing.h>. A GPU has no kernel whose types a probe could read,
 * so this file holds only what such probes use: the kernel's integer type
 * names, bool, struct pt_regs (x86-64, the kernel's field names: host
 * programs such as BPF_KPROBE(...) compile, and cuprobe does not attach
 * them), and the BPF enums (map types, update and map flags). Values are
 * those of <linux/bpf.h>. Unlike bpftool's file it marks no struct
 * preserve_access_index: there is no kernel to relocate field offsets
 * against (CO-RE). `cuprobe compile` has this directory on the include
 * path:
 *
 *   #define BPF_NO_GLOBAL_DATA
 *   #include <vmlinux.h>
 *   #include <bpf/bpf_helpers.h>
 *   #include <bpf/bpf_tracing.h>
 *
 * It may be combined with cuprobe/probe.h (included after it) like the real
 * vmlinux.h; do not include <linux/bpf.h> or <linux/types.h> with it (they
 * define the same enums).
 */
#ifndef __VMLINUX_H__
#define __VMLINUX_H__

/* ---- Integer types ------------------------------------------------------ */
typedef signed char __s8;
typedef unsigned char __u8;
typedef short int __s16;
typedef short unsigned int __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long int __s64;
typedef long long unsigned int __u64;

typedef __s8 s8;
typedef __u8 u8;
typedef __s16 s16;
typedef __u16 u16;
typedef __s32 s32;
typedef __u32 u32;
typedef __s64 s64;
typedef __u64 u64;

typedef __u16 __le16;
typedef __u16 __be16;
typedef __u32 __le32;
typedef __u32 __be32;
typedef __u64 __le64;
typedef __u64 __be64;
typedef __u16 __sum16;
typedef __u32 __wsum;

typedef long int __kernel_long_t;
typedef long unsigned int __kernel_ulong_t;
typedef int __kernel_pid_t;
typedef unsigned int __kernel_uid32_t;
typedef unsigned int __kernel_gid32_t;
typedef __kernel_ulong_t __kernel_size_t;
typedef __kernel_long_t __kernel_ssize_t;
typedef __kernel_pid_t pid_t;
typedef __kernel_uid32_t uid_t;
typedef __kernel_gid32_t gid_t;
typedef __kernel_size_t size_t;
typedef __kernel_ssize_t ssize_t;
typedef long unsigned int uintptr_t;

typedef _Bool bool;
enum {
  false = 0,
  true = 1,
};

/* ---- struct pt_regs (x86-64) -------------------------------------------
 * The register names bpf_tracing.h's PT_REGS_PARM*() use with vmlinux.h.
 * Host programs only: a GPU probe's context is struct cuprobe_ctx. */
struct pt_regs {
  long unsigned int r15;
  long unsigned int r14;
  long unsigned int r13;
  long unsigned int r12;
  long unsigned int bp;
  long unsigned int bx;
  long unsigned int r11;
  long unsigned int r10;
  long unsigned int r9;
  long unsigned int r8;
  long unsigned int ax;
  long unsigned int cx;
  long unsigned int dx;
  long unsigned int si;
  long unsigned int di;
  long unsigned int orig_ax;
  long unsigned int ip;
  long unsigned int cs;
  long unsigned int flags;
  long unsigned int sp;
  long unsigned int ss;
};

/* bpf_tracing.h picks the pt_regs field names by the target architecture,
 * which -target bpf does not name: this pt_regs is x86-64's. */
#if !defined(__TARGET_ARCH_x86) && !defined(__TARGET_ARCH_arm64) && \
    !defined(__TARGET_ARCH_s390) && !defined(__TARGET_ARCH_arm) && \
    !defined(__TARGET_ARCH_mips) && !defined(__TARGET_ARCH_powerpc) && \
    !defined(__TARGET_ARCH_sparc) && !defined(__TARGET_ARCH_riscv) && \
    !defined(__TARGET_ARCH_arc) && !defined(__TARGET_ARCH_loongarch)
#define __TARGET_ARCH_x86
#endif

/* ---- BPF enums (<linux/bpf.h>) ----------------------------------------- */
enum bpf_map_type {
  BPF_MAP_TYPE_UNSPEC = 0,
  BPF_MAP_TYPE_HASH = 1,
  BPF_MAP_TYPE_ARRAY = 2,
  BPF_MAP_TYPE_PROG_ARRAY = 3,
  BPF_MAP_TYPE_PERF_EVENT_ARRAY = 4,
  BPF_MAP_TYPE_PERCPU_HASH = 5,
  BPF_MAP_TYPE_PERCPU_ARRAY = 6,
  BPF_MAP_TYPE_STACK_TRACE = 7,
  BPF_MAP_TYPE_CGROUP_ARRAY = 8,
  BPF_MAP_TYPE_LRU_HASH = 9,
  BPF_MAP_TYPE_LRU_PERCPU_HASH = 10,
  BPF_MAP_TYPE_LPM_TRIE = 11,
  BPF_MAP_TYPE_ARRAY_OF_MAPS = 12,
  BPF_MAP_TYPE_HASH_OF_MAPS = 13,
  BPF_MAP_TYPE_DEVMAP = 14,
  BPF_MAP_TYPE_SOCKMAP = 15,
  BPF_MAP_TYPE_CPUMAP = 16,
  BPF_MAP_TYPE_XSKMAP = 17,
  BPF_MAP_TYPE_SOCKHASH = 18,
  BPF_MAP_TYPE_CGROUP_STORAGE_DEPRECATED = 19,
  BPF_MAP_TYPE_CGROUP_STORAGE = 19,
  BPF_MAP_TYPE_REUSEPORT_SOCKARRAY = 20,
  BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE_DEPRECATED = 21,
  BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE = 21,
  BPF_MAP_TYPE_QUEUE = 22,
  BPF_MAP_TYPE_STACK = 23,
  BPF_MAP_TYPE_SK_STORAGE = 24,
  BPF_MAP_TYPE_DEVMAP_HASH = 25,
  BPF_MAP_TYPE_STRUCT_OPS = 26,
  BPF_MAP_TYPE_RINGBUF = 27,
  BPF_MAP_TYPE_INODE_STORAGE = 28,
  BPF_MAP_TYPE_TASK_STORAGE = 29,
  BPF_MAP_TYPE_BLOOM_FILTER = 30,
  BPF_MAP_TYPE_USER_RINGBUF = 31,
  BPF_MAP_TYPE_CGRP_STORAGE = 32,
  BPF_MAP_TYPE_ARENA = 33,
};

/* Map update flags. */
enum {
  BPF_ANY = 0,
  BPF_NOEXIST = 1,
  BPF_EXIST = 2,
  BPF_F_LOCK = 4,
};

/* Map creation flags (map_flags). */
enum {
  BPF_F_NO_PREALLOC = 1,
  BPF_F_NO_COMMON_LRU = 2,
  BPF_F_NUMA_NODE = 4,
  BPF_F_RDONLY = 8,
  BPF_F_WRONLY = 16,
  BPF_F_STACK_BUILD_ID = 32,
  BPF_F_ZERO_SEED = 64,
  BPF_F_RDONLY_PROG = 128,
  BPF_F_WRONLY_PROG = 256,
  BPF_F_CLONE = 512,
  BPF_F_MMAPABLE = 1024,
  BPF_F_PRESERVE_ELEMS = 2048,
  BPF_F_INNER_MAP = 4096,
};

/* perf_event_output's flags. */
enum {
  BPF_F_INDEX_MASK = 4294967295ULL,
  BPF_F_CURRENT_CPU = 4294967295ULL,
  BPF_F_CTXLEN_MASK = 4503595332403200ULL,
};

/* Ring-buffer output flags. */
enum {
  BPF_RB_NO_WAKEUP = 1,
  BPF_RB_FORCE_WAKEUP = 2,
};

#endif /* __VMLINUX_H__ */
