/* File: include/cuprobe/abi.h
 *
 * The probe ABI (version: CUPROBE_ABI_VERSION below): the contract between
 *   - probes written in C (include/cuprobe/probe.h builds on this file),
 *   - the probe compiler (loader/compiler: eBPF -> LLVM IR -> NVPTX PTX),
 *   - the PTX rewriter (ptx_rewriter: calls probes from rewritten kernels),
 *   - the GPU helper library (maps/gpu: map and ring-buffer helpers),
 *   - the hook (cupti_hook: allocates maps, fills the map table).
 *
 * Plain C, no includes: it is compiled by clang -target bpf (probes), g++
 * (host), nvcc (device helpers) and checked by static asserts in
 * tests/unit/abi_test.cc. Bump CUPROBE_ABI_VERSION on any change.
 *
 * 1. The probe context (struct cuprobe_ctx) is a *virtual* layout. A probe
 *    receives a pointer to it in r1 and may only load whole fields at
 *    constant offsets (the verifier checks this; writes are rejected). The
 *    compiler lowers each load to what the field means on the GPU: a special
 *    register (%ctaid, %tid, %smid, %globaltimer, ...) or a parameter of the
 *    probe function (the memory access, the kernel id, the arguments). No
 *    context structure is ever built in memory.
 *
 * 2. A compiled probe is a PTX function with exactly this signature:
 *
 *      .visible .func (.param .b32 ret) NAME(
 *          .param .b64 mem_addr,    // mem probes: the accessed address; else 0
 *          .param .b32 mem_info,    // mem probes: CUPROBE_MEM_INFO(...); else 0
 *          .param .b32 kernel_id,   // the id the hook gave this kernel
 *          .param .b32 site_index,  // mem: index of the access in the kernel;
 *                                   // exit: index of the ret/exit; entry: 0
 *          .param .b64 args)        // generic pointer to struct cuprobe_args,
 *                                   // or 0 when the probe reads no argument
 *
 *    (what LLVM's NVPTX backend emits for
 *     `i32 @NAME(i64, i32, i32, i32, ptr)`). The return value is ignored.
 *
 * 3. Maps are reached through the module-global table
 *      .visible .global .align 8 .u64 __cuprobe_map_table[N];
 *    that the rewriter's link pass defines (N = the bundle's map count) and
 *    the hook fills after the module loads: entry i is the device address of
 *    map i's descriptor (probe/map_desc.h). Probe PTX declares it
 *      .extern .global .align 8 .u64 __cuprobe_map_table[];
 *    and an eBPF map reference (ld_imm64 pseudo map) to map i lowers to
 *    `ld.global.u64 %rd, [__cuprobe_map_table + 8*i]`.
 *    (Version 4) Code the compiler inlines on the GPU for a call site whose
 *    map is fixed reads the descriptor's fields from a constant copy,
 *      .visible .const .align 8 .b8 __cuprobe_map_descs[128*N];
 *    (entry i: the 128 bytes of map i's descriptor), which the link pass
 *    defines when a probe declares it (`.extern .const .align 8 .b8
 *    __cuprobe_map_descs[];`) and the hook fills with the table. Constant
 *    loads are served by the constant cache, which a kernel's streaming
 *    loads never evict; a copy never filled is zeros and fails the magic
 *    check like a bad map (a probe with .data/.bss then returns at once).
 *    The hook writes the copy before the table. Bundles of more than 64
 *    maps read every descriptor through the table instead.
 *
 * 4. Helpers are PTX functions of the GPU helper library named
 *    CUPROBE_HELPER_SYMBOL_* below; every argument and the result are .b64.
 *    Helpers that only read a special register are inlined by the compiler.
 *    (Version 3) Map helpers have specialized entry points, one per map type
 *    (CUPROBE_HELPER_SYMBOL_*_<TYPE>): a map reference is a constant, so the
 *    compiler knows the type at each call site and calls the specialized
 *    one, with small keys by value. The compiler also inlines ARRAY / PER* /
 *    HIST lookups and PERTHREAD map_add from the descriptor (probe/map_desc.h,
 *    whose version it checks at run time like the helpers do); see 8.
 *
 * 5. Global data (decided by the compiler, loader/compiler/lower.cc):
 *    - .data and .bss are ARRAY maps of one entry (key u32 0) whose initial
 *      value is the section's image. A probe function that uses one calls
 *      __cuprobe_map_lookup(map, &zero_key) once, in its entry block, and
 *      addresses the variables from the returned value pointer. So the
 *      helper library needs no extra entry point, and an ARRAY lookup of
 *      key 0 never fails.
 *    - .rodata (const globals, printk formats) is not a map: it is compiled
 *      into the PTX as an internal .const array (__cuprobe_ro_<section>),
 *      so constant loads fold and format strings never reach the GPU.
 *    - The map table skips .rodata: entry i is bundle map i.
 * 6. Alignment: the verifier proves natural alignment of every access whose
 *    offset it knows, assuming that map values, ring-buffer records and the
 *    probe's stack start 8-byte aligned; the helper library must return
 *    8-byte aligned value and record pointers.
 * 7. __cuprobe_map_table is read with ld.global.nc (invariant loads): the
 *    hook fills it after the module loads and before the first launch, and
 *    never changes it while a kernel of the module can run. The same holds
 *    for the map descriptors it points to (read with ld.global.nc too).
 * 8. (Version 3) Specialized entry points serve one map type and refuse a
 *    descriptor of any other type as a bad map (lookup 0, others -EINVAL);
 *    otherwise their results are exactly those of the generic helper on the
 *    same map and key. Key arguments:
 *      - ARRAY / PER* (u32 keys): `index`, the key's value (low 32 bits);
 *      - HASH with key_size <= 8 (`_HASH_WORD`): `word`, the key's bytes as a
 *        little-endian u64 (bytes past key_size ignored); refuses maps with
 *        wider keys;
 *      - HASH with 8 < key_size <= 16 (`_HASH_2WORD`, version 10): `lo` and
 *        `hi`, the key's bytes as two little-endian u64 (bytes past key_size
 *        ignored); refuses maps with other key sizes;
 *      - HASH (`_HASH`): the key's address, as the generic helper.
 *    The generic helpers stay for call sites whose map differs between paths.
 * 9. (Version 5) bpf_ringbuf_reserve by one lane on a ring the call site
 *    fixes may be made inline from the descriptors' constant copy: the
 *    cached tail and the head loaded (relaxed, gpu scope) from the map's
 *    control block, and while the record fits with the helper's slack and,
 *    over half full, no refresh of the cached tail is due (the control
 *    block's refresh window), one fetch-and-add of the record's bytes on
 *    the head. A record that fits
 *    without wrapping is the caller's, counted in its SM's shard and begun
 *    as the helper would (map_algorithms.h, RingBeginRecord); any other
 *    outcome is handed to CUPROBE_HELPER_SYMBOL_RINGBUF_RESERVE_AT with the
 *    position and the tail, which ends it as the helper would have.
 * 10. (Version 8) The patch backend. Kernels that ship only SASS are probed
 *    through the Compute Sanitizer patching API: the hook loads a patch
 *    module (ptx_rewriter/patch_module.h: a cubin compiled with ptxas
 *    --compile-as-tools-patch) into each context and has the driver call its
 *    adapters, CUPROBE_PATCH_SYMBOL_* below, at block entry, block exit and
 *    memory accesses. Every adapter receives the Sanitizer's `userdata`, a
 *    device pointer the hook sets per kernel to its struct
 *    cuprobe_patch_kernel (below), or 0 for a kernel no program selects (the
 *    adapter returns at once). The hook writes the block before a launch
 *    uses it (the adapters read it with ld.global.nc): a kernel's block once,
 *    before its first launch; with argument-reading probes, a block per
 *    launch from a ring of its stream, in the launch's stream order (a
 *    block is reused 4096 launches later in that stream; streams past the
 *    32nd of a context share one ring). Its map_block points at the
 *    context's map
 *    block, device memory laid out as
 *      [descriptors: 128 * N bytes][table: 8 * N bytes]
 *    with N = max(bundle map count, 1): exactly what 3. puts in
 *    __cuprobe_map_descs and __cuprobe_map_table. The patch module defines
 *    neither symbol (a patch module's globals cannot be filled by the host):
 *    each probe function loads map_block from [args - 16] at its top (its
 *    args parameter points at the block's args field) and reads the
 *    descriptors and the table from there. The adapters call the bundle's
 *    programs whose bit is set in `programs`:
 *      - block enter: entry programs, mem_addr 0, mem_info 0, site_index 0;
 *      - block exit: exit programs, site_index = low 32 bits of the pc;
 *      - global / shared / local access: memory programs whose mem_spaces
 *        has GLOBAL or GENERIC / SHARED / LOCAL; mem_addr = the Sanitizer's
 *        ptr (for shared and local: the offset in the window), site_index =
 *        low 32 bits of the pc, mem_info = CUPROBE_MEM_INFO(accessSize,
 *        space of the adapter, kind): ATOMIC when the flags have ATOMSYS
 *        (0x4) or both READ (0x1) and WRITE (0x2), else STORE with WRITE,
 *        else LOAD; an access with PREFETCH (0x8) and none of the others
 *        calls no program. The pc is the patched instruction's address, so
 *        site indices are not the PTX backend's small numbers;
 *      - asynchronous copy global -> shared (cp.async, LDGSTS: how sm_80+
 *        kernels such as cuBLAS's gemms load their tiles): the memory
 *        programs of the global adapter, as a global LOAD of accessSize
 *        bytes at the source address;
 *    always with kernel_id from the block and args = userdata + 16 (count 0
 *    when the hook did not fill them). The helper library's
 *    CUPROBE_PID_TGID_SYMBOL is not filled in a patch module (reads 0).
 *    (Version 9) Site counters on the patch backend. When every memory
 *    program a kernel runs reduces to adds of constants fixed by the kernel
 *    and the access class alone (the site counters' rule below, with the
 *    site index counted as varying), the hook sets the block's
 *    site_counters to a counter block laid out as below and counter_of[c]
 *    to the counter of access class c = space slot * 32 + kind * 8 +
 *    log2(accessSize) (slot 0 global and cp.async, 1 shared, 2 local), or
 *    0xff when the class adds nothing. A memory adapter then calls no
 *    program: the lowest active lane of the warp adds the number of active
 *    lanes to that counter in its SM's shard (red.global.add.u64). An
 *    access whose size is not a power of two up to 128 calls the programs
 *    as before; site_counters 0 always does.
 */
