// File: probe/map_layout.cc
#include "probe/map_layout.h"

#include <cstddef>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cuprobe {
namespace {

constexpr uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

absl::Status Bad(const MapSpec& spec, std::string_view what, std::string_view hint) {
  return absl::InvalidArgumentError(absl::StrCat("map '", spec.name, "' (",
                                                 MapTypeName(spec.type), "): ", what, "; ", hint));
}

absl::Status CheckKey(const MapSpec& spec, bool zero_ok) {
  if (spec.key_size == 4 || (zero_ok && spec.key_size == 0)) return absl::OkStatus();
  return Bad(spec, absl::StrFormat("key_size is %d", spec.key_size),
             "its key is a u32 index: declare the key as __u32");
}

absl::Status CheckValue(const MapSpec& spec) {
  if (spec.value_size >= 1 && spec.value_size <= kMaxValueSize) return absl::OkStatus();
  return Bad(spec, absl::StrFormat("value_size is %d", spec.value_size),
             absl::StrFormat("values must have 1 to %d bytes", kMaxValueSize));
}

// ComputeMapGeometry's steps: one per type (or family of types) checks the
// spec's rules for it and lays out the image in `g`, then ShardValues and
// PlaceAux finish the allocation.

absl::Status ArrayLayout(const MapSpec& spec, MapGeometry& g) {
  if (absl::Status s = CheckKey(spec, false); !s.ok()) return s;
  if (absl::Status s = CheckValue(spec); !s.ok()) return s;
  if (spec.initial_value.size() > uint64_t{spec.max_entries} * spec.value_size) {
    return Bad(spec,
               absl::StrFormat("initial value has %d bytes, more than %d entries of %d",
                               spec.initial_value.size(), spec.max_entries, spec.value_size),
               "the image must fit the map");
  }
  g.slots = spec.max_entries;
  g.image_bytes = g.slots * g.value_stride;
  return absl::OkStatus();
}

// PERTHREAD, PERWARP and PERSM: `ids` values per key.
absl::Status PerIdLayout(const MapSpec& spec, MapGeometry& g) {
  if (absl::Status s = CheckKey(spec, false); !s.ok()) return s;
  if (absl::Status s = CheckValue(spec); !s.ok()) return s;
  uint32_t ids = static_cast<uint32_t>(spec.map_extra);
  if (ids == 0) {
    ids = spec.type == CUPROBE_MAP_PERTHREAD ? kDefaultPerThreadIds
          : spec.type == CUPROBE_MAP_PERWARP ? kDefaultPerWarpIds
                                             : kDefaultPerSmIds;
  }
  if ((spec.map_extra >> 32) != 0) {
    return Bad(spec, absl::StrFormat("map_extra is 0x%x", spec.map_extra),
               "only its low 32 bits (ids per key) are used; the rest must be 0");
  }
  g.id_slots = ids;
  g.slots = uint64_t{spec.max_entries} * ids;
  g.image_bytes = g.slots * g.value_stride;
  return absl::OkStatus();
}

// HIST_LOG2 and HIST_LINEAR: one u64 count per bucket.
absl::Status HistogramLayout(const MapSpec& spec, MapGeometry& g) {
  if (absl::Status s = CheckKey(spec, true); !s.ok()) return s;
  if (spec.value_size != 8) {
    return Bad(spec, absl::StrFormat("value_size is %d", spec.value_size),
               "histogram buckets are u64 counts: declare the value as __u64");
  }
  if (spec.type == CUPROBE_MAP_HIST_LOG2 && spec.max_entries > 65) {
    return Bad(spec, absl::StrFormat("max_entries is %d", spec.max_entries),
               "a log2 histogram of u64 values has at most 65 buckets");
  }
  if (spec.type == CUPROBE_MAP_HIST_LINEAR) {
    if (spec.max_entries < 3) {
      return Bad(spec, absl::StrFormat("max_entries is %d", spec.max_entries),
                 "a linear histogram needs an underflow, an overflow and at least one "
                 "bucket in between (max_entries >= 3)");
    }
    if ((spec.map_extra >> 32) == 0) {
      return Bad(spec, "its step (high 32 bits of map_extra) is 0",
                 "map_extra = min | (uint64_t)step << 32, with step >= 1");
    }
  }
  g.slots = spec.max_entries;
  g.image_bytes = g.slots * 8;
  return absl::OkStatus();
}

// HASH: states, keys and values of a power-of-two table at most half full.
absl::Status HashLayout(const MapSpec& spec, MapGeometry& g) {
  if (spec.key_size == 0 || spec.key_size > kMaxHashKeySize) {
    return Bad(spec, absl::StrFormat("key_size is %d", spec.key_size),
               absl::StrFormat("hash keys have 1 to %d bytes", kMaxHashKeySize));
  }
  if (absl::Status s = CheckValue(spec); !s.ok()) return s;
  if (spec.max_entries > kMaxHashEntries) {
    return Bad(spec, absl::StrFormat("max_entries is %d", spec.max_entries),
               absl::StrFormat("at most %d entries", kMaxHashEntries));
  }
  uint64_t slots = 8;
  while (slots < uint64_t{2} * spec.max_entries) slots <<= 1;
  g.slots = slots;
  g.states_offset = 0;
  g.keys_offset = RoundUp(slots * 4, 8);
  g.values_offset = g.keys_offset + slots * g.key_stride;
  g.image_bytes = g.values_offset + slots * g.value_stride;
  return absl::OkStatus();
}

// RINGBUF: no image; max_entries bytes of host-mapped data.
absl::Status RingLayout(const MapSpec& spec, MapGeometry& g) {
  if (spec.key_size != 0 || spec.value_size != 0) {
    return Bad(spec,
               absl::StrFormat("key_size %d and value_size %d", spec.key_size, spec.value_size),
               "a ring buffer has neither: both must be 0 (BPF's rule)");
  }
  if (!IsPowerOfTwo(spec.max_entries) || spec.max_entries < kMinRingBytes ||
      spec.max_entries > kMaxRingBytes) {
    return Bad(spec, absl::StrFormat("max_entries (its size in bytes) is %d", spec.max_entries),
               absl::StrFormat("use a power of two from %d to %d", kMinRingBytes, kMaxRingBytes));
  }
  g.slots = 0;
  g.image_bytes = 0;
  g.ring_bytes = spec.max_entries;
  g.id_slots = 1;
  return absl::OkStatus();
}

absl::Status TypeLayout(const MapSpec& spec, MapGeometry& g) {
  switch (spec.type) {
    case CUPROBE_MAP_ARRAY:
      return ArrayLayout(spec, g);
    case CUPROBE_MAP_PERTHREAD:
    case CUPROBE_MAP_PERWARP:
    case CUPROBE_MAP_PERSM:
      return PerIdLayout(spec, g);
    case CUPROBE_MAP_HIST_LOG2:
    case CUPROBE_MAP_HIST_LINEAR:
      return HistogramLayout(spec, g);
    case CUPROBE_MAP_HASH:
      return HashLayout(spec, g);
    case CUPROBE_MAP_RINGBUF:
      return RingLayout(spec, g);
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "map '%s' has type %d, which cuprobe does not know; hint: HASH (1), ARRAY (2), "
          "RINGBUF (27), PERTHREAD (0x4001), PERWARP (0x4002), PERSM (0x4003), HIST_LOG2 "
          "(0x4004), HIST_LINEAR (0x4005) (bpftime's numbers are resolved by the compiler)",
          spec.name, spec.type));
  }
}

