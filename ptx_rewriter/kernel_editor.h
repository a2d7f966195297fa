// File: ptx_rewriter/kernel_editor.h
//
// What every rewriter pass works through: a KernelEditor queues PTX to insert
// before statements of one kernel's body, hands out fresh registers, and
// rebuilds the body once at the end (Finish). Passes never edit the body
// directly, so
//   - they all see the original statement indices (entry, exit and memory
//     passes run on the same kernel without shifting each other's sites);
//   - a pass that fails leaves the kernel exactly as it was (the editor is
//     dropped, nothing was applied): one bad kernel never costs the others;
//   - generated PTX is parsed back into statements (ParseBodyStatements)
//     before it is accepted, so a generator bug is an error, not bad output.
//
//   KernelEditor editor(module, kernel);
//   std::string addr = editor.ScratchRegister(".b64", 0);
//   CUPROBE_RETURN_IF_ERROR(editor.InsertBefore(i, absl::StrCat(
//       "add.s64 ", addr, ", %rd4, 8;\n", ProbeCallText(call))));
//   CUPROBE_RETURN_IF_ERROR(editor.Finish());
//
// Also here: the probe call sequence of the ABI (include/cuprobe/abi.h):
//
//   {
//   .param .b64 __cp_a0;  .param .b32 __cp_a1;  .param .b32 __cp_a2;
//   .param .b32 __cp_a3;  .param .b64 __cp_a4;  .param .b32 __cp_ret;
//   st.param.b64 [__cp_a0], %__cp_rd0;     // mem_addr (0 for entry/exit)
//   st.param.b32 [__cp_a1], 1048580;       // mem_info
//   st.param.b32 [__cp_a2], 7;             // kernel_id
//   st.param.b32 [__cp_a3], 2;             // site_index
//   st.param.b64 [__cp_a4], %__cp_args;    // struct cuprobe_args*, or 0
//   @%p1 call (__cp_ret), probe_fn, (__cp_a0, __cp_a1, __cp_a2, __cp_a3, __cp_a4);
//   }
//
// or, with ProbeCall::indirect, the same call through a pointer:
//   .reg .b64 %__cp_fn;
//   mov.u64 %__cp_fn, probe_fn;
//   __cp_proto : .callprototype (.param .b32 _) _ (.param .b64 _, ...);
//   @%p1 call (__cp_ret), %__cp_fn, (__cp_a0, ...), __cp_proto;
//
// `call`, never `call.uni`: probes run at sites that may be divergent, and a
// guarded site (`@%p1 ret;`) calls the probe under the same guard.
#ifndef CUPROBE_PTX_REWRITER_KERNEL_EDITOR_H_
#define CUPROBE_PTX_REWRITER_KERNEL_EDITOR_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "probe/bundle.h"
#include "ptx_rewriter/ptx_module.h"
#include "ptx_rewriter/site_summary.h"

