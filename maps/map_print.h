// File: maps/map_print.h
//
// Text for people: maps printed the way bpftrace prints them, so that
// `cuprobe maps` reads like bpftrace's output.
//
//   @lat:
//   [0]                    3 |@                                                   |
//   [2, 4)               151 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
//   [4, 8)                12 |@@@@                                                |
//
//   @counts[3]: 17
//   @counts[9]: 20
//
//   @per_thread[0]: sum 1048576 over 1048576 threads (min 1, max 1)
//
//   std::string text = FormatMap(snapshot);
//
// Keys and values with a BTF description print by field ({pid: 7, comm:
// "bash"}); integers of 1, 2, 4 or 8 bytes print as unsigned numbers;
// anything else as hex bytes.
#ifndef CUPROBE_MAPS_MAP_PRINT_H_
#define CUPROBE_MAPS_MAP_PRINT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "maps/map_ring.h"
#include "maps/map_snapshot.h"
#include "probe/bundle.h"

namespace cuprobe {

// A whole map: "@name..." lines and a blank line after.
[[nodiscard]] std::string FormatMap(const MapSnapshot& snapshot);

// bpftrace's histogram body for bucket counts (no "@name:" line); prints
// from the first to the last non-zero bucket. `map_extra` as HIST_LINEAR's.
[[nodiscard]] std::string FormatLog2Histogram(absl::Span<const uint64_t> buckets);
[[nodiscard]] std::string FormatLinearHistogram(absl::Span<const uint64_t> buckets,
                                                uint64_t map_extra);

// One key or value: by BTF fields when the description has them.
[[nodiscard]] std::string FormatBytes(absl::Span<const uint8_t> bytes,
                                      const TypeDescription& type);

// "@events: ring 8 KiB, 120 bytes pending, 5 delivered, 0 dropped, ..."
[[nodiscard]] std::string FormatRingStats(std::string_view name, const MapRingStats& stats);

// One histogram line: the label, the count and a bar scaled to `max`.
[[nodiscard]] std::string HistogramLine(std::string_view label, uint64_t count, uint64_t max);

// "1K", "16M": bpftrace's power-of-two suffixes for histogram labels.
[[nodiscard]] std::string PowerOfTwoLabel(uint64_t value);

}  // namespace cuprobe

#endif  // CUPROBE_MAPS_MAP_PRINT_H_