// The bytes of one copy of the values (they end the image).
uint64_t ValuesBytes(const MapGeometry& g) { return g.image_bytes - g.values_offset; }

// Add-only maps of a shardable type get value copies (map_layout.h), whole
// 128-byte lines apart: the atomics of two SMs on one line serialize in L2
// as if on one address, so a small map's copies (a one-counter ARRAY) must
// not share lines.
void ShardValues(const MapSpec& spec, MapGeometry& g) {
  const bool shardable = spec.type == CUPROBE_MAP_HASH || spec.type == CUPROBE_MAP_ARRAY ||
                         spec.type == CUPROBE_MAP_HIST_LOG2 ||
                         spec.type == CUPROBE_MAP_HIST_LINEAR;
  if ((spec.flags & CUPROBE_MAP_F_ADD_ONLY) == 0 || !shardable || spec.value_size < 8) return;
  const uint64_t stride = RoundUp(ValuesBytes(g), CUPROBE_MAP_COUNTER_SHARD_STRIDE);
  while (g.value_shards < CUPROBE_MAP_MAX_VALUE_SHARDS &&
         2 * g.value_shards * stride <= kValueShardBudget) {
    g.value_shards *= 2;
  }
  if (g.value_shards > 1) g.shard_bytes = stride;
}

// The aux block after the image and its copies, and the allocation's size.
absl::Status PlaceAux(const MapSpec& spec, MapGeometry& g) {
  g.aux_offset = RoundUp(CUPROBE_MAP_IMAGE_OFFSET + g.image_bytes +
                             (g.value_shards - uint64_t{1}) * g.shard_bytes,
                         CUPROBE_MAP_COUNTER_SHARD_STRIDE);
  g.allocation_bytes = g.aux_offset + CUPROBE_MAP_AUX_BYTES +
                       (spec.type == CUPROBE_MAP_RINGBUF ? CUPROBE_MAP_RING_HINT_BYTES : 0);
  if (g.allocation_bytes > kMaxMapBytes) {
    return Bad(spec, absl::StrFormat("needs %d bytes of device memory", g.allocation_bytes),
               absl::StrFormat("at most %d per map: reduce max_entries%s", kMaxMapBytes,
                               IsPerIdType(spec.type) ? " or the ids per key (map_extra)" : ""));
  }
  return absl::OkStatus();
}

}  // namespace

