#include "probe/interpreter.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "probe/alu.h"

namespace cuprobe {
namespace {

// Register fields are 4 bits wide; eBPF has 11 registers. Verified code
// never names r11..r15, but summary code arrives in bundles (untrusted
// bytes): refuse it before any instruction indexes the register file.
absl::Status CheckRegisters(absl::Span<const Insn> insns) {
  for (size_t i = 0; i < insns.size(); ++i) {
    const Insn& insn = insns[i];
    if (insn.dst >= kNumRegs || insn.src >= kNumRegs) {
      return absl::InvalidArgumentError(absl::StrCat(
          "instruction ", i, " names register r", insn.dst >= kNumRegs ? insn.dst : insn.src,
          " (eBPF has r0..r10)"));
    }
  }
  return absl::OkStatus();
}

// One run: the registers, the stack, and the context's bytes, of which only
// the address range is used (loads there ask the environment). r1 and r10
// hold the addresses of the machine's own arrays, so it is never copied.
class Machine {
 public:
  Machine(absl::Span<const Insn> insns, const InterpreterEnv& env) : insns_(insns), env_(env) {
    reg_[1] = ctx_lo_;
    reg_[10] = reinterpret_cast<uint64_t>(stack_ + kStackSize);
  }
  Machine(const Machine&) = delete;
  Machine& operator=(const Machine&) = delete;

  absl::StatusOr<uint64_t> Run() {
    for (uint64_t step = 0; step < env_.max_steps; ++step) {
      if (fault_) {
        return absl::InvalidArgumentError(
            absl::StrCat("memory access outside the stack before ", pc_));
      }
      if (pc_ >= insns_.size()) {
        return absl::InvalidArgumentError(absl::StrCat("pc ", pc_, " out of range"));
      }
      const Insn& insn = insns_[pc_];
      if ((insn.Class() == kClassJmp || insn.Class() == kClassJmp32) && insn.Op() == kJmpExit) {
        return reg_[0];
      }
      if (absl::Status s = Step(insn); !s.ok()) return s;
    }
    return absl::ResourceExhaustedError("interpreter step limit reached");
  }

 private:
  // Executes the instruction at pc_ (not an exit) and moves pc_ on.
  absl::Status Step(const Insn& insn) {
    const uint64_t imm = static_cast<uint64_t>(static_cast<int64_t>(insn.imm));
    const uint64_t src = insn.UsesSrcReg() ? reg_[insn.src] : imm;
    switch (insn.Class()) {
      case kClassAlu:
      case kClassAlu64:
        reg_[insn.dst] = EvalAlu(insn, reg_[insn.dst], src);
        ++pc_;
        break;
      case kClassLdx:
        LoadInsn(insn);
        ++pc_;
        break;
      case kClassSt:
        Store(reg_[insn.dst] + static_cast<int64_t>(insn.off), SizeBytes(insn.Size()), imm);
        ++pc_;
        break;
      case kClassStx:
        if (insn.Mode() == kModeAtomic) {
          AtomicInsn(insn);
        } else {
          Store(reg_[insn.dst] + static_cast<int64_t>(insn.off), SizeBytes(insn.Size()),
                reg_[insn.src]);
        }
        ++pc_;
        break;
      case kClassLd:
        return LdImm64(insn);
      case kClassJmp:
      case kClassJmp32:
        Jump(insn, src);
        break;
    }
    return absl::OkStatus();
  }

  void LoadInsn(const Insn& insn) {
    const int size = SizeBytes(insn.Size());
    uint64_t v = Load(reg_[insn.src] + static_cast<int64_t>(insn.off), size);
    if (insn.Mode() == kModeMemsx) {
      const int shift = 64 - 8 * size;
      v = static_cast<uint64_t>(static_cast<int64_t>(v << shift) >> shift);
    }
    reg_[insn.dst] = v;
  }

