// File: loader/oneliner/translate.h
//
// A one-liner (docs/ONELINERS.md) translated into a C probe, which then goes
// through the ordinary verified pipeline (loader/compiler), and the plan of
// its maps, from which print.h prints them the way bpftrace does.
//
//   CUPROBE_ASSIGN_OR_RETURN(oneliner::Translation t, oneliner::TranslateOneliner(text));
//   // t.c_source: #include "cuprobe/probe.h", the maps, a function per attach point
//
// Every map is a u64-valued HASH (keyed) or ARRAY (unkeyed) whose key is the
// map's key expressions as s64 fields k0..kN-1, plus a `slot` for the
// aggregations that keep several numbers per key (a histogram's buckets,
// avg's count and sum). Adds go through cuprobe_map_add, so counting
// one-liners keep the site-counter and per-SM fast paths of C probes.
#ifndef CUPROBE_LOADER_ONELINER_TRANSLATE_H_
#define CUPROBE_LOADER_ONELINER_TRANSLATE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace cuprobe::oneliner {

enum class Aggregation { kValue, kCount, kSum, kMin, kMax, kAvg, kStats, kHist, kLhist };

// How a key prints: kernel ids by name, access kinds and spaces by word.
enum class KeyKind { kInt, kKernel, kAccessKind, kSpace };

struct MapPlan {
  std::string name;  // as written, without '@' (empty for a bare '@')
  std::string c_name;  // the map's name in the probe and the session
  Aggregation aggregation = Aggregation::kValue;
  std::vector<KeyKind> keys;
  // Slots per key: hist 66 ((..., 0), [0], [1], [2, 4), ... [2^63, ...)),
  // lhist buckets + 2 (below min, above max), avg/stats 2 (count, sum);
  // 0 for the rest, which keep one value.
  uint32_t slots = 0;
  int64_t lhist_min = 0, lhist_max = 0, lhist_step = 1;
  uint32_t max_entries = 0;
  [[nodiscard]] bool keyed() const { return !keys.empty(); }
  // Key bytes: keyed maps 8 per key and 8 for the slot (if any); unkeyed
  // maps are ARRAYs indexed by the slot (u32).
  [[nodiscard]] uint32_t key_size() const;
};

struct Translation {
  std::string c_source;
  std::vector<MapPlan> maps;
  // Memory programs that read `space` instrument every space (global,
  // shared, local, generic); the others the default (global and generic).
  std::vector<std::pair<std::string, uint32_t>> mem_spaces;  // program name, bits
};

// The largest lhist: buckets between min and max.
inline constexpr int64_t kMaxLhistBuckets = 1000;

[[nodiscard]] absl::StatusOr<Translation> TranslateOneliner(std::string_view text);

}  // namespace cuprobe::oneliner

#endif  // CUPROBE_LOADER_ONELINER_TRANSLATE_H_