std::string MapTypeName(uint32_t type) {
  switch (type) {
    case CUPROBE_MAP_HASH: return "HASH";
    case CUPROBE_MAP_ARRAY: return "ARRAY";
    case CUPROBE_MAP_RINGBUF: return "RINGBUF";
    case CUPROBE_MAP_PERTHREAD: return "PERTHREAD";
    case CUPROBE_MAP_PERWARP: return "PERWARP";
    case CUPROBE_MAP_PERSM: return "PERSM";
    case CUPROBE_MAP_HIST_LOG2: return "HIST_LOG2";
    case CUPROBE_MAP_HIST_LINEAR: return "HIST_LINEAR";
  }
  return absl::StrCat("type ", type);
}

absl::StatusOr<MapGeometry> ComputeMapGeometry(const MapSpec& spec) {
  MapGeometry g;
  g.type = spec.type;
  g.flags = spec.flags;
  g.key_size = spec.key_size;
  g.value_size = spec.value_size;
  g.max_entries = spec.max_entries;
  g.map_extra = spec.map_extra;
  g.key_stride = static_cast<uint32_t>(RoundUp(spec.key_size, 8));
  g.value_stride = static_cast<uint32_t>(RoundUp(spec.value_size, 8));
  g.id_slots = 1;
  if (spec.type != CUPROBE_MAP_RINGBUF && spec.max_entries == 0) {
    return Bad(spec, "max_entries is 0", "give it at least one entry");
  }
  if (!spec.initial_value.empty() && spec.type != CUPROBE_MAP_ARRAY) {
    return Bad(spec, "has an initial value", "only ARRAY maps (global data) can have one");
  }
  if (absl::Status s = TypeLayout(spec, g); !s.ok()) return s;
  ShardValues(spec, g);
  if (absl::Status s = PlaceAux(spec, g); !s.ok()) return s;
  return g;
}

bool IsPerIdType(uint32_t type) {
  return type == CUPROBE_MAP_PERTHREAD || type == CUPROBE_MAP_PERWARP ||
         type == CUPROBE_MAP_PERSM;
}

cuprobe_map_desc MakeMapDesc(const MapGeometry& g, uint64_t base, uint64_t ring_data,
                             uint64_t ring_host) {
  cuprobe_map_desc d;
  std::memset(&d, 0, sizeof(d));
  d.magic = CUPROBE_MAP_DESC_MAGIC;
  d.version = CUPROBE_MAP_DESC_VERSION;
  d.size = CUPROBE_MAP_DESC_SIZE;
  d.type = g.type;
  d.flags = g.flags & ~CUPROBE_MAP_F_RING_SPECULATIVE;  // the host runtime's to set (map_desc.h)
  d.key_size = g.key_size;
  d.value_size = g.value_size;
  d.max_entries = g.max_entries;
  d.value_stride = g.value_stride;
  d.key_stride = g.key_stride;
  d.id_slots = g.id_slots;
  d.map_extra = g.map_extra;
  d.control = base + CUPROBE_MAP_DESC_SIZE;
  const uint64_t image = base + CUPROBE_MAP_IMAGE_OFFSET;
  if (g.type == CUPROBE_MAP_HASH) {
    d.slot_mask = g.slots - 1;
    d.states = image + g.states_offset;
    d.keys = image + g.keys_offset;
    d.values = image + g.values_offset;
  } else if (g.type == CUPROBE_MAP_RINGBUF) {
    d.slot_mask = g.ring_bytes - 1;
    d.ring_data = ring_data;
    d.ring_host = ring_host;
  } else {
    d.values = image;
  }
  if (g.value_shards > 1) {
    d.shard_bytes = g.shard_bytes;
    d.shard_mask = g.value_shards - 1;
  }
  if (g.aux_offset != 0) d.aux = base + g.aux_offset;
  return d;
}