#ifndef CUPROBE_ABI_H_
#define CUPROBE_ABI_H_

/* 10: HASH adds of two-word keys by value (8. above); 9: site counters
 * on the patch backend (10. above); 8: the patch backend; 7: rings that
 * reserve first and leave holes (probe/map_desc.h) */
#define CUPROBE_ABI_VERSION 10

typedef __UINT8_TYPE__ cuprobe_u8;
typedef __UINT16_TYPE__ cuprobe_u16;
typedef __UINT32_TYPE__ cuprobe_u32;
typedef __UINT64_TYPE__ cuprobe_u64;
typedef __INT64_TYPE__ cuprobe_s64;

/* ---- Attach points ------------------------------------------------------
 * ELF section names of probe programs (bpftime's names are aliases):
 *   cuprobe/entry/<glob>    kprobe/<kernel>       at kernel entry
 *   cuprobe/exit/<glob>     kretprobe/<kernel>    before every ret / exit
 *   cuprobe/mem/<glob>      kprobe/__memcapture   at memory accesses
 * <glob> matches the kernel's mangled name or its demangled name without
 * parameters; '*' and '?' as in fnmatch. */
#define CUPROBE_ATTACH_ENTRY 1
#define CUPROBE_ATTACH_EXIT 2
#define CUPROBE_ATTACH_MEM 3

