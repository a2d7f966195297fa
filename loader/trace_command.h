// File: loader/trace_command.h
//
// `cuprobe trace -- program args`: creates the session segment, runs the
// program with the hook injected, drains records while it runs, prints the
// kernel summary and writes the report files.
//
//   int code = RunTrace(args.trace);   // the program's exit code
#ifndef CUPROBE_LOADER_TRACE_COMMAND_H_
#define CUPROBE_LOADER_TRACE_COMMAND_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "loader/args.h"
#include "maps/segment.h"
#include "report/trace_aggregator.h"

namespace cuprobe {

// Returns the exit code cuprobe should exit with (the program's), or raises
// the signal that killed the program. Errors before the program starts
// (no hook library, unwritable output, no such program) are returned as a
// status; nothing is run then.
[[nodiscard]] absl::StatusOr<int> RunTrace(const TraceOptions& options);

// What `cuprobe run` adds to a traced run: a live view while the program
// runs, and a last word after it exited (its records all drained).
struct LiveView {
  uint32_t interval_ms = 0;  // 0: no live view
  // On a thread of the CLI, every interval_ms while the program runs, and
  // never after on_exit started.
  std::function<void(Session&)> on_interval;
  // On the same thread, every drain_interval_ms (0: never): consumes what
  // the program's probes wrote into ring buffers, so that a ring holds only
  // what arrives within one drain interval rather than within a print
  // interval.
  uint32_t drain_interval_ms = 0;
  std::function<void(Session&)> on_drain;
  // After the program exited, before the report is written.
  std::function<void(Session&, const TraceAggregator&)> on_exit;
  // Every record drained also goes here (on the drain thread, then on the
  // caller's after the program exited); nullptr: nowhere else.
  RecordConsumer* records = nullptr;
};

// Variables for the program's environment beyond those of a trace (run's
// CUPROBE_BACKEND). They replace same-named variables of cuprobe's own
// environment, as the trace's do.
using ExtraEnvironment = std::vector<std::pair<std::string, std::string>>;

// RunTrace with a session built from `session_options` (ring capacity is
// taken from `options`), a live view and `extra_env`.
[[nodiscard]] absl::StatusOr<int> RunTracedProgram(const TraceOptions& options,
                                                   SessionOptions session_options,
                                                   const LiveView& live,
                                                   const ExtraEnvironment& extra_env = {});

// The hook library next to this executable: $CUPROBE_HOOK, else
// <dir of cuprobe>/../lib/libcuprobe_hook.so, else <dir>/libcuprobe_hook.so.
[[nodiscard]] absl::StatusOr<std::string> FindHookLibrary();

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_TRACE_COMMAND_H_
