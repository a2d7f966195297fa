// File: loader/args_traced_run.cc
//
// Parsing of the commands that run against a traced program: `trace`,
// `run` (a traced run with probes) and `attach` (probes for a program
// already traced). trace and run share the options of a traced run
// (report prefix and formats, what to trace, capture range, ring size);
// attach takes the probe options of run.
#include <unistd.h>

#include <cstdlib>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loader/args_internal.h"
#include "probe/capture_range_end.h"
#include "support/status_macros.h"

namespace cuprobe::args_internal {
namespace {

// -o as given on the command line, expanded for this process.
absl::StatusOr<std::string> ReportPrefix(std::string_view value, std::string_view topic) {
  if (value.empty()) return Invalid("--output needs a non-empty prefix", topic);
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  absl::StatusOr<std::string> out = ExpandReportPrefix(
      value, static_cast<uint32_t>(::getpid()), host, [](const char* n) { return std::getenv(n); });
  if (!out.ok()) return Invalid(out.status().message(), topic);
  if (out->empty()) return Invalid(absl::StrCat("--output '", value, "' expands to nothing"), topic);
  return out;
}

absl::StatusOr<std::vector<ReportFormat>> ParseFormats(std::string_view list) {
  std::vector<ReportFormat> formats;
  for (std::string_view f : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    if (f == "table") {
      formats.push_back(ReportFormat::kTable);
    } else if (f == "json") {
      formats.push_back(ReportFormat::kJson);
    } else if (f == "csv") {
      formats.push_back(ReportFormat::kCsv);
    } else if (f == "chrome") {
      formats.push_back(ReportFormat::kChrome);
    } else if (f == "perfetto") {
      formats.push_back(ReportFormat::kPerfetto);
    } else if (f == "prom" || f == "prometheus") {
      formats.push_back(ReportFormat::kPrometheus);
    } else {
      return Invalid(absl::StrCat("unknown report format '", f,
                                  "' (expected table, json, csv, perfetto, chrome, prom)"),
                     "trace");
    }
  }
  if (formats.empty()) return Invalid("--format needs at least one format", "trace");
  return formats;
}

// "launches,kernels,memory" or a subset, normalized (sorted, no duplicates).
absl::StatusOr<std::string> ParseTraceSelection(std::string_view list) {
  bool launches = false, kernels = false, memory = false;
  for (std::string_view w : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    if (w == "launches") {
      launches = true;
    } else if (w == "kernels") {
      kernels = true;
    } else if (w == "memory") {
      memory = true;
    } else if (w == "all") {
      launches = kernels = memory = true;
    } else {
      return Invalid(absl::StrCat("unknown --trace item '", w,
                                  "' (expected launches, kernels, memory or all)"),
                     "trace");
    }
  }
  std::vector<std::string_view> words;
  if (launches) words.push_back("launches");
  if (kernels) words.push_back("kernels");
  if (memory) words.push_back("memory");
  if (words.empty()) return Invalid("--trace needs at least one item", "trace");
  return absl::StrJoin(words, ",");
}

// Options of a traced run, shared by `trace` and `run`. `extra` is tried
// first for the command's own options: it returns true when it took argv[i]
// (advancing i past a value), or an error.
using ExtraOption =
    std::function<absl::StatusOr<bool>(const std::vector<std::string>& argv, size_t& i)>;

absl::Status ParseTracedRun(const std::vector<std::string>& argv, size_t i, std::string_view topic,
                            TraceOptions& t, const ExtraOption& extra, bool* help) {
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "--") {
      t.command.assign(argv.begin() + static_cast<long>(i) + 1, argv.end());
      break;
    }
    if (arg == "-h" || arg == "--help") {
      *help = true;
      return absl::OkStatus();
    }
    if (arg == "--keep") {
      t.keep_session = true;
      continue;
    }
    if (extra) {
      CUPROBE_ASSIGN_OR_RETURN(bool taken, extra(argv, i));
      if (taken) continue;
    }
    std::string value;
    absl::Status error;
    OptionReader r(argv, i);
    if (r.Match("-o", "--output", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(t.output, ReportPrefix(value, topic));
    } else if (r.Match("-f", "--format", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(t.formats, ParseFormats(value));
    } else if (r.Match("-t", "--trace", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(t.trace_selection, ParseTraceSelection(value));
    } else if (r.Match("-c", "--capture-range", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      if (value == "cudaProfilerApi") {
        t.capture_profiler_api = true;
      } else if (value == "none") {
        t.capture_profiler_api = false;
      } else {
        return Invalid(absl::StrCat("unknown --capture-range '", value,
                                    "' (expected cudaProfilerApi or none)"),
                       topic);
      }
    } else if (r.Match("", "--capture-range-end", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      absl::StatusOr<CaptureRangeEnd> end = ParseCaptureRangeEnd(value);
      if (!end.ok()) {
        return Invalid(absl::StrCat("--capture-range-end: ", end.status().message()), topic);
      }
      t.capture_range_end = value;
    } else if (r.Match("", "--buffer-mb", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(uint64_t mb,
                               ParseNumber<uint64_t>("--buffer-mb", value, 1, 4096, topic));
      t.ring_bytes = mb << 20;
    } else if (r.Match("", "--interval", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(t.interval_ms,
                               ParseNumber<uint32_t>("--interval", value, 1, 60000, topic));
    } else if (!arg.empty() && arg[0] == '-') {
      return Invalid(absl::StrCat("unknown option '", arg, "'"), topic);
    } else {
      // The program may follow directly, without "--".
      t.command.assign(argv.begin() + static_cast<long>(i), argv.end());
      break;
    }
  }
  if (!t.capture_range_end.empty() && !t.capture_profiler_api) {
    return Invalid("--capture-range-end needs --capture-range cudaProfilerApi", topic);
  }
  if (t.command.empty()) {
    return Invalid(absl::StrCat(topic, " needs a program to run: cuprobe ", topic,
                                " [options] -- program [args]"),
                   topic);
  }
  return absl::OkStatus();
}

absl::StatusOr<ProbeBackend> ParseBackend(std::string_view value) {
  if (value == "auto") return ProbeBackend::kAuto;
  if (value == "ptx") return ProbeBackend::kPtx;
  if (value == "patch") return ProbeBackend::kPatch;
  return Invalid(absl::StrCat("unknown --backend '", value, "' (expected auto, ptx or patch)"),
                 "run");
}

// run's own options (ParseTracedRun's `extra`): probes, kernels, events,
// quiet, backend.
absl::StatusOr<bool> TakeRunOption(const std::vector<std::string>& argv, size_t& i,
                                   RunOptions& o) {
  std::string value;
  absl::Status error;
  OptionReader r(argv, i);
  if (r.Match("-p", "--probe", &value, &error)) {
    CUPROBE_RETURN_IF_ERROR(error);
    if (value.empty()) return Invalid("--probe needs a file", "run");
    o.probes.push_back(value);
    return true;
  }
  if (r.Match("-k", "--kernels", &value, &error)) {
    CUPROBE_RETURN_IF_ERROR(error);
    if (value.empty()) return Invalid("--kernels needs a glob", "run");
    o.kernels = value;
    return true;
  }
  if (r.Match("-e", "-e", &value, &error)) {
    CUPROBE_RETURN_IF_ERROR(error);
    // `-e lines` / `-e json` keep their old meaning, --events.
    if (value == "lines" || value == "json") {
      o.events_json = value == "json";
      return true;
    }
    if (value.empty()) return Invalid("-e needs a one-liner, e.g. -e 'exit:* { @n = count(); }'", "run");
    if (!o.oneliner.empty()) return Invalid("-e is given twice: put both probes in one -e", "run");
    o.oneliner = value;
    return true;
  }
  if (r.Match("", "--events", &value, &error)) {
    CUPROBE_RETURN_IF_ERROR(error);
    if (value == "lines") {
      o.events_json = false;
    } else if (value == "json") {
      o.events_json = true;
    } else {
      return Invalid(absl::StrCat("--events expects lines or json, got '", value, "'"), "run");
    }
    return true;
  }
  if (r.Match("", "--backend", &value, &error)) {
    CUPROBE_RETURN_IF_ERROR(error);
    CUPROBE_ASSIGN_OR_RETURN(o.backend, ParseBackend(value));
    return true;
  }
  if (argv[i] == "--quiet") {
    o.quiet = true;
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<CliArgs> ParseTrace(const std::vector<std::string>& argv, size_t i, CliArgs args) {
  args.command = Command::kTrace;
  bool help = false;
  CUPROBE_RETURN_IF_ERROR(ParseTracedRun(argv, i, "trace", args.trace, nullptr, &help));
  if (help) {
    args.command = Command::kHelp;
    args.help_topic = "trace";
  }
  return args;
}

absl::StatusOr<CliArgs> ParseRun(const std::vector<std::string>& argv, size_t i, CliArgs args) {
  args.command = Command::kRun;
  RunOptions& o = args.run;
  o.trace.output = "cuprobe-run";
  o.trace.interval_ms = 1000;
  ExtraOption extra = [&o](const std::vector<std::string>& argv, size_t& i) {
    return TakeRunOption(argv, i, o);
  };
  bool help = false;
  CUPROBE_RETURN_IF_ERROR(ParseTracedRun(argv, i, "run", o.trace, extra, &help));
  if (help) {
    args.command = Command::kHelp;
    args.help_topic = "run";
    return args;
  }
  if (o.probes.empty() && o.oneliner.empty()) {
    return Invalid("run needs a probe: cuprobe run -p probe.bpf.c -- program [args], or a "
                   "one-liner: cuprobe run -e 'exit:* { @n = count(); }' -- program [args]",
                   "run");
  }
  if (!o.probes.empty() && !o.oneliner.empty()) {
    return Invalid("run takes probes (-p) or a one-liner (-e), not both", "run");
  }
  return args;
}

absl::StatusOr<CliArgs> ParseAttach(const std::vector<std::string>& argv, size_t i,
                                    CliArgs args) {
  args.command = Command::kAttach;
  AttachOptions& o = args.attach;
  o.run.trace.output = "cuprobe-attach";
  o.run.trace.interval_ms = 1000;
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      args.command = Command::kHelp;
      args.help_topic = "attach";
      return args;
    }
    std::string value;
    absl::Status error;
    OptionReader r(argv, i);
    if (r.Match("-p", "--probe", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      if (value.empty()) return Invalid("--probe needs a file", "attach");
      o.run.probes.push_back(value);
    } else if (r.Match("-k", "--kernels", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      if (value.empty()) return Invalid("--kernels needs a glob", "attach");
      o.run.kernels = value;
    } else if (r.Match("-d", "--duration", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(o.duration_s,
                               ParseNumber<uint32_t>("--duration", value, 1, 86400, "attach"));
    } else if (r.Match("", "--interval", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(o.run.trace.interval_ms,
                               ParseNumber<uint32_t>("--interval", value, 1, 60000, "attach"));
    } else if (r.Match("-e", "--events", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      if (value == "lines" || value == "json") {
        o.run.events_json = value == "json";
      } else if (arg == "-e") {
        if (value.empty()) return Invalid("-e needs a one-liner", "attach");
        o.run.oneliner = value;
      } else {
        return Invalid(absl::StrCat("--events expects lines or json, got '", value, "'"),
                       "attach");
      }
    } else if (r.Match("-o", "--output", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(o.run.trace.output, ReportPrefix(value, "attach"));
    } else if (arg == "--quiet") {
      o.run.quiet = true;
    } else if (!arg.empty() && arg[0] == '-') {
      return Invalid(absl::StrCat("unknown option '", arg, "'"), "attach");
    } else if (o.target.empty()) {
      o.target = arg;
    } else {
      return Invalid(absl::StrCat("attach takes one target, got '", o.target, "' and '", arg,
                                  "'"),
                     "attach");
    }
  }
  if (o.target.empty()) {
    return Invalid("attach needs a target: cuprobe attach PID -p probe.bpf.c", "attach");
  }
  if (o.run.probes.empty() && o.run.oneliner.empty()) {
    return Invalid("attach needs a probe: cuprobe attach PID -p probe.bpf.c, or a one-liner: "
                   "cuprobe attach PID -e 'exit:* { @n = count(); }'", "attach");
  }
  if (!o.run.probes.empty() && !o.run.oneliner.empty()) {
    return Invalid("attach takes probes (-p) or a one-liner (-e), not both", "attach");
  }
  return args;
}

}  // namespace cuprobe::args_internal
