// File: tests/compiler/test_util.h
//
// Helpers of the compiler tests: compile a C probe with the real clang-19
// into an eBPF object, build raw instruction sequences (for faults C cannot
// express), run ptxas on PTX.
#ifndef CUPROBE_TESTS_COMPILER_TEST_UTIL_H_
#define CUPROBE_TESTS_COMPILER_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "probe/ebpf.h"
#include "loader/compiler/compiler.h"
#include "loader/compiler/object.h"

namespace cuprobe::testing {

// Writes `source` to a temporary .bpf.c file and compiles it with clang-19
// -target bpf -O2 -g (the probe include path set). Returns the object bytes.
absl::StatusOr<std::vector<uint8_t>> CompileProbeSource(const std::string& source);
// `body` after #include "cuprobe/probe.h", compiled and lowered into a
// bundle with these lowering switches.
absl::StatusOr<CompileResult> CompileC(const std::string& body, bool keep_llvm = false,
                                       RingLowering ring = {}, MapLowering maps = {});

// Assembles PTX with `ptxas -arch=sm_90 -c`; returns ptxas' output on failure.
absl::Status PtxasAccepts(const std::string& ptx);

// A one-program object around raw instructions, with the maps given.
BpfObject RawObject(std::vector<Insn> insns, std::vector<ObjectMap> maps = {},
                    std::string section = "cuprobe/entry/*");

// Instruction builders (the kernel's BPF_* macros, as functions).
Insn Alu64Imm(uint8_t op, uint8_t dst, int32_t imm);
Insn Alu64Reg(uint8_t op, uint8_t dst, uint8_t src);
Insn Alu32Imm(uint8_t op, uint8_t dst, int32_t imm);
Insn Alu32Reg(uint8_t op, uint8_t dst, uint8_t src);
Insn MovImm(uint8_t dst, int32_t imm);
Insn MovReg(uint8_t dst, uint8_t src);
Insn Ldx(uint8_t size, uint8_t dst, uint8_t src, int16_t off);
Insn Stx(uint8_t size, uint8_t dst, uint8_t src, int16_t off);
Insn StImm(uint8_t size, uint8_t dst, int16_t off, int32_t imm);
Insn Atomic(uint8_t size, uint8_t dst, uint8_t src, int16_t off, int32_t op);
Insn JmpImm(uint8_t op, uint8_t dst, int32_t imm, int16_t off);
Insn JmpReg(uint8_t op, uint8_t dst, uint8_t src, int16_t off);
Insn Jmp32Imm(uint8_t op, uint8_t dst, int32_t imm, int16_t off);
Insn Jmp32Reg(uint8_t op, uint8_t dst, uint8_t src, int16_t off);
Insn Ja(int16_t off);
Insn Call(int32_t helper);
Insn Exit();
// ld_imm64: two instructions.
std::vector<Insn> LdImm64(uint8_t dst, uint64_t value);

ObjectMap HashMap(std::string name, uint32_t key_size, uint32_t value_size);
ObjectMap RingbufMap(std::string name, uint32_t bytes);

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_COMPILER_TEST_UTIL_H_