/* ---- Memory accesses (mem probes) -------------------------------------- */
#define CUPROBE_SPACE_GLOBAL 1
#define CUPROBE_SPACE_SHARED 2
#define CUPROBE_SPACE_LOCAL 3
#define CUPROBE_SPACE_GENERIC 4
#define CUPROBE_SPACE_CONST 5

#define CUPROBE_ACCESS_LOAD 1
#define CUPROBE_ACCESS_STORE 2
#define CUPROBE_ACCESS_ATOMIC 3 /* atom / red: read-modify-write */

/* mem_info: bits 0-15 access size in bytes (a vector access counts whole:
 * ld.v4.f32 is 16), bits 16-19 space, bits 20-23 kind. */
#define CUPROBE_MEM_INFO(size, space, kind) \
  ((cuprobe_u32)(size) | ((cuprobe_u32)(space) << 16) | ((cuprobe_u32)(kind) << 20))
#define CUPROBE_MEM_INFO_SIZE(info) ((info)&0xffffu)
#define CUPROBE_MEM_INFO_SPACE(info) (((info) >> 16) & 0xfu)
#define CUPROBE_MEM_INFO_KIND(info) (((info) >> 20) & 0xfu)

/* ---- Kernel arguments --------------------------------------------------
 * Copied once at kernel entry (only when some probe of the kernel reads an
 * argument) from .param space into a per-thread local buffer. Argument i is
 * zero-extended to 64 bits when it is at most 8 bytes; a larger argument
 * (a struct passed by value) gives its first 8 bytes. */
