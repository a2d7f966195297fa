// File: loader/instrument_command.cc
//
// `cuprobe instrument`: the probe bundle, the input's first PTX module with
// a kernel it selects, that module instrumented (to PTX, or compiled to a
// cubin; with --stats, both modules compiled verbose), the output written,
// and the report of what was done.
#include "loader/instrument_command.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "maps/gpu/helpers_ptx.h"
#include "report/trace_report.h"
#include "ptx_rewriter/builtin_probes.h"
#include "ptx_rewriter/settings.h"
#include "ptx_rewriter/compile.h"
#include "ptx_rewriter/image.h"
#include "ptx_rewriter/instrument.h"
#include "probe/kernel_glob.h"
#include "ptx_rewriter/ptx_parser.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", what, " '", path, "': ", std::strerror(errno)));
  }
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool IsHostElf(std::string_view b) {
  if (b.size() < 20 || b.substr(0, 4) != "\x7f" "ELF") return false;
  const uint16_t machine = static_cast<uint16_t>(static_cast<uint8_t>(b[18]) |
                                                 (static_cast<uint8_t>(b[19]) << 8));
  return machine != 190;  // EM_CUDA: a cubin
}

struct InputModule {
  std::string ptx;
  std::string where;  // "app fatbin @0x1234 entry 3 (PTX sm_90)"
  size_t kernels = 0;
};

// The kernels of `ptx` that some program of `bundle` selects.
absl::StatusOr<size_t> MatchingKernels(std::string_view ptx, std::string_view where,
                                       const ProbeBundle& bundle, size_t* total) {
  CUPROBE_ASSIGN_OR_RETURN(Module m, ParsePtx(ptx, where));
  size_t matched = 0;
  for (const Function& f : m.functions) {
    if (!f.is_kernel || !f.has_body) continue;
    ++*total;
    const std::string base = KernelBaseName(f.name);
    for (const ProbeProgram& p : bundle.programs) {
      if (KernelGlobMatches(p.kernel_glob, f.name, base)) {
        ++matched;
        break;
      }
    }
  }
  return matched;
}

// What selects the kernels, for messages: "--kernels 'add*'", or the
// programs' own globs ("the probe's kernel globs 'vec_add', '*scale*'").
std::string SelectionText(const InstrumentCommandOptions& o, const ProbeBundle& bundle) {
  if (!o.kernels.empty()) return absl::StrCat("--kernels '", o.kernels, "'");
  std::vector<std::string> globs;
  for (const ProbeProgram& p : bundle.programs) {
    const std::string quoted = absl::StrCat("'", p.kernel_glob, "'");
    if (std::find(globs.begin(), globs.end(), quoted) == globs.end()) globs.push_back(quoted);
  }
  return absl::StrCat("the probe's kernel glob", globs.size() == 1 ? " " : "s ",
                      absl::StrJoin(globs, ", "));
}

// The first PTX module of the input (for --sm) with a kernel the bundle
// selects. A host executable or library may carry many modules.
absl::StatusOr<InputModule> FindInputPtx(const InstrumentCommandOptions& o,
                                         const ProbeBundle& bundle) {
  CUPROBE_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(o.input, "input"));
  const absl::Span<const uint8_t> all(reinterpret_cast<const uint8_t*>(bytes.data()),
                                      bytes.size());
  std::vector<std::pair<std::string, absl::Span<const uint8_t>>> images;
  if (IsHostElf(bytes)) {
    absl::StatusOr<std::vector<HostFatbin>> fatbins = FindFatbinsInHostElf(all);
    if (!fatbins.ok()) {
      return absl::Status(fatbins.status().code(),
                          absl::StrCat(o.input, ": ", fatbins.status().message()));
    }
    if (fatbins->empty()) return absl::NotFoundError(absl::StrCat(o.input, ": no CUDA code"));
    for (const HostFatbin& f : *fatbins) {
      images.emplace_back(absl::StrCat(o.input, " fatbin @0x", absl::Hex(f.offset)),
                          all.subspan(f.offset, f.size));
    }
  } else {
    images.emplace_back(o.input, all);
  }
  size_t with_ptx = 0, total_kernels = 0;
  for (const auto& [where, span] : images) {
    absl::StatusOr<Image> image = ReadImage(span);
    if (!image.ok()) {
      return absl::Status(image.status().code(), absl::StrCat(where, ": ", image.status().message()));
    }
    const ImageEntry* entry = PickPtxFor(*image, o.sm);
    if (entry == nullptr) continue;
    ++with_ptx;
    CUPROBE_ASSIGN_OR_RETURN(std::string ptx, ExtractPtx(*entry));
    const std::string name =
        image->format == ImageFormat::kPtx
            ? where
            : absl::StrCat(where, " entry @0x", absl::Hex(entry->offset), " (PTX sm_",
                           entry->sm_arch, ")");
    size_t total = 0;
    CUPROBE_ASSIGN_OR_RETURN(size_t matched, MatchingKernels(ptx, name, bundle, &total));
    total_kernels += total;
    if (matched > 0) return InputModule{std::move(ptx), name, total};
  }
  if (with_ptx == 0) {
    return absl::NotFoundError(absl::StrCat(
        o.input, ": no PTX usable on sm_", o.sm,
        " (SASS only?); kernels can only be instrumented from PTX. `cuprobe inspect ", o.input,
        "` lists what the file holds"));
  }
  return absl::NotFoundError(absl::StrCat("no kernel of ", o.input, " matches ",
                                          SelectionText(o, bundle), " (", total_kernels,
                                          " kernel(s) with PTX for sm_", o.sm,
                                          "; see `cuprobe inspect ", o.input, "`)"));
}

