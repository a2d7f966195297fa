// File: maps/map_algo_hash.h
//
// HASH maps (maps/map_algorithms.h includes this): the two ways a key
// arrives (by address, or a small key by value), its hash, and the
// open-addressing table's find, insert and delete, which the GPU runs
// lock-free.
//
//   const mapalgo::BytesKey key{bytes, key_size};
//   uint64_t value = mapalgo::HashLookup(d, key);           // 0: absent
//   uint64_t* counter = mapalgo::HashAddTarget(d, key, &err);  // inserts a zero value
//
// Hazards:
//  - HASH slots publish key and value with a release store of the state
//    word (GPU scope).
//  - A HASH slot in PENDING state makes a thread looking for the same key
//    (same fingerprint) wait for the inserter, which writes a few words and
//    publishes. Never call these while holding anything the inserter needs.
#ifndef CUPROBE_MAPS_MAP_ALGO_HASH_H_
#define CUPROBE_MAPS_MAP_ALGO_HASH_H_

#include <stdint.h>
#include <string.h>

#include "maps/map_algo_desc.h"
#include "maps/map_algo_primitives.h"
#include "probe/map_desc.h"

namespace cuprobe::mapalgo {

// ---- Keys of HASH maps -------------------------------------------------------
//
// The HASH algorithms read a key through one of two sources that agree word
// for word, so a key hashes, compares and is stored the same whichever way
// it came:
//  - BytesKey: key_size bytes at any alignment (a probe's stack, a map value);
//  - WordKey: a key of at most 8 bytes passed by value, as its little-endian
//    word with the bytes past key_size zero (the specialized entry points of
//    the helper library take small keys this way, so the probe's stack never
//    has to be addressable);
//  - PairKey: a key of 9 to 16 bytes passed by value as its two words, the
//    second with the bytes past key_size zero.

struct BytesKey {
  const uint8_t* bytes;
  uint32_t size;
  CUPROBE_HD uint32_t Words() const { return (size + 7) / 8; }
  CUPROBE_HD uint64_t Word(uint32_t i) const { return KeyWord(bytes, size, i); }
};

struct WordKey {
  uint64_t word;  // zero past `size` bytes (KeyWordOf)
  uint32_t size;  // 1..8
  CUPROBE_HD uint32_t Words() const { return 1; }
  CUPROBE_HD uint64_t Word(uint32_t) const { return word; }
};

struct PairKey {
  uint64_t lo;
  uint64_t hi;    // zero past `size` - 8 bytes (KeyWordOf)
  uint32_t size;  // 9..16
  CUPROBE_HD uint32_t Words() const { return 2; }
  CUPROBE_HD uint64_t Word(uint32_t i) const { return i == 0 ? lo : hi; }
};

// The word of a key of `size` (1..8) bytes: the bytes past `size` cleared.
CUPROBE_HD uint64_t KeyWordOf(uint64_t word, uint32_t size) {
  return size >= 8 ? word : word & ((uint64_t{1} << (8 * size)) - 1);
}

template <typename Key>
CUPROBE_HD_SEARCH uint64_t HashOf(const Key& key) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ key.size;
  const uint32_t words = key.Words();
  CUPROBE_NO_UNROLL
  for (uint32_t i = 0; i < words; ++i) h = Mix64(h + key.Word(i));
  return h;
}

CUPROBE_HD uint64_t HashKey(const uint8_t* key, uint32_t key_size) {
  return HashOf(BytesKey{key, key_size});
}

// ---- HASH -------------------------------------------------------------------
//
// Open addressing, linear probing over slots = 2^k >= 2 * max_entries. A
// slot's key never changes once written (until the whole map is cleared), so
// a key has exactly one slot: the first one on its probe path that holds it
// or was EMPTY when it was claimed. Delete marks DELETED and keeps the key; the
// same key can revive the slot, other keys skip it. BPF's limit holds: at most
// max_entries keys are LIVE at once (-E2BIG beyond, counted in errors); an
// insert that finds no EMPTY slot on the whole table also gets -E2BIG (only
// possible after many deletes of distinct keys; clearing the map resets it).
//
// Register budget (maps/gpu/helpers.cu): the search is inline in each
// helper and keeps little live across its loop (the descriptor pointer, the
// key, the slot); table addresses are re-read from the descriptor, which
// sits in the read-only cache, rather than held in registers.

struct HashSlots {  // for readers of snapshots (maps/map_snapshot.cc)
  uint32_t* states;
  uint8_t* keys;
  uint8_t* values;
  uint64_t mask;
  uint32_t key_size;
  uint32_t key_stride;
  uint32_t value_stride;
};

