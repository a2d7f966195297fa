// File: maps/map_algo_generic.h
//
// The generic map operations (maps/map_algorithms.h includes this): what the
// helpers that take a key by address do, per lane, on a map of any type.
// They check the descriptor, then dispatch on its type to the indexed
// (maps/map_algo_indexed.h) or HASH (maps/map_algo_hash.h) algorithms.
//
//   int64_t rc = mapalgo::MapUpdate(d, &key, &value, CUPROBE_ANY, /*id=*/0);
//   uint64_t* counter = mapalgo::MapAddTarget(d, &key, /*id=*/0, &rc);
#ifndef CUPROBE_MAPS_MAP_ALGO_GENERIC_H_
#define CUPROBE_MAPS_MAP_ALGO_GENERIC_H_

#include <stdint.h>

#include "maps/map_algo_desc.h"
#include "maps/map_algo_hash.h"
#include "maps/map_algo_indexed.h"
#include "maps/map_algo_primitives.h"
#include "probe/map_desc.h"

namespace cuprobe::mapalgo {

// ---- Generic operations (the helpers, per lane) ---------------------------

// Address of the value of `key`, or 0 (BPF: NULL).
CUPROBE_HD uint64_t MapLookup(const cuprobe_map_desc* d, const void* key, uint64_t id) {
  if (!DescOk(d) || key == nullptr) return 0;
  const auto* k = static_cast<const uint8_t*>(key);
  const uint32_t type = DescField(d->type);
  if (IsIndexed(type)) return reinterpret_cast<uintptr_t>(IndexedValueOf(d, type, LoadU32(k), id));
  if (type == CUPROBE_MAP_HASH) return HashLookup(d, BytesKey{k, DescField(d->key_size)});
  return 0;
}

CUPROBE_HD int64_t MapUpdate(const cuprobe_map_desc* d, const void* key, const void* value,
                             uint64_t flags, uint64_t id) {
  if (!DescOk(d) || key == nullptr || value == nullptr) return kEINVAL;
  if (flags > CUPROBE_EXIST) return kEINVAL;
  const auto* k = static_cast<const uint8_t*>(key);
  const auto* v = static_cast<const uint8_t*>(value);
  const uint32_t type = DescField(d->type);
  const uint32_t value_size = DescField(d->value_size);
  if (IsIndexed(type)) {
    const uint32_t index = LoadU32(k);
    if (index >= DescField(d->max_entries)) {
      CountError(d);
      return kE2BIG;
    }
    if (flags == CUPROBE_NOEXIST) return kEEXIST;  // array slots always exist
    uint8_t* dst = IndexedValueOf(d, type, index, id);
    if (dst == nullptr) return kE2BIG;
    CopyToAligned(dst, v, value_size);
    return 0;
  }
  if (type == CUPROBE_MAP_HASH) {
    const BytesKey bk{k, DescField(d->key_size)};
    const uint64_t h = HashOf(bk);
    if (flags == CUPROBE_EXIST) {
      const int64_t slot = HashFind<HashMode::kFind>(d, bk, h, nullptr).slot;
      if (slot < 0) return slot;
      CopyToAligned(ValueOf(d, static_cast<uint64_t>(slot)), v, value_size);
      return 0;
    }
    const HashHit hit = HashFind<HashMode::kInsertValue>(d, bk, h, v);
    if (hit.slot < 0) return hit.slot;
    if (hit.created) return 0;
    if (flags == CUPROBE_NOEXIST) return kEEXIST;
    // Replaces in place: not atomic with respect to concurrent readers of
    // this key (as BPF's in-place array update).
    CopyToAligned(ValueOf(d, static_cast<uint64_t>(hit.slot)), v, value_size);
    return 0;
  }
  return kEINVAL;
}

CUPROBE_HD int64_t MapDelete(const cuprobe_map_desc* d, const void* key) {
  if (!DescOk(d) || key == nullptr) return kEINVAL;
  if (DescField(d->type) == CUPROBE_MAP_HASH) {
    return HashDelete(d, static_cast<const uint8_t*>(key));
  }
  return kEINVAL;  // BPF: array elements cannot be deleted
}

// The u64 that MAP_ADD(map, key, delta) adds to (the first 8 bytes of the
// value; HASH inserts a zero value for a new key), or null with *err set.
CUPROBE_HD uint64_t* MapAddTarget(const cuprobe_map_desc* d, const void* key, uint64_t id,
                                  int64_t* err) {
  *err = kEINVAL;
  if (!DescOk(d) || key == nullptr) return nullptr;
  const auto* k = static_cast<const uint8_t*>(key);
  const uint32_t type = DescField(d->type);
  if (IsIndexed(type)) return IndexedAddTarget(d, type, LoadU32(k), id, err);
  if (type == CUPROBE_MAP_HASH && DescField(d->value_size) >= 8) {
    return HashAddTarget(d, BytesKey{k, DescField(d->key_size)}, err);
  }
  return nullptr;
}

}  // namespace cuprobe::mapalgo

#endif  // CUPROBE_MAPS_MAP_ALGO_GENERIC_H_
