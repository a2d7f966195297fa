// File: loader/trace_command.h
//
// `cuprobe trace -- program args`: creates the session segment, runs the
// program with the hook injected, drains records while it runs, prints the
// kernel summary and writes the report files.
//
//   int code = RunTrace(args.trace);   // the program's exit code
#ifndef CUPROBE_LOADER_TRACE_COMMAND_H_
#define CUPROBE_LOADER_TRACE_COMMAND_H_

#include <string>

#include "absl/status/statusor.h"
#include "loader/args.h"

namespace cuprobe {

// Returns the exit code cuprobe should exit with (the program's), or raises
// the signal that killed the program. Errors before the program starts
// (no hook library, unwritable output, no such program) are returned as a
// status; nothing is run then.
[[nodiscard]] absl::StatusOr<int> RunTrace(const TraceOptions& options);

// The hook library next to this executable: $CUPROBE_HOOK, else
// <dir of cuprobe>/../lib/libcuprobe_hook.so, else <dir>/libcuprobe_hook.so.
[[nodiscard]] absl::StatusOr<std::string> FindHookLibrary();

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_TRACE_COMMAND_H_
