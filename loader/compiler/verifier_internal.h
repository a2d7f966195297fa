// File: loader/compiler/verifier_internal.h
//
// The verifier's internals, shared by its source files; not a public header
// (users include verifier.h). It holds the abstract domain (Value: what a
// register or spilled stack slot may hold on one path; State: registers,
// stack bytes and open ring-buffer reservations) and the Verifier class,
// whose members are defined by responsibility:
//   verifier.cc         the structure checks, the exploration of every path
//                       with state pruning, the per-instruction dispatch, the
//                       diagnostics, and the public entry points;
//   verifier_domain.cc  the abstract values: bounds of scalar arithmetic,
//                       branch refinement, state inclusion; ALU and branch
//                       instructions;
//   verifier_access.cc  loads, stores, atomics and helpers' memory arguments:
//                       the context, the stack, map values, records;
//   verifier_call.cc    helper calls: the helper table, argument kinds, printk
//                       formats, results.
#ifndef CUPROBE_LOADER_COMPILER_VERIFIER_INTERNAL_H_
#define CUPROBE_LOADER_COMPILER_VERIFIER_INTERNAL_H_

#include <algorithm>
#include <array>
#include <bitset>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "loader/compiler/object.h"
#include "loader/compiler/verifier.h"

namespace cuprobe::verifier_internal {

inline constexpr uint64_t kU32Max = 0xffffffffull;

// ---- Abstract values --------------------------------------------------------

enum class Type : uint8_t {
  kNotInit,
  kScalar,
  kCtx,           // pointer to the virtual context
  kStack,         // pointer into this program's stack; offsets are from r10
  kMap,           // a map (ld_imm64 pseudo map), only for helpers
  kMapValue,      // pointer into a map value (or global data)
  kMapValueOrNull,
  kMem,           // ring-buffer record
  kMemOrNull,
};

[[nodiscard]] const char* TypeName(Type t);

inline int Ctz(uint64_t v) { return v == 0 ? 64 : __builtin_ctzll(v); }

struct Value {
  Type type = Type::kNotInit;
  // Scalars: unsigned and signed bounds; tz = trailing bits known to be zero.
  // Pointers: bounds of the offset (as signed) and its known trailing zeros.
  uint64_t umin = 0, umax = UINT64_MAX;
  int64_t smin = INT64_MIN, smax = INT64_MAX;
  int tz = 0;
  uint32_t map = 0;       // kMap / kMapValue*
  uint32_t mem_size = 0;  // kMem*
  uint32_t id = 0;        // *OrNull: shared by copies, for the NULL check
  uint32_t ref = 0;       // kMem*: the reservation to release

  static Value Unknown() {
    Value v;
    v.type = Type::kScalar;
    return v;
  }
  static Value Const(uint64_t c) {
    Value v;
    v.type = Type::kScalar;
    v.umin = v.umax = c;
    v.smin = v.smax = static_cast<int64_t>(c);
    v.tz = Ctz(c);
    return v;
  }
  static Value Range(uint64_t lo, uint64_t hi) {
    Value v = Unknown();
    v.umin = lo;
    v.umax = hi;
    v.Sync();
    return v;
  }
  static Value Pointer(Type t, int64_t off) {
    Value v;
    v.type = t;
    v.smin = v.smax = off;
    v.umin = v.umax = static_cast<uint64_t>(off);
    // Bases (stack frame, map values, records) are 8-byte aligned (abi.h).
    v.tz = std::min(3, Ctz(static_cast<uint64_t>(off)));
    return v;
  }

  bool IsConst() const { return type == Type::kScalar && umin == umax; }
  bool IsPointer() const { return type != Type::kScalar && type != Type::kNotInit; }
  bool ConstOffset() const { return smin == smax; }

  // Makes the signed and unsigned bounds agree.
  void Sync() {
    if (umax <= static_cast<uint64_t>(INT64_MAX)) {
      smin = std::max<int64_t>(smin, static_cast<int64_t>(umin));
      smax = std::min<int64_t>(smax, static_cast<int64_t>(umax));
    } else if (umin > static_cast<uint64_t>(INT64_MAX)) {
      smin = std::max<int64_t>(smin, static_cast<int64_t>(umin));
      smax = std::min<int64_t>(smax, static_cast<int64_t>(umax));
    }
    if (smin >= 0) {
      umin = std::max<uint64_t>(umin, static_cast<uint64_t>(smin));
      umax = std::min<uint64_t>(umax, static_cast<uint64_t>(smax));
    } else if (smax < 0) {
      umin = std::max<uint64_t>(umin, static_cast<uint64_t>(smin));
      umax = std::min<uint64_t>(umax, static_cast<uint64_t>(smax));
    }
    if (umin == umax) {
      smin = smax = static_cast<int64_t>(umin);
      tz = Ctz(umin);
    }
  }
  bool Empty() const { return umin > umax || smin > smax; }

