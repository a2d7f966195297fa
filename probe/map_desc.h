/* File: probe/map_desc.h
 *
 * The device map descriptor, version 1: what `__cuprobe_map_table[i]` points
 * at (include/cuprobe/abi.h, 3.). The host runtime (maps/map_set.h) builds one
 * per map in device memory before any instrumented kernel runs; the GPU
 * helper library (maps/gpu/helpers.cu) reads it on every helper call, and
 * so does code the probe compiler inlines (loader/compiler/lower_map.cc and
 * lower_ring.cc read magic, version, type, key/value sizes, max_entries,
 * strides, id_slots, values and control at the offsets below; abi.h 8.); the
 * same algorithms (maps/map_algorithms.h) read it on the host over
 * snapshots. Never written while a kernel of the module can run: the GPU
 * reads it with ld.global.nc.
 *
 * Plain C layout, fixed-width, no pointers: every address is a 64-bit device
 * address (on the host fake of tests, a host address). Bump
 * CUPROBE_MAP_DESC_VERSION on any change (compiled bundles embed the
 * offsets: the check below makes an old bundle fail cleanly); the helpers
 * and the inline code refuse a descriptor whose magic or version differ (the
 * call fails as on a bad map: -EINVAL or 0).
 *
 * One device allocation per map (see probe/map_layout.h for the arithmetic):
 *
 *   +0     struct cuprobe_map_desc     128 bytes, written once, read-only
 *   +128   struct cuprobe_map_control  128 bytes, the map's atomics
 *   +256   image                       the map's data (layout per type below)
 *          value shards 1..S-1         add-only maps only (below)
 *          aux                         counter shards (below); rings: then
 *                                      their per-SM hint lines
 *
 * control + image are contiguous: one device-to-host copy, folded (below),
 * is a snapshot.
 *
 * Spreading hot counters (version 2). Thousands of warps adding to one
 * address serialize on it in L2 (about a nanosecond each), so:
 *  - counters: errors and a ring's reserved / dropped counts go to the
 *    calling SM's counter shard in the aux block, aux +
 *    CUPROBE_MAP_COUNTER_SHARD_STRIDE * (%smid & (CUPROBE_MAP_COUNTER_SHARDS
 *    - 1)), at the CUPROBE_MAP_SHARD_* offsets (errors: one atomic per warp
 *    for all its lanes that count). The control block's own fields keep
 *    what host code counts.
 *  - values of an ADD-ONLY map (CUPROBE_MAP_F_ADD_ONLY: the probe compiler
 *    proved that probes only add to it, through map_add or hist_add, and
 *    never look a value up): HASH, ARRAY and HIST_* maps get S = shard_mask
 *    + 1 copies of their values array, shard_bytes apart (whole 128-byte
 *    lines: SMs never share one), the first being
 *    the image's own; an add goes to copy (%smid & shard_mask). HASH keys and
 *    states are not copied: a key's slot is the same in every copy.
 * (Version 4: a ring's full hints in per-SM lines after the counter
 * shards, CUPROBE_MAP_RING_HINTS_AT. Version 5: rings flagged
 * CUPROBE_MAP_F_RING_SPECULATIVE reserve first and check after, below.)
 * (Version 3: counter shards are 128 bytes apart, one cache line each:
 * atomics of two SMs on one line serialize in L2 as if on one address.)
 * The host folds before anyone reads (probe/map_layout.h, FoldMapImage):
 * each control counter += its field in every counter shard, each value's
 * first u64 += the same u64 of every other copy. Readers see one plain
 * image.
 *
 * Image per type (stride = round_up(size, 8); ids = id_slots):
 *   ARRAY, HIST_*   values[max_entries][value_stride]
 *   PER*            values[max_entries][ids][value_stride], index key*ids+id
 *   HASH            states[slots] (u32, padded to 8) | keys[slots][key_stride]
 *                   | values[slots][value_stride]; slots = slot_mask + 1
 *   RINGBUF         no image: its data and consumer control live in
 *                   host-mapped segment memory (ring_data, ring_host_control)
 *
 * Ids of PER* maps (the same numbering as CUPROBE_HELPER_GLOBAL_THREAD_ID):
 *   thread = block_linear * threads_per_block + thread_linear, where
 *            block_linear  = (ctaid.z * nctaid.y + ctaid.y) * nctaid.x + ctaid.x
 *            thread_linear = (tid.z * ntid.y + tid.y) * ntid.x + tid.x
 *   warp   = block_linear * ceil(threads_per_block / 32) + thread_linear / 32
 *   sm     = %smid
 * An id >= id_slots is out of range: lookups return 0, updates -E2BIG, and
 * control.errors counts it.
 */
