// File: loader/maps_command.h
//
// `cuprobe maps SESSION`: prints the probes' maps of a running or finished
// session the way bpftrace prints them (histograms with bars, `@name[key]:
// value` tables), reading the snapshots the hook publishes into the session
// segment. --watch reprints every interval until the hook stops; --events
// consumes ring buffers and prints their records; --clear asks the hook to
// clear a map; --set writes an ARRAY entry that the probes read on the GPU.
// SESSION may also be the pid of a program running under cuprobe.
//
//   absl::StatusOr<MapsOptions> o = ParseMapsArgs({"cuprobe", "maps", "cuprobe-1000-..."}, 2);
//   CUPROBE_RETURN_IF_ERROR(RunMaps(*o));   // prints to stdout
#ifndef CUPROBE_LOADER_MAPS_COMMAND_H_
#define CUPROBE_LOADER_MAPS_COMMAND_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cuprobe {

class MapReader;

struct MapsOptions {
  bool help = false;           // -h: print MapsUsage() instead
  std::string session;         // segment name ("/dev/shm/" prefix allowed)
  bool watch = false;
  uint32_t interval_ms = 1000;
  uint32_t count = 0;          // --watch: stop after this many prints (0: until the hook stops)
  bool events = false;         // consume ring buffers, print records
  bool list = false;           // list maps with specs and types only
  std::vector<std::string> clear;  // maps to clear
  std::vector<std::string> set;    // NAME[INDEX]=VALUE host writes (ARRAY maps)
  std::vector<std::string> only;   // print just these maps (default: all)
};

// Parses argv[i...] (after "cuprobe maps"). Never prints, never exits.
[[nodiscard]] absl::StatusOr<MapsOptions> ParseMapsArgs(const std::vector<std::string>& argv,
                                                        size_t i);
[[nodiscard]] std::string_view MapsUsage();

// One print of every selected map (what `cuprobe maps` shows once).
[[nodiscard]] absl::StatusOr<std::string> FormatSessionMaps(MapReader& reader,
                                                            const MapsOptions& options);
// The spec listing of --list.
[[nodiscard]] std::string FormatMapList(const MapReader& reader);

// A --set assignment, NAME[INDEX]=VALUE, parsed; `value` is encoded by
// EncodeMapValue once the map's value size is known.
struct MapAssignment {
  std::string map;
  uint32_t index = 0;
  std::string value;  // as written
};
[[nodiscard]] absl::StatusOr<MapAssignment> ParseMapAssignment(std::string_view text);
// VALUE as `size` little-endian bytes: an integer (decimal, 0x hex, or
// negative) for sizes 1, 2, 4 and 8, or hex:BYTES (2 * size hex digits) for
// any size. INVALID_ARGUMENT when it does not fit.
[[nodiscard]] absl::StatusOr<std::vector<uint8_t>> EncodeMapValue(std::string_view value,
                                                                  uint32_t size);

[[nodiscard]] absl::Status RunMaps(const MapsOptions& options);

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_MAPS_COMMAND_H_
