// File: loader/compiler/lower.h
//
// Lowering of verified eBPF programs to LLVM IR, and of that IR to PTX with
// LLVM's NVPTX backend (sm_90). Each program becomes
//   i32 @<ptx_function>(i64 mem_addr, i32 mem_info, i32 kernel_id,
//                       i32 site_index, ptr args)
// (the probe ABI of include/cuprobe/abi.h): eBPF registers are allocas that
// SROA/mem2reg promote, the 512-byte stack is an alloca, context loads become
// special-register reads or parameter uses, map references become loads of
// __cuprobe_map_table, helpers become calls of the GPU helper library or
// inline code, and instructions the verifier never reached become
// `unreachable`.
//
// LowerTarget::kHost builds the same IR for the host (tests JIT it with ORC
// and compare it with the reference interpreter): only the special registers
// differ, read through `i64 __cuprobe_host_sreg(i32 ctx_offset)`; the grid
// id (cuprobe_grid_id, no context field) reads offset kHostGridIdSreg.
//
//   llvm::LLVMContext ctx;
//   CUPROBE_ASSIGN_OR_RETURN(auto module, LowerToLlvm(ctx, input, LowerTarget::kNvptx));
//   CUPROBE_ASSIGN_OR_RETURN(std::string ptx, EmitPtx(*module));
#ifndef CUPROBE_LOADER_COMPILER_LOWER_H_
#define CUPROBE_LOADER_COMPILER_LOWER_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loader/compiler/object.h"
#include "loader/compiler/verifier.h"

namespace llvm {
class LLVMContext;
class Module;
class TargetMachine;
}  // namespace llvm

namespace cuprobe {

enum class LowerTarget { kNvptx, kHost };

// The __cuprobe_host_sreg offset that stands for %gridid: past the context.
inline constexpr int32_t kHostGridIdSreg = CUPROBE_CTX_SIZE;

struct ProgramToLower {
  const BpfProgram* program = nullptr;
  const VerifiedProgram* verified = nullptr;
  std::string function_name;             // the PTX .func
  std::vector<uint32_t> printk_ids;      // verified->printk_formats[i] -> bundle format id
  // The program's own object and map slots when the bundle holds several
  // objects (null: LowerInput's), and the name prefix of its .rodata
  // constants (distinct per object).
  const BpfObject* object = nullptr;
  const std::vector<int32_t>* map_slot = nullptr;
  std::string rodata_prefix = "__cuprobe_ro_";
};

// Measuring switches of the ring-buffer lowering (the CLI reads them from
// the environment: ProbeCompileOptions::FromEnvironment). Each is for
// comparisons only.
struct RingLowering {
  // CUPROBE_RING_INLINE=0: lone-lane ring reservations call the helper as
  // other ones do.
  bool inline_reservations = true;
  // CUPROBE_DIAG_RING_COMMIT: "relaxed" commits ring records with a relaxed
  // system-scope store, "gpu" with a GPU-scope release. Neither orders the
  // record's bytes before its commit for the host, so the consumer may read
  // a torn record: it measures what the system-scope release costs.
  std::string commit;
  // CUPROBE_DIAG_RING_DROP: "nocount" drops a full ring's records without
  // counting them, "always" drops every record without reading the SM's
  // hint, "always-nocount" both. Each breaks delivered + dropped =
  // produced: it measures what the drop path's parts cost.
  std::string drop;
};

// Measuring switch of the map lowering (ProbeCompileOptions::FromEnvironment).
struct MapLowering {
  // CUPROBE_UNIFORM_ADDS=0: warp-uniform adds (ARRAY, HIST_*, HASH) call
  // the helper from every lane, as adds with keys that differ per lane do.
  bool uniform_adds = true;
};

struct LowerInput {
  const BpfObject* object = nullptr;
  std::vector<ProgramToLower> programs;
  // BpfObject::maps index -> slot in __cuprobe_map_table; -1 for .rodata maps,
  // which are compiled into the module as constants.
  std::vector<int32_t> map_slot;
  int32_t printk_slot = -1;  // slot of the implicit printk RINGBUF
  RingLowering ring;
  MapLowering maps;
};

// Helper library symbols the IR of `module` calls (sorted).
[[nodiscard]] std::vector<std::string> HelperSymbolsUsed(const llvm::Module& module);

[[nodiscard]] absl::StatusOr<std::unique_ptr<llvm::Module>> LowerToLlvm(
    llvm::LLVMContext& context, const LowerInput& input, LowerTarget target);

// Runs LLVM's O2 pipeline on the module (with the target machine's analyses).
[[nodiscard]] absl::Status OptimizeModule(llvm::Module& module, llvm::TargetMachine* machine);

// The NVPTX target machine for sm_90 (owned by the caller).
[[nodiscard]] absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> CreateNvptxMachine();

// O2 + NVPTX code generation: the PTX text of the module.
[[nodiscard]] absl::StatusOr<std::string> EmitPtx(llvm::Module& module);

// The module as LLVM assembly text.
[[nodiscard]] std::string ModuleText(const llvm::Module& module);

// "19.1.7": the LLVM the compiler was built with.
[[nodiscard]] std::string LlvmVersion();

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_COMPILER_LOWER_H_
