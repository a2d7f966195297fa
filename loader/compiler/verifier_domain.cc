// File: loader/compiler/verifier_domain.cc
//
// The verifier's abstract values (verifier_internal.h): what the bounds of
// a scalar are after arithmetic, what a branch teaches about its operands,
// when one state includes another (pruning), and the ALU and conditional
// jump instructions that use them, pointer arithmetic and NULL checks
// included.
#include "loader/compiler/verifier_internal.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "probe/alu.h"

namespace cuprobe::verifier_internal {
namespace {

constexpr int64_t kMaxPtrOffset = 1 << 29;  // pointer arithmetic bound

// ---- Scalar arithmetic on bounds -----------------------------------------------

bool AddOverflowsU(uint64_t a, uint64_t b) { return a + b < a; }

// Bounds of the bitwise operations and shifts (into `r`, an unknown scalar).
void BitwiseBounds(const Insn& insn, const Value& d, const Value& s, Value& r) {
  switch (insn.Op()) {
    case kAluAnd:
      r.umin = 0;
      r.umax = std::min(d.umax, s.umax);
      r.tz = std::max(d.tz, s.tz);
      break;
    case kAluOr:
    case kAluXor: {
      // Bounded by the next power of two of the larger operand.
      const uint64_t m = std::max(d.umax, s.umax);
      const int bits = m == 0 ? 0 : 64 - __builtin_clzll(m);
      r.umin = insn.Op() == kAluOr ? std::max(d.umin, s.umin) : 0;
      r.umax = bits >= 64 ? UINT64_MAX : ((uint64_t{1} << bits) - 1);
      r.tz = std::min(d.tz, s.tz);
      break;
    }
    case kAluLsh:
      if (s.IsConst() && s.umin < 64) {
        const int k = static_cast<int>(s.umin);
        if (k == 0 || (d.umax >> (64 - k)) == 0) {
          r.umin = d.umin << k;
          r.umax = d.umax << k;
        }
        r.tz = std::min(64, d.tz + k);
      }
      break;
    case kAluRsh:
      if (s.IsConst()) {
        const int k = static_cast<int>(s.umin & 63);
        r.umin = d.umin >> k;
        r.umax = d.umax >> k;
      } else {
        r.umin = 0;
        r.umax = d.umax;
      }
      break;
    default:
      break;
  }
}

Value ScalarAlu64(const Insn& insn, const Value& d, const Value& s) {
  if (d.IsConst() && s.IsConst()) return Value::Const(EvalAlu(insn, d.umin, s.umin));
  Value r = Value::Unknown();
  switch (insn.Op()) {
    case kAluAdd:
      if (!AddOverflowsU(d.umax, s.umax)) {
        r.umin = d.umin + s.umin;
        r.umax = d.umax + s.umax;
      }
      if (!__builtin_add_overflow(d.smin, s.smin, &r.smin) &&
          !__builtin_add_overflow(d.smax, s.smax, &r.smax)) {
      } else {
        r.smin = INT64_MIN;
        r.smax = INT64_MAX;
      }
      r.tz = std::min(d.tz, s.tz);
      break;
    case kAluSub:
      if (d.umin >= s.umax) {
        r.umin = d.umin - s.umax;
        r.umax = d.umax - s.umin;
      }
      if (__builtin_sub_overflow(d.smin, s.smax, &r.smin) ||
          __builtin_sub_overflow(d.smax, s.smin, &r.smax)) {
        r.smin = INT64_MIN;
        r.smax = INT64_MAX;
      }
      r.tz = std::min(d.tz, s.tz);
      break;
    case kAluMul: {
      unsigned __int128 hi = static_cast<unsigned __int128>(d.umax) * s.umax;
      if (hi <= UINT64_MAX) {
        r.umin = d.umin * s.umin;
        r.umax = static_cast<uint64_t>(hi);
      }
      r.tz = std::min(64, d.tz + s.tz);
      break;
    }
    case kAluAnd:
    case kAluOr:
    case kAluXor:
    case kAluLsh:
    case kAluRsh:
      BitwiseBounds(insn, d, s, r);
      break;
    case kAluDiv:
      if (insn.off == 0 && s.umin > 0) {
        r.umin = d.umin / s.umax;
        r.umax = d.umax / s.umin;
      } else if (insn.off == 0) {
        r.umin = 0;
        r.umax = d.umax;
      }
      break;
    case kAluMod:
      if (insn.off == 0) {
        r.umin = 0;
        r.umax = s.umin > 0 ? std::min(d.umax, s.umax - 1) : d.umax;
      }
      break;
    case kAluMov:
      if (insn.off == 0) return s;
      break;
    default:
      break;
  }
  r.Sync();
  if (r.Empty()) return Value::Unknown();
  return r;
}

Value ScalarAlu(const Insn& insn, const Value& d, const Value& s) {
  if (insn.Class() == kClassAlu64) return ScalarAlu64(insn, d, s);
  if (d.IsConst() && s.IsConst()) return Value::Const(EvalAlu(insn, d.umin, s.umin));
  if (insn.Op() == kAluMov && insn.off == 0) {
    if (s.umax <= kU32Max) return s;
    return Value::Range(0, kU32Max);
  }
  // Operands below 2^32 and a result below 2^32: the 64-bit bounds hold.
  if (d.umax <= kU32Max && s.umax <= kU32Max && insn.Op() != kAluArsh && insn.Op() != kAluNeg &&
      insn.Op() != kAluEnd && insn.off == 0) {
    Insn wide = insn;
    wide.code = static_cast<uint8_t>((insn.code & ~0x07) | kClassAlu64);
    Value r = ScalarAlu64(wide, d, s);
    if (r.umax <= kU32Max) return r;
  }
  return Value::Range(0, kU32Max);
}

// The comparison that holds when "a OP b" does not (none for kJmpJset, whose
// negation "a & b == 0" is no jump opcode, or for a non-comparison).
std::optional<uint8_t> NegatedJmp(uint8_t op) {
  switch (op) {
    case kJmpJeq: return kJmpJne;
    case kJmpJne: return kJmpJeq;
    case kJmpJgt: return kJmpJle;
    case kJmpJge: return kJmpJlt;
    case kJmpJlt: return kJmpJge;
    case kJmpJle: return kJmpJgt;
    case kJmpJsgt: return kJmpJsle;
    case kJmpJsge: return kJmpJslt;
    case kJmpJslt: return kJmpJsge;
    case kJmpJsle: return kJmpJsgt;
    default: return std::nullopt;
  }
}

// Refines `a` and `b` (scalars) under "a OP b" being `taken`. Returns false
// if that is impossible.
bool Refine(uint8_t op, bool taken, Value& a, Value& b) {
  if (!taken) {
    if (op == kJmpJset) {
      // Not taken: a & b == 0. With b constant, a's known bits stay unknown.
      if (a.IsConst() && b.IsConst()) return (a.umin & b.umin) == 0;
      return true;
    }
    const std::optional<uint8_t> negated = NegatedJmp(op);
    if (!negated) return true;
    op = *negated;
  }
  switch (op) {
    case kJmpJeq: {
      const uint64_t lo = std::max(a.umin, b.umin), hi = std::min(a.umax, b.umax);
      const int64_t slo = std::max(a.smin, b.smin), shi = std::min(a.smax, b.smax);
      a.umin = b.umin = lo;
      a.umax = b.umax = hi;
      a.smin = b.smin = slo;
      a.smax = b.smax = shi;
      a.tz = b.tz = std::max(a.tz, b.tz);
      break;
    }
    case kJmpJne:
      if (a.IsConst() && b.IsConst()) return a.umin != b.umin;
      if (b.IsConst()) {
        if (a.umin == b.umin) ++a.umin;
        if (a.umax == b.umin) --a.umax;
      }
      if (a.IsConst()) {
        if (b.umin == a.umin) ++b.umin;
        if (b.umax == a.umin) --b.umax;
      }
      break;
    case kJmpJgt:  // a > b
      if (b.umin == UINT64_MAX || a.umax == 0) return false;
      a.umin = std::max(a.umin, b.umin + 1);
      b.umax = std::min(b.umax, a.umax - 1);
      break;
    case kJmpJge:
      a.umin = std::max(a.umin, b.umin);
      b.umax = std::min(b.umax, a.umax);
      break;
    case kJmpJlt:
      if (a.umin == UINT64_MAX || b.umax == 0) return false;
      a.umax = std::min(a.umax, b.umax - 1);
      b.umin = std::max(b.umin, a.umin + 1);
      break;
    case kJmpJle:
      a.umax = std::min(a.umax, b.umax);
      b.umin = std::max(b.umin, a.umin);
      break;
    case kJmpJsgt:
      if (b.smin == INT64_MAX || a.smax == INT64_MIN) return false;
      a.smin = std::max(a.smin, b.smin + 1);
      b.smax = std::min(b.smax, a.smax - 1);
      break;
    case kJmpJsge:
      a.smin = std::max(a.smin, b.smin);
      b.smax = std::min(b.smax, a.smax);
      break;
    case kJmpJslt:
      if (a.smin == INT64_MAX || b.smax == INT64_MIN) return false;
      a.smax = std::min(a.smax, b.smax - 1);
      b.smin = std::max(b.smin, a.smin + 1);
      break;
    case kJmpJsle:
      a.smax = std::min(a.smax, b.smax);
      b.smin = std::max(b.smin, a.smin);
      break;
    case kJmpJset:
      if (a.IsConst() && b.IsConst()) return (a.umin & b.umin) != 0;
      if (a.umax == 0 || b.umax == 0) return false;
      break;
    default:
      break;
  }
  if (a.Empty() || b.Empty()) return false;
  a.Sync();
  b.Sync();
  return !a.Empty() && !b.Empty();
}

}  // namespace

const char* TypeName(Type t) {
  switch (t) {
    case Type::kNotInit: return "uninitialised";
    case Type::kScalar: return "a scalar";
    case Type::kCtx: return "the context pointer";
    case Type::kStack: return "a stack pointer";
    case Type::kMap: return "a map";
    case Type::kMapValue: return "a map value pointer";
    case Type::kMapValueOrNull: return "a map value pointer that may be NULL";
    case Type::kMem: return "a ring-buffer record pointer";
    case Type::kMemOrNull: return "a ring-buffer record pointer that may be NULL";
  }
  return "?";
}

bool Within(const Value& old, const Value& cur) {
  if (old.type == Type::kNotInit) return true;  // never read on the old path
  if (old.type != cur.type) return false;
  if (cur.umin < old.umin || cur.umax > old.umax || cur.smin < old.smin || cur.smax > old.smax ||
      cur.tz < old.tz) {
    return false;
  }
  return old.map == cur.map && old.mem_size == cur.mem_size && old.id == cur.id &&
         old.ref == cur.ref;
}

bool StateWithin(const State& old, const State& cur) {
  for (int r = 0; r < kNumRegs; ++r) {
    if (!Within(old.regs[r], cur.regs[r])) return false;
  }
  for (int i = 0; i < kStackSize; ++i) {
    if (old.stack[i] == Slot::kUninit) continue;
    if (cur.stack[i] == Slot::kUninit) return false;
    if (old.stack[i] == Slot::kSpill) {
      if (cur.stack[i] != Slot::kSpill) {
        // A spilled unknown scalar accepts plain data.
        const Value& o = old.spills[i / 8];
        if (!(o.type == Type::kScalar && o.umin == 0 && o.umax == UINT64_MAX)) return false;
      } else if (i % 8 == 0 && !Within(old.spills[i / 8], cur.spills[i / 8])) {
        return false;
      }
    } else if (cur.stack[i] == Slot::kSpill && cur.spills[i / 8].type != Type::kScalar) {
      return false;
    } else if (old.byte_known[i] && KnownStackByte(cur, i) != old.byte_value[i]) {
      return false;  // a constant byte (of a format, say) that cur may not hold
    }
  }
  return old.refs == cur.refs;
}

// ---- ALU and branch instructions ----------------------------------------------

Verifier::Result Verifier::DoAlu(uint32_t pc, const Insn& insn, State& st) {
  const uint8_t op = insn.Op();
  if (auto r = CheckAluEncoding(pc, insn); r) return r;
  Value src;
  if (op != kAluNeg && op != kAluEnd) {
    if (insn.UsesSrcReg()) {
      if (auto r = ReadReg(pc, st, insn.src); r) return r;
      src = st.regs[insn.src];
    } else {
      src = Value::Const(static_cast<uint64_t>(static_cast<int64_t>(insn.imm)));
    }
  }
  Value& dst = st.regs[insn.dst];
  if (op == kAluMov) return DoMov(pc, insn, src, dst);
  if (auto r = ReadReg(pc, st, insn.dst); r) return r;
  if (dst.IsPointer() || src.IsPointer()) return DoPointerAlu(pc, insn, src, dst);
  dst = ScalarAlu(insn, dst, src);
  return std::nullopt;
}

// The fields of an ALU instruction that the opcode does not fix.
Verifier::Result Verifier::CheckAluEncoding(uint32_t pc, const Insn& insn) {
  const uint8_t op = insn.Op();
  const bool is64 = insn.Class() == kClassAlu64;
  if (insn.dst == 10) return Reject(pc, "r10 (the frame pointer) is read-only");
  if (op > kAluEnd) return Reject(pc, absl::StrCat("unknown ALU opcode 0x", absl::Hex(insn.code)));
  if (op == kAluEnd) {
    if (insn.imm != 16 && insn.imm != 32 && insn.imm != 64) {
      return Reject(pc, absl::StrCat("byte swap of ", insn.imm, " bits"));
    }
  }
  if ((op == kAluDiv || op == kAluMod) && insn.off != 0 && insn.off != 1) {
    return Reject(pc, "invalid offset on a division");
  }
  if (op == kAluMov && insn.off != 0 &&
      !(insn.off == 8 || insn.off == 16 || (insn.off == 32 && is64))) {
    return Reject(pc, "invalid sign-extension width on a move");
  }
  return std::nullopt;
}

// A move: a 64-bit one copies pointers too; a narrowing or sign-extending
// one makes a number of a pointer.
Verifier::Result Verifier::DoMov(uint32_t pc, const Insn& insn, const Value& src, Value& dst) {
  const bool is64 = insn.Class() == kClassAlu64;
  if (insn.off == 0 && is64) {
    dst = src;
    return std::nullopt;
  }
  if (src.IsPointer()) {
    // Truncating or sign-extending a pointer makes a number of it; for
    // the virtual context there is no address at all.
    if (src.type == Type::kCtx) {
      return Reject(pc, "the context pointer cannot be converted to a number",
                    "the context is virtual: read its fields instead");
    }
    dst = is64 ? Value::Unknown() : Value::Range(0, kU32Max);
    return std::nullopt;
  }
  dst = ScalarAlu(insn, Value::Const(0), src);
  return std::nullopt;
}

// Pointer arithmetic: only a bounded offset added to or subtracted from a
// checked pointer (or the difference of two pointers into the same stack
// or map value, a number).
Verifier::Result Verifier::DoPointerAlu(uint32_t pc, const Insn& insn, const Value& src,
                                        Value& dst) {
  const uint8_t op = insn.Op();
  const bool is64 = insn.Class() == kClassAlu64;
  if (!is64) {
    return Reject(pc, "32-bit arithmetic on a pointer", "use 64-bit arithmetic on pointers");
  }
  if (op == kAluSub && dst.IsPointer() && src.IsPointer()) {
    if (dst.type == src.type && dst.map == src.map &&
        (dst.type == Type::kStack || dst.type == Type::kMapValue)) {
      dst = Value::Unknown();
      return std::nullopt;
    }
    return Reject(pc, "subtraction of unrelated pointers");
  }
  if (op != kAluAdd && op != kAluSub) {
    return Reject(pc,
                  absl::StrCat("arithmetic (", Disassemble(insn, nullptr), ") on ",
                               TypeName(dst.IsPointer() ? dst.type : src.type),
                               " is not allowed"),
                  "only adding or subtracting an offset to a pointer is allowed");
  }
  if (dst.IsPointer() && src.IsPointer()) return Reject(pc, "addition of two pointers");
  Value ptr = dst.IsPointer() ? dst : src;
  const Value scalar = dst.IsPointer() ? src : dst;
  if (op == kAluSub && !dst.IsPointer()) return Reject(pc, "subtracting a pointer from a scalar");
  if (ptr.type == Type::kMap) {
    return Reject(pc, "arithmetic on a map pointer", "pass the map to a helper as it is");
  }
  if (ptr.type == Type::kMapValueOrNull || ptr.type == Type::kMemOrNull) {
    return Reject(pc, absl::StrCat("arithmetic on ", TypeName(ptr.type)),
                  "check the pointer against NULL first");
  }
  if (ptr.type == Type::kCtx && !scalar.IsConst()) {
    return Reject(pc, "variable offset added to the context pointer",
                  "read ctx->args[i] with a constant i, or use cuprobe_get_arg(ctx, i)");
  }
  if (scalar.smin < -kMaxPtrOffset || scalar.smax > kMaxPtrOffset) {
    return Reject(pc,
                  absl::StrCat("offset added to ", TypeName(ptr.type), " is unbounded [",
                               scalar.smin, ", ", scalar.smax, "]"),
                  "bound the index with an if (i < N) check before using it");
  }
  int64_t lo = scalar.smin, hi = scalar.smax;
  if (op == kAluSub) {
    lo = -scalar.smax;
    hi = -scalar.smin;
  }
  ptr.smin += lo;
  ptr.smax += hi;
  ptr.tz = std::min(ptr.tz, scalar.tz);
  if (ptr.smin < -kMaxPtrOffset || ptr.smax > kMaxPtrOffset) {
    return Reject(pc, "pointer offset out of range");
  }
  ptr.umin = static_cast<uint64_t>(ptr.smin);
  ptr.umax = static_cast<uint64_t>(ptr.smax);
  if (ptr.ConstOffset()) ptr.tz = std::min(3, Ctz(static_cast<uint64_t>(ptr.smin)));
  dst = ptr;
  return std::nullopt;
}

void Verifier::MarkNull(State& st, uint32_t id, bool is_null) {
  auto mark = [&](Value& v) {
    if (v.id != id || (v.type != Type::kMapValueOrNull && v.type != Type::kMemOrNull)) return;
    if (is_null) {
      if (v.ref != 0) st.refs.erase(std::remove(st.refs.begin(), st.refs.end(), v.ref),
                                    st.refs.end());
      v = Value::Const(0);
    } else {
      v.type = v.type == Type::kMapValueOrNull ? Type::kMapValue : Type::kMem;
      v.id = 0;
    }
  };
  for (Value& r : st.regs) mark(r);
  for (Value& s : st.spills) mark(s);
}

Verifier::Result Verifier::DoBranch(uint32_t pc, const Insn& insn, State& st, uint32_t* next,
                                    bool* done) {
  const uint8_t op = insn.Op();
  if (op == kJmpJa) {
    *next = pc + 1 + (insn.Class() == kClassJmp32 ? insn.imm : insn.off);
    return std::nullopt;
  }
  if (auto r = ReadReg(pc, st, insn.dst); r) return r;
  Value src;
  int src_reg = -1;
  if (insn.UsesSrcReg()) {
    if (auto r = ReadReg(pc, st, insn.src); r) return r;
    src = st.regs[insn.src];
    src_reg = insn.src;
  } else {
    src = Value::Const(static_cast<uint64_t>(static_cast<int64_t>(insn.imm)));
  }
  const uint32_t target = pc + 1 + insn.off;
  const Value& dst = st.regs[insn.dst];
  bool can_take = true, can_fall = true;
  auto taken_state = std::make_shared<State>(st);
  if (dst.IsPointer() || src.IsPointer()) {
    if (auto r = BranchOnPointer(pc, insn, src, st, *taken_state, &can_take, &can_fall); r) {
      return r;
    }
  } else {
    BranchOnScalars(insn, src, src_reg, st, *taken_state, &can_take, &can_fall);
  }
  if (!can_take && !can_fall) {
    *done = true;
    return std::nullopt;
  }
  if (can_take && can_fall) {
    if (target <= pc) {  // a back edge, taken when the branch is resumed
      taken_state->in_loop = true;
      taken_state->loop_header = target;
    }
    pending_.push_back(PendingBranch{target, std::move(taken_state)});
    *next = pc + 1;
  } else if (can_take) {
    st = *taken_state;
    *next = target;
  } else {
    *next = pc + 1;
  }
  return std::nullopt;
}

// A comparison with a pointer: only against NULL, which splits a lookup's
// or reservation's result into NULL (a number) and a checked pointer.
Verifier::Result Verifier::BranchOnPointer(uint32_t pc, const Insn& insn, const Value& src,
                                           State& st, State& taken, bool* can_take,
                                           bool* can_fall) {
  const uint8_t op = insn.Op();
  const Value& dst = st.regs[insn.dst];
  const Value& ptr = dst.IsPointer() ? dst : src;
  const Value& other = dst.IsPointer() ? src : dst;
  const bool null_cmp = other.IsConst() && other.umin == 0 && insn.Class() == kClassJmp &&
                        (op == kJmpJeq || op == kJmpJne);
  if (!null_cmp || (dst.IsPointer() && src.IsPointer())) {
    return Reject(pc, absl::StrCat("comparison of ", TypeName(ptr.type),
                                   " other than == NULL / != NULL"),
                  "compare the values, not their addresses");
  }
  if (ptr.type == Type::kMapValueOrNull || ptr.type == Type::kMemOrNull) {
    const uint32_t id = ptr.id;
    // "== 0" taken: NULL on the target side.
    MarkNull(taken, id, op == kJmpJeq);
    MarkNull(st, id, op != kJmpJeq);
  } else {
    // A valid pointer is never NULL.
    *can_take = op == kJmpJne;
    *can_fall = op == kJmpJeq;
  }
  return std::nullopt;
}

// A comparison of scalars: each side refines the bounds of both operands,
// and a side they cannot satisfy is not explored.
void Verifier::BranchOnScalars(const Insn& insn, const Value& src, int src_reg, State& st,
                               State& taken, bool* can_take, bool* can_fall) {
  const uint8_t op = insn.Op();
  const Value& dst = st.regs[insn.dst];
  bool wide = insn.Class() == kClassJmp;
  if (!wide) {
    // 32-bit compare: refine only when both sides are known to fit.
    const bool is_signed = op == kJmpJsgt || op == kJmpJsge || op == kJmpJslt || op == kJmpJsle;
    const uint64_t lim = is_signed ? 0x7fffffffull : kU32Max;
    wide = dst.umax <= lim && src.umax <= lim;
  }
  if (dst.IsConst() && src.IsConst()) {
    const bool t = EvalJmp(insn, dst.umin, src.umin);
    *can_take = t;
    *can_fall = !t;
  } else if (wide) {
    Value a = dst, b = src;
    *can_take = Refine(op, true, a, b);
    if (*can_take) {
      taken.regs[insn.dst] = a;
      if (src_reg >= 0) taken.regs[src_reg] = b;
    }
    Value fa = dst, fb = src;
    *can_fall = Refine(op, false, fa, fb);
    if (*can_fall) {
      st.regs[insn.dst] = fa;
      if (src_reg >= 0) st.regs[src_reg] = fb;
    }
  }
}

}  // namespace cuprobe::verifier_internal
