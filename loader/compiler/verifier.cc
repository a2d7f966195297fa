// File: loader/compiler/verifier.cc
//
// The verifier's driver: the structure checks, the exploration of every path
// with state pruning, the per-instruction dispatch and the diagnostics, and
// the entry points of verifier.h. verifier_internal.h says which file holds
// the rest.
#include "loader/compiler/verifier.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "loader/compiler/verifier_internal.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace verifier_internal {
namespace {

// States kept per pruning point. The vector is reserved to this size once, so
// pointers to its entries (Verifier::incomplete_) stay valid.
constexpr size_t kMaxStatesPerPoint = 64;

}  // namespace

absl::Status Verifier::Format(const Rejection& r) const {
  std::string where;
  const LineInfo* line = obj_.LineOf(prog_, r.pc);
  if (line != nullptr) {
    std::string file = line->file;
    if (size_t slash = file.rfind('/'); slash != std::string::npos) file = file.substr(slash + 1);
    where = absl::StrCat(file, ":", line->line, ":", line->column, ": ");
  } else {
    where = absl::StrCat(obj_.name, ": ");
  }
  const Insn* next = r.pc + 1 < prog_.insns.size() ? &prog_.insns[r.pc + 1] : nullptr;
  std::string text = r.pc < prog_.insns.size() ? Disassemble(prog_.insns[r.pc], next) : "";
  std::string msg = absl::StrCat(where, "error: program '", prog_.name, "' (", prog_.section,
                                 ") insn ", r.pc, " '", text, "': ", r.message);
  if (line != nullptr && !line->line_text.empty()) {
    std::string_view src = line->line_text;
    while (!src.empty() && (src.front() == ' ' || src.front() == '\t')) src.remove_prefix(1);
    absl::StrAppend(&msg, "\n    ", src);
  }
  if (!r.hint.empty()) absl::StrAppend(&msg, "\n  hint: ", r.hint);
  return absl::InvalidArgumentError(msg);
}

Verifier::Result Verifier::CheckStructure() {
  const uint32_t n = static_cast<uint32_t>(prog_.insns.size());
  if (n > options_.max_insns) {
    return Reject(0, absl::StrCat("program has ", n, " instructions, over the budget of ",
                                  options_.max_insns),
                  "split the probe, or raise the instruction budget (--max-insns)");
  }
  prune_point_.assign(n + 1, false);
  for (uint32_t pc = 0; pc < n; ++pc) {
    const Insn& insn = prog_.insns[pc];
    const uint8_t cls = insn.Class();
    if (insn.dst > 10 || insn.src > 10) {
      return Reject(pc, "register number out of range (r0..r10)");
    }
    if (cls == kClassLd) {
      if (insn.code != kLdImm64) {
        return Reject(pc, absl::StrCat("legacy packet load (opcode 0x", absl::Hex(insn.code),
                                       ") is not supported"));
      }
      if (pc + 1 >= n || prog_.insns[pc + 1].code != 0) {
        return Reject(pc, "ld_imm64 is missing its second half");
      }
      if (insn.src > kPseudoMapValue) {
        return Reject(pc, absl::StrCat("ld_imm64 with source ", int{insn.src},
                                       " (BTF ids, functions) is not supported"));
      }
      if (insn.src != 0 && !prog_.map_refs.contains(pc)) {
        return Reject(pc, "map reference without a relocation");
      }
      ++pc;
      continue;
    }
    if (cls == kClassJmp || cls == kClassJmp32) {
      const uint8_t op = insn.Op();
      if (op == kJmpCall || op == kJmpExit) {
        if (cls == kClassJmp32) return Reject(pc, "invalid 32-bit call or exit");
        continue;
      }
      if (op == kJmpJa && cls == kClassJmp32 && insn.imm == 0 && insn.off == 0) continue;
      if (op > kJmpJsle) {
        return Reject(pc, absl::StrCat("unknown jump opcode 0x", absl::Hex(insn.code)));
      }
      const int64_t delta = (op == kJmpJa && cls == kClassJmp32) ? insn.imm : insn.off;
      const int64_t target = int64_t{pc} + 1 + delta;
      if (target < 0 || target >= n) {
        return Reject(pc, absl::StrCat("jump to ", target, " is outside the program [0, ", n, ")"));
      }
      if (target > 0 && prog_.insns[target - 1].code == kLdImm64 &&
          (target < 2 || prog_.insns[target - 2].code != kLdImm64)) {
        return Reject(pc, "jump into the middle of an ld_imm64");
      }
      prune_point_[target] = true;
      if (op != kJmpJa) prune_point_[pc + 1] = true;
      continue;
    }
  }
  if (n == 0) return Reject(0, "empty program");
  return std::nullopt;
}