CUPROBE_HD HashSlots Slots(const cuprobe_map_desc* d) {
  return HashSlots{Ptr<uint32_t>(DescField(d->states)),
                   Ptr<uint8_t>(DescField(d->keys)),
                   Ptr<uint8_t>(DescField(d->values)),
                   DescField(d->slot_mask),
                   DescField(d->key_size),
                   DescField(d->key_stride),
                   DescField(d->value_stride)};
}

// An 8-aligned u64 of the map's own memory.
CUPROBE_HD uint64_t LoadAligned64(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint64_t*>(p);
#else
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
#endif
}

// Whether the key stored at `stored` (8-aligned, zero-padded) is `key`.
template <typename Key>
CUPROBE_HD bool StoredKeyIs(const uint8_t* stored, const Key& key) {
  const uint32_t words = key.Words();
  CUPROBE_NO_UNROLL
  for (uint32_t i = 0; i < words; ++i) {
    if (LoadAligned64(stored + 8 * i) != key.Word(i)) return false;
  }
  return true;
}

// For readers of snapshots: `key` is key_size bytes.
CUPROBE_HD bool KeyEquals(const HashSlots& s, uint64_t slot, const uint8_t* key) {
  return StoredKeyIs(s.keys + slot * s.key_stride, BytesKey{key, s.key_size});
}

// Writes the key's words (zero-padded to key_stride) into its slot.
template <typename Key>
CUPROBE_HD void StoreKey(uint8_t* dst, const Key& key) {
  const uint32_t words = key.Words();
  CUPROBE_NO_UNROLL
  for (uint32_t i = 0; i < words; ++i) StoreU64(dst + 8 * i, key.Word(i));
}

CUPROBE_HD uint32_t StateWord(uint32_t fingerprint, uint32_t state) {
  return (fingerprint << 2) | state;
}

CUPROBE_HD uint32_t Fingerprint(uint64_t hash) { return static_cast<uint32_t>(hash >> 34); }

CUPROBE_HD uint32_t* StateOf(const cuprobe_map_desc* d, uint64_t slot) {
  return Ptr<uint32_t>(DescField(d->states)) + slot;
}
CUPROBE_HD uint8_t* KeyOf(const cuprobe_map_desc* d, uint64_t slot) {
  return Ptr<uint8_t>(DescField(d->keys)) + slot * DescField(d->key_stride);
}
CUPROBE_HD uint8_t* ValueOf(const cuprobe_map_desc* d, uint64_t slot) {
  return Ptr<uint8_t>(DescField(d->values)) + slot * DescField(d->value_stride);
}

// Takes one more live key unless max_entries are live.
CUPROBE_HD bool TakeCount(const cuprobe_map_desc* d) {
  cuprobe_map_control* c = Control(d);
  if (AtomicAdd64(&c->count, 1) < DescField(d->max_entries)) return true;
  AtomicAdd64(&c->count, ~uint64_t{0});  // -1
  return false;
}

struct HashHit {
  int64_t slot;  // >= 0: the LIVE slot; else -ENOENT / -E2BIG
  bool created;  // the call inserted the key
};

enum class HashMode {
  kFind,         // -ENOENT when absent
  kInsertZero,   // insert an absent key with a zero value (map_add)
  kInsertValue,  // insert an absent key with `init` (map_update)
};

// Claimed slot `slot` (PENDING, key written) for a new key: takes a count,
// writes the value and publishes LIVE, or gives the slot back as `fallback`
// (DELETED with this key, so probe paths stay intact) and reports -E2BIG.
template <HashMode kMode>
CUPROBE_HD HashHit HashPublish(const cuprobe_map_desc* d, uint64_t slot, uint32_t fp,
                               uint32_t fallback, const uint8_t* init) {
  uint32_t* state = StateOf(d, slot);
  if (!TakeCount(d)) {
    StoreRelease32(state, fallback);
    CountError(d);
    return HashHit{kE2BIG, false};
  }
  uint8_t* value = ValueOf(d, slot);
  if (kMode == HashMode::kInsertValue) {
    CopyToAligned(value, init, DescField(d->value_size));
  } else {
    ZeroAligned(value, DescField(d->value_stride));
  }
  StoreRelease32(state, StateWord(fp, CUPROBE_HASH_LIVE));
  return HashHit{static_cast<int64_t>(slot), true};
}

