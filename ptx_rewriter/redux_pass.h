// File: ptx_rewriter/redux_pass.h
//
// The redux pass, for the patch backend: ptxas --compile-as-tools-patch
// refuses `redux` ("Instruction 'redux' is not allowed when command line
// option '--compile-as-tools-patch' is specified", ptxas 13.0), which the
// GPU helper library uses for warp sums (maps/gpu/helpers.cu, GroupSum),
// while shfl.sync, vote.sync, match.sync and activemask are allowed. The
// pass replaces each `redux.sync.<op>.<type> d, a, membermask;` (op add,
// min, max, and, or, xor; type u32, s32, b32) with shfl.sync: a butterfly of
// five shuffles when the member mask is the full warp, else one shuffle per
// member lane. Both give every member the same result as redux: groups of
// lanes with different member masks may run it at the same time (GroupSum
// does), each group on its own, as with redux.
//
// Before:
//   redux.sync.add.u32 %r406, %r405, %r531;
// After:
//   {
//   .reg .b32 %__cprx_m, %__cprx_acc, %__cprx_v, %__cprx_l;
//   .reg .pred %__cprx_p;
//   mov.b32 %__cprx_m, %r531;
//   setp.ne.b32 %__cprx_p, %__cprx_m, -1;
//   @%__cprx_p bra $L__cprx0_part;
//   mov.b32 %__cprx_acc, %r405;
//   shfl.sync.bfly.b32 %__cprx_v, %__cprx_acc, 16, 31, -1;
//   add.u32 %__cprx_acc, %__cprx_acc, %__cprx_v;
//   ... (8, 4, 2, 1)
//   bra $L__cprx0_done;
//   $L__cprx0_part:                      // one lane of the mask at a time
//   ...
//   $L__cprx0_done:
//   mov.b32 %r406, %__cprx_acc;
//   }
#ifndef CUPROBE_PTX_REWRITER_REDUX_PASS_H_
#define CUPROBE_PTX_REWRITER_REDUX_PASS_H_

#include "absl/status/statusor.h"
#include "ptx_rewriter/ptx_module.h"

namespace cuprobe {

// Lowers every redux of `module`'s function bodies; returns how many. An
// error for a redux form the pass does not know (e.g. the .f32 forms).
[[nodiscard]] absl::StatusOr<int> LowerRedux(Module& module);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_REDUX_PASS_H_
