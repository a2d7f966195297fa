// File: ptx_rewriter/compile.h
//
// What the hook calls at module load: instrument a PTX module with a bundle
// (instrument.h), compile it for the device's exact SM through nvJitLink
// (nvjitlink.h), and remember the cubin in the on-disk cache
// (compile_cache.h) under a key made of every input -- the module, the
// bundle, the helper library, the options, this rewriter's version and
// nvJitLink's version and build -- so the next load of the same module costs
// one file read.
//
//   CompileCache cache(CurrentRewriterSettings().cache_dir);  // ptx_rewriter/settings.h
//   absl::StatusOr<InstrumentedModule> m =
//       InstrumentAndCompile(ptx, bundle, options, cache);
//   if (!m.ok() || m->instrumented.empty()) return;   // load the original
//   ReplaceImage(m->cubin.data());
#ifndef CUPROBE_PTX_REWRITER_COMPILE_H_
#define CUPROBE_PTX_REWRITER_COMPILE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "probe/bundle.h"
#include "ptx_rewriter/compile_cache.h"
#include "ptx_rewriter/instrument.h"
#include "ptx_rewriter/nvjitlink.h"

namespace cuprobe {

// Bumped whenever the rewriter's output for the same inputs changes, so old
// cache entries stop matching.
inline constexpr char kRewriterVersion[] = "cuprobe-rewriter 7";

struct InstrumentedModule {
  std::vector<uint8_t> cubin;  // empty when no kernel was instrumented
  std::vector<InstrumentedKernel> instrumented;
  std::vector<SkippedKernel> skipped;
  std::vector<std::string> warnings;
  std::vector<SiteCounter> site_counters;  // InstrumentResult::site_counters
  bool cache_hit = false;
  std::string cache_key;
};

// InstrumentPtx + CompilePtx, without the cache. When ptxas fails register
// allocation around direct probe calls (C7600; see ProbeCall::indirect), the
// module is instrumented again with indirect calls and compiled again, and
// the result carries a warning saying so. `cubin` is empty when no kernel
// was instrumented.
struct CompiledInstrumentation {
  InstrumentResult result;
  CompiledCubin compiled;
};
[[nodiscard]] absl::StatusOr<CompiledInstrumentation> InstrumentAndCompileUncached(
    std::string_view module_ptx, const ProbeBundle& bundle, InstrumentOptions options,
    const CompileOptions& compile);

// The cache key of an InstrumentAndCompile call (32 hex digits): of the
// module's PTX, or of its identity when `is_identity` (the Lazy variant).
[[nodiscard]] absl::StatusOr<std::string> InstrumentCacheKey(std::string_view module_ptx,
                                                             const ProbeBundle& bundle,
                                                             const InstrumentOptions& options,
                                                             const CompileOptions& compile,
                                                             bool is_identity = false);

[[nodiscard]] absl::StatusOr<InstrumentedModule> InstrumentAndCompile(
    std::string_view module_ptx, const ProbeBundle& bundle, const InstrumentOptions& options,
    const CompileCache& cache, CompileOptions compile = {});

// The same for the hook, which should not pay for extracting (zstd) and
// hashing megabytes of PTX on a cache hit: `module_identity` stands for the
// module's content -- e.g. "fatbin-entry:" + HashHex(HashBytes(stored
// payload)), the compressed bytes as the image holds them -- and
// `extract_ptx` is called only on a miss. Two different modules must never
// share an identity.
[[nodiscard]] absl::StatusOr<InstrumentedModule> InstrumentAndCompileLazy(
    std::string_view module_identity,
    const std::function<absl::StatusOr<std::string>()>& extract_ptx, const ProbeBundle& bundle,
    const InstrumentOptions& options, const CompileCache& cache, CompileOptions compile = {});

// The cache entry format of an InstrumentedModule (exposed for tests).
[[nodiscard]] std::string EncodeInstrumentedModule(const InstrumentedModule& m);
[[nodiscard]] absl::StatusOr<InstrumentedModule> DecodeInstrumentedModule(std::string_view bytes);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_COMPILE_H_