namespace cuprobe {

// A probe program as the passes see it: the (linked) PTX function to call.
struct ProbeRef {
  std::string function;
  bool reads_args = false;
  uint32_t mem_spaces = 0;  // memory probes: bit (1 << CUPROBE_SPACE_*) per space
  const ProbeProgram* program = nullptr;  // for site counters; may be null
};

// Site counters of a module (site_summary.h): the table, the bundle's maps,
// and the counters the kernel being rewritten uses.
struct SiteCounterState {
  SiteCounterTable* table = nullptr;
  absl::Span<const MapSpec> maps;
  std::vector<uint32_t> used;  // counter indices, in first-use order
  // Thread-range counters (abi.h) the kernel records once per launch, one
  // entry per probe that reduced to one (a counter may appear twice).
  std::vector<uint32_t> thread_ranges;
};

// Everything the passes insert into one kernel.
struct KernelProbes {
  uint32_t kernel_id = 0;
  bool indirect_calls = false;  // see ProbeCall::indirect
  std::vector<ProbeRef> entry;
  std::vector<ProbeRef> exit;
  std::vector<ProbeRef> memory;
  SiteCounterState* sites = nullptr;  // null: every site calls its probes
  [[nodiscard]] bool NeedsArgs() const;
};

// Counts a pass reports for one kernel.
struct PassStats {
  uint32_t entry_sites = 0;
  uint32_t exit_sites = 0;
  uint32_t memory_sites = 0;          // accesses instrumented
  uint32_t memory_sites_skipped = 0;  // accesses whose address could not be formed
  bool args_copied = false;
  uint32_t counted_calls = 0;  // probe calls replaced by site counter increments
};

// One call of a probe, in operand text.
struct ProbeCall {
  std::string_view function;
  std::string_view mem_addr = "0";  // a .b64 register or an immediate
  uint32_t mem_info = 0;
  uint32_t kernel_id = 0;
  uint32_t site_index = 0;
  std::string_view args = "0";      // a .b64 register or "0"
  std::string_view guard;           // predicate of the site, or empty
  bool guard_negated = false;
  // Call through a function pointer and a .callprototype instead of by
  // name. ptxas 13 sometimes fails register allocation around a direct call
  // in kernels that keep many uniform predicates live ("C7600: Register
  // allocation failed with register count of '7'", seen in CUB's onesweep
  // radix sort); an indirect call makes it use the standard ABI and
  // succeed, at the price of more registers. Compile() falls back to it.
  bool indirect = false;
};

// The PTX block that calls a probe (see the file comment).
[[nodiscard]] std::string ProbeCallText(const ProbeCall& call);

class KernelEditor {
 public:
  // `kernel` must be a function of `module` with a body; both must outlive
  // the editor.
  KernelEditor(Module& module, Function& kernel);

  [[nodiscard]] Module& module() { return module_; }
  [[nodiscard]] Function& kernel() { return kernel_; }

  // A register of `type` (".b64", ".b32", ".pred") reserved for the passes,
  // declared at the top of the body at Finish. Scratch registers are reused
  // at every site (their values never live across a site); `slot` picks one.
  [[nodiscard]] std::string ScratchRegister(std::string_view type, uint32_t slot);
  // A register that lives for the whole kernel, e.g. the args pointer.
  [[nodiscard]] std::string KernelRegister(std::string_view name, std::string_view type);

  // Width in bits of a register of the kernel (64 for `%rd4` declared by
  // `.reg .b64 %rd<9>`), 0 when it is not declared in the kernel.
  [[nodiscard]] uint32_t RegisterBits(std::string_view reg) const;

  // Index of the first body statement after the leading declarations: where
  // entry code goes (every path through the kernel starts there).
  [[nodiscard]] size_t EntryPoint() const;

  // Queues `ptx` (statements, one or more, blocks balanced) to go before
  // body[index] (index == body size: at the end). Calls for the same index
  // keep their order.
  [[nodiscard]] absl::Status InsertBefore(size_t index, std::string ptx);
  // Queues `ptx` at EntryPoint() ahead of everything queued there, before
  // or after this call (e.g. what must run before any probe site).
  [[nodiscard]] absl::Status InsertAtEntryFront(std::string ptx);
  // Queues a declaration for the top of the body (`.local .align 8 .b8 x[136];`).
  [[nodiscard]] absl::Status Declare(std::string ptx);
  // A name for a function-scope variable that no module-level symbol uses.
  [[nodiscard]] std::string FreshVariableName(std::string_view base) const;

  // Rebuilds the kernel body with everything queued. The editor is spent.
  [[nodiscard]] absl::Status Finish();

  [[nodiscard]] bool HasEdits() const { return !inserts_.empty() || !declarations_.empty(); }

 private:
  struct RegInfo {
    uint32_t bits = 0;
    bool parameterized = false;  // `%r<9>`: names %r0..%r8
  };

  Module& module_;
  Function& kernel_;
  std::string prefix_;  // of the registers the passes add: "%__cp" unless taken
  absl::flat_hash_map<std::string_view, RegInfo> regs_;
  // (body index, statements) in call order; stable-sorted at Finish.
  std::vector<std::pair<size_t, std::vector<Statement>>> inserts_;
  std::vector<Statement> declarations_;
  absl::flat_hash_map<std::string, std::string> added_regs_;  // name -> type
  std::vector<std::string> added_order_;
};

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_KERNEL_EDITOR_H_