#ifndef CUPROBE_PROBE_MAP_DESC_H_
#define CUPROBE_PROBE_MAP_DESC_H_

#include "cuprobe/abi.h"

#define CUPROBE_MAP_DESC_MAGIC 0x444D5043u /* "CPMD" in memory */
#define CUPROBE_MAP_DESC_VERSION 5
#define CUPROBE_MAP_DESC_SIZE 128
#define CUPROBE_MAP_CONTROL_SIZE 128
#define CUPROBE_MAP_IMAGE_OFFSET 256 /* desc + control */

/* HASH slot state word: bits 0-1 the state, bits 2-31 a fingerprint of the
 * key's hash (so a probe for another key skips a slot without touching its
 * key, and waits only on a PENDING slot that may hold its own key). */
#define CUPROBE_HASH_EMPTY 0u   /* never used; the whole word is 0 */
#define CUPROBE_HASH_PENDING 1u /* claimed; its key/value are being written */
#define CUPROBE_HASH_LIVE 2u    /* key and value published */
#define CUPROBE_HASH_DELETED 3u /* key kept (slots are key-stable), no value */

/* Ring-buffer record header (RINGBUF, host-mapped), two words. Word 0: the
 * body length in bits 0-28, and the flags below; a record is committed when
 * bit 31 is set. A record begun by bpf_ringbuf_reserve has its length alone
 * in word 0 and is committed by COMMIT (and DISCARD) in word 1, written
 * after it with release order: submit then needs no read of word 0, which
 * on the GPU crosses the bus. Word 1 is otherwise zero. A record occupies
 * round_up(8 + length, 8) bytes and never wraps the data area. */
#define CUPROBE_RING_COMMIT 0x80000000u
#define CUPROBE_RING_DISCARD 0x40000000u /* skipped by the consumer */
#define CUPROBE_RING_PAD 0x20000000u     /* filler up to the end of the data */
#define CUPROBE_RING_LEN_MASK 0x1FFFFFFFu
#define CUPROBE_RING_HEADER_SIZE 8

struct cuprobe_map_desc {
  cuprobe_u32 magic;        /*   0 CUPROBE_MAP_DESC_MAGIC */
  cuprobe_u16 version;      /*   4 CUPROBE_MAP_DESC_VERSION */
  cuprobe_u16 size;         /*   6 CUPROBE_MAP_DESC_SIZE */
  cuprobe_u32 type;         /*   8 CUPROBE_MAP_* (aliases resolved) */
  cuprobe_u32 flags;        /*  12 MapSpec.flags */
  cuprobe_u32 key_size;     /*  16 bytes */
  cuprobe_u32 value_size;   /*  20 bytes */
  cuprobe_u32 max_entries;  /*  24 keys (RINGBUF: data bytes) */
  cuprobe_u32 value_stride; /*  28 round_up(value_size, 8) */
  cuprobe_u32 key_stride;   /*  32 HASH: round_up(key_size, 8) */
  cuprobe_u32 id_slots;     /*  36 PER*: ids per key */
  cuprobe_u64 slot_mask;    /*  40 HASH: slots - 1; RINGBUF: data bytes - 1 (the capacity,
                               or twice it: CUPROBE_MAP_F_RING_SPECULATIVE) */
  cuprobe_u64 map_extra;    /*  48 HIST_LINEAR: min (s32, low), step (u32, high) */
  cuprobe_u64 values;       /*  56 values (all but RINGBUF) */
  cuprobe_u64 keys;         /*  64 HASH keys */
  cuprobe_u64 states;       /*  72 HASH slot states */
  cuprobe_u64 control;      /*  80 struct cuprobe_map_control */
  cuprobe_u64 ring_data;    /*  88 RINGBUF data (device address of host memory) */
  cuprobe_u64 ring_host;    /*  96 RINGBUF struct cuprobe_ring_host (host memory) */
  cuprobe_u64 shard_bytes;  /* 104 ADD-ONLY: bytes from one value copy to the next (0: one) */
  cuprobe_u64 aux;          /* 112 counter shards */
  cuprobe_u32 shard_mask;   /* 120 ADD-ONLY: value copies - 1 (a power of two - 1) */
  cuprobe_u32 reserved;     /* 124 zero */
};

/* MapSpec.flags bit set by the probe compiler (never by a probe: the
 * compiler clears it from declared map_flags): probes only add to the map. */
