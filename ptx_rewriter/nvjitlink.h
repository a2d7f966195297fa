// File: ptx_rewriter/nvjitlink.h
//
// PTX -> cubin for one exact SM through nvJitLink, loaded at run time with
// dlopen("libnvJitLink.so.13") (then $CUDA_HOME/lib64 and
// /usr/local/cuda/lib64), so that the injected hook has no link-time
// dependency on it: an application without the toolkit still starts, and
// only instrumentation is unavailable. Errors carry ptxas' own messages.
//
//   CUPROBE_ASSIGN_OR_RETURN(CompiledCubin c, CompilePtx(ptx, {.sm = 90}));
//   for (const FunctionResources& f : ParseResourceUsage(c.info_log)) ...
//
// Thread-safe: the library is loaded once; each compile has its own handle.
#ifndef CUPROBE_PTX_REWRITER_NVJITLINK_H_
#define CUPROBE_PTX_REWRITER_NVJITLINK_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cuprobe {

struct CompileOptions {
  uint32_t sm = 90;                 // -arch=sm_<sm>
  bool verbose = false;             // ptxas resource usage into info_log
  std::vector<std::string> extra;   // more nvJitLink options ("-lineinfo", "-O3")
  std::string input_name = "cuprobe.ptx";  // names the input in messages
  // Compile a Compute Sanitizer patch module (ptxas
  // --compile-as-tools-patch): every .visible .func is kept as a patch
  // function the Sanitizer can call. Only the toolkit's ptxas can build one
  // (checked with CUDA 13.0): nvJitLinkCreate rejects the option itself,
  // and with -Xptxas=--compile-as-tools-patch ptxas refuses it next to the
  // --compile-only that nvJitLink compiles PTX with ("Conflicting options").
  // So CompilePtx uses ptxas for it whenever ptxas exists, even with
  // CUPROBE_PTX_COMPILER=nvjitlink; CompilePtxWithNvJitLink passes the
  // -Xptxas form and adds a hint to the refusal.
  bool tools_patch = false;
};

struct CompiledCubin {
  std::vector<uint8_t> cubin;
  std::string info_log;
};

struct NvJitLinkLibrary {
  std::string path;       // where it was loaded from
  uint32_t major = 0;     // nvJitLinkVersion
  uint32_t minor = 0;
  // Identifies the exact build (size and mtime of the library file): a
  // toolkit update invalidates cached cubins even when major.minor stays.
  std::string fingerprint;
};

// Loads the library (once per process) and reports what was loaded.
[[nodiscard]] absl::StatusOr<NvJitLinkLibrary> LoadNvJitLink();

// Identifies the nvJitLink build a compile would use, for cache keys,
// without loading it when it is not loaded yet (dlopen of the 100 MB library
// costs ~50 ms, far more than a cache hit may): the path, size and mtime of
// the file the search order of Load() finds ($LD_LIBRARY_PATH, $CUDA_HOME,
// /usr/local/cuda). Loads the library only when no file is found.
[[nodiscard]] absl::StatusOr<std::string> NvJitLinkFingerprint();

// PTX -> cubin. Uses the toolkit's ptxas (whole-program compilation: an
// unchanged kernel gets nvcc's machine code, small probes are inlined) when
// $CUDA_HOME/bin/ptxas or /usr/local/cuda/bin/ptxas exists and
// CUPROBE_PTX_COMPILER is not "nvjitlink" (or `options.tools_patch`);
// nvJitLink otherwise.
[[nodiscard]] absl::StatusOr<CompiledCubin> CompilePtx(std::string_view ptx,
                                                       const CompileOptions& options);
[[nodiscard]] absl::StatusOr<CompiledCubin> CompilePtxWithNvJitLink(
    std::string_view ptx, const CompileOptions& options);
// Which compiler CompilePtx uses (for options with this `tools_patch`), for
// messages; and its identity for cache keys.
[[nodiscard]] std::string PtxCompilerName(bool tools_patch = false);
[[nodiscard]] absl::StatusOr<std::string> PtxCompilerFingerprint(bool tools_patch = false);

// Per-function resource usage, from the info log of a verbose compile
// (nvJitLink's "Function properties for 'k': used 8 registers, ..." lines).
struct FunctionResources {
  std::string name;
  uint32_t registers = 0;
  uint32_t barriers = 0;
  uint64_t stack_bytes = 0;
  uint64_t shared_bytes = 0;
  uint64_t local_bytes = 0;
  // ptxas' "N bytes spill stores" (ptxas' own log); nvJitLink's log has
  // none, so its lmem (local memory, spills included) counts here too.
  uint64_t spill_bytes = 0;
};
[[nodiscard]] std::vector<FunctionResources> ParseResourceUsage(std::string_view info_log);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_NVJITLINK_H_
