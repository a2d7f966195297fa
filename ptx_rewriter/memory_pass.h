// File: ptx_rewriter/memory_pass.h
//
// The memory pass: calls every memory probe of a kernel before (or, with
// `after`, after) each load, store and atomic of the spaces the probe asks
// for (ProbeProgram::mem_spaces; default global and generic) with the
// access's effective address and CUPROBE_MEM_INFO(size, space, kind). Instructions: ld, ldu, st, atom, red
// with every modifier (.nc, .volatile, .relaxed.gpu, .L2::cache_hint, ...);
// vector accesses count whole (ld.v4.f32 is 16 bytes); a predicated access
// calls the probe under its predicate. ld.param / st.param are never memory
// accesses of the kernel. The probe runs before the access, while the
// address registers still hold the address (`ld.global.u64 %rd1, [%rd1]`).
//
// The effective address is formed in a scratch register for every operand
// form: `[%rd4]` (passed as is), `[%rd4+8]` / `[%rd4+-8]` (add.s64),
// `[%r5]` (a 32-bit shared/local address: cvt.u64.u32), `[sym]` /
// `[sym+8]` (mov.u64 of the symbol's address), `[0x1000]`. Addresses are
// those of the instruction's space: a shared access reports its shared-window
// address, a global or generic one the generic address.
//
// Before:
//   @%p1 ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd4+16];
//
// After (kernel id 7, first access of the kernel):
//   add.s64 %__cp_d0, %rd4, 16;
//   {
//   ...
//   st.param.b64 [__cp_a0], %__cp_d0;
//   st.param.b32 [__cp_a1], 1114128;     // size 16, global, load
//   st.param.b32 [__cp_a2], 7;
//   st.param.b32 [__cp_a3], 0;
//   st.param.b64 [__cp_a4], 0;
//   @%p1 call (__cp_ret), on_mem, (__cp_a0, __cp_a1, __cp_a2, __cp_a3, __cp_a4);
//   }
//   @%p1 ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd4+16];
//
// With `after` (CUPROBE_MEM_PROBE_AFTER=1, a switch to compare the two
// placements) the address is formed in the scratch register before the
// access, always (even `[%rd4]` is copied: the access may overwrite its
// base), and the probe runs after it: the kernel's load issues first and
// the probe's work can fill its latency. The probe sees the same address,
// size, space and kind; it does not run for an access that faults.
//
// Not instrumented (docs/REWRITER.md): cp.async / cp.async.bulk, tensor
// memory (wmma.load/store, ldmatrix, stmatrix, tma), multimem, texture and
// surface instructions, and accesses inside non-inlined .func callees.
#ifndef CUPROBE_PTX_REWRITER_MEMORY_PASS_H_
#define CUPROBE_PTX_REWRITER_MEMORY_PASS_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "ptx_rewriter/kernel_editor.h"
#include "ptx_rewriter/ptx_module.h"

namespace cuprobe {

struct MemoryAccess {
  uint32_t space = 0;         // CUPROBE_SPACE_*
  uint32_t kind = 0;          // CUPROBE_ACCESS_*
  uint32_t size = 0;          // bytes, vectors whole
  std::string_view address;   // inside the brackets: "%rd4+16"
};

// The access an instruction makes, or nullopt when it is not one the pass
// handles (not a memory instruction, ld.param/st.param, or no `[...]`).
[[nodiscard]] std::optional<MemoryAccess> ClassifyMemoryAccess(const Statement& instruction);

[[nodiscard]] absl::Status RunMemoryPass(KernelEditor& editor, const KernelProbes& probes,
                                         std::string_view args, PassStats* stats,
                                         bool after = false);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_MEMORY_PASS_H_
