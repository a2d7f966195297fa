// File: ptx_rewriter/context_pass.h
//
// The context pass: builds, once at kernel entry, the part of the probe
// context (abi.h, struct cuprobe_ctx) that is not a special register or a
// probe parameter: the kernel's arguments. It runs only when some probe of
// the kernel reads arguments (ProbeProgram::reads_args); it copies each
// parameter from .param space into a per-thread `struct cuprobe_args` in
// local memory -- zero-extended to 64 bits when at most 8 bytes, the first 8
// bytes of a by-value struct otherwise, at most CUPROBE_MAX_ARGS of them --
// and keeps a generic pointer to it in a register that every probe call of
// the kernel passes as its `args` parameter.
//
// Before (nvcc):
//   .visible .entry scale(.param .u64 scale_param_0, .param .f32 scale_param_1)
//   {
//   .reg .b64 %rd<5>;
//   ld.param.u64 %rd1, [scale_param_0];
//
// After:
//   {
//   .reg .b64 %__cp_args;
//   .reg .b64 %__cp_d0;
//   .local .align 8 .b8 __cuprobe_args[136];
//   .reg .b64 %rd<5>;
//   st.local.u32 [__cuprobe_args], 2;            // count
//   st.local.u32 [__cuprobe_args+4], 0;          // reserved
//   ld.param.u64 %__cp_d0, [scale_param_0];
//   st.local.u64 [__cuprobe_args+8], %__cp_d0;
//   ld.param.u32 %__cp_d0, [scale_param_1];      // f32 bits, zero-extended
//   st.local.u64 [__cuprobe_args+16], %__cp_d0;
//   cvta.local.u64 %__cp_args, __cuprobe_args;
//   ld.param.u64 %rd1, [scale_param_0];
//
// The other fields of the context (ids, dims, SM/warp/lane, timers) are
// special registers the probe compiler reads inside the probe; the memory
// access and site index are probe parameters (kernel_editor.h).
#ifndef CUPROBE_PTX_REWRITER_CONTEXT_PASS_H_
#define CUPROBE_PTX_REWRITER_CONTEXT_PASS_H_

#include <string>

#include "absl/status/statusor.h"
#include "ptx_rewriter/kernel_editor.h"

namespace cuprobe {

// Returns the `args` operand for the kernel's probe calls: the register
// holding the pointer, or "0" when no probe reads arguments.
[[nodiscard]] absl::StatusOr<std::string> RunContextPass(KernelEditor& editor,
                                                         const KernelProbes& probes,
                                                         PassStats* stats);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_CONTEXT_PASS_H_