#define CUPROBE_MAX_ARGS 16
struct cuprobe_args {
  cuprobe_u32 count; /* parameters of the kernel, capped at CUPROBE_MAX_ARGS */
  cuprobe_u32 reserved;
  cuprobe_u64 value[CUPROBE_MAX_ARGS];
};

/* ---- The patch backend (see 10. above) ---------------------------------
 * The Sanitizer callbacks' userdata: device memory, one per (context,
 * kernel). */
#define CUPROBE_PATCH_ACCESS_CLASSES 96 /* 3 space slots x 4 kinds x 8 sizes */
struct cuprobe_patch_kernel {
  cuprobe_u64 map_block;     /*   0  device address of the context's map block */
  cuprobe_u32 kernel_id;     /*   8  the id the hook gave this kernel */
  cuprobe_u32 programs;      /*  12  bit i set: bundle program i runs in this kernel */
  struct cuprobe_args args;  /*  16  the kernel's arguments (count 0 when not filled) */
  cuprobe_u64 site_counters; /* 152  device address of its site counters, or 0 */
  /* 160  per access class (10. above): its counter, or CUPROBE_PATCH_NO_COUNTER */
  cuprobe_u8 counter_of[CUPROBE_PATCH_ACCESS_CLASSES];
};                           /* 256 bytes */
#define CUPROBE_PATCH_KERNEL_SIZE 256
#define CUPROBE_PATCH_SITE_COUNTERS_OFFSET 152
#define CUPROBE_PATCH_COUNTER_OF_OFFSET 160
#define CUPROBE_PATCH_NO_COUNTER 0xff
#define CUPROBE_PATCH_KERNEL_ARGS_OFFSET 16
#define CUPROBE_PATCH_MAX_PROGRAMS 32 /* bits of `programs` */
/* The adapters of a patch module, (.param .b32 ret) NAME(...) returning 0
 * (SANITIZER_PATCH_SUCCESS), with the Sanitizer's callback parameters:
 *   BLOCK_ENTER, BLOCK_EXIT:  (.b64 userdata, .b64 pc)
 *   *_ACCESS:                 (.b64 userdata, .b64 pc, .b64 ptr,
 *                              .b32 accessSize, .b32 flags, .b64 pData) */
