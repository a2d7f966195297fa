// File: loader/attach_command.h
//
// `cuprobe attach PID -p probe.bpf.c`: late attach. Compiles the probes as
// `cuprobe run` does, puts them in a probe session of its own (bundle +
// maps), asks the hook of a program running under `cuprobe trace` to attach
// it (the request in the program's session header, maps/segment_layout.h),
// prints maps and events live, and detaches on Ctrl-C, at --duration or when
// the program exits. The hook's side is cupti_hook/late_attach.h.
//
//   absl::StatusOr<int> code = RunAttach(args.attach);   // 0 when it detached cleanly
#ifndef CUPROBE_LOADER_ATTACH_COMMAND_H_
#define CUPROBE_LOADER_ATTACH_COMMAND_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "loader/args.h"
#include "loader/session_lookup.h"

namespace cuprobe {

[[nodiscard]] absl::StatusOr<int> RunAttach(const AttachOptions& options);

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_ATTACH_COMMAND_H_
