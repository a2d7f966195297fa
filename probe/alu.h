// File: probe/alu.h
//
// The exact semantics of eBPF ALU and conditional-jump operations on
// concrete values, in one place: the reference interpreter runs them, the
// verifier folds constants with them, and the lowering is tested against them
// (tests/compiler/differential_test.cc). The rules that C leaves undefined
// are eBPF's:
//   - division by zero gives 0; modulo by zero leaves dst unchanged (the
//     32-bit forms then zero-extend the low half);
//   - signed INT_MIN / -1 gives INT_MIN, INT_MIN % -1 gives 0;
//   - shift amounts are masked to the operand width (& 63 or & 31);
//   - every 32-bit operation zero-extends its result into the 64-bit register.
//
//   uint64_t r = EvalAlu(insn, dst_value, src_value);
#ifndef CUPROBE_PROBE_ALU_H_
#define CUPROBE_PROBE_ALU_H_

#include <cstdint>

#include "probe/ebpf.h"

namespace cuprobe {

inline uint64_t ByteSwap(uint64_t v, int bits) {
  switch (bits) {
    case 16: return __builtin_bswap16(static_cast<uint16_t>(v));
    case 32: return __builtin_bswap32(static_cast<uint32_t>(v));
    default: return __builtin_bswap64(v);
  }
}

// EvalAlu's two widths (use EvalAlu).
namespace alu_internal {

inline uint64_t Alu64(const Insn& insn, uint64_t dst, uint64_t src) {
  const bool sign = insn.off == 1;
  const int64_t sd = static_cast<int64_t>(dst), ss = static_cast<int64_t>(src);
  switch (insn.Op()) {
    case kAluAdd: return dst + src;
    case kAluSub: return dst - src;
    case kAluMul: return dst * src;
    case kAluDiv:
      if (src == 0) return 0;
      if (sign) {
        if (sd == INT64_MIN && ss == -1) return dst;
        return static_cast<uint64_t>(sd / ss);
      }
      return dst / src;
    case kAluMod:
      if (src == 0) return dst;
      if (sign) {
        if (ss == -1) return 0;
        return static_cast<uint64_t>(sd % ss);
      }
      return dst % src;
    case kAluOr: return dst | src;
    case kAluAnd: return dst & src;
    case kAluXor: return dst ^ src;
    case kAluLsh: return dst << (src & 63);
    case kAluRsh: return dst >> (src & 63);
    case kAluArsh: return static_cast<uint64_t>(sd >> (src & 63));
    case kAluNeg: return static_cast<uint64_t>(0) - dst;
    case kAluMov:
      switch (insn.off) {
        case 8: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(src)));
        case 16: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int16_t>(src)));
        case 32: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(src)));
        default: return src;
      }
    case kAluEnd: return ByteSwap(dst, insn.imm);  // BPF_ALU64 | BPF_END: bswap
    default: return 0;
  }
}

inline uint64_t Alu32(const Insn& insn, uint64_t dst, uint64_t src) {
  const bool sign = insn.off == 1;
  const uint32_t d = static_cast<uint32_t>(dst), s = static_cast<uint32_t>(src);
  const int32_t sd = static_cast<int32_t>(d), ss = static_cast<int32_t>(s);
  switch (insn.Op()) {
    case kAluAdd: return uint32_t(d + s);
    case kAluSub: return uint32_t(d - s);
    case kAluMul: return uint32_t(d * s);
    case kAluDiv:
      if (s == 0) return 0;
      if (sign) {
        if (sd == INT32_MIN && ss == -1) return d;
        return static_cast<uint32_t>(sd / ss);
      }
      return d / s;
    case kAluMod:
      if (s == 0) return d;
      if (sign) {
        if (ss == -1) return 0;
        return static_cast<uint32_t>(sd % ss);
      }
      return d % s;
    case kAluOr: return d | s;
    case kAluAnd: return d & s;
    case kAluXor: return d ^ s;
    case kAluLsh: return uint32_t(d << (s & 31));
    case kAluRsh: return d >> (s & 31);
    case kAluArsh: return static_cast<uint32_t>(sd >> (s & 31));
    case kAluNeg: return uint32_t(0u - d);
    case kAluMov:
      switch (insn.off) {
        case 8: return static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(s)));
        case 16: return static_cast<uint32_t>(static_cast<int32_t>(static_cast<int16_t>(s)));
        default: return s;
      }
    case kAluEnd: {
      // to_le (BPF_K) on a little-endian machine truncates; to_be swaps.
      const int bits = insn.imm;
      const uint64_t mask = bits == 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
      if (insn.UsesSrcReg()) return ByteSwap(dst, bits) & mask;
      return dst & mask;
    }
    default: return 0;
  }
}

}  // namespace alu_internal

// `src` is the source register's value, or the sign-extended immediate.
inline uint64_t EvalAlu(const Insn& insn, uint64_t dst, uint64_t src) {
  if (insn.Class() == kClassAlu64) return alu_internal::Alu64(insn, dst, src);
  return alu_internal::Alu32(insn, dst, src);
}

// Is the conditional jump taken? (`src`: register value or sign-extended imm.)
inline bool EvalJmp(const Insn& insn, uint64_t dst, uint64_t src) {
  if (insn.Class() == kClassJmp32) {
    const uint32_t d = static_cast<uint32_t>(dst), s = static_cast<uint32_t>(src);
    const int32_t sd = static_cast<int32_t>(d), ss = static_cast<int32_t>(s);
    switch (insn.Op()) {
      case kJmpJeq: return d == s;
      case kJmpJne: return d != s;
      case kJmpJgt: return d > s;
      case kJmpJge: return d >= s;
      case kJmpJlt: return d < s;
      case kJmpJle: return d <= s;
      case kJmpJsgt: return sd > ss;
      case kJmpJsge: return sd >= ss;
      case kJmpJslt: return sd < ss;
      case kJmpJsle: return sd <= ss;
      case kJmpJset: return (d & s) != 0;
      default: return false;
    }
  }
  const int64_t sd = static_cast<int64_t>(dst), ss = static_cast<int64_t>(src);
  switch (insn.Op()) {
    case kJmpJeq: return dst == src;
    case kJmpJne: return dst != src;
    case kJmpJgt: return dst > src;
    case kJmpJge: return dst >= src;
    case kJmpJlt: return dst < src;
    case kJmpJle: return dst <= src;
    case kJmpJsgt: return sd > ss;
    case kJmpJsge: return sd >= ss;
    case kJmpJslt: return sd < ss;
    case kJmpJsle: return sd <= ss;
    case kJmpJset: return (dst & src) != 0;
    default: return false;
  }
}

}  // namespace cuprobe

#endif  // CUPROBE_PROBE_ALU_H_