Verifier::Result Verifier::DoExit(uint32_t pc, State& st) {
  if (st.regs[0].type == Type::kNotInit) {
    return Reject(pc, "R0 (the return value) is not set at exit", "return 0 from the probe");
  }
  if (!st.refs.empty()) {
    return Reject(pc, "a ring-buffer reservation is neither submitted nor discarded at exit",
                  "call bpf_ringbuf_submit or bpf_ringbuf_discard on every path");
  }
  return std::nullopt;
}

Verifier::Result Verifier::Step(uint32_t pc, State& st, uint32_t* next, bool* done) {
  const Insn& insn = prog_.insns[pc];
  *next = pc + 1;
  switch (insn.Class()) {
    case kClassAlu:
    case kClassAlu64:
      return DoAlu(pc, insn, st);
    case kClassLdx:
      return DoLoad(pc, insn, st);
    case kClassSt:
      if (auto r = ReadReg(pc, st, insn.dst); r) return r;
      return DoStore(pc, insn, st);
    case kClassStx:
      if (insn.Mode() == kModeAtomic) return DoAtomic(pc, insn, st);
      return DoStore(pc, insn, st);
    case kClassLd: {
      if (insn.dst == 10) return Reject(pc, "r10 (the frame pointer) is read-only");
      const Insn& hi = prog_.insns[pc + 1];
      *next = pc + 2;
      if (insn.src == 0) {
        st.regs[insn.dst] = Value::Const((static_cast<uint64_t>(static_cast<uint32_t>(hi.imm))
                                          << 32) |
                                         static_cast<uint32_t>(insn.imm));
        return std::nullopt;
      }
      const MapRef& ref = prog_.map_refs.at(pc);
      if (ref.value) {
        Value v = Value::Pointer(Type::kMapValue, ref.offset);
        v.map = ref.map;
        st.regs[insn.dst] = v;
      } else {
        Value v = Value::Pointer(Type::kMap, 0);
        v.map = ref.map;
        st.regs[insn.dst] = v;
      }
      out_.maps_used.insert(ref.map);
      return std::nullopt;
    }
    case kClassJmp:
    case kClassJmp32:
      if (insn.Op() == kJmpCall) return DoCall(pc, insn, st);
      if (insn.Op() == kJmpExit) {
        *done = true;
        return DoExit(pc, st);
      }
      return DoBranch(pc, insn, st, next, done);
  }
  return Reject(pc, "unknown instruction class");
}

