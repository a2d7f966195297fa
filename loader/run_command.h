// File: loader/run_command.h
//
// `cuprobe run -p probe.bpf.c -- program args`: compiles (or loads) the
// probe bundle, creates a session that carries it and its maps, runs the
// program with the hook injected (the hook rewrites the selected kernels as
// their modules load), prints the maps every interval and streams ring-buffer
// events while the program runs, and ends with the final maps and the trace
// report of `cuprobe trace`.
//
//   absl::StatusOr<int> code = RunRun(args.run);   // the program's exit code
#ifndef CUPROBE_LOADER_RUN_COMMAND_H_
#define CUPROBE_LOADER_RUN_COMMAND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "loader/args.h"
#include "maps/segment.h"
#include "probe/bundle.h"

namespace cuprobe {

[[nodiscard]] absl::StatusOr<int> RunRun(const RunOptions& options);

// The probes of several -p (or one), with -k applied and each program
// announced; an error when there is no program.
[[nodiscard]] absl::StatusOr<ProbeBundle> LoadRunProbes(const RunOptions& options);

// The live view of `cuprobe run` over a probe session, for `cuprobe attach`:
// maps every interval (Interval), ring-buffer events (Drain), then the last
// events and the final maps, on stderr and into PREFIX.maps.txt /
// PREFIX.events (Final).
class ProbePrinter {
 public:
  // Both are kept by reference.
  ProbePrinter(const RunOptions& options, const ProbeBundle& bundle);
  ~ProbePrinter();
  void Interval(Session& session);
  // Consumes the ring buffers (events printed unless quiet); call often.
  void Drain(Session& session);
  void Final(Session& session);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The bundle of a -p argument: a .cpb file is read, anything else compiled.
[[nodiscard]] absl::StatusOr<ProbeBundle> LoadProbe(const std::string& path);

// A printk record (abi.h: {u32 format_id, u32 nargs, u64 args[3]}) formatted
// with the bundle's format strings: %d %i %u %x %X %o %c %p %% with l/ll/h/hh
// /z length modifiers, flags and widths. Anything else prints verbatim.
[[nodiscard]] std::string FormatPrintk(const ProbeBundle& bundle,
                                       absl::Span<const uint8_t> record);
[[nodiscard]] std::string FormatPrintf(std::string_view format, absl::Span<const uint64_t> args);

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_RUN_COMMAND_H_