#define CUPROBE_PATCH_SYMBOL_BLOCK_ENTER "__cuprobe_patch_block_enter"
#define CUPROBE_PATCH_SYMBOL_BLOCK_EXIT "__cuprobe_patch_block_exit"
#define CUPROBE_PATCH_SYMBOL_GLOBAL_ACCESS "__cuprobe_patch_global_access"
#define CUPROBE_PATCH_SYMBOL_SHARED_ACCESS "__cuprobe_patch_shared_access"
#define CUPROBE_PATCH_SYMBOL_LOCAL_ACCESS "__cuprobe_patch_local_access"
#define CUPROBE_PATCH_SYMBOL_ASYNC_COPY "__cuprobe_patch_async_copy"

/* ---- The probe context (virtual; see 1. above) ------------------------- */
struct cuprobe_ctx {
  cuprobe_u32 kind;          /*   0  CUPROBE_ATTACH_*, a constant per program */
  cuprobe_u32 kernel_id;     /*   4  */
  cuprobe_u32 block_idx[3];  /*   8  %ctaid.{x,y,z} */
  cuprobe_u32 thread_idx[3]; /*  20  %tid */
  cuprobe_u32 block_dim[3];  /*  32  %ntid */
  cuprobe_u32 grid_dim[3];   /*  44  %nctaid */
  cuprobe_u32 sm_id;         /*  56  %smid */
  cuprobe_u32 warp_id;       /*  60  %warpid */
  cuprobe_u32 lane_id;       /*  64  %laneid */
  cuprobe_u32 active_mask;   /*  68  activemask.b32 at the probe */
  cuprobe_u64 global_timer;  /*  72  %globaltimer, ns */
  cuprobe_u64 clock;         /*  80  %clock64, SM cycles */
  cuprobe_u64 mem_addr;      /*  88  mem probes */
  cuprobe_u32 mem_size;      /*  96  bytes */
  cuprobe_u32 mem_space;     /* 100  CUPROBE_SPACE_* */
  cuprobe_u32 mem_kind;      /* 104  CUPROBE_ACCESS_* */
  cuprobe_u32 site_index;    /* 108  */
  cuprobe_u32 num_args;      /* 112  0 unless the program reads arguments */
  cuprobe_u32 reserved;      /* 116  reads as 0 */
  cuprobe_u64 args[CUPROBE_MAX_ARGS]; /* 120  see struct cuprobe_args */
};                                    /* 248 bytes */
#define CUPROBE_CTX_SIZE 248

/* ---- Map types ---------------------------------------------------------
 * BPF's numbers where BPF has the type; cuprobe's own from 0x4000. bpftime's
 * GPU map numbers are accepted as aliases. */
#define CUPROBE_MAP_HASH 1      /* BPF_MAP_TYPE_HASH */
#define CUPROBE_MAP_ARRAY 2     /* BPF_MAP_TYPE_ARRAY */
#define CUPROBE_MAP_RINGBUF 27  /* BPF_MAP_TYPE_RINGBUF: max_entries = bytes */
#define CUPROBE_MAP_PERTHREAD 0x4001 /* value per (key, global thread id) */
#define CUPROBE_MAP_PERWARP 0x4002   /* value per (key, global warp id) */
#define CUPROBE_MAP_PERSM 0x4003     /* value per (key, SM id) */
#define CUPROBE_MAP_HIST_LOG2 0x4004 /* u64 counts; bucket = log2(value) + 1 */
#define CUPROBE_MAP_HIST_LINEAR 0x4005 /* u64 counts; map_extra: min, step (bundle:
                                        min low 32 bits, step high 32; probe.h's
                                        __uint(map_extra) packs min | step << 16) */
/* Aliases (bpftime): 1501 GPU hash -> HASH, 1502 per-GPU-thread array ->
 * PERTHREAD, 1503 GPU array -> ARRAY, 1504 array shared with the kernel ->
 * ARRAY, 1512 per-GPU-thread array in host memory -> PERTHREAD, 1513 GPU
 * array in host memory -> ARRAY, 1527 GPU ring buffer -> RINGBUF (bpftime's
 * max_entries counts records of value_size: the compiler sizes the ring in
 * bytes, loader/compiler/object.cc). BPF's PERCPU_ARRAY (6) and PERCPU_HASH
 * (5) are read as PERSM and HASH. */
