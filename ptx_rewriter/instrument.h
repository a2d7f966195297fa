// File: ptx_rewriter/instrument.h
//
// The rewriter's entry point, what the hook calls at module load (and
// `cuprobe instrument` offline): rewrites the kernels of a PTX module that a
// bundle's probes attach to, and links the probes and the GPU helper library
// into it. The result is PTX for Compile (compile.h).
//
//   InstrumentOptions options;
//   options.helper_ptx = helper_library_ptx;   // the maps' GPU helper library
//   options.kernel_ids = {{"_Z7add_onePfi", 12}};
//   options.first_kernel_id = 100;              // for kernels not in the map
//   CUPROBE_ASSIGN_OR_RETURN(InstrumentResult r, InstrumentPtx(ptx, bundle, options));
//   for (const InstrumentedKernel& k : r.instrumented) hook.Remember(k.name, k.kernel_id);
//   for (const SkippedKernel& k : r.skipped) Log("%s: %s", k.name, k.reason);
//
// Per kernel it runs, in order: context (argument copy, only when a probe
// reads arguments), entry, exit and memory passes; then the link pass for
// the module. A kernel whose rewrite fails is left unmodified and listed in
// `skipped` with the reason; the other kernels are still instrumented. An
// error is returned only for what spoils every kernel: unparsable PTX, a bad
// bundle or helper library, a link conflict.
#ifndef CUPROBE_PTX_REWRITER_INSTRUMENT_H_
#define CUPROBE_PTX_REWRITER_INSTRUMENT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "probe/bundle.h"
#include "ptx_rewriter/kernel_editor.h"
#include "ptx_rewriter/ptx_module.h"
#include "ptx_rewriter/site_summary.h"

namespace cuprobe {

struct InstrumentOptions {
  // PTX of the GPU helper library (the functions of CUPROBE_HELPER_SYMBOL_*).
  // Empty when the bundle calls no helper.
  std::string_view helper_ptx;
  // The device's SM (90 for 9.0), for Compile; recorded in the result.
  uint32_t sm = 90;
  // Kernel ids (mangled name -> id). Kernels without an entry get
  // first_kernel_id, first_kernel_id + 1, ... in module order.
  absl::flat_hash_map<std::string, uint32_t> kernel_ids;
  uint32_t first_kernel_id = 0;
  // Kernels (mangled names) not to rewrite even if a probe matches.
  std::vector<std::string> skip_kernels;
  // Names the module in diagnostics ("libfoo.so fatbin @0x1234 entry 3").
  std::string module_name = "<module>";
  // Call probes through a function pointer (ProbeCall::indirect in
  // kernel_editor.h). InstrumentAndCompile sets it when ptxas fails register
  // allocation around direct calls.
  bool indirect_calls = false;
  // Replace the calls of probes that reduce to adds of site constants by
  // site counters (site_summary.h). CUPROBE_SITE_COUNTERS=0 turns it off too.
  bool site_counters = true;
  // Fault injection for tests: the rewrite of this kernel (mangled name)
  // gets an instruction ptxas refuses.
  std::string fault_kernel;
  // Fault injection for tests: the module with its probes inlined gets a
  // kernel ptxas refuses (InstrumentAndCompile then compiles the calls).
  bool fault_inlined = false;
};

struct InstrumentedKernel {
  std::string name;  // mangled
  uint32_t kernel_id = 0;
  std::vector<std::string> programs;  // ProbeProgram::name of each attached program
  PassStats stats;
};

struct SkippedKernel {
  std::string name;
  std::string reason;
};

struct InstrumentResult {
  // The rewritten and linked module; the input unchanged when no kernel was
  // instrumented (then `instrumented` is empty).
  std::string ptx;
  uint32_t sm = 90;
  std::vector<InstrumentedKernel> instrumented;
  std::vector<SkippedKernel> skipped;  // matched but not instrumented, and why
  std::vector<std::string> warnings;
  uint32_t kernels_in_module = 0;
  // The module's site counters (index order); when not empty the module
  // defines CUPROBE_SITE_COUNTS_SYMBOL, which the hook must fill.
  std::vector<SiteCounter> site_counters;
};

[[nodiscard]] absl::StatusOr<InstrumentResult> InstrumentPtx(std::string_view module_ptx,
                                                             const ProbeBundle& bundle,
                                                             const InstrumentOptions& options);

// False when CUPROBE_SITE_COUNTERS=0 (then every probe site calls its probe).
[[nodiscard]] bool SiteCountersEnabled();

// Checks that `f` has the probe signature of abi.h: (.param .b32 r)
// f(.b64, .b32, .b32, .b32, .b64), with a body.
[[nodiscard]] absl::Status CheckProbeSignature(const Function& f);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_INSTRUMENT_H_
