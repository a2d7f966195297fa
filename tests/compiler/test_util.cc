#include "tests/compiler/test_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "loader/compiler/compiler.h"

namespace cuprobe::testing {

absl::StatusOr<std::vector<uint8_t>> CompileProbeSource(const std::string& source) {
  char dir_template[] = "/tmp/cuprobe-test-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return absl::InternalError("mkdtemp");
  const std::string path = std::string(dir_template) + "/probe.bpf.c";
  {
    std::ofstream out(path);
    out << source;
  }
  ProbeCompileOptions options;
  auto object = CompileCToBpf(path, options);
  std::error_code ec;
  std::filesystem::remove_all(dir_template, ec);
  return object;
}

absl::Status PtxasAccepts(const std::string& ptx) {
  char dir_template[] = "/tmp/cuprobe-ptxas-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) return absl::InternalError("mkdtemp");
  const std::string dir = dir_template;
  {
    std::ofstream out(dir + "/probe.ptx");
    out << ptx;
  }
  const std::string cmd = absl::StrCat(CUPROBE_PTXAS, " -arch=sm_90 -c ", dir, "/probe.ptx -o ",
                                       dir, "/probe.cubin > ", dir, "/log 2>&1");
  const int rc = std::system(cmd.c_str());
  std::ifstream log(dir + "/log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (rc != 0) return absl::InvalidArgumentError(absl::StrCat("ptxas failed: ", text));
  return absl::OkStatus();
}

BpfObject RawObject(std::vector<Insn> insns, std::vector<ObjectMap> maps, std::string section) {
  BpfObject obj;
  obj.name = "raw.o";
  BpfProgram p;
  p.name = "raw";
  p.section = std::move(section);
  for (uint32_t i = 0; i < insns.size(); ++i) {
    if (insns[i].code == kLdImm64 && insns[i].src != 0) {
      p.map_refs[i] = MapRef{static_cast<uint32_t>(insns[i].imm), insns[i].src == kPseudoMapValue,
                             static_cast<uint32_t>(i + 1 < insns.size() ? insns[i + 1].imm : 0)};
    }
  }
  p.insns = std::move(insns);
  obj.programs.push_back(std::move(p));
  obj.maps = std::move(maps);
  return obj;
}

namespace {
Insn Make(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  Insn i;
  i.code = code;
  i.dst = dst;
  i.src = src;
  i.off = off;
  i.imm = imm;
  return i;
}
}  // namespace

Insn Alu64Imm(uint8_t op, uint8_t dst, int32_t imm) { return Make(kClassAlu64 | op, dst, 0, 0, imm); }
Insn Alu64Reg(uint8_t op, uint8_t dst, uint8_t src) {
  return Make(kClassAlu64 | op | 0x08, dst, src, 0, 0);
}
Insn Alu32Imm(uint8_t op, uint8_t dst, int32_t imm) { return Make(kClassAlu | op, dst, 0, 0, imm); }
Insn Alu32Reg(uint8_t op, uint8_t dst, uint8_t src) {
  return Make(kClassAlu | op | 0x08, dst, src, 0, 0);
}
Insn MovImm(uint8_t dst, int32_t imm) { return Alu64Imm(kAluMov, dst, imm); }
Insn MovReg(uint8_t dst, uint8_t src) { return Alu64Reg(kAluMov, dst, src); }
Insn Ldx(uint8_t size, uint8_t dst, uint8_t src, int16_t off) {
  return Make(kClassLdx | size | kModeMem, dst, src, off, 0);
}
Insn Stx(uint8_t size, uint8_t dst, uint8_t src, int16_t off) {
  return Make(kClassStx | size | kModeMem, dst, src, off, 0);
}
Insn StImm(uint8_t size, uint8_t dst, int16_t off, int32_t imm) {
  return Make(kClassSt | size | kModeMem, dst, 0, off, imm);
}
Insn Atomic(uint8_t size, uint8_t dst, uint8_t src, int16_t off, int32_t op) {
  return Make(kClassStx | size | kModeAtomic, dst, src, off, op);
}
Insn JmpImm(uint8_t op, uint8_t dst, int32_t imm, int16_t off) {
  return Make(kClassJmp | op, dst, 0, off, imm);
}
Insn JmpReg(uint8_t op, uint8_t dst, uint8_t src, int16_t off) {
  return Make(kClassJmp | op | 0x08, dst, src, off, 0);
}
Insn Jmp32Imm(uint8_t op, uint8_t dst, int32_t imm, int16_t off) {
  return Make(kClassJmp32 | op, dst, 0, off, imm);
}
Insn Jmp32Reg(uint8_t op, uint8_t dst, uint8_t src, int16_t off) {
  return Make(kClassJmp32 | op | 0x08, dst, src, off, 0);
}
Insn Ja(int16_t off) { return Make(kClassJmp | kJmpJa, 0, 0, off, 0); }
Insn Call(int32_t helper) { return Make(kClassJmp | kJmpCall, 0, 0, 0, helper); }
Insn Exit() { return Make(kClassJmp | kJmpExit, 0, 0, 0, 0); }
std::vector<Insn> LdImm64(uint8_t dst, uint64_t value) {
  return {Make(kLdImm64, dst, 0, 0, static_cast<int32_t>(value)),
          Make(0, 0, 0, 0, static_cast<int32_t>(value >> 32))};
}

ObjectMap HashMap(std::string name, uint32_t key_size, uint32_t value_size) {
  ObjectMap m;
  m.spec.name = std::move(name);
  m.spec.type = CUPROBE_MAP_HASH;
  m.spec.key_size = key_size;
  m.spec.value_size = value_size;
  m.spec.max_entries = 16;
  return m;
}

ObjectMap RingbufMap(std::string name, uint32_t bytes) {
  ObjectMap m;
  m.spec.name = std::move(name);
  m.spec.type = CUPROBE_MAP_RINGBUF;
  m.spec.max_entries = bytes;
  return m;
}

absl::StatusOr<CompileResult> CompileC(const std::string& body, bool keep_llvm,
                                       RingLowering ring, MapLowering maps) {
  auto object = CompileProbeSource(absl::StrCat("#include \"cuprobe/probe.h\"\n", body));
  if (!object.ok()) return object.status();
  ProbeCompileOptions options;
  options.keep_llvm = keep_llvm;
  options.ring = std::move(ring);
  options.maps = maps;
  return CompileObject(*object, "probe.bpf.c", options);
}

}  // namespace cuprobe::testing