#define CUPROBE_MAP_F_ADD_ONLY 0x80000000u
/* Set by the host runtime (never by a probe or the compiler: MakeMapDesc
 * clears it from MapSpec.flags) on a RINGBUF whose data and struct
 * cuprobe_ring_host are device memory that the hook's pump consumes
 * (maps/map_set.h, RingData::kDeviceSpeculative). Its data area is twice
 * the ring's capacity (slot_mask + 1 = 2 x capacity). Its producers read
 * the consumer's tail itself (device memory: no cached copy) and make the
 * fetch-and-add on the head without loading the head first. A record is
 * granted when its bytes end within one capacity of the tail. Bytes that
 * end past that but within two capacities are free too (the data area's
 * other half): the producer makes them one committed PAD record there and
 * drops its record, so nobody waits for it. Only bytes past two capacities
 * are given back as on other rings (producers after them give theirs back
 * first, or leave by a grant or a pad that this producer's bytes then also
 * qualify for: no producer waits on the host). */
#define CUPROBE_MAP_F_RING_SPECULATIVE 0x40000000u
#define CUPROBE_MAP_COUNTER_SHARDS 128
#define CUPROBE_MAP_COUNTER_SHARD_STRIDE 128 /* one shard per 128-byte line: SMs never share one */
#define CUPROBE_MAP_SHARD_ERRORS 0
#define CUPROBE_MAP_SHARD_RING_RESERVED 8
#define CUPROBE_MAP_SHARD_RING_DROPPED 16
#define CUPROBE_MAP_SHARD_RING_DROPPED_BYTES 24
/* RINGBUF: %globaltimer until which this SM's producers take the ring as
 * full without touching its control line (a hint, not a counter: never
 * folded). Set by a producer that found the ring full, for the SM's current
 * span (the next field, also a hint): 1 us after a reservation of the SM
 * succeeded, doubled each time the ring is found full again, up to 128 us.
 * A ring that stays full (a kernel writing far more than the bus drains) is
 * then checked by each SM about once per 128 us instead of once per
 * microsecond; once the consumer frees space, an SM drops for at most its
 * span before it sees it.
 * The two hints live in a second array of per-SM lines after the counter
 * shards (CUPROBE_MAP_RING_HINT_BYTES more aux bytes, rings only): every drop
 * adds to the SM's counter line, and an atomic evicts the line from the
 * SM's L1, so a hint next to the counters cost each dropping block leader a
 * round trip to L2. In a line of its own, which no atomic touches (the
 * SM's successful reservations store its span back to 0, a plain store),
 * it stays in L1 (ABI version 6, descriptor version 4). The offsets below
 * are from the SM's counter shard, as the counters' are: the hint lines
 * start CUPROBE_MAP_RING_HINTS_AT bytes after the counter shards do. */
#define CUPROBE_MAP_RING_HINTS_AT CUPROBE_MAP_AUX_BYTES /* the counter shards' end */
#define CUPROBE_MAP_RING_HINT_BYTES (CUPROBE_MAP_COUNTER_SHARDS * CUPROBE_MAP_COUNTER_SHARD_STRIDE)
#define CUPROBE_MAP_SHARD_RING_FULL_UNTIL (CUPROBE_MAP_RING_HINTS_AT + 0)
#define CUPROBE_MAP_SHARD_RING_FULL_SPAN (CUPROBE_MAP_RING_HINTS_AT + 8)
#define CUPROBE_RING_FULL_HINT_NS 1000
#define CUPROBE_RING_FULL_HINT_MAX_NS 128000
#define CUPROBE_MAP_AUX_BYTES (CUPROBE_MAP_COUNTER_SHARDS * CUPROBE_MAP_COUNTER_SHARD_STRIDE)
#define CUPROBE_MAP_MAX_VALUE_SHARDS 128

/* The map's device-side atomics, on their own 128-byte line. Snapshot
 * copies carry it (so readers see counts and drops). */
struct cuprobe_map_control {
  cuprobe_u64 count;            /*   0 HASH: live keys */
  cuprobe_u64 errors;           /*   8 refused updates: full hash, id or key out of range */
  cuprobe_u64 ring_head;        /*  16 RINGBUF: next byte position to reserve */
  cuprobe_u64 ring_tail_cache;  /*  24 RINGBUF: last consumer tail seen by a producer */
  cuprobe_u64 ring_reserved;    /*  32 RINGBUF: records reserved (submitted or discarded) */
  cuprobe_u64 ring_dropped;     /*  40 RINGBUF: records refused for lack of space */
  cuprobe_u64 ring_dropped_bytes; /* 48 */
  cuprobe_u64 ring_refresh_ns;  /*  56 RINGBUF: %globaltimer before which producers of a full
                                 ring do not read the consumer's tail again */
  cuprobe_u64 reserved[8];      /*  64 zero */
};

