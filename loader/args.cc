// File: loader/args.cc
//
// ParseArgs: the command, then the command's own parser (args_internal.h
// says which file has which); the report prefix's placeholders; report
// format and backend names.
#include "loader/args.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loader/args_internal.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace args_internal {

absl::Status Invalid(std::string_view message, std::string_view topic) {
  return absl::InvalidArgumentError(absl::StrCat(
      message, "\nTry 'cuprobe ", topic, topic.empty() ? "" : " ", "--help'."));
}

}  // namespace args_internal

using args_internal::Invalid;

absl::StatusOr<CliArgs> ParseArgs(const std::vector<std::string>& argv) {
  CliArgs args;
  if (argv.size() < 2) return args;  // plain `cuprobe`: general help
  const std::string& cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    args.command = Command::kHelp;
    if (argv.size() > 2) args.help_topic = argv[2];
    if (!args.help_topic.empty() && args.help_topic != "trace" && args.help_topic != "inspect" &&
        args.help_topic != "compile" && args.help_topic != "instrument" &&
        args.help_topic != "maps" && args.help_topic != "run" && args.help_topic != "attach" &&
        args.help_topic != "list") {
      return Invalid(absl::StrCat("no help for unknown command '", args.help_topic, "'"), "");
    }
    return args;
  }
  if (cmd == "-V" || cmd == "--version" || cmd == "version") {
    args.command = Command::kVersion;
    return args;
  }
  if (cmd == "trace") return args_internal::ParseTrace(argv, 2, std::move(args));
  if (cmd == "run") return args_internal::ParseRun(argv, 2, std::move(args));
  if (cmd == "attach") return args_internal::ParseAttach(argv, 2, std::move(args));
  if (cmd == "inspect") return args_internal::ParseInspect(argv, 2, std::move(args));
  if (cmd == "compile") return args_internal::ParseCompile(argv, 2, std::move(args));
  if (cmd == "instrument") return args_internal::ParseInstrument(argv, 2, std::move(args));
  if (cmd == "list") return args_internal::ParseList(argv, 2, std::move(args));
  if (cmd == "maps") {
    CUPROBE_ASSIGN_OR_RETURN(args.maps, ParseMapsArgs(argv, 2));
    args.command = args.maps.help ? Command::kHelp : Command::kMaps;
    if (args.maps.help) args.help_topic = "maps";
    return args;
  }
  return Invalid(absl::StrCat("unknown command '", cmd, "'"), "");
}

absl::StatusOr<std::string> ExpandReportPrefix(
    std::string_view prefix, uint32_t pid, std::string_view host,
    const std::function<const char*(const char*)>& getenv) {
  std::string out;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (prefix[i] != '%') {
      out += prefix[i];
      continue;
    }
    if (i + 1 >= prefix.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--output '", prefix, "' ends in a lone '%' (write %% for a '%')"));
    }
    const char c = prefix[++i];
    if (c == '%') {
      out += '%';
    } else if (c == 'p') {
      absl::StrAppend(&out, pid);
    } else if (c == 'h') {
      out += host;
    } else if (c == 'q' && i + 1 < prefix.size() && prefix[i + 1] == '{') {
      const size_t close = prefix.find('}', i + 2);
      if (close == std::string_view::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("--output '", prefix, "': %q{ at offset ", i - 1, " has no closing }"));
      }
      const std::string name(prefix.substr(i + 2, close - i - 2));
      if (name.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--output '", prefix, "': %q{} names no environment variable"));
      }
      const char* value = getenv(name.c_str());
      if (value != nullptr) out += value;
      i = close;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--output '", prefix, "': unknown placeholder '%", std::string(1, c), "' at offset ",
          i - 1, " (known: %p pid, %h host, %q{VAR} environment variable, %% a '%')"));
    }
  }
  return out;
}

std::string_view ReportFormatName(ReportFormat format) {
  switch (format) {
    case ReportFormat::kTable: return "table";
    case ReportFormat::kJson: return "json";
    case ReportFormat::kCsv: return "csv";
    case ReportFormat::kChrome: return "chrome";
    case ReportFormat::kPerfetto: return "perfetto";
    case ReportFormat::kPrometheus: return "prom";
  }
  return "?";
}

std::string_view ProbeBackendName(ProbeBackend backend) {
  switch (backend) {
    case ProbeBackend::kAuto: return "auto";
    case ProbeBackend::kPtx: return "ptx";
    case ProbeBackend::kPatch: return "patch";
  }
  return "?";
}

}  // namespace cuprobe
