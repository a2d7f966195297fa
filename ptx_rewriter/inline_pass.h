// File: ptx_rewriter/inline_pass.h
//
// Inlines probe calls into the kernels of an instrumented module. ptxas does
// not inline `.func` calls: each probe site kept a CALL, a RET and a
// BSSY/BSYNC reconvergence pair (an empty entry + exit probe grew vec_add's
// machine code from 32 to 40 instructions, 6% of its time), and a probe's
// early exit (`if (!block_leader) return 0`) still paid the call.
//
//   absl::StatusOr<Module> m = ParsePtx(instrumented_ptx);
//   size_t n = InlineProbeCalls(*m);   // sites inlined
//   std::string ptx = PrintPtx(*m);
//
// A site is the block the kernel editor emits (ProbeCallText): `.param`
// declarations, five `st.param`s and a direct `call (__cp_ret), F, (...)`,
// optionally guarded. It becomes a block with F's registers, labels and local
// variables renamed for the site, F's parameter loads turned into moves of
// the call's arguments, its return value dropped and each `ret` a branch to
// the block's end. A parameter read in part (LLVM narrows `(mem_info >> 16)
// & 0xf` to `ld.param.u16 %rs, [p+2]`) is folded from the site's immediate
// argument (mem_info, kernel id and site index are constants at every
// site). A site is left as a call when F has no body, reads a parameter
// other than with scalar `ld.param`s, reads in part an argument the site
// does not pass as an immediate, or declares something this pass does not
// rename; F itself stays in the module.
#ifndef CUPROBE_PTX_REWRITER_INLINE_PASS_H_
#define CUPROBE_PTX_REWRITER_INLINE_PASS_H_

#include <cstddef>

#include "ptx_rewriter/ptx_module.h"

namespace cuprobe {

// Inlines every inlinable probe call site of every kernel; returns how many.
size_t InlineProbeCalls(Module& module);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_INLINE_PASS_H_