#define CUPROBE_MAP_ALIAS_BPFTIME_GPU_HASH 1501
#define CUPROBE_MAP_ALIAS_BPFTIME_PERGPUTD_ARRAY 1502
#define CUPROBE_MAP_ALIAS_BPFTIME_GPU_ARRAY 1503
#define CUPROBE_MAP_ALIAS_BPFTIME_KERNEL_SHARED_ARRAY 1504
#define CUPROBE_MAP_ALIAS_BPFTIME_PERGPUTD_ARRAY_HOST 1512
#define CUPROBE_MAP_ALIAS_BPFTIME_GPU_ARRAY_HOST 1513
#define CUPROBE_MAP_ALIAS_BPFTIME_GPU_RINGBUF 1527

/* Map update flags (BPF's). */
#define CUPROBE_ANY 0
#define CUPROBE_NOEXIST 1
#define CUPROBE_EXIST 2

/* ---- Helpers -----------------------------------------------------------
 * eBPF helper ids (BPF's numbers where BPF has the helper; bpftime's GPU ids
 * 501-511 accepted; cuprobe's own from 1000) and the GPU helper library
 * symbol each lowers to. "inline" helpers become special-register reads. */
#define CUPROBE_HELPER_MAP_LOOKUP_ELEM 1      /* (map, key) -> value ptr or 0 */
#define CUPROBE_HELPER_MAP_UPDATE_ELEM 2      /* (map, key, value, flags) -> 0/-errno */
#define CUPROBE_HELPER_MAP_DELETE_ELEM 3      /* (map, key) -> 0/-errno */
#define CUPROBE_HELPER_KTIME_GET_NS 5         /* inline: %globaltimer */
#define CUPROBE_HELPER_TRACE_PRINTK 6         /* (fmt, fmt_size, a1, a2, a3) */
#define CUPROBE_HELPER_GET_SMP_PROCESSOR_ID 8 /* inline: %smid */
#define CUPROBE_HELPER_GET_CURRENT_PID_TGID 14 /* (pid << 32) | pid of the app */
#define CUPROBE_HELPER_PERF_EVENT_OUTPUT 25   /* (ctx, map, flags, data, size) */
#define CUPROBE_HELPER_RINGBUF_OUTPUT 130     /* (map, data, size, flags) */
#define CUPROBE_HELPER_RINGBUF_RESERVE 131    /* (map, size, flags) -> ptr or 0 */
#define CUPROBE_HELPER_RINGBUF_SUBMIT 132     /* (ptr, flags) */
#define CUPROBE_HELPER_RINGBUF_DISCARD 133    /* (ptr, flags) */
#define CUPROBE_HELPER_BPFTIME_PUTS 501       /* (str) */
#define CUPROBE_HELPER_BPFTIME_GLOBALTIMER 502 /* inline */
#define CUPROBE_HELPER_BPFTIME_BLOCK_IDX 503  /* inline: (u64 *x, *y, *z) */
#define CUPROBE_HELPER_BPFTIME_BLOCK_DIM 504  /* inline */
#define CUPROBE_HELPER_BPFTIME_THREAD_IDX 505 /* inline */
#define CUPROBE_HELPER_BPFTIME_MEMBAR 506     /* inline: membar.sys */
#define CUPROBE_HELPER_BPFTIME_EXIT 507       /* inline: PTX exit, ends the thread */
#define CUPROBE_HELPER_BPFTIME_GRID_DIM 508   /* inline: (u64 *x, *y, *z) */
#define CUPROBE_HELPER_BPFTIME_SM_ID 509      /* inline: %smid */
#define CUPROBE_HELPER_BPFTIME_WARP_ID 510    /* inline: %warpid */
#define CUPROBE_HELPER_BPFTIME_LANE_ID 511    /* inline: %laneid */
#define CUPROBE_HELPER_MAP_ADD 1000     /* (map, key, delta): atomic add to a u64 value */
#define CUPROBE_HELPER_HIST_ADD 1001    /* (map, value, count): histogram bucket += count */
#define CUPROBE_HELPER_GET_ARG 1002     /* (ctx, index) -> argument (dynamic index) */
#define CUPROBE_HELPER_GRID_DIM 1003    /* inline: (u64 *x, *y, *z) */
#define CUPROBE_HELPER_GLOBAL_THREAD_ID 1004 /* inline: linear id over the grid */
#define CUPROBE_HELPER_WARP_MATCH 1005  /* inline: (value) -> lanes here with the same value */
#define CUPROBE_HELPER_GRID_ID 1006     /* inline: %gridid, this launch's id in its context */
#define CUPROBE_HELPER_CLZ 1007         /* inline: (value) -> leading zero bits, 64 for 0 */

