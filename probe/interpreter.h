// File: probe/interpreter.h
//
// A small reference interpreter of eBPF, the oracle of the differential tests
// (tests/compiler/differential_test.cc): the same program runs here and as
// host code JIT-compiled from the lowering's LLVM IR, and the results must be
// identical. It shares the ALU and jump semantics of alu.h with the verifier;
// memory accesses go to real host addresses (the stack is a local buffer),
// except loads from the context, which ask the environment. Atomics run as
// plain read-modify-writes: the interpreter has one thread.
//
//   InterpreterEnv env;
//   env.ctx_field = [&](int32_t off) { return off == 120 ? 42 : 0; };
//   CUPROBE_ASSIGN_OR_RETURN(uint64_t r0, Interpret(program.insns, env));
#ifndef CUPROBE_PROBE_INTERPRETER_H_
#define CUPROBE_PROBE_INTERPRETER_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "probe/ebpf.h"

namespace cuprobe {

struct InterpreterEnv {
  // The value of the context field at `offset` (a whole field, see abi.h).
  std::function<uint64_t(int32_t offset)> ctx_field;
  // Helper `id` called with r1..r5; returns r0. (cuprobe_clz, a pure
  // function, is the interpreter's own and never reaches it.)
  std::function<uint64_t(int32_t id, const uint64_t* args)> helper;
  // ld_imm64 of map `index`: the value a program sees (a map handle), and of
  // a global-data map's value: its address.
  std::function<uint64_t(uint32_t map)> map_handle;
  std::function<uint64_t(uint32_t map)> value_address;
  uint64_t max_steps = 1'000'000;
  // For programs that are not trusted to be verified (the hook runs bundle
  // code, site_summary.h): every load and store must fall inside the stack
  // or the context, else the run fails; and helper_on_stack, when set, is
  // called instead of `helper` with the stack's bytes and their address, so
  // that it can read arguments pointing into the stack without trusting them.
  bool confine_memory = false;
  std::function<uint64_t(int32_t id, const uint64_t* args, const uint8_t* stack,
                         uint64_t stack_address)>
      helper_on_stack;
};

// Runs the program from instruction 0 with r1 = the context; returns r0 at
// exit. Errors: out-of-range jumps, the step limit, unknown opcodes, and
// with confine_memory, an access outside the stack and the context.
[[nodiscard]] absl::StatusOr<uint64_t> Interpret(absl::Span<const Insn> insns,
                                                 const InterpreterEnv& env);

}  // namespace cuprobe

#endif  // CUPROBE_PROBE_INTERPRETER_H_
