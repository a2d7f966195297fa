// File: loader/compiler/verifier.h
//
// The probe verifier: an abstract interpreter over every path of an eBPF
// program (with state pruning), in the spirit of the Linux verifier but for
// cuprobe's virtual context and GPU helpers. It proves that a probe
//   - reads only initialised registers and stack bytes,
//   - accesses the context (read-only, whole fields at constant offsets), the
//     stack, map values and ring-buffer records within bounds and aligned,
//   - checks map lookups and ring-buffer reservations for NULL before use and
//     submits or discards every reservation,
//   - calls only known helpers with arguments of the right types,
//   - terminates: every loop has a bound the verifier can prove, and the
//     exploration stays within a configurable instruction budget.
// What it learns per instruction (which context field a load reads, whether
// an access is to the stack, the format string of a printk) is what the
// lowering (lower.h) needs; instructions it never reached are lowered to
// `unreachable`.
//
//   CUPROBE_ASSIGN_OR_RETURN(VerifiedProgram v, Verify(object, program, {}));
//   // On rejection the status message reads, e.g.:
//   // probe.bpf.c:14:9: error: program 'count' (cuprobe/entry/*) insn 7
//   //   'r1 = *(u64 *)(r0 + 0)': R0 may be NULL (a map lookup result)
//   //       u64 v = *value;
//   //   hint: check the pointer against NULL before using it
#ifndef CUPROBE_LOADER_COMPILER_VERIFIER_H_
#define CUPROBE_LOADER_COMPILER_VERIFIER_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loader/compiler/object.h"
#include "probe/bundle.h"

namespace cuprobe {

struct VerifierOptions {
  // Programs longer than this are rejected before any analysis.
  uint32_t max_insns = 4096;
  // Instructions the abstract interpreter may process over all paths.
  uint64_t max_steps = 1'000'000;
};

// What the verifier learned about one instruction.
struct InsnInfo {
  bool reached = false;
  // Loads, stores, atomics.
  enum class Mem : uint8_t { kNone, kCtx, kStack, kOther, kMixed };
  Mem mem = Mem::kNone;
  int32_t ctx_offset = -1;   // kCtx: the field's offset in struct cuprobe_ctx
  int32_t stack_offset = 0;  // kStack: offset from the frame pointer (r10)
  bool stack_offset_known = false;  // the same constant on every path
  bool aligned = true;       // every path proved natural alignment
  // trace_printk / puts call sites.
  int32_t printk_format = -1;  // index into VerifiedProgram::printk_formats
  uint32_t printk_nargs = 0;
  // When paths reach the call with different formats (clang merges calls
  // that differ only in their format on the stack): all of them; the
  // lowering tells them apart by the string's bytes. Empty otherwise.
  std::vector<int32_t> printk_choices;
  // Calls of helpers that take a map in R1 (the lowering picks the helper's
  // specialized entry point by the map's type, abi.h 8.): the map
  // (BpfObject::maps index) when it is the same on every path, else
  // kCallMapMixed.
  static constexpr int32_t kCallMapNone = -2;   // not a map helper call
  static constexpr int32_t kCallMapMixed = -1;  // paths pass different maps
  int32_t call_map = kCallMapNone;
  // ... and their key (R2) when it points into the stack at the same
  // constant offset (from r10) on every path: the lowering then reads it
  // from the stack's alloca, so the stack need not be addressable.
  bool call_key_on_stack = false;
  int32_t call_key_stack_offset = 0;
};

struct VerifiedProgram {
  AttachKind attach = AttachKind::kEntry;
  std::string kernel_glob;
  std::vector<InsnInfo> insns;
  bool reads_args = false;
  std::vector<std::string> printk_formats;  // local to this program
  std::set<uint32_t> maps_used;             // BpfObject::maps indices
  std::set<int32_t> helpers_used;           // helper ids
  // The lowest frame-pointer offset any access or helper argument touches
  // (0: the stack is unused): the lowering gives the program only this much
  // of the 512-byte eBPF stack, which on the GPU is per-thread local memory.
  int32_t min_stack_offset = 0;
  uint64_t steps = 0;                       // instructions processed
};

// Attach point of a section name ("cuprobe/entry/vec*", "kprobe/foo",
// "kretprobe/foo", "kprobe/__memcapture"), or an error naming the section.
[[nodiscard]] absl::Status ParseAttachPoint(std::string_view section, AttachKind* kind,
                                            std::string* glob);

[[nodiscard]] absl::StatusOr<VerifiedProgram> Verify(const BpfObject& object,
                                                     const BpfProgram& program,
                                                     const VerifierOptions& options);

// Number of conversions (%d, %llx, %s, ...) in a printk format; "%%" is not one.
[[nodiscard]] int CountPrintkConversions(std::string_view format);

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_COMPILER_VERIFIER_H_
