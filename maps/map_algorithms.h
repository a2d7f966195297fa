// File: maps/map_algorithms.h
//
// The map algorithms, written once for both sides: nvcc compiles them into the
// GPU helper library (maps/gpu/helpers.cu), g++ into host code that reads
// snapshots (maps/map_snapshot.cc) and into the CPU tests, which check the
// semantics of the very code the GPU runs. Everything works on a
// `cuprobe_map_desc` (probe/map_desc.h) whose addresses are device addresses
// on the GPU and host addresses on the host.
//
//   const cuprobe_map_desc* d = ...;          // a descriptor built by MapSet
//   uint64_t key = 7;
//   int64_t rc = mapalgo::MapUpdate(d, &key, &value, CUPROBE_ANY, /*id=*/0);
//   uint64_t* counter = mapalgo::MapAddTarget(d, &key, /*id=*/0, &rc);
//
// What is NOT here: warp aggregation (match/redux/shuffle exist on the GPU
// only; maps/gpu/helpers.cu groups lanes and then calls these per group), and
// reading the special registers that give PER* maps their ids (the caller
// passes the id).
//
// Hazards:
//  - Memory orders are explicit: HASH slots publish key and value with a
//    release store of the state word (GPU scope); ring records commit with a
//    release store at *system* scope because the consumer is a CPU reading
//    host-mapped memory over the bus.
//  - A HASH slot in PENDING state makes a thread looking for the same key
//    (same fingerprint) wait for the inserter, which writes a few words and
//    publishes. Never call these while holding anything the inserter needs.
//  - Keys and values come from generic pointers of any alignment (a probe's
//    stack); loads take the aligned fast path only when it is safe.
//
// The algorithms are split by map kind, one header each; this one includes
// them all and is the one to include (the GPU helper library, the host
// runtime and the tests do):
//   map_algo_primitives.h  host/device macros, errno values, atomics, loads
//   map_algo_desc.h        descriptor fields and checks, counters, shards
//   map_algo_indexed.h     ARRAY, PER* and HIST_* (a u32 index is the key)
//   map_algo_hash.h        HASH: keys, hashing, find / insert / delete
//   map_algo_generic.h     the generic operations, dispatching on the type
//   map_algo_ring.h        RINGBUF producers: reservations, hints, records
#ifndef CUPROBE_MAPS_MAP_ALGORITHMS_H_
#define CUPROBE_MAPS_MAP_ALGORITHMS_H_

#include "maps/map_algo_primitives.h"
#include "maps/map_algo_desc.h"
#include "maps/map_algo_indexed.h"
#include "maps/map_algo_hash.h"
#include "maps/map_algo_generic.h"
#include "maps/map_algo_ring.h"

#endif  // CUPROBE_MAPS_MAP_ALGORITHMS_H_
