// File: loader/compile_command.h
//
// `cuprobe compile`: verifies a probe (C source or eBPF object), compiles it
// to PTX and writes the probe bundle, optionally with the PTX and LLVM IR
// beside it. A summary line goes to stderr; verifier rejections are printed
// with their source line and hint.
//
//   CompileArgs args;
//   args.input = "threadhist.bpf.c";
//   CUPROBE_RETURN_IF_ERROR(RunCompile(args));  // writes threadhist.cpb
#ifndef CUPROBE_LOADER_COMPILE_COMMAND_H_
#define CUPROBE_LOADER_COMPILE_COMMAND_H_

#include <string>

#include "absl/status/status.h"
#include "loader/args.h"

namespace cuprobe {

[[nodiscard]] absl::Status RunCompile(const CompileArgs& args);

// "probe.bpf.c" -> "probe.cpb", "dir/p.o" -> "dir/p.cpb".
[[nodiscard]] std::string DefaultBundlePath(const std::string& input);

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_COMPILE_COMMAND_H_
