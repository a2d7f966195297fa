// File: ptx_rewriter/exit_pass.h
//
// The exit pass: calls every exit probe of a kernel right before each `ret`
// and `exit` of the kernel's body -- early returns, returns in nested blocks
// and predicated ones included. A predicated `@%p1 ret;` calls the probe
// under the same predicate, so the probe runs exactly when the thread
// leaves. site_index numbers the kernel's ret/exit instructions from 0 in
// text order.
//
// Before:
//   @%p1 bra $L__BB0_2;
//   st.global.f32 [%rd4], %f2;
//   $L__BB0_2:
//   @%p2 ret;
//   ret;
//
// After (kernel id 3):
//   @%p1 bra $L__BB0_2;
//   st.global.f32 [%rd4], %f2;
//   $L__BB0_2:
//   { ... st.param.b32 [__cp_a3], 0;
//   @%p2 call (__cp_ret), on_exit, (__cp_a0, __cp_a1, __cp_a2, __cp_a3, __cp_a4); }
//   @%p2 ret;
//   { ... st.param.b32 [__cp_a3], 1;
//   call (__cp_ret), on_exit, (__cp_a0, __cp_a1, __cp_a2, __cp_a3, __cp_a4); }
//   ret;
//
// Only the kernel's own body is rewritten: an `exit` inside a non-inlined
// .func the kernel calls is not seen (nvcc and clang inline nearly all device
// code; docs/REWRITER.md lists this gap). `trap` aborts the grid and is not
// an exit.
#ifndef CUPROBE_PTX_REWRITER_EXIT_PASS_H_
#define CUPROBE_PTX_REWRITER_EXIT_PASS_H_

#include <string_view>

#include "absl/status/status.h"
#include "ptx_rewriter/kernel_editor.h"

namespace cuprobe {

[[nodiscard]] absl::Status RunExitPass(KernelEditor& editor, const KernelProbes& probes,
                                       std::string_view args, PassStats* stats);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_EXIT_PASS_H_
