// File: ptx_rewriter/builtin_probes.h
//
// Bundles built into cuprobe, so the whole pipeline (rewrite, link,
// compile, load, read back) runs before any probe compiler exists, and as a
// reference for what a compiled probe looks like.
//
// builtin:count counts events per kernel: one program per requested attach
// point (entry, exit, memory), all calling the same hand-written PTX probe,
// which adds the number of active lanes of the warp (one atomic per warp,
// not per thread) to element `kernel_id` of map 0, an ARRAY map of u64,
// through the GPU helper library's __cuprobe_map_add. After a launch of a
// kernel instrumented with --entry only, element kernel_id holds exactly the
// number of threads launched.
//
//   CUPROBE_ASSIGN_OR_RETURN(ProbeBundle b, BuiltinBundle("builtin:count", {
//       .kernel_glob = "*", .entry = true}));
//   CUPROBE_ASSIGN_OR_RETURN(InstrumentResult r, InstrumentPtx(ptx, b, options));
#ifndef CUPROBE_PTX_REWRITER_BUILTIN_PROBES_H_
#define CUPROBE_PTX_REWRITER_BUILTIN_PROBES_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "probe/bundle.h"

namespace cuprobe {

// Map 0 of builtin:count: ARRAY, u32 key = kernel id, u64 value.
inline constexpr uint32_t kBuiltinCountMaxKernels = 1u << 16;
inline constexpr char kBuiltinCountMapName[] = "counts";
inline constexpr char kBuiltinCountFunction[] = "__cuprobe_builtin_count";

struct BuiltinBundleOptions {
  std::string kernel_glob = "*";
  bool entry = false;
  bool exit = false;
  bool memory = false;
  // Memory programs: CUPROBE_SPACE_* bits; default global and generic.
  uint32_t mem_spaces = (1u << CUPROBE_SPACE_GLOBAL) | (1u << CUPROBE_SPACE_GENERIC);
};

// True for "builtin:NAME" probe specs.
[[nodiscard]] bool IsBuiltinProbeSpec(std::string_view spec);

// The bundle named by `spec` ("builtin:count"); NOT_FOUND for an unknown
// name (the message lists the known ones). At least one attach point must be
// requested.
[[nodiscard]] absl::StatusOr<ProbeBundle> BuiltinBundle(std::string_view spec,
                                                        const BuiltinBundleOptions& options);

// The PTX module of builtin:count (also what tests compare against).
[[nodiscard]] std::string_view BuiltinCountPtx();

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_BUILTIN_PROBES_H_