absl::StatusOr<std::string> HelperPtx(const InstrumentCommandOptions& o, const ProbeBundle& bundle) {
  std::string path = o.helpers;
  if (path.empty()) {
    if (const char* env = std::getenv("CUPROBE_HELPER_PTX"); env != nullptr) path = env;
  }
  // Default: the helper library built into this binary (the hook links the
  // same one).
  if (path.empty()) return std::string(HelpersPtx());
  return ReadWholeFile(path, "GPU helper library");
}

std::string Demangled(std::string_view name) {
  std::string d = DemangleKernelName(name);
  return d == name ? std::string(name) : absl::StrCat(d, "  [", name, "]");
}

// What instrumenting the input module gave: the kernels, the output file's
// bytes (PTX or a cubin) and how they were made; with --stats, each
// function's resources before and after.
struct Instrumented {
  std::vector<InstrumentedKernel> instrumented;
  std::vector<SkippedKernel> skipped;
  std::vector<std::string> warnings;
  std::string output;
  std::string how;  // "" for PTX
  absl::flat_hash_map<std::string, FunctionResources> before, after;
};

// A cubin, through the compile cache.
absl::StatusOr<Instrumented> InstrumentToCubin(const InputModule& input, const ProbeBundle& bundle,
                                               const InstrumentOptions& options) {
  CUPROBE_ASSIGN_OR_RETURN(
      InstrumentedModule m,
      InstrumentAndCompile(input.ptx, bundle, options, CompileCache(CurrentRewriterSettings().cache_dir)));
  Instrumented r;
  r.instrumented = std::move(m.instrumented);
  r.skipped = std::move(m.skipped);
  r.warnings = std::move(m.warnings);
  r.output.assign(m.cubin.begin(), m.cubin.end());
  r.how = m.cache_hit ? "from the compile cache" : "compiled with nvJitLink";
  return r;
}

// --stats: both modules compiled with -verbose, for the registers before
// and after; the output is the cubin or the PTX.
absl::StatusOr<Instrumented> InstrumentWithStats(const InstrumentCommandOptions& o,
                                                 const InputModule& input,
                                                 const ProbeBundle& bundle,
                                                 const InstrumentOptions& options,
                                                 bool want_cubin) {
  Instrumented r;
  CompileOptions verbose;
  verbose.sm = o.sm;
  verbose.verbose = true;
  verbose.input_name = "original.ptx";
  CUPROBE_ASSIGN_OR_RETURN(CompiledCubin orig, CompilePtx(input.ptx, verbose));
  for (FunctionResources& f : ParseResourceUsage(orig.info_log)) r.before[f.name] = f;
  verbose.input_name = "instrumented.ptx";
  CUPROBE_ASSIGN_OR_RETURN(CompiledInstrumentation c,
                           InstrumentAndCompileUncached(input.ptx, bundle, options, verbose));
  for (FunctionResources& f : ParseResourceUsage(c.compiled.info_log)) r.after[f.name] = f;
  r.instrumented = std::move(c.result.instrumented);
  r.skipped = std::move(c.result.skipped);
  r.warnings = std::move(c.result.warnings);
  if (want_cubin) {
    r.output.assign(c.compiled.cubin.begin(), c.compiled.cubin.end());
    r.how = "compiled with nvJitLink";
  } else {
    r.output = std::move(c.result.ptx);
  }
  return r;
}

