#include "loader/compile_command.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "loader/compiler/compiler.h"
#include "loader/oneliner/compile.h"
#include "probe/bundle.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

std::string StripSuffix(std::string path, std::string_view suffix) {
  if (absl::EndsWith(path, suffix)) path.resize(path.size() - suffix.size());
  return path;
}

absl::Status WriteFile(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

std::string DefaultBundlePath(const std::string& input) {
  std::string base = input;
  for (std::string_view suffix : {".bpf.c", ".c", ".bpf.o", ".o"}) {
    if (absl::EndsWith(base, suffix)) {
      base = StripSuffix(base, suffix);
      break;
    }
  }
  return base + ".cpb";
}

absl::Status RunCompile(const CompileArgs& args) {
  ProbeCompileOptions options = ProbeCompileOptions::FromEnvironment(&std::getenv);
  options.verifier.max_insns = args.max_insns;
  options.verifier.max_steps = args.max_steps;
  options.keep_llvm = args.emit_llvm;
  options.clang_args = args.clang_args;
  const bool tty = isatty(STDERR_FILENO) != 0;
  const std::string input = args.oneliner.empty() ? args.input : "-e";
  if (tty) std::fprintf(stderr, "cuprobe: compiling %s ...\r", input.c_str());
  CUPROBE_ASSIGN_OR_RETURN(CompileResult r, args.oneliner.empty()
                                                ? CompileFile(args.input, options)
                                                : oneliner::CompileOneliner(args.oneliner, options));
  if (tty) std::fprintf(stderr, "\33[2K");
  const std::string output = !args.output.empty()    ? args.output
                             : args.oneliner.empty() ? DefaultBundlePath(args.input)
                                                     : std::string("oneliner.cpb");
  const std::vector<uint8_t> bytes = WriteBundle(r.bundle);
  CUPROBE_RETURN_IF_ERROR(WriteFile(output, bytes.data(), bytes.size()));
  const std::string stem = StripSuffix(output, ".cpb");
  if (args.emit_ptx) {
    CUPROBE_RETURN_IF_ERROR(WriteFile(stem + ".ptx", r.bundle.ptx.data(), r.bundle.ptx.size()));
  }
  if (args.emit_llvm) {
    CUPROBE_RETURN_IF_ERROR(WriteFile(stem + ".ll", r.llvm_ir.data(), r.llvm_ir.size()));
  }
  const CompileTimings& t = r.timings;
  std::fprintf(stderr,
               "cuprobe: %s: %zu program%s (%llu insns), %zu map%s -> %s (%zu bytes)\n"
               "         clang %.1f ms, verify %.1f ms, lower %.1f ms, PTX %.1f ms\n",
               input.c_str(), r.bundle.programs.size(),
               r.bundle.programs.size() == 1 ? "" : "s",
               static_cast<unsigned long long>(r.object_insns), r.bundle.maps.size(),
               r.bundle.maps.size() == 1 ? "" : "s", output.c_str(), bytes.size(), t.clang_ms,
               t.verify_ms, t.lower_ms, t.codegen_ms);
  for (const ProbeProgram& p : r.bundle.programs) {
    std::fprintf(stderr, "         %-24s %-6s %s\n", p.name.c_str(),
                 p.attach == AttachKind::kEntry ? "entry"
                 : p.attach == AttachKind::kExit ? "exit"
                                                 : "mem",
                 p.kernel_glob.c_str());
  }
  return absl::OkStatus();
}

}  // namespace cuprobe