Verifier::Result Verifier::Explore() {
  const uint32_t n = static_cast<uint32_t>(prog_.insns.size());
  stored_.assign(n, {});
  auto initial = std::make_shared<State>();
  initial->regs[1] = Value::Pointer(Type::kCtx, 0);
  initial->regs[10] = Value::Pointer(Type::kStack, 0);
  pending_.push_back(PendingBranch{0, std::move(initial)});
  uint64_t steps = 0;
  while (!pending_.empty()) {
    PendingBranch item = std::move(pending_.back());
    pending_.pop_back();
    // Everything stored while this branch was pending has now been explored.
    const size_t depth = pending_.size();
    while (!incomplete_.empty() && incomplete_.back().second->stack_size > depth) {
      incomplete_.back().second->complete = true;
      incomplete_.pop_back();
    }
    State& st = *item.state;
    uint32_t pc = item.pc;
    uint32_t prev_pc = UINT32_MAX;
    while (true) {
      if (pc >= n) {
        return Reject(prev_pc == UINT32_MAX ? n - 1 : prev_pc,
                      "execution falls off the end of the program", "end the probe with return");
      }
      if (prev_pc != UINT32_MAX && pc <= prev_pc) {
        st.in_loop = true;  // a back edge
        st.loop_header = pc;
      }
      if (prune_point_[pc]) {
        bool pruned = false;
        for (StoredState& s : stored_[pc]) {
          if (!StateWithin(*s.state, st)) continue;
          if (s.complete) {
            pruned = true;
            break;
          }
          return Reject(pc, "infinite loop: this point is reached again in the same state",
                        "give the loop a constant bound, e.g. for (int i = 0; i < 16; i++)");
        }
        if (pruned) break;
        if (stored_[pc].capacity() == 0) stored_[pc].reserve(kMaxStatesPerPoint);
        if (stored_[pc].size() < kMaxStatesPerPoint) {
          StoredState entry{std::make_shared<const State>(st), pending_.size(), false};
          stored_[pc].push_back(std::move(entry));
          incomplete_.emplace_back(pc, &stored_[pc].back());
        }
      }
      if (++steps > options_.max_steps) {
        if (st.in_loop) {
          return Reject(st.loop_header,
                        absl::StrCat("loop without a provable bound: the verifier gave up after ",
                                     options_.max_steps, " instructions"),
                        "bound the loop by a constant (for (int i = 0; i < N; i++)) and check "
                        "variable limits against it");
        }
        return Reject(pc, absl::StrCat("program too complex: more than ", options_.max_steps,
                                       " instructions processed over all paths"),
                      "simplify the probe or raise the budget");
      }
      out_.insns[pc].reached = true;
      uint32_t next = 0;
      bool done = false;
      if (auto r = Step(pc, st, &next, &done); r) return r;
      if (done) break;
      prev_pc = pc;
      pc = next;
    }
  }
  out_.steps = steps;
  return std::nullopt;
}

absl::StatusOr<VerifiedProgram> Verifier::Run() {
  CUPROBE_RETURN_IF_ERROR(ParseAttachPoint(prog_.section, &out_.attach, &out_.kernel_glob));
  out_.insns.assign(prog_.insns.size(), InsnInfo{});
  if (auto r = CheckStructure(); r) return Format(*r);
  if (auto r = Explore(); r) return Format(*r);
  return std::move(out_);
}

}  // namespace verifier_internal

absl::Status ParseAttachPoint(std::string_view section, AttachKind* kind, std::string* glob) {
  struct Prefix {
    std::string_view prefix;
    AttachKind kind;
  };
  constexpr Prefix kPrefixes[] = {
      {"cuprobe/entry/", AttachKind::kEntry},
      {"cuprobe/exit/", AttachKind::kExit},
      {"cuprobe/mem/", AttachKind::kMemory},
      {"kretprobe/", AttachKind::kExit},
      {"kprobe/", AttachKind::kEntry},
  };
  if (section == "kprobe/__memcapture") {
    *kind = AttachKind::kMemory;
    glob->assign(1, '*');
    return absl::OkStatus();
  }
  for (const Prefix& p : kPrefixes) {
    if (absl::StartsWith(section, p.prefix)) {
      *kind = p.kind;
      *glob = std::string(section.substr(p.prefix.size()));
      // bpftime names a GPU probe that shares maps with kernel eBPF
      // "cuda_<kernel>" (and strips the prefix): "kprobe/cuda__Z9vecAdd..."
      // probes _Z9vecAdd.... Only before a mangled name: a kernel's own name
      // cannot be cuda__Z... (names with "__" are reserved in C++).
      if (!absl::StartsWith(p.prefix, "cuprobe/") && absl::StartsWith(*glob, "cuda__Z")) {
        glob->erase(0, 5);
      }
      if (glob->empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "section '", section, "': no kernel after '", p.prefix,
            "'; write e.g. SEC(\"", p.prefix, "*\") for every kernel"));
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "section '", section,
      "' is not an attach point: use cuprobe/entry/<glob>, cuprobe/exit/<glob>, "
      "cuprobe/mem/<glob> (or bpftime's kprobe/<kernel>, kretprobe/<kernel>, "
      "kprobe/__memcapture)"));
}

absl::StatusOr<VerifiedProgram> Verify(const BpfObject& object, const BpfProgram& program,
                                       const VerifierOptions& options) {
  verifier_internal::Verifier v(object, program, options);
  return v.Run();
}

}  // namespace cuprobe
