// File: loader/inspect_command.h
//
// `cuprobe inspect FILE`: lists the CUDA code in a host executable or shared
// library, a fatbin, an ELF cubin or PTX text, offline (no GPU needed).
//
//   CUPROBE_RETURN_IF_ERROR(RunInspect(args.inspect));   // prints to stdout
#ifndef CUPROBE_LOADER_INSPECT_COMMAND_H_
#define CUPROBE_LOADER_INSPECT_COMMAND_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loader/args.h"

namespace cuprobe {

// The listing `cuprobe inspect` prints.
[[nodiscard]] absl::StatusOr<std::string> InspectFile(const InspectOptions& options);

// Prints the listing to stdout; with --extract-ptx also writes the PTX.
[[nodiscard]] absl::Status RunInspect(const InspectOptions& options);

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_INSPECT_COMMAND_H_
