#include "probe/ebpf.h"

#include "absl/strings/str_cat.h"

namespace cuprobe {
namespace {

const char* AluOpName(uint8_t op) {
  switch (op) {
    case kAluAdd: return "+=";
    case kAluSub: return "-=";
    case kAluMul: return "*=";
    case kAluDiv: return "/=";
    case kAluOr: return "|=";
    case kAluAnd: return "&=";
    case kAluLsh: return "<<=";
    case kAluRsh: return ">>=";
    case kAluMod: return "%=";
    case kAluXor: return "^=";
    case kAluMov: return "=";
    case kAluArsh: return "s>>=";
    default: return "?=";
  }
}

const char* JmpOpName(uint8_t op) {
  switch (op) {
    case kJmpJeq: return "==";
    case kJmpJgt: return ">";
    case kJmpJge: return ">=";
    case kJmpJset: return "&";
    case kJmpJne: return "!=";
    case kJmpJsgt: return "s>";
    case kJmpJsge: return "s>=";
    case kJmpJlt: return "<";
    case kJmpJle: return "<=";
    case kJmpJslt: return "s<";
    case kJmpJsle: return "s<=";
    default: return "?";
  }
}

const char* SizeName(uint8_t size) {
  switch (size) {
    case kSizeB: return "u8";
    case kSizeH: return "u16";
    case kSizeW: return "u32";
    default: return "u64";
  }
}

std::string Off(int16_t off) {
  return off < 0 ? absl::StrCat(" - ", -static_cast<int>(off)) : absl::StrCat(" + ", off);
}

}  // namespace

std::string Disassemble(const Insn& insn, const Insn* next) {
  const uint8_t cls = insn.Class();
  const std::string dst = absl::StrCat(cls == kClassAlu || cls == kClassJmp32 ? "w" : "r",
                                       insn.dst);
  const std::string src = insn.UsesSrcReg()
                              ? absl::StrCat(cls == kClassAlu || cls == kClassJmp32 ? "w" : "r",
                                             insn.src)
                              : absl::StrCat(insn.imm);
  switch (cls) {
    case kClassAlu:
    case kClassAlu64:
      if (insn.Op() == kAluNeg) return absl::StrCat(dst, " = -", dst);
      if (insn.Op() == kAluEnd) {
        const char* kind = cls == kClassAlu64 ? "bswap" : (insn.UsesSrcReg() ? "be" : "le");
        return absl::StrCat(dst, " = ", kind, insn.imm, " ", dst);
      }
      if (insn.Op() == kAluMov && insn.off != 0) {
        return absl::StrCat(dst, " = (s", insn.off, ")", src);
      }
      if ((insn.Op() == kAluDiv || insn.Op() == kAluMod) && insn.off == 1) {
        return absl::StrCat(dst, " s", AluOpName(insn.Op()), " ", src);
      }
      return absl::StrCat(dst, " ", AluOpName(insn.Op()), " ", src);
    case kClassJmp:
    case kClassJmp32:
      if (insn.Op() == kJmpJa) {
        return cls == kClassJmp32 ? absl::StrCat("gotol ", insn.imm)
                                  : absl::StrCat("goto ", insn.off);
      }
      if (insn.Op() == kJmpCall) {
        return insn.src == kPseudoCall ? absl::StrCat("call pc", insn.imm)
                                       : absl::StrCat("call ", insn.imm);
      }
      if (insn.Op() == kJmpExit) return "exit";
      return absl::StrCat("if ", dst, " ", JmpOpName(insn.Op()), " ", src, " goto ", insn.off);
    case kClassLdx:
      return absl::StrCat("r", insn.dst, " = *(", insn.Mode() == kModeMemsx ? "s" : "",
                          SizeName(insn.Size()) + (insn.Mode() == kModeMemsx ? 1 : 0), " *)(r",
                          insn.src, Off(insn.off), ")");
    case kClassSt:
      return absl::StrCat("*(", SizeName(insn.Size()), " *)(r", insn.dst, Off(insn.off),
                          ") = ", insn.imm);
    case kClassStx:
      if (insn.Mode() == kModeAtomic) {
        return absl::StrCat("atomic ", insn.imm, " *(", SizeName(insn.Size()), " *)(r", insn.dst,
                            Off(insn.off), ") with r", insn.src);
      }
      return absl::StrCat("*(", SizeName(insn.Size()), " *)(r", insn.dst, Off(insn.off),
                          ") = r", insn.src);
    case kClassLd:
      if (insn.code == kLdImm64) {
        const uint64_t hi = next != nullptr ? static_cast<uint32_t>(next->imm) : 0;
        const uint64_t value = (hi << 32) | static_cast<uint32_t>(insn.imm);
        if (insn.src == kPseudoMapFd) return absl::StrCat("r", insn.dst, " = map[", insn.imm, "]");
        if (insn.src == kPseudoMapValue) {
          return absl::StrCat("r", insn.dst, " = map_value[", insn.imm, "] + ", hi);
        }
        return absl::StrCat("r", insn.dst, " = ", value, " ll");
      }
      break;
    default:
      break;
  }
  return absl::StrCat("<opcode 0x", absl::Hex(insn.code), ">");
}

}  // namespace cuprobe