/* Symbols of the GPU helper library (extern "C" __device__, all .b64). */
#define CUPROBE_HELPER_SYMBOL_MAP_LOOKUP "__cuprobe_map_lookup"       /* (map, key) */
#define CUPROBE_HELPER_SYMBOL_MAP_UPDATE "__cuprobe_map_update"       /* (map, key, value, flags) */
#define CUPROBE_HELPER_SYMBOL_MAP_DELETE "__cuprobe_map_delete"       /* (map, key) */
#define CUPROBE_HELPER_SYMBOL_MAP_ADD "__cuprobe_map_add"             /* (map, key, delta) */
#define CUPROBE_HELPER_SYMBOL_HIST_ADD "__cuprobe_hist_add"           /* (map, value, count) */
#define CUPROBE_HELPER_SYMBOL_RINGBUF_OUTPUT "__cuprobe_ringbuf_output" /* (map, data, size, flags) */
#define CUPROBE_HELPER_SYMBOL_RINGBUF_RESERVE "__cuprobe_ringbuf_reserve" /* (map, size, flags) */
/* (Version 5) The end of an inline reservation (9. above). */
#define CUPROBE_HELPER_SYMBOL_RINGBUF_RESERVE_AT \
  "__cuprobe_ringbuf_reserve_at" /* (map, size, position, tail) */
#define CUPROBE_HELPER_SYMBOL_RINGBUF_SUBMIT "__cuprobe_ringbuf_submit" /* (ptr, flags) */
#define CUPROBE_HELPER_SYMBOL_RINGBUF_DISCARD "__cuprobe_ringbuf_discard" /* (ptr, flags) */
#define CUPROBE_HELPER_SYMBOL_PID_TGID "__cuprobe_pid_tgid"           /* () */
/* (Version 3) Specialized entry points (8. above). */
#define CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_ARRAY "__cuprobe_map_lookup_array"         /* (map, index) */
#define CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_PERTHREAD "__cuprobe_map_lookup_perthread" /* (map, index) */
#define CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_PERWARP "__cuprobe_map_lookup_perwarp"     /* (map, index) */
#define CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_PERSM "__cuprobe_map_lookup_persm"         /* (map, index) */
#define CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_HASH "__cuprobe_map_lookup_hash"           /* (map, key) */
#define CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_HASH_WORD "__cuprobe_map_lookup_hash_word" /* (map, word) */
#define CUPROBE_HELPER_SYMBOL_MAP_ADD_ARRAY "__cuprobe_map_add_array"     /* (map, index, delta) */
#define CUPROBE_HELPER_SYMBOL_MAP_ADD_PERTHREAD "__cuprobe_map_add_perthread" /* (map, index, delta) */
#define CUPROBE_HELPER_SYMBOL_MAP_ADD_PERWARP "__cuprobe_map_add_perwarp" /* (map, index, delta) */
#define CUPROBE_HELPER_SYMBOL_MAP_ADD_PERSM "__cuprobe_map_add_persm"     /* (map, index, delta) */
#define CUPROBE_HELPER_SYMBOL_MAP_ADD_HASH "__cuprobe_map_add_hash"       /* (map, key, delta) */
#define CUPROBE_HELPER_SYMBOL_MAP_ADD_HASH_WORD "__cuprobe_map_add_hash_word" /* (map, word, delta) */
/* (Version 10) */
#define CUPROBE_HELPER_SYMBOL_MAP_ADD_HASH_2WORD \
  "__cuprobe_map_add_hash_2word" /* (map, lo, hi, delta) */
