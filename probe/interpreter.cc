#include "probe/interpreter.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "probe/alu.h"

namespace cuprobe {

absl::StatusOr<uint64_t> Interpret(absl::Span<const Insn> insns, const InterpreterEnv& env) {
  // Register fields are 4 bits wide; eBPF has 11 registers. Verified code
  // never names r11..r15, but summary code arrives in bundles (untrusted
  // bytes): refuse it before any instruction indexes the register file.
  for (size_t i = 0; i < insns.size(); ++i) {
    const Insn& insn = insns[i];
    if (insn.dst >= kNumRegs || insn.src >= kNumRegs) {
      return absl::InvalidArgumentError(absl::StrCat(
          "instruction ", i, " names register r", insn.dst >= kNumRegs ? insn.dst : insn.src,
          " (eBPF has r0..r10)"));
    }
  }
  alignas(8) uint8_t stack[kStackSize] = {};
  alignas(8) uint8_t ctx[CUPROBE_CTX_SIZE] = {};
  const uint64_t ctx_lo = reinterpret_cast<uint64_t>(ctx);
  const uint64_t ctx_hi = ctx_lo + sizeof(ctx);
  uint64_t reg[kNumRegs] = {};
  reg[1] = ctx_lo;
  reg[10] = reinterpret_cast<uint64_t>(stack + kStackSize);
  const uint64_t n = insns.size();
  const uint64_t stack_lo = reinterpret_cast<uint64_t>(stack);
  bool fault = false;  // confine_memory: an access left the stack and the context
  auto allowed = [&](uint64_t addr, int size) {
    if (!env.confine_memory) return true;
    const uint64_t n = static_cast<uint64_t>(size);
    const bool in_stack = addr >= stack_lo && addr - stack_lo <= kStackSize - n;
    if (!in_stack) fault = true;
    return in_stack;
  };
  auto load = [&](uint64_t addr, int size) -> uint64_t {
    if (addr >= ctx_lo && addr < ctx_hi) return env.ctx_field(static_cast<int32_t>(addr - ctx_lo));
    uint64_t v = 0;
    if (allowed(addr, size)) std::memcpy(&v, reinterpret_cast<const void*>(addr), size);
    return v;
  };
  auto store = [&](uint64_t addr, int size, uint64_t v) {
    if (allowed(addr, size)) std::memcpy(reinterpret_cast<void*>(addr), &v, size);
  };
  uint64_t pc = 0;
  for (uint64_t step = 0; step < env.max_steps; ++step) {
    if (fault) {
      return absl::InvalidArgumentError(absl::StrCat("memory access outside the stack before ", pc));
    }
    if (pc >= n) return absl::InvalidArgumentError(absl::StrCat("pc ", pc, " out of range"));
    const Insn& insn = insns[pc];
    const uint64_t imm = static_cast<uint64_t>(static_cast<int64_t>(insn.imm));
    const uint64_t src = insn.UsesSrcReg() ? reg[insn.src] : imm;
    switch (insn.Class()) {
      case kClassAlu:
      case kClassAlu64:
        reg[insn.dst] = EvalAlu(insn, reg[insn.dst], src);
        ++pc;
        break;
      case kClassLdx: {
        const int size = SizeBytes(insn.Size());
        uint64_t v = load(reg[insn.src] + static_cast<int64_t>(insn.off), size);
        if (insn.Mode() == kModeMemsx) {
          const int shift = 64 - 8 * size;
          v = static_cast<uint64_t>(static_cast<int64_t>(v << shift) >> shift);
        }
        reg[insn.dst] = v;
        ++pc;
        break;
      }
      case kClassSt:
        store(reg[insn.dst] + static_cast<int64_t>(insn.off), SizeBytes(insn.Size()), imm);
        ++pc;
        break;
      case kClassStx: {
        const int size = SizeBytes(insn.Size());
        const uint64_t addr = reg[insn.dst] + static_cast<int64_t>(insn.off);
        if (insn.Mode() != kModeAtomic) {
          store(addr, size, reg[insn.src]);
          ++pc;
          break;
        }
        const uint64_t mask = size == 8 ? ~uint64_t{0} : 0xffffffffull;
        const uint64_t old = load(addr, size);
        const uint64_t s = reg[insn.src] & mask;
        const int32_t op = insn.imm;
        if (op == kAtomicCmpxchg) {
          if (old == (reg[0] & mask)) store(addr, size, s);
          reg[0] = old;
        } else {
          uint64_t updated = s;
          switch (op & ~kAtomicFetch) {
            case kAluAdd: updated = old + s; break;
            case kAluOr: updated = old | s; break;
            case kAluAnd: updated = old & s; break;
            case kAluXor: updated = old ^ s; break;
            default: break;  // xchg
          }
          store(addr, size, updated & mask);
          if (op & kAtomicFetch) reg[insn.src] = old;
        }
        ++pc;
        break;
      }
      case kClassLd: {
        if (insn.code != kLdImm64 || pc + 1 >= n) {
          return absl::InvalidArgumentError(absl::StrCat("bad ld at ", pc));
        }
        const uint64_t hi = static_cast<uint32_t>(insns[pc + 1].imm);
        if (insn.src == kPseudoMapFd) {
          reg[insn.dst] = env.map_handle(static_cast<uint32_t>(insn.imm));
        } else if (insn.src == kPseudoMapValue) {
          reg[insn.dst] = env.value_address(static_cast<uint32_t>(insn.imm)) + hi;
        } else {
          reg[insn.dst] = (hi << 32) | static_cast<uint32_t>(insn.imm);
        }
        pc += 2;
        break;
      }
      case kClassJmp:
      case kClassJmp32: {
        const uint8_t op = insn.Op();
        if (op == kJmpExit) return reg[0];
        if (op == kJmpCall) {
          reg[0] = env.helper_on_stack ? env.helper_on_stack(insn.imm, &reg[1], stack, stack_lo)
                                       : env.helper(insn.imm, &reg[1]);
          ++pc;
          break;
        }
        if (op == kJmpJa) {
          pc += 1 + (insn.Class() == kClassJmp32 ? insn.imm : insn.off);
          break;
        }
        pc += EvalJmp(insn, reg[insn.dst], src) ? 1 + insn.off : 1;
        break;
      }
    }
  }
  return absl::ResourceExhaustedError("interpreter step limit reached");
}

}  // namespace cuprobe
