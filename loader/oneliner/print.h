// File: loader/oneliner/print.h
//
// A one-liner's maps printed as bpftrace prints them, keys by name:
//
//   @exits[vec_add]: 1048576
//
//   @sm_blocks:
//   [0, 1)                 8 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
//   [1, 2)                 8 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
//
// Scalar maps print sorted by value (then key), histograms by key; a map
// with nothing in it prints nothing.
//
//   std::string text = FormatOnelinerMap(plan, entries, names);
#ifndef CUPROBE_LOADER_ONELINER_PRINT_H_
#define CUPROBE_LOADER_ONELINER_PRINT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "loader/oneliner/translate.h"
#include "maps/map_reader.h"

namespace cuprobe::oneliner {

// A map's entries as the session holds them: key bytes (MapPlan::key_size)
// and the u64 value.
struct MapEntry {
  std::vector<uint8_t> key;
  uint64_t value = 0;
};

// The name of kernel id `id` (ctx->kernel_id), or "" when unknown (printed
// as "kernel#ID").
using KernelNames = std::function<std::string(uint32_t id)>;

// One map; `refused` updates (map full) are noted under it.
[[nodiscard]] std::string FormatOnelinerMap(const MapPlan& plan,
                                            const std::vector<MapEntry>& entries,
                                            const KernelNames& names, uint64_t refused = 0);

// Every map of `translation` read from the session.
[[nodiscard]] absl::StatusOr<std::string> FormatOnelinerMaps(const Translation& translation,
                                                            MapReader& reader,
                                                            const KernelNames& names);

}  // namespace cuprobe::oneliner

#endif  // CUPROBE_LOADER_ONELINER_PRINT_H_
