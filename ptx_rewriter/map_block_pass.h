// File: ptx_rewriter/map_block_pass.h
//
// The map block pass, for the patch backend (include/cuprobe/abi.h, 10.): a
// patch module is loaded by the Compute Sanitizer, so the hook cannot fill
// its globals, and the probes cannot reach the maps through
// __cuprobe_map_table / __cuprobe_map_descs. Instead each probe function
// loads the address of its context's map block from the patch kernel block
// that its `args` parameter points into (args - 16 is the block's
// map_block), and every reference to the two symbols becomes an offset from
// that register:
//
//   ld.const.T %r, [__cuprobe_map_descs+K]     -> ld.global.nc.T %r, [%cuprobe_pb+K]
//   ld.global.nc.T %r, [__cuprobe_map_table+K] -> ld.global.nc.T %r, [%cuprobe_pb+(128*N+K)]
//   mov.u64 %r, __cuprobe_map_table;           -> add.s64 %r, %cuprobe_pb, 128*N;
//   mov.u64 %r, __cuprobe_map_descs;           -> add.s64 %r, %cuprobe_pb, 0;
//
// (N = the map block's slots). The last form is refused when a constant
// load of the function goes through a register: it could be reading the
// descriptors' constant copy through %r, which the block does not have.
// The .extern declarations of both symbols go; any other reference to them,
// in any function, is an error naming the line.
//
// Before (N = 2):
//   .extern .global .align 8 .b8 __cuprobe_map_table[];
//   .visible .func (.param .b32 r) on_entry(..., .param .b64 on_entry_param_4)
//   {
//   .reg .b64 %rd<9>;
//   ld.global.nc.u64 %rd1, [__cuprobe_map_table+8];
// After:
//   .visible .func (.param .b32 r) on_entry(..., .param .b64 on_entry_param_4)
//   {
//   .reg .b64 %cuprobe_pb;
//   .reg .b64 %rd<9>;
//   ld.param.u64 %cuprobe_pb, [on_entry_param_4];
//   ld.u64 %cuprobe_pb, [%cuprobe_pb+-16];
//   ld.global.nc.u64 %rd1, [%cuprobe_pb+264];
#ifndef CUPROBE_PTX_REWRITER_MAP_BLOCK_PASS_H_
#define CUPROBE_PTX_REWRITER_MAP_BLOCK_PASS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "ptx_rewriter/ptx_module.h"

namespace cuprobe {

// The register that holds the map block's address in a rewritten probe.
inline constexpr char kMapBlockRegister[] = "%cuprobe_pb";

// Rewrites `module` (a bundle's PTX) so that the functions named in
// `probes`, which follow the probe signature (abi.h, 2.), reach the maps
// through a map block of `map_slots` slots. INVALID_ARGUMENT "the patch
// backend cannot take this probe: <module>:<line>: ..." when a reference to
// the map symbols has another form or sits outside a probe function.
[[nodiscard]] absl::Status RunMapBlockPass(Module& module, absl::Span<const std::string> probes,
                                           uint32_t map_slots);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_MAP_BLOCK_PASS_H_
