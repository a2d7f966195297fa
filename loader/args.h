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
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loader/maps_command.h"

namespace cuprobe {

enum class Command {
  kHelp, kVersion, kTrace, kRun, kAttach, kInspect, kCompile, kInstrument, kMaps, kList
};

enum class ReportFormat { kTable, kJson, kCsv, kChrome, kPerfetto, kPrometheus };

struct TraceOptions {
  std::string output = "cuprobe-report";  // prefix of the report files
  std::vector<ReportFormat> formats = {ReportFormat::kTable, ReportFormat::kPerfetto};
  bool keep_session = false;
  uint64_t ring_bytes = 64ull << 20;
  uint32_t interval_ms = 100;
  // What the hook traces (CUPROBE_TRACE): "launches,kernels,memory".
  std::string trace_selection = "launches,kernels,memory";
  // --capture-range cudaProfilerApi (CUPROBE_CAPTURE_RANGE): only what is
  // launched between the program's cudaProfilerStart and cudaProfilerStop.
  bool capture_profiler_api = false;
  // --capture-range-end (CUPROBE_CAPTURE_RANGE_END): repeat (the default),
  // repeat:N, stop or none (probe/capture_range_end.h); empty: the
  // default. Only with --capture-range.
  std::string capture_range_end;
  std::vector<std::string> command;  // the program and its arguments
};

// How `cuprobe run` gets probes into kernels; the hook reads it from
// CUPROBE_BACKEND (ProbeBackendName gives the value).
//   kAuto   the hook's choice; today the PTX backend.
//   kPtx    kernels are rewritten from their PTX as their modules load;
//           kernels without PTX run unchanged.
//   kPatch  every selected kernel's SASS is patched through the Compute
//           Sanitizer; no GPU kernel times (it excludes CUPTI).
enum class ProbeBackend { kAuto, kPtx, kPatch };

// `cuprobe run` (loader/run_command.h): a traced run with probes.
struct RunOptions {
  TraceOptions trace;                // report, formats, program; interval: map prints
  std::vector<std::string> probes;   // .c, .o or .cpb
  std::string oneliner;              // -e PROGRAM (docs/ONELINERS.md), instead of probes
  std::string kernels;               // overrides every program's kernel glob
  bool events_json = false;          // ring-buffer events as JSON lines
  bool quiet = false;                // no live output
  ProbeBackend backend = ProbeBackend::kPtx;  // --backend (CUPROBE_BACKEND)
};

// `cuprobe attach TARGET -p PROBE`: probes added to a running `cuprobe
// trace` (loader/attach_command.h).
struct AttachOptions {
  std::string target;     // the program's pid, or its session's name
  RunOptions run;         // probes, -k, events, quiet, output prefix, interval
  uint32_t duration_s = 0;  // 0: until Ctrl-C or the program's exit
};

struct InspectOptions {
  std::string path;
  uint32_t sm = 90;            // device SM the PTX choice is made for
  std::string extract_ptx;     // write the chosen PTX here ("-" for stdout)
  // Where the PTX of a bare cubin is looked for, as the hook does (Triton's
  // cache); RunInspect fills it from the environment when empty.
  std::vector<std::string> ptx_search_roots;
};

// `cuprobe list` (loader/list_command.h): the attach points of a file's
// kernels, of a running program's, or of a program run for the purpose.
struct ListOptions {
  // Which attach points: "", "GLOB" (every point of the kernels the glob
  // selects) or "POINT:GLOB" with POINT entry, exit, mem or *.
  std::string pattern;
  std::string target;                // FILE, or PID / session name
  std::vector<std::string> command;  // -- program args (instead of a target)
  uint32_t sm = 90;                  // FILE: the device the PTX is chosen for
  bool verbose = false;              // -v: mangled names too
};

struct CompileArgs {
  std::string input;           // probe.bpf.c or an eBPF object
  std::string oneliner;        // -e PROGRAM instead of an input
  std::string output;          // .cpb path; default: the input's name with .cpb
  bool emit_ptx = false;       // also write OUTPUT without .cpb + .ptx
  bool emit_llvm = false;      // also write OUTPUT without .cpb + .ll
  uint32_t max_insns = 4096;   // verifier: program size budget
  uint64_t max_steps = 1'000'000;  // verifier: instructions processed over all paths
  std::vector<std::string> clang_args;  // -D / -I given through
};

// `cuprobe instrument` (loader/instrument_command.h).
struct InstrumentCommandOptions {
  std::string probe;  // "builtin:count" or a bundle file (.cpb)
  // -k: a glob over mangled / demangled names that replaces every program's
  // own; "": the bundle's globs (builtin:count: every kernel).
  std::string kernels;
  // --entry / --exit / --mem: the attach points to keep. None of them: a
  // bundle's programs attach where their sections say (builtin:count needs
  // at least one).
  bool entry = false;
  bool exit = false;
  bool mem = false;
  // --mem-spaces: CUPROBE_SPACE_* bits replacing the memory programs' own;
  // 0: the bundle's (builtin:count: global and generic).
  uint32_t mem_spaces = 0;
  std::string input;          // executable, .so, fatbin, cubin or PTX
  std::string output;         // .cubin or .ptx
  std::string helpers;        // GPU helper library PTX ("": $CUPROBE_HELPER_PTX)
  bool stats = false;         // per-kernel sites and extra registers
  uint32_t sm = 90;
  uint32_t first_kernel_id = 0;

  // No --entry, --exit or --mem: the bundle's own attach points.
  bool UsesBundleAttachPoints() const { return !entry && !exit && !mem; }
};

struct CliArgs {
  Command command = Command::kHelp;
  std::string help_topic;  // "" (general), "trace", "inspect", "compile", "instrument", "maps"
  TraceOptions trace;
  RunOptions run;
  AttachOptions attach;
  InspectOptions inspect;
  CompileArgs compile;
  InstrumentCommandOptions instrument;
  MapsOptions maps;
  ListOptions list;
};

[[nodiscard]] absl::StatusOr<CliArgs> ParseArgs(const std::vector<std::string>& argv);

// Expands the placeholders of a report prefix (-o), so that one command line
// serves every rank of a launcher (`torchrun --no-python cuprobe trace -o
// job/rank%q{RANK} -- python3 train.py`): %p the cuprobe process's pid, %h
// the host name, %q{NAME} environment variable NAME (empty when unset), %%
// a '%'. INVALID_ARGUMENT for any other '%' sequence, naming it.
[[nodiscard]] absl::StatusOr<std::string> ExpandReportPrefix(
    std::string_view prefix, uint32_t pid, std::string_view host,
    const std::function<const char*(const char*)>& getenv);

// Usage text for `cuprobe --help` ("") and `cuprobe <command> --help`.
[[nodiscard]] std::string UsageText(std::string_view topic);

[[nodiscard]] std::string_view ReportFormatName(ReportFormat format);

// The CUPROBE_BACKEND value of a backend: "auto", "ptx" or "patch".
[[nodiscard]] std::string_view ProbeBackendName(ProbeBackend backend);

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_ARGS_H_