// Finds the LIVE slot of `key` (whose hash is h = HashOf(key)); in the
// insert modes, inserts it when absent. -ENOENT: absent (kFind); -E2BIG:
// full (counted).
template <HashMode kMode, typename Key>
CUPROBE_HD_SEARCH HashHit HashFind(const cuprobe_map_desc* d, const Key& key, uint64_t h,
                                   const uint8_t* init) {
  constexpr bool kCreate = kMode != HashMode::kFind;
  const uint64_t mask = DescField(d->slot_mask);
  const uint32_t fp = Fingerprint(h);  // 30 bits
  uint64_t slot = h & mask;
  CUPROBE_NO_UNROLL
  for (uint64_t left = mask + 1; left != 0; --left, slot = (slot + 1) & mask) {
    uint32_t state = LoadAcquire32(StateOf(d, slot));
    for (;;) {
      if (state == CUPROBE_HASH_EMPTY) {
        if (!kCreate) return HashHit{kENOENT, false};
        const uint32_t seen =
            AtomicCas32(StateOf(d, slot), CUPROBE_HASH_EMPTY, StateWord(fp, CUPROBE_HASH_PENDING));
        if (seen != CUPROBE_HASH_EMPTY) {
          state = seen;  // lost the race: look at what the winner put there
          continue;
        }
        // Ours: write the key, then take a count.
        StoreKey(KeyOf(d, slot), key);
        return HashPublish<kMode>(d, slot, fp, StateWord(fp, CUPROBE_HASH_DELETED), init);
      }
      if ((state >> 2) != fp) break;  // another key: next slot
      const uint32_t kind = state & 3u;
      if (kind == CUPROBE_HASH_PENDING) {  // maybe our key, being written
        Pause();
        state = LoadAcquire32(StateOf(d, slot));
        continue;
      }
      if (!StoredKeyIs(KeyOf(d, slot), key)) break;
      if (kind == CUPROBE_HASH_LIVE) return HashHit{static_cast<int64_t>(slot), false};
      // DELETED, our key: revive it (or report it absent).
      if (!kCreate) return HashHit{kENOENT, false};
      const uint32_t seen =
          AtomicCas32(StateOf(d, slot), state, StateWord(fp, CUPROBE_HASH_PENDING));
      if (seen != state) {
        state = seen;
        continue;
      }
      return HashPublish<kMode>(d, slot, fp, state, init);
    }
  }
  if (kCreate) CountError(d);
  return HashHit{kCreate ? kE2BIG : kENOENT, false};
}

// lookup on a HASH descriptor (checked by the caller): the value's address or 0.
template <typename Key>
CUPROBE_HD uint64_t HashLookup(const cuprobe_map_desc* d, const Key& key) {
  const int64_t slot = HashFind<HashMode::kFind>(d, key, HashOf(key), nullptr).slot;
  return slot < 0 ? 0 : reinterpret_cast<uintptr_t>(ValueOf(d, static_cast<uint64_t>(slot)));
}

// map_add on a HASH descriptor (checked by the caller, value_size >= 8): the
// u64 to add to (a new key is inserted with a zero value), or null with *err.
template <typename Key>
CUPROBE_HD uint64_t* HashAddTarget(const cuprobe_map_desc* d, const Key& key, int64_t* err) {
  const int64_t slot = HashFind<HashMode::kInsertZero>(d, key, HashOf(key), nullptr).slot;
  if (slot < 0) {
    *err = slot;
    return nullptr;
  }
  *err = 0;
  return reinterpret_cast<uint64_t*>(ValueOf(d, static_cast<uint64_t>(slot)));
}

CUPROBE_HD int64_t HashDelete(const cuprobe_map_desc* d, const uint8_t* key) {
  const BytesKey k{key, DescField(d->key_size)};
  const uint64_t h = HashOf(k);
  for (;;) {
    const int64_t slot = HashFind<HashMode::kFind>(d, k, h, nullptr).slot;
    if (slot < 0) return slot;
    uint32_t* word = StateOf(d, static_cast<uint64_t>(slot));
    const uint32_t live = LoadAcquire32(word);
    if ((live & 3u) != CUPROBE_HASH_LIVE) continue;  // changed under us: look again
    if (AtomicCas32(word, live, (live & ~3u) | CUPROBE_HASH_DELETED) == live) {
      AtomicAdd64(&Control(d)->count, ~uint64_t{0});
      return 0;
    }
  }
}

}  // namespace cuprobe::mapalgo

#endif  // CUPROBE_MAPS_MAP_ALGO_HASH_H_