void SettleHashStates(const MapGeometry& g, uint8_t* snapshot) {
  if (g.type != CUPROBE_MAP_HASH) return;
  uint8_t* states = snapshot + CUPROBE_MAP_CONTROL_SIZE + g.states_offset;
  for (uint64_t slot = 0; slot < g.slots; ++slot) {
    uint32_t word;
    std::memcpy(&word, states + slot * 4, 4);
    if ((word & 3u) != CUPROBE_HASH_PENDING) continue;
    word = (word & ~3u) | CUPROBE_HASH_DELETED;
    std::memcpy(states + slot * 4, &word, 4);
  }
}

void FoldMapImage(const MapGeometry& g, uint8_t* device_copy) {
  auto u64_at = [](uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  };
  auto add_at = [&](uint8_t* p, uint64_t v) {
    const uint64_t sum = u64_at(p) + v;
    std::memcpy(p, &sum, 8);
  };
  uint8_t* control = device_copy;  // the copy starts at control
  const uint8_t* aux = device_copy + (g.aux_offset - CUPROBE_MAP_DESC_SIZE);
  constexpr struct {
    uint32_t shard_offset;
    uint32_t control_offset;
  } kCounters[] = {
      {CUPROBE_MAP_SHARD_ERRORS, offsetof(cuprobe_map_control, errors)},
      {CUPROBE_MAP_SHARD_RING_RESERVED, offsetof(cuprobe_map_control, ring_reserved)},
      {CUPROBE_MAP_SHARD_RING_DROPPED, offsetof(cuprobe_map_control, ring_dropped)},
      {CUPROBE_MAP_SHARD_RING_DROPPED_BYTES, offsetof(cuprobe_map_control, ring_dropped_bytes)},
  };
  for (const auto& counter : kCounters) {
    uint64_t sum = 0;
    for (uint32_t i = 0; i < CUPROBE_MAP_COUNTER_SHARDS; ++i) {
      sum += u64_at(const_cast<uint8_t*>(aux) + uint64_t{i} * CUPROBE_MAP_COUNTER_SHARD_STRIDE +
                    counter.shard_offset);
    }
    add_at(control + counter.control_offset, sum);
  }
  if (g.value_shards <= 1) return;
  uint8_t* values = device_copy + CUPROBE_MAP_CONTROL_SIZE + g.values_offset;
  const uint64_t stride = g.value_stride;  // HIST_*: 8
  const uint64_t values_bytes = ValuesBytes(g);  // a copy, less its padding
  for (uint32_t shard = 1; shard < g.value_shards; ++shard) {
    uint8_t* copy = values + uint64_t{shard} * g.shard_bytes;
    for (uint64_t at = 0; at < values_bytes; at += stride) {
      const uint64_t v = u64_at(copy + at);
      if (v != 0) add_at(values + at, v);
    }
  }
}

cuprobe_map_desc MakeSnapshotDesc(const MapGeometry& g, const uint8_t* snapshot) {
  // The snapshot is control + image: as if the allocation began 128 bytes
  // before it.
  const uint64_t base = reinterpret_cast<uintptr_t>(snapshot) - CUPROBE_MAP_DESC_SIZE;
  cuprobe_map_desc d = MakeMapDesc(g, base, 0, 0);
  d.shard_bytes = 0;  // a snapshot is folded: one plain image
  d.shard_mask = 0;
  d.aux = 0;
  return d;
}

}  // namespace cuprobe