  bool operator==(const Value& o) const {
    if (type != o.type) return false;
    if (type == Type::kNotInit) return true;
    return umin == o.umin && umax == o.umax && smin == o.smin && smax == o.smax && tz == o.tz &&
           map == o.map && mem_size == o.mem_size && id == o.id && ref == o.ref;
  }
};

// Is every concrete value of `cur` a value of `old`?
[[nodiscard]] bool Within(const Value& old, const Value& cur);

// ---- Verifier state ----------------------------------------------------------

enum class Slot : uint8_t { kUninit, kMisc, kSpill };

struct State {
  std::array<Value, kNumRegs> regs;
  std::array<Slot, kStackSize> stack{};  // byte i = fp - 512 + i
  std::array<Value, kStackSize / 8> spills;
  // kMisc bytes that a store of a constant wrote (byte_value is 0 where
  // byte_known is not set): a printk format built on the stack
  // (BPF_NO_GLOBAL_DATA, char msg[] = "...") is read from them.
  std::bitset<kStackSize> byte_known;
  std::array<uint8_t, kStackSize> byte_value{};
  std::vector<uint32_t> refs;  // unreleased ring-buffer reservations
  bool in_loop = false;        // a back edge was taken on this path
  uint32_t loop_header = 0;

  bool operator==(const State& o) const {
    return regs == o.regs && stack == o.stack && spills == o.spills &&
           byte_known == o.byte_known && byte_value == o.byte_value && refs == o.refs;
  }
};

// Stack byte i's value when a constant was stored there (a kMisc byte of a
// constant store, or a byte of a spilled constant), else nullopt.
[[nodiscard]] std::optional<uint8_t> KnownStackByte(const State& st, int i);

// Is every concrete state of `cur` a state of `old` (so that a path reaching
// `cur` where `old` was explored need not go on)?
[[nodiscard]] bool StateWithin(const State& old, const State& cur);

// ---- The verifier ------------------------------------------------------------

struct Rejection {
  uint32_t pc;
  std::string message;
  std::string hint;
};

struct PendingBranch {
  uint32_t pc;
  std::shared_ptr<State> state;
};

struct StoredState {
  std::shared_ptr<const State> state;
  size_t stack_size = 0;  // pending branches when stored
  bool complete = false;
};

// Defined in verifier_call.cc: a helper's signature, and what the arguments
// of one call established.
struct HelperSpec;
struct CallFacts;

class Verifier {
 public:
  Verifier(const BpfObject& object, const BpfProgram& program, const VerifierOptions& options)
      : obj_(object), prog_(program), options_(options) {}

  absl::StatusOr<VerifiedProgram> Run();

 private:
  using Result = std::optional<Rejection>;

  Result Reject(uint32_t pc, std::string message, std::string hint = "") {
    return Rejection{pc, std::move(message), std::move(hint)};
  }
  Result ReadReg(uint32_t pc, const State& st, int reg) {
    if (st.regs[reg].type == Type::kNotInit) {
      return Reject(pc, absl::StrCat("R", reg, " is read before it is initialised"),
                    reg >= 1 && reg <= 5
                        ? "R1-R5 are clobbered by every helper call; keep values in R6-R9 "
                          "or on the stack across calls"
                        : "initialise the variable before using it");
    }
    return std::nullopt;
  }

  // verifier.cc: structure, exploration, dispatch.
  absl::Status Format(const Rejection& r) const;
  Result CheckStructure();
  Result Explore();
  // Executes the instruction at pc on `st`; sets *next (and, for a branch,
  // pushes the other side). *done: the path ended (exit or infeasible).
  Result Step(uint32_t pc, State& st, uint32_t* next, bool* done);
  Result DoExit(uint32_t pc, State& st);

