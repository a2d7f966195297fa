#include "loader/args.h"

#include <unistd.h>

#include <cstdlib>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "probe/capture_range_end.h"
#include "ptx_rewriter/builtin_probes.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

constexpr char kGeneralUsage[] = R"(cuprobe: trace and probe the CUDA kernels of unmodified programs

USAGE
  cuprobe <command> [options] [-- program [args...]]

COMMANDS
  trace     run a program and trace every kernel launch, kernel, memcpy and memset
  run       run a program with eBPF probes in its kernels; print maps and events live
  attach    add probes to a program already running under `cuprobe trace`
  inspect   list the CUDA code in an executable, library, fatbin, cubin or PTX file
  compile   verify a C/eBPF probe and compile it to a probe bundle (.cpb) of PTX
  instrument  rewrite the kernels of a file with probes, offline, into a cubin or PTX
  maps      print the probes' maps of a running or finished session

  cuprobe <command> --help    options and examples of one command
  cuprobe --version

EXAMPLES
  cuprobe trace -- ./vec_add
  cuprobe trace -o run1 --format table,csv,chrome -- python3 train.py
  cuprobe run -p samples/threadhist/threadhist.bpf.c -- build/samples/vec_add
  cuprobe attach 4242 -p samples/threadhist/threadhist.bpf.c --duration 10
  cuprobe inspect build/samples/vec_add
  cuprobe compile samples/threadhist/threadhist.bpf.c -o threadhist.cpb
  cuprobe instrument --probe builtin:count --entry build/samples/vec_add -o vec_add.cubin

ENVIRONMENT
  CUPROBE_LOG   off, error, warn (default), info, debug, trace
)";

constexpr char kTraceUsage[] = R"(cuprobe trace: trace every kernel of a program (an Nsight-Systems-style run)

USAGE
  cuprobe trace [options] -- program [args...]

  Runs the program with cuprobe's hook injected (CUDA_INJECTION64_PATH), with
  the program's own stdin, stdout and stderr. Prints a kernel summary when it
  exits and writes the report files. cuprobe exits with the program's exit
  code (or re-raises the signal that killed it).

OPTIONS
  -o, --output PREFIX     report file prefix (default: cuprobe-report);
                          %p: cuprobe's pid, %h: host name, %q{VAR}: the
                          environment variable VAR (e.g. rank%q{RANK})
  -f, --format LIST       comma-separated: table, json, csv, chrome
                          (default: table,chrome)
                            table   kernel summary on stderr and in PREFIX.txt
                            json    PREFIX.json: summaries as JSON
                            csv     PREFIX.csv: kernel summary as CSV
                            chrome  PREFIX.trace.json: a timeline for Perfetto
                                    (ui.perfetto.dev) or chrome://tracing
                            prom    PREFIX.prom: Prometheus text exposition,
                                    labelled host, rank (RANK, SLURM_PROCID,
                                    OMPI_COMM_WORLD_RANK) and pid, for
                                    collecting many ranks and machines
  -t, --trace LIST        what to trace, comma-separated (default: all):
                            launches  every launch call on the CPU: API time,
                                      grid, block, shared memory, stream
                            kernels   every kernel's GPU start and end (CUPTI
                                      kernel activity; costs most on programs
                                      that launch many tiny kernels)
                            memory    every memcpy and memset on the GPU
  -c, --capture-range R   what part of the run to trace (default: none, all of it):
                            cudaProfilerApi  only what the program launches
                                      between cudaProfilerStart and
                                      cudaProfilerStop (cuProfilerStart/Stop,
                                      torch.cuda.profiler.start/stop); by
                                      default every such range of the run,
                                      in one report
      --capture-range-end E
                          which ranges (with -c; default: repeat):
                            repeat    every range (up to 4096)
                            repeat:N  the first N ranges (N: 1 to 4096)
                            stop      the first range only
                            none      from the first start to the end of
                                      the run (stop calls are ignored)
                          (nsys' stop-shutdown and repeat-shutdown:N end the
                          program; cuprobe never does, and refuses them)
      --buffer-mb N       size of the record ring in the session (default: 64)
      --interval MS       how often the hook publishes heartbeats (default: 100)
      --keep              keep the session segment in /dev/shm after the run
  -h, --help              this text

