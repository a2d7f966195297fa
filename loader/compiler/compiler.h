// File: loader/compiler/compiler.h
//
// The probe compiler end to end: C source -> clang-19 -target bpf -> eBPF
// object -> verifier -> LLVM IR -> O2 -> NVPTX PTX (sm_90) -> ProbeBundle.
// `cuprobe compile` and `cuprobe run` call it; the bundle it returns is what
// the rewriter and the hook consume (probe/bundle.h).
//
//   ProbeCompileOptions options;
//   CUPROBE_ASSIGN_OR_RETURN(CompileResult r, CompileFile("threadhist.bpf.c", options));
//   std::vector<uint8_t> bytes = WriteBundle(r.bundle);
#ifndef CUPROBE_LOADER_COMPILER_COMPILER_H_
#define CUPROBE_LOADER_COMPILER_COMPILER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "loader/compiler/lower.h"
#include "loader/compiler/verifier.h"
#include "probe/bundle.h"

namespace cuprobe {

struct ProbeCompileOptions {
  VerifierOptions verifier;
  bool keep_llvm = false;              // fill CompileResult::llvm_ir
  std::vector<std::string> clang_args;  // extra arguments (-DNAME=1, -Idir)
  // Size of the implicit printk ring buffer, in bytes.
  uint32_t printk_ring_bytes = 1u << 20;
  // The clang that compiles C probes (empty: the one found at configure
  // time) and the directory holding cuprobe/probe.h (empty: the source
  // tree's include/).
  std::string clang;
  std::string include_dir;
  // The ring-buffer lowering's measuring switches.
  RingLowering ring;
  // The map lowering's measuring switch.
  MapLowering maps;

  // The defaults, with what the environment says: CUPROBE_CLANG,
  // CUPROBE_INCLUDE_DIR, CUPROBE_RING_INLINE, CUPROBE_DIAG_RING_COMMIT,
  // CUPROBE_DIAG_RING_DROP, CUPROBE_UNIFORM_ADDS, read through `env` (the
  // CLI passes std::getenv).
  using Lookup = std::function<const char*(const char*)>;
  [[nodiscard]] static ProbeCompileOptions FromEnvironment(const Lookup& env);
};

struct CompileTimings {
  double clang_ms = 0, read_ms = 0, verify_ms = 0, lower_ms = 0, codegen_ms = 0;
};

struct CompileResult {
  ProbeBundle bundle;
  // One line per program the bundle leaves out (BpfObject::skipped: host
  // programs of bpftime's examples), also logged as warnings.
  std::vector<std::string> warnings;
  std::string llvm_ir;  // before optimization (keep_llvm)
  std::vector<VerifiedProgram> verified;
  uint64_t object_insns = 0;
  CompileTimings timings;
};

// The clang that compiles probes: options.clang, else the one found at
// configure time.
[[nodiscard]] std::string ClangPath(const ProbeCompileOptions& options);
// The directory holding cuprobe/probe.h: options.include_dir, else the
// source tree's include/.
[[nodiscard]] std::string ProbeIncludeDir(const ProbeCompileOptions& options);

// Runs clang on a C probe and returns the eBPF object. Compiler diagnostics
// are part of the error message.
[[nodiscard]] absl::StatusOr<std::vector<uint8_t>> CompileCToBpf(
    const std::string& source_path, const ProbeCompileOptions& options, double* clang_ms = nullptr);

// Compiles an eBPF object (its bytes; `name` for messages).
[[nodiscard]] absl::StatusOr<CompileResult> CompileObject(absl::Span<const uint8_t> object,
                                                          std::string_view name,
                                                          const ProbeCompileOptions& options);

// Several eBPF objects into one bundle (`cuprobe run -p a.bpf.c -p b.bpf.c`):
// their programs in order, their maps in one table (a map named like one of
// an earlier object becomes "<object stem>.<name>"), one printk ring. Each
// program keeps its own maps and read-only data.
struct ProbeObject {
  absl::Span<const uint8_t> bytes;
  std::string name;  // for messages and the bundle's source name
};
[[nodiscard]] absl::StatusOr<CompileResult> CompileObjects(absl::Span<const ProbeObject> objects,
                                                           const ProbeCompileOptions& options);

// A .c file (any file not starting with the ELF magic is taken as C) or an
// eBPF object file.
[[nodiscard]] absl::StatusOr<CompileResult> CompileFile(const std::string& path,
                                                        const ProbeCompileOptions& options);
// Several of them into one bundle (CompileObjects).
[[nodiscard]] absl::StatusOr<CompileResult> CompileFiles(const std::vector<std::string>& paths,
                                                         const ProbeCompileOptions& options);

[[nodiscard]] std::string CompilerVersion();

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_COMPILER_COMPILER_H_
