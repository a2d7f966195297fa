// File: loader/instrument_command.h
//
// `cuprobe instrument`: the whole rewrite pipeline, offline -- read an
// image (executable, library, fatbin, cubin, PTX), pick the PTX for --sm,
// rewrite the kernels the probe's programs select (their globs, or
// --kernels), each program at its own attach point, link the probe and the
// GPU helper library, write PTX or compile a cubin. The rewrite is the one
// the hook does for `cuprobe run` (InstrumentPtx): which program attaches
// where comes from the bundle alone; --entry/--exit/--mem only drop
// programs.
//
//   CUPROBE_ASSIGN_OR_RETURN(std::string report, InstrumentFile(args.instrument));
//   std::fputs(report.c_str(), stdout);
#ifndef CUPROBE_LOADER_INSTRUMENT_COMMAND_H_
#define CUPROBE_LOADER_INSTRUMENT_COMMAND_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loader/args.h"
#include "probe/bundle.h"

namespace cuprobe {

// The bundle --probe names: a built-in one, or a .cpb file with the
// programs of the attach points --entry/--exit/--mem ask for (all of them
// without these flags), -k and --mem-spaces, when given, replacing their
// kernel globs and memory spaces.
[[nodiscard]] absl::StatusOr<ProbeBundle> LoadProbeBundle(const InstrumentCommandOptions& options);

// Runs the pipeline, writes options.output and returns the report text.
[[nodiscard]] absl::StatusOr<std::string> InstrumentFile(const InstrumentCommandOptions& options);

// InstrumentFile, report on stdout.
[[nodiscard]] absl::Status RunInstrument(const InstrumentCommandOptions& options);

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_INSTRUMENT_COMMAND_H_