EXAMPLES
  cuprobe trace -- ./vec_add 1048576 100
  cuprobe trace -o matmul --format table,json -- python3 matmul.py
  cuprobe trace --format chrome -o timeline -- ./app && echo open timeline.trace.json
  cuprobe trace --trace launches -- ./launch_heavy_app    # counts only, lowest overhead
  cuprobe trace -c cudaProfilerApi -- python3 train.py    # the steps between
                                      # torch.cuda.profiler.start() and stop()
  cuprobe trace -c cudaProfilerApi --capture-range-end stop -- python3 train.py
                                      # the first such range only
  torchrun --nproc_per_node=2 --no-python \
      cuprobe trace -o job/rank%q{RANK} --format table,prom,chrome -- python3 train.py
)";

constexpr char kRunUsage[] = R"(cuprobe run: attach eBPF probes to a program's kernels and read them live

USAGE
  cuprobe run -p PROBE [-p PROBE...] [options] -- program [args...]

  PROBE is a C probe (.c, compiled with clang-19 -target bpf), an eBPF object
  (.o) or a compiled bundle (.cpb, from `cuprobe compile`). The probe is
  verified and lowered to PTX; when the program loads a module whose kernels
  the probe's sections select (cuprobe/entry/GLOB, cuprobe/exit/GLOB,
  cuprobe/mem/GLOB, or bpftime's kprobe/NAME and kretprobe/NAME), those
  kernels are rewritten and compiled for the GPU, and the module loads with
  the probes in it. Kernels without PTX (cuBLAS, cuDNN, most of PyTorch) are
  named once and run unchanged. While the program runs, the maps are printed
  every --interval and ring-buffer events are streamed, on stderr (the
  program's stdout is left alone). Everything `cuprobe trace` does is done
  too: the kernel summary and the timeline are written at the end.

OPTIONS
  -p, --probe PROBE       a probe (.c, .o, .cpb); several -p (sources or
                          objects) are compiled together into one bundle
  -k, --kernels GLOB      attach to these kernels instead of the ones the
                          probe's sections name ('*' and '?' wildcards)
      --interval MS       print maps every MS milliseconds (default: 1000)
  -e, --events FORMAT     ring-buffer events as 'lines' (default) or 'json'
      --quiet             no live output; final maps and the report only
  -o, --output PREFIX     report prefix (default: cuprobe-run); also writes
                          PREFIX.maps.txt and PREFIX.events (lines or JSON)
  -f, --format LIST       trace report formats, as for `cuprobe trace`
  -t, --trace LIST        what to trace, as for `cuprobe trace`
  -c, --capture-range R   what part of the run to trace, as for `cuprobe
                          trace` (the trace alone: probes run throughout)
      --capture-range-end E
                          which ranges, as for `cuprobe trace`
      --buffer-mb N       trace record ring size (default: 64)
      --keep              keep the session segment (read it with `cuprobe maps`)
  -h, --help              this text

EXAMPLES
  cuprobe run -p samples/threadhist/threadhist.bpf.c -- build/samples/vec_add
  cuprobe run -p samples/mem_trace/mem_trace.bpf.c -p samples/kernel_trace/kernel_trace.bpf.c -- ./app
  cuprobe run -p probe.bpf.c -k 'matmul*' --events json -- ./app > app.out
  cuprobe compile probe.bpf.c -o p.cpb && cuprobe run -p p.cpb -- python3 train.py
)";

constexpr char kAttachUsage[] = R"(cuprobe attach: add probes to a program already running under `cuprobe trace`

USAGE
  cuprobe attach [options] TARGET -p PROBE [-p PROBE...]

  TARGET is the pid of a program that runs under `cuprobe trace` (or the name
  of its session, cuprobe-UID-PID-...). The probes are compiled as for
  `cuprobe run` and handed to the program's hook, which instruments each
  selected kernel at its next launch: the kernel's module is rewritten from
  its original image, loaded beside the program's, and the launch runs the
  instrumented copy (launch-time redirection). Maps are printed every
  --interval and ring-buffer events streamed while attached. On Ctrl-C, at
  the end of --duration, or when the program exits, the probes are detached
  (later launches run the original kernels again) and the final maps are
  printed. The program is never stopped or restarted.

  Caveats: an instrumented copy has its own __device__ variables (initialized
  from the image, not the program's current values); launches inside CUDA
  graphs run uninstrumented; a kernel's launches run uninstrumented while its
  module compiles. Use `cuprobe run` when the probes are known before the
  start.

OPTIONS
  -p, --probe PROBE       a probe (.c, .o, .cpb); several -p are compiled together
  -k, --kernels GLOB      attach to these kernels instead of the sections' globs
  -d, --duration S        detach after S seconds (default: at Ctrl-C or exit)
      --interval MS       print maps every MS milliseconds (default: 1000)
  -e, --events FORMAT     ring-buffer events as 'lines' (default) or 'json'
      --quiet             no live output; final maps only
  -o, --output PREFIX     write PREFIX.maps.txt and PREFIX.events
                          (default: cuprobe-attach)
  -h, --help              this text

EXAMPLES
  cuprobe trace -- python3 train.py &        # in one shell (or any traced program)
  cuprobe attach $(pgrep -f train.py) -p samples/threadhist/threadhist.bpf.c -d 10
  cuprobe attach cuprobe-1000-4242-0123456789abcdef -p mem_trace.cpb -k 'gemm*'
)";