  // A plain read-modify-write: the interpreter has one thread.
  void AtomicInsn(const Insn& insn) {
    const int size = SizeBytes(insn.Size());
    const uint64_t addr = reg_[insn.dst] + static_cast<int64_t>(insn.off);
    const uint64_t mask = size == 8 ? ~uint64_t{0} : 0xffffffffull;
    const uint64_t old = Load(addr, size);
    const uint64_t s = reg_[insn.src] & mask;
    const int32_t op = insn.imm;
    if (op == kAtomicCmpxchg) {
      if (old == (reg_[0] & mask)) Store(addr, size, s);
      reg_[0] = old;
      return;
    }
    uint64_t updated = s;
    switch (op & ~kAtomicFetch) {
      case kAluAdd: updated = old + s; break;
      case kAluOr: updated = old | s; break;
      case kAluAnd: updated = old & s; break;
      case kAluXor: updated = old ^ s; break;
      default: break;  // xchg
    }
    Store(addr, size, updated & mask);
    if (op & kAtomicFetch) reg_[insn.src] = old;
  }

  absl::Status LdImm64(const Insn& insn) {
    if (insn.code != kLdImm64 || pc_ + 1 >= insns_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("bad ld at ", pc_));
    }
    const uint64_t hi = static_cast<uint32_t>(insns_[pc_ + 1].imm);
    if (insn.src == kPseudoMapFd) {
      reg_[insn.dst] = env_.map_handle(static_cast<uint32_t>(insn.imm));
    } else if (insn.src == kPseudoMapValue) {
      reg_[insn.dst] = env_.value_address(static_cast<uint32_t>(insn.imm)) + hi;
    } else {
      reg_[insn.dst] = (hi << 32) | static_cast<uint32_t>(insn.imm);
    }
    pc_ += 2;
    return absl::OkStatus();
  }

  // Calls and jumps (`src`: the source register or the immediate).
  void Jump(const Insn& insn, uint64_t src) {
    const uint8_t op = insn.Op();
    if (op == kJmpCall) {
      // A pure helper is the interpreter's own: it reads nothing else.
      if (insn.imm == CUPROBE_HELPER_CLZ) {
        reg_[0] = reg_[1] == 0 ? 64 : static_cast<uint64_t>(__builtin_clzll(reg_[1]));
      } else {
        reg_[0] = env_.helper_on_stack
                      ? env_.helper_on_stack(insn.imm, &reg_[1], stack_, stack_lo_)
                      : env_.helper(insn.imm, &reg_[1]);
      }
      ++pc_;
      return;
    }
    if (op == kJmpJa) {
      pc_ += 1 + (insn.Class() == kClassJmp32 ? insn.imm : insn.off);
      return;
    }
    pc_ += EvalJmp(insn, reg_[insn.dst], src) ? 1 + insn.off : 1;
  }

  // With confine_memory, an access must fall inside the stack; one that does
  // not is skipped and fails the run before the next instruction.
  bool Allowed(uint64_t addr, int size) {
    if (!env_.confine_memory) return true;
    const uint64_t n = static_cast<uint64_t>(size);
    const bool in_stack = addr >= stack_lo_ && addr - stack_lo_ <= kStackSize - n;
    if (!in_stack) fault_ = true;
    return in_stack;
  }

  uint64_t Load(uint64_t addr, int size) {
    if (addr >= ctx_lo_ && addr < ctx_hi_) {
      return env_.ctx_field(static_cast<int32_t>(addr - ctx_lo_));
    }
    uint64_t v = 0;
    if (Allowed(addr, size)) std::memcpy(&v, reinterpret_cast<const void*>(addr), size);
    return v;
  }

  void Store(uint64_t addr, int size, uint64_t v) {
    if (Allowed(addr, size)) std::memcpy(reinterpret_cast<void*>(addr), &v, size);
  }

  const absl::Span<const Insn> insns_;
  const InterpreterEnv& env_;
  alignas(8) uint8_t stack_[kStackSize] = {};
  alignas(8) uint8_t ctx_[CUPROBE_CTX_SIZE] = {};
  const uint64_t ctx_lo_ = reinterpret_cast<uint64_t>(ctx_);
  const uint64_t ctx_hi_ = ctx_lo_ + sizeof(ctx_);
  const uint64_t stack_lo_ = reinterpret_cast<uint64_t>(stack_);
  uint64_t reg_[kNumRegs] = {};
  uint64_t pc_ = 0;
  bool fault_ = false;  // confine_memory: an access left the stack and the context
};

}  // namespace

absl::StatusOr<uint64_t> Interpret(absl::Span<const Insn> insns, const InterpreterEnv& env) {
  if (absl::Status s = CheckRegisters(insns); !s.ok()) return s;
  Machine machine(insns, env);
  return machine.Run();
}

}  // namespace cuprobe