// PTX only: nothing is compiled.
absl::StatusOr<Instrumented> InstrumentToPtx(const InputModule& input, const ProbeBundle& bundle,
                                             const InstrumentOptions& options) {
  CUPROBE_ASSIGN_OR_RETURN(InstrumentResult result, InstrumentPtx(input.ptx, bundle, options));
  Instrumented r;
  r.instrumented = std::move(result.instrumented);
  r.skipped = std::move(result.skipped);
  r.warnings = std::move(result.warnings);
  r.output = std::move(result.ptx);
  return r;
}

// The input module instrumented as -o and --stats ask.
absl::StatusOr<Instrumented> Instrument(const InstrumentCommandOptions& o,
                                        const InputModule& input, const ProbeBundle& bundle,
                                        const InstrumentOptions& options) {
  const bool want_cubin = absl::EndsWith(o.output, ".cubin");
  if (want_cubin && !o.stats) return InstrumentToCubin(input, bundle, options);
  if (o.stats) return InstrumentWithStats(o, input, bundle, options, want_cubin);
  return InstrumentToPtx(input, bundle, options);
}

// One instrumented kernel's lines of the report: its id and name, its probe
// sites, and (--stats) its registers and stack before and after.
std::string KernelReport(const InstrumentedKernel& k, const Instrumented& r, bool stats) {
  std::string report = absl::StrFormat("  id %-4u %s\n", k.kernel_id, Demangled(k.name));
  std::vector<std::string> sites;
  if (k.stats.entry_sites) sites.push_back(absl::StrCat("entry ", k.stats.entry_sites));
  if (k.stats.exit_sites) sites.push_back(absl::StrCat("exit sites ", k.stats.exit_sites));
  if (k.stats.memory_sites || k.stats.memory_sites_skipped) {
    sites.push_back(absl::StrCat("memory sites ", k.stats.memory_sites,
                                 k.stats.memory_sites_skipped
                                     ? absl::StrCat(" (", k.stats.memory_sites_skipped,
                                                    " without a usable address)")
                                     : ""));
  }
  if (k.stats.counted_calls) {
    sites.push_back(absl::StrCat(k.stats.counted_calls, " probe call(s) as site counters"));
  }
  if (!sites.empty()) absl::StrAppend(&report, "           ", absl::StrJoin(sites, ", "), "\n");
  if (stats) {
    auto b = r.before.find(k.name);
    auto a = r.after.find(k.name);
    if (b != r.before.end() && a != r.after.end()) {
      absl::StrAppend(&report,
                      absl::StrFormat("           registers %u -> %u (%+d), stack %u -> %u bytes\n",
                                      b->second.registers, a->second.registers,
                                      static_cast<int>(a->second.registers) -
                                          static_cast<int>(b->second.registers),
                                      b->second.stack_bytes, a->second.stack_bytes));
    }
  }
  return report;
}

// What `cuprobe instrument` prints: the input, every kernel instrumented or
// skipped, warnings, and the file written.
std::string FormatInstrumentReport(const InstrumentCommandOptions& o, const InputModule& input,
                                   const ProbeBundle& bundle, const Instrumented& r, double ms) {
  std::string report = absl::StrCat(input.where, ": ", input.kernels, " kernel(s) with PTX\n");
  absl::StrAppend(&report, "instrumented ", r.instrumented.size(), " kernel(s) with ",
                  bundle.source_name, ":\n");
  for (const InstrumentedKernel& k : r.instrumented) {
    absl::StrAppend(&report, KernelReport(k, r, o.stats));
  }
  for (const SkippedKernel& k : r.skipped) {
    absl::StrAppend(&report, "skipped ", Demangled(k.name), ": ", k.reason, "\n");
  }
  for (const std::string& w : r.warnings) absl::StrAppend(&report, "warning: ", w, "\n");
  absl::StrAppend(&report, "wrote ", o.output, " (", r.output.size(), " bytes",
                  r.how.empty() ? "" : absl::StrCat(", ", r.how),
                  absl::StrFormat(", %.1f ms", ms), ")\n");
  return report;
}

