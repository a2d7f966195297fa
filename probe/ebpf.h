// File: probe/ebpf.h
//
// The eBPF instruction set as the probe compiler sees it: the 8-byte
// instruction, its opcode fields, and names for the classes, operations and
// modes (the numbers are the Linux kernel's, which clang -target bpf emits).
//
//   const Insn& insn = program.insns[pc];
//   if (insn.Class() == kClassAlu64 && insn.Op() == kAluAdd) ...
//
// Every decoder of the compiler (verifier, lowering, reference interpreter,
// disassembler) uses these names, so there is one place that knows the bits.
#ifndef CUPROBE_PROBE_EBPF_H_
#define CUPROBE_PROBE_EBPF_H_

#include <cstdint>
#include <string>

namespace cuprobe {

struct Insn {
  uint8_t code = 0;
  uint8_t dst = 0;  // 0..10
  uint8_t src = 0;  // 0..10
  int16_t off = 0;
  int32_t imm = 0;

  uint8_t Class() const { return code & 0x07; }
  uint8_t Op() const { return code & 0xf0; }           // ALU / JMP operation
  bool UsesSrcReg() const { return (code & 0x08) != 0; }  // BPF_X vs BPF_K
  uint8_t Size() const { return code & 0x18; }         // LD/ST size field
  uint8_t Mode() const { return code & 0xe0; }         // LD/ST mode field
};

// Decodes instruction `index` of `bytes` (little-endian, 8 bytes each).
inline Insn DecodeInsn(const uint8_t* p) {
  Insn i;
  i.code = p[0];
  i.dst = p[1] & 0x0f;
  i.src = p[1] >> 4;
  i.off = static_cast<int16_t>(p[2] | (p[3] << 8));
  i.imm = static_cast<int32_t>(static_cast<uint32_t>(p[4]) | (static_cast<uint32_t>(p[5]) << 8) |
                               (static_cast<uint32_t>(p[6]) << 16) |
                               (static_cast<uint32_t>(p[7]) << 24));
  return i;
}

// Classes.
inline constexpr uint8_t kClassLd = 0x00;
inline constexpr uint8_t kClassLdx = 0x01;
inline constexpr uint8_t kClassSt = 0x02;
inline constexpr uint8_t kClassStx = 0x03;
inline constexpr uint8_t kClassAlu = 0x04;
inline constexpr uint8_t kClassJmp = 0x05;
inline constexpr uint8_t kClassJmp32 = 0x06;
inline constexpr uint8_t kClassAlu64 = 0x07;

// ALU operations.
inline constexpr uint8_t kAluAdd = 0x00;
inline constexpr uint8_t kAluSub = 0x10;
inline constexpr uint8_t kAluMul = 0x20;
inline constexpr uint8_t kAluDiv = 0x30;  // off == 1: signed (cpu v4)
inline constexpr uint8_t kAluOr = 0x40;
inline constexpr uint8_t kAluAnd = 0x50;
inline constexpr uint8_t kAluLsh = 0x60;
inline constexpr uint8_t kAluRsh = 0x70;
inline constexpr uint8_t kAluNeg = 0x80;
inline constexpr uint8_t kAluMod = 0x90;  // off == 1: signed (cpu v4)
inline constexpr uint8_t kAluXor = 0xa0;
inline constexpr uint8_t kAluMov = 0xb0;  // off 8/16/32: sign-extending move (cpu v4)
inline constexpr uint8_t kAluArsh = 0xc0;
inline constexpr uint8_t kAluEnd = 0xd0;  // byte swap; imm = 16/32/64

// Jump operations.
inline constexpr uint8_t kJmpJa = 0x00;
inline constexpr uint8_t kJmpJeq = 0x10;
inline constexpr uint8_t kJmpJgt = 0x20;
inline constexpr uint8_t kJmpJge = 0x30;
inline constexpr uint8_t kJmpJset = 0x40;
inline constexpr uint8_t kJmpJne = 0x50;
inline constexpr uint8_t kJmpJsgt = 0x60;
inline constexpr uint8_t kJmpJsge = 0x70;
inline constexpr uint8_t kJmpCall = 0x80;
inline constexpr uint8_t kJmpExit = 0x90;
inline constexpr uint8_t kJmpJlt = 0xa0;
inline constexpr uint8_t kJmpJle = 0xb0;
inline constexpr uint8_t kJmpJslt = 0xc0;
inline constexpr uint8_t kJmpJsle = 0xd0;

// Load/store sizes and modes.
inline constexpr uint8_t kSizeW = 0x00;
inline constexpr uint8_t kSizeH = 0x08;
inline constexpr uint8_t kSizeB = 0x10;
inline constexpr uint8_t kSizeDw = 0x18;
inline constexpr uint8_t kModeImm = 0x00;
inline constexpr uint8_t kModeMem = 0x60;
inline constexpr uint8_t kModeMemsx = 0x80;  // sign-extending load (cpu v4)
inline constexpr uint8_t kModeAtomic = 0xc0;

// Atomic operations (imm of an atomic STX).
inline constexpr int32_t kAtomicFetch = 0x01;
inline constexpr int32_t kAtomicXchg = 0xe0 | kAtomicFetch;
inline constexpr int32_t kAtomicCmpxchg = 0xf0 | kAtomicFetch;

// ld_imm64 source registers (what the 64-bit immediate means).
inline constexpr uint8_t kPseudoMapFd = 1;
inline constexpr uint8_t kPseudoMapValue = 2;
// call source register: a call of a function of the program (bpf-to-bpf).
inline constexpr uint8_t kPseudoCall = 1;

inline constexpr uint8_t kLdImm64 = kClassLd | kSizeDw | kModeImm;  // 0x18

inline constexpr int kNumRegs = 11;  // r0..r10
inline constexpr int kStackSize = 512;

// Bytes of a load/store size field.
inline int SizeBytes(uint8_t size_field) {
  switch (size_field) {
    case kSizeB: return 1;
    case kSizeH: return 2;
    case kSizeW: return 4;
    default: return 8;
  }
}

// One instruction in the disassembler's syntax ("r1 = *(u32 *)(r6 + 4)").
// `next` is the second half of an ld_imm64 (may be null otherwise).
[[nodiscard]] std::string Disassemble(const Insn& insn, const Insn* next);

}  // namespace cuprobe

#endif  // CUPROBE_PROBE_EBPF_H_
