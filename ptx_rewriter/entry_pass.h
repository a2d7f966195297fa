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
//
// Sinking (KernelProbes::sink_entry, on unless CUPROBE_SINK_ENTRY=0): a call
// at the very top makes every warp wait for its probe before the kernel's
// first loads are even issued; a probe whose work is one thread's chain of
// dependent loads (a block leader's ring reservation: about 650 ns on an
// H200) then adds its whole latency to the block's. So the calls move down
// the kernel's straight-line start, past instructions that neither write
// memory, synchronize nor branch (FindEntrySink), to just before the first
// use of a global or generic load's result: the kernel's loads are then in
// flight while the probe runs. A guarded branch on the way (`@%p1 bra L;`,
// at most two) gets a copy of the calls under its own guard, so the threads
// that leave there call them too: each thread still calls each probe
// exactly once, before anything of the kernel that it could observe (the
// probes see no kernel register, and maps are not the kernel's memory). The
// calls stay at the top when nothing would be in flight, and when the
// kernel also has memory probes (whose sites are those loads). Site-counted
// probes stay at the top (they cost an increment).
//
//   ld.param.u64 %rd1, [vec_add_param_0];      ld.param.u64 %rd1, [vec_add_param_0];
//   ...                                         ...
//   setp.ge.s32 %p1, %r1, %r2;                  setp.ge.s32 %p1, %r1, %r2;
//   @%p1 bra $L__BB0_2;               =>        @%p1 call (__cp_ret), probe, (...);
//   ld.global.f32 %f1, [%rd8];                  @%p1 bra $L__BB0_2;
//   ld.global.f32 %f2, [%rd6];                  ld.global.f32 %f1, [%rd8];
//   add.f32 %f3, %f2, %f1;                      ld.global.f32 %f2, [%rd6];
//                                               call (__cp_ret), probe, (...);
//                                               add.f32 %f3, %f2, %f1;
#ifndef CUPROBE_PTX_REWRITER_ENTRY_PASS_H_
#define CUPROBE_PTX_REWRITER_ENTRY_PASS_H_

#include <cstddef>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "ptx_rewriter/kernel_editor.h"

namespace cuprobe {

// Where FindEntrySink puts the entry calls: before body[index], plus a
// guarded copy before each body[branches[k]].
struct EntrySink {
  size_t index = 0;
  std::vector<size_t> branches;
};

// The sink point of `kernel`'s entry calls, starting at body[entry]; index
// == entry (no branches) when sinking gains nothing.
[[nodiscard]] EntrySink FindEntrySink(const Function& kernel, size_t entry);

// False when CUPROBE_SINK_ENTRY=0.
[[nodiscard]] bool EntrySinkingEnabled();

// `args` is what RunContextPass returned.
[[nodiscard]] absl::Status RunEntryPass(KernelEditor& editor, const KernelProbes& probes,
                                        std::string_view args, PassStats* stats);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_ENTRY_PASS_H_