/* The consumer's side of a ring, in host-mapped segment memory, followed by
 * the data. The GPU reads `tail` (system scope) only when its cached copy
 * says the ring is full; the host consumer alone writes it. */
struct cuprobe_ring_host {
  cuprobe_u64 magic;        /*   0 CUPROBE_RING_HOST_MAGIC */
  cuprobe_u64 capacity;     /*   8 data bytes, a power of two */
  /* Set by the hook when a new producer replaces one that is gone (maps
   * made again: the next process of a session, or after cudaDeviceReset):
   * the new producer starts at resume_at. A consumer that finds no
   * committed record at its tail while tail < resume_at skips (zeroing) to
   * resume_at: whatever the old producer left unfinished is abandoned. */
  cuprobe_u64 resume_at;    /*  16 */
  cuprobe_u64 abandoned;    /*  24 bytes skipped that way */
  cuprobe_u64 reserved0[4]; /*  32 */
  cuprobe_u64 tail;         /*  64 consumer position; bytes before it are zero */
  cuprobe_u64 delivered;    /*  72 records handed to the consumer's callback */
  cuprobe_u64 discarded;    /*  80 discarded records skipped */
  cuprobe_u64 reserved1[5]; /*  88 */
  /* Published by the hook's watcher from struct cuprobe_map_control. */
  cuprobe_u64 published_head;     /* 128 */
  cuprobe_u64 published_reserved; /* 136 */
  cuprobe_u64 published_dropped;  /* 144 */
  cuprobe_u64 published_dropped_bytes; /* 152 */
  cuprobe_u64 publish_count;      /* 160 */
  cuprobe_u64 reserved2[11];      /* 168 */
};
#define CUPROBE_RING_HOST_MAGIC 0x31464252504D5043ull /* "CPMPRBF1" */
#define CUPROBE_RING_HOST_SIZE 256

#ifdef __cplusplus
static_assert(sizeof(struct cuprobe_map_desc) == CUPROBE_MAP_DESC_SIZE, "map desc size");
static_assert(CUPROBE_MAP_DESCS_ENTRY_SIZE == CUPROBE_MAP_DESC_SIZE, "constant copy entry size");
static_assert(sizeof(struct cuprobe_map_control) == CUPROBE_MAP_CONTROL_SIZE, "control size");
static_assert(sizeof(struct cuprobe_ring_host) == CUPROBE_RING_HOST_SIZE, "ring host size");
static_assert(__builtin_offsetof(struct cuprobe_map_desc, type) == 8, "desc.type");
static_assert(__builtin_offsetof(struct cuprobe_map_desc, key_stride) == 32, "desc.key_stride");
static_assert(__builtin_offsetof(struct cuprobe_map_desc, slot_mask) == 40, "desc.slot_mask");
static_assert(__builtin_offsetof(struct cuprobe_map_desc, map_extra) == 48, "desc.map_extra");
static_assert(__builtin_offsetof(struct cuprobe_map_desc, values) == 56, "desc.values");
static_assert(__builtin_offsetof(struct cuprobe_map_desc, control) == 80, "desc.control");
static_assert(__builtin_offsetof(struct cuprobe_map_desc, ring_host) == 96, "desc.ring_host");
static_assert(__builtin_offsetof(struct cuprobe_map_desc, shard_bytes) == 104, "desc.shard_bytes");
static_assert(__builtin_offsetof(struct cuprobe_map_desc, aux) == 112, "desc.aux");
static_assert(__builtin_offsetof(struct cuprobe_map_desc, shard_mask) == 120, "desc.shard_mask");
static_assert(__builtin_offsetof(struct cuprobe_map_control, ring_head) == 16, "ctl.head");
static_assert(__builtin_offsetof(struct cuprobe_map_control, ring_dropped) == 40, "ctl.drop");
static_assert(__builtin_offsetof(struct cuprobe_ring_host, tail) == 64, "ring.tail");
static_assert(__builtin_offsetof(struct cuprobe_ring_host, resume_at) == 16, "ring.resume_at");
static_assert(__builtin_offsetof(struct cuprobe_ring_host, published_head) == 128, "ring.pub");
static_assert(CUPROBE_MAP_IMAGE_OFFSET == CUPROBE_MAP_DESC_SIZE + CUPROBE_MAP_CONTROL_SIZE,
              "image follows control");
#endif

#endif /* CUPROBE_PROBE_MAP_DESC_H_ */
