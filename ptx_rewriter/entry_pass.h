// File: ptx_rewriter/entry_pass.h
//
// The entry pass: calls every entry probe of a kernel once per thread, at
// kernel entry -- after the body's leading declarations and after the
// context pass's argument copy, before the kernel's first instruction (so
// before any branch: every thread runs it exactly once, even when the first
// statement is a loop label).
//
// Before:
//   .visible .entry add_one(.param .u64 add_one_param_0, .param .u32 add_one_param_1)
//   {
//   .reg .b64 %rd<5>;
//   ld.param.u64 %rd1, [add_one_param_0];
//
// After (kernel id 7, no probe reads arguments):
//   {
//   .reg .b64 %rd<5>;
//   {
//   .param .b64 __cp_a0;
//   ...
//   st.param.b64 [__cp_a0], 0;           // mem_addr
//   st.param.b32 [__cp_a1], 0;           // mem_info
//   st.param.b32 [__cp_a2], 7;           // kernel_id
//   st.param.b32 [__cp_a3], 0;           // site_index
//   st.param.b64 [__cp_a4], 0;           // args
//   call (__cp_ret), on_entry, (__cp_a0, __cp_a1, __cp_a2, __cp_a3, __cp_a4);
//   }
//   ld.param.u64 %rd1, [add_one_param_0];
#ifndef CUPROBE_PTX_REWRITER_ENTRY_PASS_H_
#define CUPROBE_PTX_REWRITER_ENTRY_PASS_H_

#include <string_view>

#include "absl/status/status.h"
#include "ptx_rewriter/kernel_editor.h"

namespace cuprobe {

// `args` is what RunContextPass returned.
[[nodiscard]] absl::Status RunEntryPass(KernelEditor& editor, const KernelProbes& probes,
                                        std::string_view args, PassStats* stats);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_ENTRY_PASS_H_
