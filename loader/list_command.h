// File: loader/list_command.h
//
// `cuprobe list`: the attach points probes can use, one per line, the way
// `bpftrace -l` lists its probes: `entry:KERNEL`, `exit:KERNEL` and
// `mem:KERNEL` for every kernel, with the backend `cuprobe run --backend
// auto` reaches it through (ptx: rewritten from its PTX; patch: SASS only,
// through the Compute Sanitizer). KERNEL is the name kernel globs match
// (probe/kernel_glob.h: demangled, without parameters). Three sources:
//   cuprobe list FILE            the kernels of an executable, library,
//                                fatbin, cubin or PTX file (offline);
//   cuprobe list PID             the kernels of the modules a program
//                                running under `cuprobe trace` has loaded;
//   cuprobe list -- CMD ARGS     runs CMD and lists the kernels of every
//                                module it loaded, with their launches.
//
//   CUPROBE_ASSIGN_OR_RETURN(int code, RunList(args.list));
#ifndef CUPROBE_LOADER_LIST_COMMAND_H_
#define CUPROBE_LOADER_LIST_COMMAND_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loader/args.h"

namespace cuprobe {

// A pattern: "" (everything), GLOB, or POINT:GLOB with POINT entry, exit,
// mem or *. A prefix that is not a point is part of the glob ("ns::k*").
struct ListPattern {
  bool entry = true;
  bool exit = true;
  bool mem = true;
  std::string glob = "*";
};
[[nodiscard]] ListPattern ParseListPattern(std::string_view pattern);

struct ListedKernel {
  std::string mangled;
  uint16_t backend = 0;                // kCatalogBackend*; 0: not known
  std::optional<uint64_t> launches;    // `list -- CMD` only
};

// What `cuprobe list` prints: `lines` (stdout) has one line per attach
// point the pattern selects, sorted by kernel name; `summary` (stderr) says
// how many points of how many kernels, by backend. `verbose` adds each
// kernel's mangled name.
struct ListText {
  std::string lines;
  std::string summary;
};
[[nodiscard]] ListText FormatList(std::vector<ListedKernel> kernels, const ListPattern& pattern,
                                  bool verbose);

// The kernels of FILE, as `cuprobe list FILE` finds them.
[[nodiscard]] absl::StatusOr<std::vector<ListedKernel>> ListFileKernels(
    const std::string& path, uint32_t sm, const std::vector<std::string>& ptx_search_roots);

// Prints the list; returns the program's exit code for `-- CMD`, else 0.
[[nodiscard]] absl::StatusOr<int> RunList(const ListOptions& options);

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_LIST_COMMAND_H_