constexpr char kInspectUsage[] = R"(cuprobe inspect: list the CUDA code in a file

USAGE
  cuprobe inspect [options] FILE

  FILE may be a host executable or shared library (its .nv_fatbin section), a
  fatbin, an ELF cubin or a PTX file. Lists every entry (kind, SM, PTX ISA
  version, compression, sizes) and the kernels of each.

OPTIONS
      --sm N              device SM to choose PTX for (default: 90)
      --extract-ptx PATH  write the PTX chosen for --sm to PATH ("-": stdout)
  -h, --help              this text

EXAMPLES
  cuprobe inspect build/samples/vec_add
  cuprobe inspect --extract-ptx - build/samples/vec_add | head
)";

constexpr char kCompileUsage[] = R"(cuprobe compile: verify a probe and compile it to a probe bundle

USAGE
  cuprobe compile [options] PROBE

  PROBE is a C probe (compiled with clang-19 -target bpf -O2 -g, with
  include/cuprobe on the include path) or an eBPF object. Every program is
  verified, lowered through LLVM to PTX for sm_90 and written with its maps
  into a bundle (.cpb) that `cuprobe run` loads. docs/PROBES.md shows how to
  write probes.

OPTIONS
  -o, --output FILE       the bundle (default: PROBE's name with .cpb)
      --emit-ptx          also write the PTX next to the bundle (.ptx)
      --emit-llvm         also write the LLVM IR next to the bundle (.ll)
      --max-insns N       reject programs longer than N instructions (4096)
      --max-steps N       verifier budget over all paths (1000000)
  -D NAME[=VALUE], -I DIR passed to clang
  -h, --help              this text

EXAMPLES
  cuprobe compile samples/threadhist/threadhist.bpf.c -o threadhist.cpb
  cuprobe compile --emit-ptx probe.bpf.c && less probe.ptx
  clang-19 -target bpf -O2 -g -Iinclude -c p.bpf.c -o p.o && cuprobe compile p.o
)";

constexpr char kInstrumentUsage[] = R"(cuprobe instrument: rewrite kernels with probes, offline

USAGE
  cuprobe instrument --probe PROBE [--entry] [--exit] [--mem] [options] FILE -o OUT

  A bundle's programs attach where their sections say; --entry, --exit and
  --mem then keep only the programs of those attach points. builtin:count
  needs at least one of them.

  FILE may be anything `cuprobe inspect` reads (executable, shared library,
  fatbin, cubin with PTX, PTX). The PTX best suited to --sm is rewritten: the
  kernels --kernels selects get the probe at the attach points given, the
  probe and the GPU helper library are linked in, and the result is written
  as PTX (OUT ends in .ptx) or compiled for sm_<--sm> with nvJitLink (OUT
  ends in .cubin; compiled cubins are cached in ~/.cache/cuprobe).

OPTIONS
  -p, --probe PROBE       builtin:count (counts events per kernel into map 0,
                          indexed by kernel id) or a bundle file (.cpb)
  -k, --kernels GLOB      kernels to instrument, by mangled or demangled name
                          without parameters; '*' and '?' wildcards (default: *)
      --entry             probe at kernel entry (a bundle: its entry programs)
      --exit              probe before every ret / exit (a bundle: its exit programs)
      --mem               probe at every global / generic load, store, atomic
                          (a bundle: its memory programs)
      --mem-spaces LIST   spaces --mem instruments: global, generic, shared,
                          local, const, or all (default: global,generic)
  -o, --output OUT        OUT.cubin or OUT.ptx
      --sm N              device SM, e.g. 90 for sm_90 (default: 90)
      --helpers PTX       the GPU helper library PTX (default: $CUPROBE_HELPER_PTX,
                          else the one built into cuprobe)
      --kernel-id N       id of the first instrumented kernel (default: 0)
      --stats             per kernel: probe sites, and registers before and
                          after (compiles both with nvJitLink -verbose)
  -h, --help              this text

