// File: loader/args.h
//
// Command-line parsing for `cuprobe`. ParseArgs never prints and never exits:
// it returns the parsed command, or an INVALID_ARGUMENT status whose message is
// what to tell the user. main() decides what to print.
//
//   absl::StatusOr<CliArgs> args = ParseArgs({"cuprobe", "trace", "--", "./app"});
//   if (args->command == Command::kTrace) RunTrace(args->trace);
#ifndef CUPROBE_LOADER_ARGS_H_
#define CUPROBE_LOADER_ARGS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loader/maps_command.h"

namespace cuprobe {

enum class Command { kHelp, kVersion, kTrace, kInspect, kMaps };

enum class ReportFormat { kTable, kJson, kCsv, kChrome };

struct TraceOptions {
  std::string output = "cuprobe-report";  // prefix of the report files
  std::vector<ReportFormat> formats = {ReportFormat::kTable, ReportFormat::kChrome};
  bool keep_session = false;
  uint64_t ring_bytes = 64ull << 20;
  uint32_t interval_ms = 100;
  std::vector<std::string> command;  // the program and its arguments
};

struct InspectOptions {
  std::string path;
  uint32_t sm = 90;            // device SM the PTX choice is made for
  std::string extract_ptx;     // write the chosen PTX here ("-" for stdout)
};

struct CliArgs {
  Command command = Command::kHelp;
  std::string help_topic;  // "" (general), "trace", "inspect", "maps"
  TraceOptions trace;
  InspectOptions inspect;
  MapsOptions maps;
};

[[nodiscard]] absl::StatusOr<CliArgs> ParseArgs(const std::vector<std::string>& argv);

// Usage text for `cuprobe --help` ("") and `cuprobe <command> --help`.
[[nodiscard]] std::string UsageText(std::string_view topic);

[[nodiscard]] std::string_view ReportFormatName(ReportFormat format);

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_ARGS_H_