  // verifier_domain.cc: ALU and branch instructions.
  Result DoAlu(uint32_t pc, const Insn& insn, State& st);
  Result CheckAluEncoding(uint32_t pc, const Insn& insn);
  Result DoMov(uint32_t pc, const Insn& insn, const Value& src, Value& dst);
  Result DoPointerAlu(uint32_t pc, const Insn& insn, const Value& src, Value& dst);
  Result DoBranch(uint32_t pc, const Insn& insn, State& st, uint32_t* next, bool* done);
  Result BranchOnPointer(uint32_t pc, const Insn& insn, const Value& src, State& st,
                         State& taken, bool* can_take, bool* can_fall);
  void BranchOnScalars(const Insn& insn, const Value& src, int src_reg, State& st, State& taken,
                       bool* can_take, bool* can_fall);
  void MarkNull(State& st, uint32_t id, bool is_null);

  // verifier_access.cc: memory.
  Result DoLoad(uint32_t pc, const Insn& insn, State& st);
  Result DoStore(uint32_t pc, const Insn& insn, State& st);
  Result DoAtomic(uint32_t pc, const Insn& insn, State& st);
  // Checks an access of `size` bytes at reg + off. For the stack, marks or
  // reads bytes. `out` receives the loaded value (loads).
  enum class Access { kRead, kWrite, kAtomic };
  Result CheckAccess(uint32_t pc, State& st, int reg, int32_t off, int size, Access access,
                     const Value* stored, Value* out, bool sign_extend);
  // CheckAccess by the base pointer's type (`base` is the register).
  Result CheckCtxAccess(uint32_t pc, const Value& base, int32_t off, int size, Access access,
                        Value* out, bool sign_extend);
  Result CheckStackAccess(uint32_t pc, State& st, const Value& base, int32_t off, int size,
                          Access access, const Value* stored, Value* out, bool sign_extend);
  Result CheckValueAccess(uint32_t pc, const Value& base, int32_t off, int size, Access access,
                          const Value* stored, Value* out, bool sign_extend);
  Result CheckStackRange(uint32_t pc, const State& st, int64_t lo, int64_t hi, bool write,
                         const char* what);
  Result CheckMemArg(uint32_t pc, State& st, int reg, uint64_t size, bool write, const char* what);
  void RecordMem(uint32_t pc, InsnInfo::Mem kind, int32_t ctx_offset, const Value* stack_ptr,
                 int32_t insn_off, bool aligned);

  // verifier_call.cc: DoCall and its steps (the helper, its arguments, a
  // printk's format, the call's effect).
  Result DoCall(uint32_t pc, const Insn& insn, State& st);
  Result ResolveHelper(uint32_t pc, const Insn& insn, const HelperSpec** h);
  Result CheckHelperArg(uint32_t pc, State& st, const HelperSpec& h, int a, CallFacts& call);
  Result WrongArg(uint32_t pc, const HelperSpec& h, int a, const Value& v, const char* expected);
  Result CheckMapArg(uint32_t pc, const HelperSpec& h, int a, const Value& v, CallFacts& call);
  Result CheckMapType(uint32_t pc, const HelperSpec& h, const ObjectMap& map);
  Result CheckSizedMemArg(uint32_t pc, State& st, const HelperSpec& h, int a);
  Result CheckConstSizeArg(uint32_t pc, const HelperSpec& h, int a, const Value& v,
                           CallFacts& call);
  Result FormatString(uint32_t pc, const State& st, const Value& v, uint64_t size_limit,
                      std::string* out);
  Result StackString(uint32_t pc, const State& st, const Value& v, uint64_t size_limit,
                     std::string* out);
  Result CheckPrintk(uint32_t pc, const State& st, const HelperSpec& h, const std::string& format);
  void ReleaseRecord(State& st, uint32_t ref);
  void SetCallResult(State& st, const HelperSpec& h, const CallFacts& call);
  void RecordCallMap(uint32_t pc, uint32_t map);
  void RecordCallKey(uint32_t pc, const Value& key);

  const BpfObject& obj_;
  const BpfProgram& prog_;
  const VerifierOptions& options_;
  VerifiedProgram out_;
  std::vector<bool> prune_point_;
  std::vector<std::vector<StoredState>> stored_;
  std::vector<std::pair<uint32_t, StoredState*>> incomplete_;  // (pc, entry) on current path
  std::vector<PendingBranch> pending_;
  uint32_t next_id_ = 1;
  std::map<uint32_t, std::vector<int32_t>> printk_at_;  // pc -> its formats (printk_formats)
  std::set<uint32_t> call_key_seen_;           // helper calls whose key was recorded
};

}  // namespace cuprobe::verifier_internal

#endif  // CUPROBE_LOADER_COMPILER_VERIFIER_INTERNAL_H_