EXAMPLES
  cuprobe instrument --probe builtin:count --entry --exit build/samples/vec_add -o vec_add.cubin
  cuprobe instrument -p builtin:count --mem -k 'vec_add*' --stats kernels.ptx -o out.ptx
  cuprobe instrument -p threadhist.cpb build/samples/vec_add -o vec_add.ptx   # the bundle's own

ENVIRONMENT
  CUPROBE_HELPER_PTX   a GPU helper library PTX to use instead of the built-in one
  CUPROBE_CACHE_DIR    compile cache directory ("off" disables it)
)";

absl::Status Invalid(std::string_view message, std::string_view topic) {
  return absl::InvalidArgumentError(absl::StrCat(
      message, "\nTry 'cuprobe ", topic, topic.empty() ? "" : " ", "--help'."));
}

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
    } else if (f == "chrome" || f == "perfetto") {
      formats.push_back(ReportFormat::kChrome);
    } else if (f == "prom" || f == "prometheus") {
      formats.push_back(ReportFormat::kPrometheus);
    } else {
      return Invalid(absl::StrCat("unknown report format '", f,
                                  "' (expected table, json, csv, chrome, prom)"),
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

// Reads the value of an option given as "--name value" or "--name=value".
class OptionReader {
 public:
  OptionReader(const std::vector<std::string>& argv, size_t& i) : argv_(argv), i_(i) {}

  // True if argv[i] is this option; fills *value or sets *error.
  bool Match(std::string_view short_name, std::string_view long_name, std::string* value,
             absl::Status* error) {
    std::string_view arg = argv_[i_];
    std::string_view name = arg;
    std::string_view inline_value;
    bool has_inline = false;
    if (size_t eq = arg.find('='); arg.substr(0, 2) == "--" && eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
      has_inline = true;
    }
    if (name != long_name && (short_name.empty() || name != short_name)) return false;
    if (has_inline) {
      *value = std::string(inline_value);
      return true;
    }
    if (i_ + 1 >= argv_.size()) {
      *error = absl::InvalidArgumentError(absl::StrCat("option ", name, " needs a value"));
      return true;
    }
    *value = argv_[++i_];
    return true;
  }

 private:
  const std::vector<std::string>& argv_;
  size_t& i_;
};

template <typename T>
absl::StatusOr<T> ParseNumber(std::string_view option, std::string_view text, T min, T max,
                              std::string_view topic) {
  uint64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < static_cast<uint64_t>(min) ||
      v > static_cast<uint64_t>(max)) {
    return Invalid(absl::StrCat(option, " expects a number from ", min, " to ", max, ", got '",
                                text, "'"),
                   topic);
  }
  return static_cast<T>(v);
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
  ExtraOption extra = [&o](const std::vector<std::string>& argv,
                           size_t& i) -> absl::StatusOr<bool> {
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
    if (r.Match("-e", "--events", &value, &error)) {
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
    if (argv[i] == "--quiet") {
      o.quiet = true;
      return true;
    }
    return false;
  };
  bool help = false;
  CUPROBE_RETURN_IF_ERROR(ParseTracedRun(argv, i, "run", o.trace, extra, &help));
  if (help) {
    args.command = Command::kHelp;
    args.help_topic = "run";
    return args;
  }
  if (o.probes.empty()) {
    return Invalid("run needs a probe: cuprobe run -p probe.bpf.c -- program [args]", "run");
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
      if (value != "lines" && value != "json") {
        return Invalid(absl::StrCat("--events expects lines or json, got '", value, "'"),
                       "attach");
      }
      o.run.events_json = value == "json";
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
  if (o.run.probes.empty()) {
    return Invalid("attach needs a probe: cuprobe attach PID -p probe.bpf.c", "attach");
  }
  return args;
}

absl::StatusOr<CliArgs> ParseInspect(const std::vector<std::string>& argv, size_t i,
                                     CliArgs args) {
  args.command = Command::kInspect;
  InspectOptions& o = args.inspect;
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      args.command = Command::kHelp;
      args.help_topic = "inspect";
      return args;
    }
    std::string value;
    absl::Status error;
    OptionReader r(argv, i);
    if (r.Match("", "--sm", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(o.sm, ParseNumber<uint32_t>("--sm", value, 10, 200, "inspect"));
    } else if (r.Match("", "--extract-ptx", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      o.extract_ptx = value;
    } else if (arg.size() > 1 && arg[0] == '-') {
      return Invalid(absl::StrCat("unknown option '", arg, "'"), "inspect");
    } else if (!o.path.empty()) {
      return Invalid(absl::StrCat("inspect takes one file, got '", o.path, "' and '", arg, "'"),
                     "inspect");
    } else {
      o.path = arg;
    }
  }
  if (o.path.empty()) return Invalid("inspect needs a file: cuprobe inspect FILE", "inspect");
  return args;
}

absl::StatusOr<CliArgs> ParseCompile(const std::vector<std::string>& argv, size_t i,
                                     CliArgs args) {
  args.command = Command::kCompile;
  CompileArgs& c = args.compile;
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      args.command = Command::kHelp;
      args.help_topic = "compile";
      return args;
    }
    if (arg == "--emit-ptx") {
      c.emit_ptx = true;
      continue;
    }
    if (arg == "--emit-llvm") {
      c.emit_llvm = true;
      continue;
    }
    if ((arg.rfind("-D", 0) == 0 || arg.rfind("-I", 0) == 0) && arg.size() > 2) {
      c.clang_args.push_back(arg);
      continue;
    }
    if ((arg == "-D" || arg == "-I") && i + 1 < argv.size()) {
      c.clang_args.push_back(arg + argv[++i]);
      continue;
    }
    std::string value;
    absl::Status error;
    OptionReader r(argv, i);
    if (r.Match("-o", "--output", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      if (value.empty()) return Invalid("--output needs a file name", "compile");
      c.output = value;
    } else if (r.Match("", "--max-insns", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(c.max_insns, ParseNumber<uint32_t>("--max-insns", value, 1,
                                                                  1u << 20, "compile"));
    } else if (r.Match("", "--max-steps", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(c.max_steps, ParseNumber<uint64_t>("--max-steps", value, 1,
                                                                  uint64_t{1} << 32, "compile"));
    } else if (arg.size() > 1 && arg[0] == '-') {
      return Invalid(absl::StrCat("unknown option '", arg, "'"), "compile");
    } else if (!c.input.empty()) {
      return Invalid(absl::StrCat("compile takes one probe, got '", c.input, "' and '", arg, "'"),
                     "compile");
    } else {
      c.input = arg;
    }
  }
  if (c.input.empty()) {
    return Invalid("compile needs a probe: cuprobe compile probe.bpf.c -o probe.cpb", "compile");
  }
  return args;
}

absl::StatusOr<CliArgs> ParseInstrument(const std::vector<std::string>& argv, size_t i,
                                        CliArgs args) {
  args.command = Command::kInstrument;
  InstrumentCommandOptions& o = args.instrument;
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      args.command = Command::kHelp;
      args.help_topic = "instrument";
      return args;
    }
    if (arg == "--entry" || arg == "--exit" || arg == "--mem" || arg == "--stats") {
      (arg == "--entry" ? o.entry : arg == "--exit" ? o.exit : arg == "--mem" ? o.mem : o.stats) =
          true;
      continue;
    }
    std::string value;
    absl::Status error;
    OptionReader r(argv, i);
    if (r.Match("-p", "--probe", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      o.probe = value;
    } else if (r.Match("-k", "--kernels", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      if (value.empty()) return Invalid("--kernels needs a glob", "instrument");
      o.kernels = value;
    } else if (r.Match("-o", "--output", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      o.output = value;
    } else if (r.Match("", "--sm", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(o.sm, ParseNumber<uint32_t>("--sm", value, 10, 200, "instrument"));
    } else if (r.Match("", "--mem-spaces", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      o.mem_spaces = 0;
      for (std::string_view sp : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        // Bits are 1 << CUPROBE_SPACE_* (include/cuprobe/abi.h).
        if (sp == "global") o.mem_spaces |= 1u << 1;
        else if (sp == "shared") o.mem_spaces |= 1u << 2;
        else if (sp == "local") o.mem_spaces |= 1u << 3;
        else if (sp == "generic") o.mem_spaces |= 1u << 4;
        else if (sp == "const") o.mem_spaces |= 1u << 5;
        else if (sp == "all") o.mem_spaces |= 0x3e;
        else return Invalid(absl::StrCat("--mem-spaces: unknown space '", sp,
                                         "' (global, generic, shared, local, const, all)"),
                            "instrument");
      }
      if (o.mem_spaces == 0) return Invalid("--mem-spaces needs at least one space", "instrument");
    } else if (r.Match("", "--helpers", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      o.helpers = value;
    } else if (r.Match("", "--kernel-id", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(o.first_kernel_id, ParseNumber<uint32_t>("--kernel-id", value, 0,
                                                                        UINT32_MAX, "instrument"));
    } else if (arg.size() > 1 && arg[0] == '-') {
      return Invalid(absl::StrCat("unknown option '", arg, "'"), "instrument");
    } else if (!o.input.empty()) {
      return Invalid(absl::StrCat("instrument takes one input file, got '", o.input, "' and '",
                                  arg, "'"),
                     "instrument");
    } else {
      o.input = arg;
    }
  }
  if (o.probe.empty()) {
    return Invalid("instrument needs --probe (builtin:count or a bundle file)", "instrument");
  }
  if (o.input.empty()) return Invalid("instrument needs an input file", "instrument");
  if (o.output.empty()) return Invalid("instrument needs -o OUT.cubin or OUT.ptx", "instrument");
  if (!absl::EndsWith(o.output, ".cubin") && !absl::EndsWith(o.output, ".ptx")) {
    return Invalid(absl::StrCat("-o '", o.output, "': the output must end in .cubin or .ptx"),
                   "instrument");
  }
  // A bundle's programs carry their own attach points (the flags then
  // narrow them); the built-in probe has none.
  if (IsBuiltinProbeSpec(o.probe) && !o.entry && !o.exit && !o.mem) {
    return Invalid(absl::StrCat("--probe ", o.probe,
                                " needs at least one attach point: --entry, --exit, --mem"),
                   "instrument");
  }
  return args;
}

}  // namespace

absl::StatusOr<CliArgs> ParseArgs(const std::vector<std::string>& argv) {
  CliArgs args;
  if (argv.size() < 2) return args;  // plain `cuprobe`: general help
  const std::string& cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    args.command = Command::kHelp;
    if (argv.size() > 2) args.help_topic = argv[2];
    if (!args.help_topic.empty() && args.help_topic != "trace" && args.help_topic != "inspect" &&
        args.help_topic != "compile" && args.help_topic != "instrument" &&
        args.help_topic != "maps" && args.help_topic != "run" && args.help_topic != "attach") {
      return Invalid(absl::StrCat("no help for unknown command '", args.help_topic, "'"), "");
    }
    return args;
  }
  if (cmd == "-V" || cmd == "--version" || cmd == "version") {
    args.command = Command::kVersion;
    return args;
  }
  if (cmd == "trace") return ParseTrace(argv, 2, std::move(args));
  if (cmd == "run") return ParseRun(argv, 2, std::move(args));
  if (cmd == "attach") return ParseAttach(argv, 2, std::move(args));
  if (cmd == "inspect") return ParseInspect(argv, 2, std::move(args));
  if (cmd == "compile") return ParseCompile(argv, 2, std::move(args));
  if (cmd == "instrument") return ParseInstrument(argv, 2, std::move(args));
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

std::string UsageText(std::string_view topic) {
  if (topic == "trace") return kTraceUsage;
  if (topic == "run") return kRunUsage;
  if (topic == "attach") return kAttachUsage;
  if (topic == "inspect") return kInspectUsage;
  if (topic == "compile") return kCompileUsage;
  if (topic == "instrument") return kInstrumentUsage;
  if (topic == "maps") return std::string(MapsUsage());
  return kGeneralUsage;
}

std::string_view ReportFormatName(ReportFormat format) {
  switch (format) {
    case ReportFormat::kTable: return "table";
    case ReportFormat::kJson: return "json";
    case ReportFormat::kCsv: return "csv";
    case ReportFormat::kChrome: return "chrome";
    case ReportFormat::kPrometheus: return "prom";
  }
  return "?";
}

}  // namespace cuprobe