// builtin:count at the attach points the flags name, on -k's kernels (all
// of them without -k).
absl::StatusOr<ProbeBundle> LoadBuiltin(const InstrumentCommandOptions& o) {
  BuiltinBundleOptions b;
  if (!o.kernels.empty()) b.kernel_glob = o.kernels;
  b.entry = o.entry;
  b.exit = o.exit;
  b.memory = o.mem;
  if (o.mem_spaces != 0) b.mem_spaces = o.mem_spaces;
  return BuiltinBundle(o.probe, b);
}

absl::StatusOr<ProbeBundle> ReadBundleFile(const std::string& path) {
  CUPROBE_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path, "probe bundle"));
  absl::StatusOr<ProbeBundle> bundle = ReadBundle(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  if (!bundle.ok()) {
    return absl::Status(bundle.status().code(),
                        absl::StrCat("--probe ", path, ": ", bundle.status().message()));
  }
  return bundle;
}

// Keeps the programs whose attach point --entry/--exit/--mem asks for; with
// none of them, every program, each at its own attach point.
absl::Status KeepAskedPrograms(const InstrumentCommandOptions& o, ProbeBundle* bundle) {
  if (o.UsesBundleAttachPoints()) return absl::OkStatus();
  std::vector<ProbeProgram> kept;
  for (ProbeProgram& p : bundle->programs) {
    const bool wanted = (p.attach == AttachKind::kEntry && o.entry) ||
                        (p.attach == AttachKind::kExit && o.exit) ||
                        (p.attach == AttachKind::kMemory && o.mem);
    if (wanted) kept.push_back(std::move(p));
  }
  if (kept.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--probe ", o.probe, ": none of its ", bundle->programs.size(),
        " program(s) attaches where --entry/--exit/--mem ask"));
  }
  bundle->programs = std::move(kept);
  return absl::OkStatus();
}

// -k replaces every program's kernel glob, as `cuprobe run -k` does;
// --mem-spaces replaces the memory programs' spaces. Without them each
// program keeps its own.
void ApplyOverrides(const InstrumentCommandOptions& o, ProbeBundle* bundle) {
  for (ProbeProgram& p : bundle->programs) {
    if (!o.kernels.empty()) p.kernel_glob = o.kernels;
    if (o.mem_spaces != 0 && p.attach == AttachKind::kMemory) p.mem_spaces = o.mem_spaces;
  }
}

}  // namespace

absl::StatusOr<ProbeBundle> LoadProbeBundle(const InstrumentCommandOptions& o) {
  if (IsBuiltinProbeSpec(o.probe)) return LoadBuiltin(o);
  CUPROBE_ASSIGN_OR_RETURN(ProbeBundle bundle, ReadBundleFile(o.probe));
  CUPROBE_RETURN_IF_ERROR(KeepAskedPrograms(o, &bundle));
  ApplyOverrides(o, &bundle);
  return bundle;
}

absl::StatusOr<std::string> InstrumentFile(const InstrumentCommandOptions& o) {
  CUPROBE_ASSIGN_OR_RETURN(ProbeBundle bundle, LoadProbeBundle(o));
  CUPROBE_ASSIGN_OR_RETURN(InputModule input, FindInputPtx(o, bundle));
  CUPROBE_ASSIGN_OR_RETURN(std::string helpers, HelperPtx(o, bundle));

  InstrumentOptions options;
  options.helper_ptx = helpers;
  options.sm = o.sm;
  options.first_kernel_id = o.first_kernel_id;
  options.module_name = input.where;

  const auto t0 = std::chrono::steady_clock::now();
  CUPROBE_ASSIGN_OR_RETURN(Instrumented r, Instrument(o, input, bundle, options));
  if (r.instrumented.empty()) {
    std::string why;
    for (const SkippedKernel& k : r.skipped) absl::StrAppend(&why, "\n  ", k.name, ": ", k.reason);
    return absl::FailedPreconditionError(
        absl::StrCat(input.where, ": no kernel was instrumented", why));
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CUPROBE_RETURN_IF_ERROR(WriteFile(o.output, r.output));
  return FormatInstrumentReport(o, input, bundle, r, ms);
}

absl::Status RunInstrument(const InstrumentCommandOptions& options) {
  CUPROBE_ASSIGN_OR_RETURN(std::string report, InstrumentFile(options));
  std::fputs(report.c_str(), stdout);
  return absl::OkStatus();
}

}  // namespace cuprobe
