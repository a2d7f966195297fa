// File: ptx_rewriter/patch_module.h
//
// The patch module of the patch backend (include/cuprobe/abi.h, 10.): for
// kernels that ship only SASS, the hook loads this cubin into each context
// with sanitizerAddPatches and installs its callbacks with
// sanitizerPatchInstructions; the driver then calls its adapters at block
// entry, block exit and memory accesses, with a per-kernel userdata that
// points at a struct cuprobe_patch_kernel.
//
// The module is built on the CPU from the bundle and the GPU helper library:
//   - the bundle's probe functions, rewritten to reach the maps through the
//     kernel block's map_block (map_block_pass.h), since the hook cannot fill
//     a patch module's globals;
//   - the helper library functions they reach (ProbeLinker, link_pass.h),
//     without the map table the linker defines for the PTX backend, and
//     with redux lowered to shfl.sync (redux_pass.h: a tools patch may not
//     use redux);
//   - the adapters (patch_adapters.h);
// compiled by ptxas --compile-as-tools-patch (nvjitlink.h, tools_patch) and
// cached in the compile cache.
//
//   CompileCache cache(CurrentRewriterSettings().cache_dir);
//   CUPROBE_ASSIGN_OR_RETURN(PatchModule patches,
//                            BuildPatchModule(bundle, HelpersPtx(), sm, cache));
//   sanitizerAddPatches(patches.cubin.data(), ctx);
//   for (const PatchCallback& cb : patches.callbacks)
//     sanitizerPatchInstructions(Sanitizer_InstructionId(cb.instruction), module,
//                                cb.function.c_str());
//   // per kernel: a cuprobe_patch_kernel with
//   //   programs = ProgramMask(bundle, mangled, demangled_base),
//   //   map_block = [128 * patches.map_slots descriptors][8 * map_slots table]
#ifndef CUPROBE_PTX_REWRITER_PATCH_MODULE_H_
#define CUPROBE_PTX_REWRITER_PATCH_MODULE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "probe/bundle.h"
#include "ptx_rewriter/compile_cache.h"
#include "ptx_rewriter/patch_adapters.h"

namespace cuprobe {

// Bumped whenever the patch module built from the same inputs changes, so
// old cache entries stop matching.
inline constexpr char kPatchModuleVersion[] = "cuprobe-patch 1";

struct PatchModule {
  std::vector<uint8_t> cubin;            // for sanitizerAddPatches
  std::vector<PatchCallback> callbacks;  // what to patch, in order
  uint32_t map_slots = 0;                // N of the map block's layout
  bool cache_hit = false;
};

// N of the map block for `bundle`: its map count, at least 1.
[[nodiscard]] uint32_t PatchMapSlots(const ProbeBundle& bundle);

// The whole patch module as PTX: the header, the helper library functions
// the probes reach, the rewritten probes and the adapters. Errors name what
// the patch backend cannot take (a probe's form of map access, more than
// CUPROBE_PATCH_MAX_PROGRAMS programs).
[[nodiscard]] absl::StatusOr<std::string> PatchModulePtx(const ProbeBundle& bundle,
                                                         std::string_view helper_ptx);

// PatchModulePtx compiled for sm_<sm> with ptxas --compile-as-tools-patch,
// through `cache` (key: the PTX, sm, the compiler's build and
// kPatchModuleVersion).
[[nodiscard]] absl::StatusOr<PatchModule> BuildPatchModule(const ProbeBundle& bundle,
                                                           std::string_view helper_ptx,
                                                           uint32_t sm, const CompileCache& cache);

// Which programs select the kernel of mangled name `mangled` (demangled name
// without parameters `demangled_base`, may be empty): bit i set when
// programs[i].kernel_glob matches (KernelGlobMatches). Programs past
// CUPROBE_PATCH_MAX_PROGRAMS have no bit.
[[nodiscard]] uint32_t ProgramMask(const ProbeBundle& bundle, std::string_view mangled,
                                   std::string_view demangled_base);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_PATCH_MODULE_H_
