// File: maps/map_algo_indexed.h
//
// The maps whose key is a u32 index (maps/map_algorithms.h includes this):
// ARRAY, the PER* maps (PERTHREAD, PERWARP, PERSM: one value per index and
// id) and the histograms (HIST_LOG2, HIST_LINEAR: the index is the bucket of
// a value). Their operations are an address computation and a range check;
// out-of-range indices and ids are counted in control.errors.
//
//   uint64_t* v = mapalgo::IndexedAddTarget(d, CUPROBE_MAP_ARRAY, index, /*id=*/0, &err);
//   uint64_t* bucket = mapalgo::HistTarget(d, latency_ns);
#ifndef CUPROBE_MAPS_MAP_ALGO_INDEXED_H_
#define CUPROBE_MAPS_MAP_ALGO_INDEXED_H_

#include <stdint.h>

#include "maps/map_algo_desc.h"
#include "maps/map_algo_primitives.h"
#include "probe/map_desc.h"

namespace cuprobe::mapalgo {

// The value of key `index` of an indexed map of `type` (and `id` for PER*
// maps), or null when out of range (PER* out-of-range ids are counted in
// control.errors).
CUPROBE_HD uint8_t* IndexedValueOf(const cuprobe_map_desc* d, uint32_t type, uint32_t index,
                                   uint64_t id) {
  if (index >= DescField(d->max_entries)) return nullptr;
  uint64_t slot = index;
  if (IsPerId(type)) {
    const uint64_t ids = DescField(d->id_slots);
    if (id >= ids) {
      CountError(d);
      return nullptr;
    }
    slot = static_cast<uint64_t>(index) * ids + id;
  }
  return Ptr<uint8_t>(DescField(d->values)) + slot * DescField(d->value_stride);
}

CUPROBE_HD uint8_t* IndexedValue(const cuprobe_map_desc* d, uint32_t index, uint64_t id) {
  return IndexedValueOf(d, DescField(d->type), index, id);
}

// ---- Indexed maps: typed operations ---------------------------------------
//
// What the specialized entry points (and the generic operations, once they
// know the type) do for ARRAY, PER* and HIST_* maps. `type` is a constant at
// every specialized call, so the type tests fold away.

// lookup: the value's address, or 0 (BPF: NULL).
CUPROBE_HD uint64_t IndexedLookup(const cuprobe_map_desc* d, uint32_t type, uint32_t index,
                                  uint64_t id) {
  if (!DescIs(d, type)) return 0;
  return reinterpret_cast<uintptr_t>(IndexedValueOf(d, type, index, id));
}

// map_add: the u64 to add to, or null with *err set (-EINVAL: bad map or a
// value under 8 bytes; -E2BIG: index or id out of range, counted once).
CUPROBE_HD uint64_t* IndexedAddTarget(const cuprobe_map_desc* d, uint32_t type, uint32_t index,
                                      uint64_t id, int64_t* err) {
  *err = kEINVAL;
  if (!DescIs(d, type) || DescField(d->value_size) < 8) return nullptr;
  uint8_t* value = IndexedValueOf(d, type, index, id);
  if (value == nullptr) {
    if (index >= DescField(d->max_entries)) CountError(d);
    *err = kE2BIG;
    return nullptr;
  }
  *err = 0;
  return reinterpret_cast<uint64_t*>(value);
}

// ---- Histograms -------------------------------------------------------------

// The histogram bucket of `value` in a map of `type`:
//   HIST_LOG2:   0 for 0, else floor(log2(value)) + 1 (bucket k >= 1 holds
//                [2^(k-1), 2^k)); clamped to the last bucket.
//   HIST_LINEAR: min = (int32) low 32 bits of map_extra, step = high 32 bits
//                (>= 1); value read as int64. Bucket 0 holds value < min,
//                bucket b in [1, n-2] holds [min + (b-1)*step, min + b*step),
//                bucket n-1 holds everything from min + (n-2)*step up.
CUPROBE_HD uint32_t HistBucketOf(const cuprobe_map_desc* d, uint32_t type, uint64_t value) {
  const uint32_t last = DescField(d->max_entries) - 1;
  uint64_t bucket;
  if (type == CUPROBE_MAP_HIST_LOG2) {
    bucket = value == 0 ? 0 : 64 - CountLeadingZeros64(value);
  } else {
    const uint64_t extra = DescField(d->map_extra);
    const int64_t min = static_cast<int32_t>(static_cast<uint32_t>(extra));
    const uint32_t step = static_cast<uint32_t>(extra >> 32);
    const int64_t v = static_cast<int64_t>(value);
    if (v < min || step == 0) {
      bucket = 0;
    } else {
      // bucket = 1 + diff / step, clamped to `last`. Values at or past the
      // last bucket's start are decided by one multiply; the rest divide in
      // 32 bits when they fit (64-bit division is a long subroutine on the
      // GPU).
      const uint64_t diff = static_cast<uint64_t>(v) - static_cast<uint64_t>(min);
      const uint64_t last_start = last == 0 ? 0 : static_cast<uint64_t>(last - 1) * step;
      if (diff >= last_start) {
        bucket = last;
      } else if (diff <= 0xffffffffull) {
        bucket = 1 + static_cast<uint32_t>(diff) / step;
      } else {
        bucket = 1 + diff / step;
      }
    }
  }
  return static_cast<uint32_t>(bucket < last ? bucket : last);
}

CUPROBE_HD uint32_t HistBucket(const cuprobe_map_desc* d, uint64_t value) {
  return HistBucketOf(d, DescField(d->type), value);
}

// The bucket counter HIST_ADD(map, value, count) adds to in a map of `type`
// (HIST_LOG2 or HIST_LINEAR), or null.
CUPROBE_HD uint64_t* HistTargetOf(const cuprobe_map_desc* d, uint32_t type, uint64_t value) {
  if (!DescIs(d, type) || DescField(d->max_entries) == 0) return nullptr;
  return Ptr<uint64_t>(DescField(d->values) +
                       static_cast<uint64_t>(HistBucketOf(d, type, value)) * 8);
}

// The bucket counter HIST_ADD(map, value, count) adds to, or null.
CUPROBE_HD uint64_t* HistTarget(const cuprobe_map_desc* d, uint64_t value) {
  if (!DescOk(d)) return nullptr;
  const uint32_t type = DescField(d->type);
  if (type != CUPROBE_MAP_HIST_LOG2 && type != CUPROBE_MAP_HIST_LINEAR) return nullptr;
  return HistTargetOf(d, type, value);
}

}  // namespace cuprobe::mapalgo

#endif  // CUPROBE_MAPS_MAP_ALGO_INDEXED_H_