#define CUPROBE_HELPER_SYMBOL_HIST_ADD_LOG2 "__cuprobe_hist_add_log2"     /* (map, value, count) */
#define CUPROBE_HELPER_SYMBOL_HIST_ADD_LINEAR "__cuprobe_hist_add_linear" /* (map, value, count) */
/* (Version 2) The helper library's one global: pid_tgid reads it. The hook
 * writes (pid << 32) | pid into it after the module loads, together with the
 * map table; it is a module global (not a constant) so that compiled cubins
 * stay cacheable across processes. */
#define CUPROBE_PID_TGID_SYMBOL "__cuprobe_pid_tgid_value"
/* trace_printk and puts are lowered to RINGBUF output into the bundle's
 * implicit map "__cuprobe_printk" (the last map of the bundle, 1 MiB): a
 * 32-byte record {u32 format_id, u32 nargs, u64 args[3]}, written with
 * __cuprobe_ringbuf_output; the format strings travel in the bundle
 * (printk_formats[format_id]) and the host formats them. Conversions: %d %i
 * %u %x %X %o %c %p with l/ll/h/z; no %s. perf_event_output(ctx, map, flags,
 * data, size) is lowered to __cuprobe_ringbuf_output(map, data, size, 0). */
#define CUPROBE_PRINTK_MAP_NAME "__cuprobe_printk"
#define CUPROBE_MAP_TABLE_SYMBOL "__cuprobe_map_table"
#define CUPROBE_MAP_DESCS_SYMBOL "__cuprobe_map_descs"
#define CUPROBE_MAP_DESCS_ENTRY_SIZE 128 /* == CUPROBE_MAP_DESC_SIZE (probe/map_desc.h) */
/* (Version 3) Site counters. When a probe program's effect at a site is
 * only adds of constants to add-only maps (map_add / hist_add with a key,
 * value and delta that depend on nothing but the site: kernel id, attach
 * kind, memory access kind, space and size, site index), the rewriter runs
 * the program once on the host for that site and replaces the call by an
 * increment of a per-thread register; every thread adds its registers to
 * the module's site counters when it exits (one atomic per warp and
 * counter), and the host folds count x delta into the maps' snapshots
 * (ptx_rewriter/site_summary.h). The module global below holds the device
 * address of its counters, filled by the hook after the load (0 leaves the
 * counts unflushed): groups of 16 counters, each group one 128-byte line
 * per shard (shard = %smid & (CUPROBE_SITE_COUNTER_SHARDS - 1)), so that
 * the atomics of different SMs never meet on one line:
 *   u64 at base + (c / 16) * SHARDS * 128 + shard * 128 + (c % 16) * 8 */
/* Thread-range counters. A counter whose adds all go to PERTHREAD maps
 * (map_add of a constant to the calling thread's own slot, key and delta
 * fixed by the site) at a site each thread passes exactly once per launch
 * (entry; exit when every exit of the kernel makes the same adds) is not
 * counted per thread: the thread with global id 0 records the launch's
 * thread count T at entry. Its slot in shard 0 holds the device address of
 * its area, filled by the hook:
 *   u64 errors;             sum of max(T - ids, 0): refusals, one per add
 *   u64 high_water;         max of min(T, ids): how far the host reads
 *   u64 launches[ids + 1];  launches[j]: launches with min(T, ids) == j
 * and the host adds delta x (launches with T > t) to id t of each add's
 * key. Modules with the same counter share one area. */
#define CUPROBE_SITE_COUNTS_SYMBOL "__cuprobe_site_counts"
#define CUPROBE_SITE_COUNTER_SHARDS 128
#define CUPROBE_SITE_COUNTERS_PER_LINE 16
#define CUPROBE_SITE_COUNTER_GROUP_BYTES (CUPROBE_SITE_COUNTER_SHARDS * 128)

#endif /* CUPROBE_ABI_H_ */
