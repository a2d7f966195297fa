// File: ptx_rewriter/patch_adapters.h
//
// The adapters of a patch module (include/cuprobe/abi.h, 10.): the device
// functions the Compute Sanitizer calls, with its callback signatures, that
// call the bundle's probe programs with the probe signature (abi.h, 2.).
// One adapter per Sanitizer instruction kind that has a program: block
// enter (entry programs), block exit (exit programs), global, shared and
// local memory accesses (memory programs by their mem_spaces). Each returns
// at once on a userdata of 0, reads kernel_id and the program mask from the
// kernel block, and calls program i only when bit i of the mask is set:
//
//   .visible .func (.param .b32 __cuprobe_ret) __cuprobe_patch_block_enter(
//       .param .b64 __cuprobe_userdata, .param .b64 __cuprobe_pc)
//   {
//   ...
//   ld.param.u64 %rd1, [__cuprobe_userdata];
//   setp.eq.u64 %p1, %rd1, 0;
//   @%p1 bra $L__cuprobe_done;
//   ld.global.nc.u32 %r1, [%rd1+8];         // kernel_id
//   ld.global.nc.u32 %r2, [%rd1+12];        // programs
//   add.s64 %rd2, %rd1, 16;                 // args
//   ...
//   and.b32 %r5, %r2, 4;                    // program 2
//   setp.eq.u32 %p2, %r5, 0;
//   @%p2 bra $L__cuprobe_skip2;
//   { ... call.uni (__cp_ret), on_entry, (__cp_a0, ..., __cp_a4); }
//   $L__cuprobe_skip2:
//   ...
//   $L__cuprobe_done:
//   st.param.b32 [__cuprobe_ret], 0;        // SANITIZER_PATCH_SUCCESS
//   ret;
//   }
//
// The memory adapters derive the access kind from the Sanitizer's flags
// with a 16-entry table that PatchAccessKind() fills, so the PTX and the
// host function cannot disagree. When a memory program of the bundle has
// summary code, they first look at the block's site counters (abi.h, 10.):
// with a counter block set, an access of a power-of-two size adds the
// warp's active lanes to its class's counter instead of calling programs
// (PatchSiteCounters computes the classes' counters on the host).
#ifndef CUPROBE_PTX_REWRITER_PATCH_ADAPTERS_H_
#define CUPROBE_PTX_REWRITER_PATCH_ADAPTERS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cuprobe/abi.h"
#include "probe/bundle.h"

namespace cuprobe {

// Sanitizer_InstructionId values (sanitizer_patching.h) of the callbacks a
// patch module installs.
inline constexpr uint32_t kSanitizerBlockEnter = 1;
inline constexpr uint32_t kSanitizerBlockExit = 2;
inline constexpr uint32_t kSanitizerGlobalMemoryAccess = 3;
inline constexpr uint32_t kSanitizerSharedMemoryAccess = 4;
inline constexpr uint32_t kSanitizerLocalMemoryAccess = 5;
// cp.async (global -> shared): SanitizerCallbackMemcpyAsync(userdata, pc,
// src, dst, accessSize).
inline constexpr uint32_t kSanitizerMemcpyAsync = 14;

// Sanitizer_DeviceMemoryFlags bits.
inline constexpr uint32_t kSanitizerMemoryRead = 0x1;
inline constexpr uint32_t kSanitizerMemoryWrite = 0x2;
inline constexpr uint32_t kSanitizerMemoryAtomSys = 0x4;
inline constexpr uint32_t kSanitizerMemoryPrefetch = 0x8;

// One callback to install: sanitizerPatchInstructions(instruction, module,
// function).
struct PatchCallback {
  uint32_t instruction = 0;  // kSanitizer*
  std::string function;      // an adapter of the patch module
  bool operator==(const PatchCallback&) const = default;
};

// The CUPROBE_ACCESS_* kind of a memory access with Sanitizer `flags`:
// ATOMIC with ATOMSYS, or with both READ and WRITE; else STORE with WRITE;
// else LOAD. 0 (no program runs) for a prefetch: PREFETCH without READ,
// WRITE or ATOMSYS. Bits above PREFETCH are ignored.
[[nodiscard]] uint32_t PatchAccessKind(uint32_t flags);

// The CUPROBE_SPACE_* bits (1 << space) of ProbeProgram::mem_spaces that
// run a memory program in the adapter of `instruction` (GLOBAL or GENERIC
// for global accesses); 0 for the block adapters.
[[nodiscard]] uint32_t PatchAdapterSpaces(uint32_t instruction);

// Site counters on the patch backend (include/cuprobe/abi.h, 10.): the
// access class of an access the adapter of `instruction` sees, with
// CUPROBE_ACCESS_* `kind` and `size` bytes: slot * 32 + kind * 8 +
// log2(size), slot 0 for global accesses and cp.async, 1 shared, 2 local.
// nullopt for a size that is not a power of two up to 128, or a block
// adapter.
[[nodiscard]] std::optional<uint32_t> PatchAccessClass(uint32_t instruction, uint32_t kind,
                                                       uint32_t size);

// What a kernel's block holds for its site counters: the counters to
// register (MapSet::AddSiteCounters) and, per access class, the index of
// the one it counts in, or CUPROBE_PATCH_NO_COUNTER.
struct PatchKernelCounters {
  std::vector<SiteCounter> counters;
  std::array<uint8_t, CUPROBE_PATCH_ACCESS_CLASSES> counter_of{};
};

// The site counters of a kernel with id `kernel_id` whose programs are
// `programs` (ProgramMask): every memory program it runs summarized
// (SummarizeSite, the site index varying) for every access class. nullopt
// when one cannot be, or the kernel runs no memory program: its memory
// accesses then call the programs.
[[nodiscard]] std::optional<PatchKernelCounters> PatchSiteCounters(const ProbeBundle& bundle,
                                                                   uint32_t programs,
                                                                   uint32_t kernel_id);

struct PatchAdapters {
  std::string ptx;                       // the adapter functions
  std::vector<PatchCallback> callbacks;  // one per adapter, by instruction
};

// The adapters for `bundle`, whose program i is the PTX function
// `functions[i]` (its name in the linked module). More than
// CUPROBE_PATCH_MAX_PROGRAMS programs is an error.
[[nodiscard]] absl::StatusOr<PatchAdapters> GeneratePatchAdapters(
    const ProbeBundle& bundle, absl::Span<const std::string> functions);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_PATCH_ADAPTERS_H_
