// File: ptx_rewriter/compile.cc
#include "ptx_rewriter/compile.h"
#include "ptx_rewriter/settings.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "ptx_rewriter/content_hash.h"
#include "ptx_rewriter/inline_pass.h"
#include "ptx_rewriter/ptx_parser.h"
#include "support/status_macros.h"

namespace cuprobe {

// ptxas does not inline .func calls: the probes' bodies go into the kernels
// before compiling (ptx_rewriter/inline_pass.h), on the text that is compiled
// (the instrumented PTX a user asks for stays readable, with calls).
// CUPROBE_INLINE=0 keeps the calls.
// The occupancy guard (InstrumentAndCompileUncached): 32 registers per
// thread let 2048 threads, every SM's maximum, be resident at any block size.
constexpr uint32_t kRegisterCap = 32;
// What a probe helper may spill under the cap (bytes per thread).
constexpr uint64_t kHelperSpillBytes = 64;

static bool RegisterCapEnabled() { return CurrentRewriterSettings().register_cap; }

static bool InliningEnabled() { return CurrentRewriterSettings().inline_probes; }
namespace {

// --- A tiny length-prefixed encoding for cache entries.
class Writer {
 public:
  void U32(uint32_t v) { out_.append(reinterpret_cast<const char*>(&v), 4); }
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool U32(uint32_t* v) {
    if (in_.size() - pos_ < 4) return false;
    std::memcpy(v, in_.data() + pos_, 4);
    pos_ += 4;
    return true;
  }
  bool Str(std::string* s) {
    std::string_view v;
    if (!View(&v)) return false;
    s->assign(v);
    return true;
  }
  bool View(std::string_view* v) {
    uint32_t n = 0;
    if (!U32(&n) || in_.size() - pos_ < n) return false;
    *v = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool AtEnd() const { return pos_ == in_.size(); }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

constexpr uint32_t kEntryVersion = 3;
constexpr uint32_t kMaxCount = 1u << 20;

}  // namespace

std::string EncodeInstrumentedModule(const InstrumentedModule& m) {
  Writer w;
  w.U32(kEntryVersion);
  w.U32(static_cast<uint32_t>(m.instrumented.size()));
  for (const InstrumentedKernel& k : m.instrumented) {
    w.Str(k.name);
    w.U32(k.kernel_id);
    w.U32(static_cast<uint32_t>(k.programs.size()));
    for (const std::string& p : k.programs) w.Str(p);
    w.U32(k.stats.entry_sites);
    w.U32(k.stats.exit_sites);
    w.U32(k.stats.memory_sites);
    w.U32(k.stats.memory_sites_skipped);
    w.U32(k.stats.args_copied ? 1 : 0);
    w.U32(k.stats.counted_calls);
  }
  w.U32(static_cast<uint32_t>(m.skipped.size()));
  for (const SkippedKernel& k : m.skipped) {
    w.Str(k.name);
    w.Str(k.reason);
  }
  w.U32(static_cast<uint32_t>(m.warnings.size()));
  for (const std::string& s : m.warnings) w.Str(s);
  w.U32(static_cast<uint32_t>(m.site_counters.size()));
  for (const SiteCounter& c : m.site_counters) {
    w.U32(c.thread_ids);
    w.U32(static_cast<uint32_t>(c.adds.size()));
    for (const SiteAdd& a : c.adds) {
      w.U32(a.map);
      w.U32(a.hist ? 1 : 0);
      w.Str(std::string_view(reinterpret_cast<const char*>(a.key.data()), a.key.size()));
      w.U32(static_cast<uint32_t>(a.delta));
      w.U32(static_cast<uint32_t>(a.delta >> 32));
    }
  }
  w.Str(std::string_view(reinterpret_cast<const char*>(m.cubin.data()), m.cubin.size()));
  return w.Take();
}

absl::StatusOr<InstrumentedModule> DecodeInstrumentedModule(std::string_view bytes) {
  Reader r(bytes);
  InstrumentedModule m;
  auto bad = [] { return absl::DataLossError("malformed compile cache entry"); };
  uint32_t version = 0, n = 0;
  if (!r.U32(&version) || version != kEntryVersion || !r.U32(&n) || n > kMaxCount) return bad();
  m.instrumented.resize(n);
  for (InstrumentedKernel& k : m.instrumented) {
    uint32_t programs = 0, args = 0;
    if (!r.Str(&k.name) || !r.U32(&k.kernel_id) || !r.U32(&programs) || programs > kMaxCount) {
      return bad();
    }
    k.programs.resize(programs);
    for (std::string& p : k.programs) {
      if (!r.Str(&p)) return bad();
    }
    if (!r.U32(&k.stats.entry_sites) || !r.U32(&k.stats.exit_sites) ||
        !r.U32(&k.stats.memory_sites) || !r.U32(&k.stats.memory_sites_skipped) || !r.U32(&args) ||
        !r.U32(&k.stats.counted_calls)) {
      return bad();
    }
    k.stats.args_copied = args != 0;
  }
  if (!r.U32(&n) || n > kMaxCount) return bad();
  m.skipped.resize(n);
  for (SkippedKernel& k : m.skipped) {
    if (!r.Str(&k.name) || !r.Str(&k.reason)) return bad();
  }
  if (!r.U32(&n) || n > kMaxCount) return bad();
  m.warnings.resize(n);
  for (std::string& s : m.warnings) {
    if (!r.Str(&s)) return bad();
  }
  if (!r.U32(&n) || n > kMaxCount) return bad();
  m.site_counters.resize(n);
  for (SiteCounter& c : m.site_counters) {
    uint32_t adds = 0;
    if (!r.U32(&c.thread_ids) || !r.U32(&adds) || adds > kMaxCount) return bad();
    c.adds.resize(adds);
    for (SiteAdd& a : c.adds) {
      uint32_t hist = 0, lo = 0, hi = 0;
      std::string key;
      if (!r.U32(&a.map) || !r.U32(&hist) || hist > 1 || !r.Str(&key) || !r.U32(&lo) ||
          !r.U32(&hi)) {
        return bad();
      }
      a.hist = hist == 1;
      a.key.assign(key.begin(), key.end());
      a.delta = (uint64_t{hi} << 32) | lo;
    }
  }
  std::string_view cubin;
  if (!r.View(&cubin) || !r.AtEnd()) return bad();
  m.cubin.assign(cubin.begin(), cubin.end());
  return m;
}

absl::StatusOr<std::string> InstrumentCacheKey(std::string_view module_ptx,
                                               const ProbeBundle& bundle,
                                               const InstrumentOptions& options,
                                               const CompileOptions& compile, bool is_identity) {
  CUPROBE_ASSIGN_OR_RETURN(std::string nvjitlink, PtxCompilerFingerprint());
  CacheKeyBuilder key;
  key.Add("rewriter", kRewriterVersion);
  key.Add("abi", uint64_t{CUPROBE_ABI_VERSION});
  key.Add("nvjitlink", nvjitlink);
  key.Add(is_identity ? "module-identity" : "module", module_ptx);
  key.Add("bundle.ptx", bundle.ptx);
  key.Add("bundle.maps", uint64_t{bundle.maps.size()});
  // Site counters depend on the maps' types, sizes, entries and add-only
  // flags; thread-range counters on their ids per key (map_extra).
  for (const MapSpec& m : bundle.maps) {
    key.Add("map", absl::StrCat(m.type, ",", m.key_size, ",", m.value_size, ",", m.max_entries,
                                ",", m.map_extra, ",", m.flags));
  }
  for (const ProbeProgram& p : bundle.programs) {
    key.Add("program", absl::StrCat(p.name, "\n", static_cast<uint32_t>(p.attach), "\n",
                                    p.kernel_glob, "\n", p.ptx_function, "\n",
                                    p.reads_args ? 1 : 0, "\n", p.mem_spaces));
    key.Add("program.summary",
            std::string_view(reinterpret_cast<const char*>(p.summary_code.data()),
                             p.summary_code.size()));
    for (const auto& [insn, map] : p.summary_maps) {
      key.Add("program.summary_map", absl::StrCat(insn, "=", map));
    }
  }
  key.Add("helpers", options.helper_ptx);
  key.Add("sm", uint64_t{options.sm});
  std::vector<std::pair<std::string, uint32_t>> ids(options.kernel_ids.begin(),
                                                    options.kernel_ids.end());
  std::sort(ids.begin(), ids.end());
  for (const auto& [name, id] : ids) key.Add("id", absl::StrCat(name, "=", id));
  key.Add("first_id", uint64_t{options.first_kernel_id});
  key.Add("indirect", uint64_t{options.indirect_calls ? 1u : 0u});
  std::vector<std::string> skip = options.skip_kernels;
  std::sort(skip.begin(), skip.end());
  for (const std::string& s : skip) key.Add("skip", s);
  key.Add("compile.sm", uint64_t{compile.sm});
  key.Add("inline", uint64_t{InliningEnabled() ? 1u : 0u});
  key.Add("mem_after", uint64_t{CurrentRewriterSettings().mem_probes_after ? 1u : 0u});
  key.Add("register_cap", uint64_t{RegisterCapEnabled() ? kRegisterCap : 0u});
  key.Add("site_counters", uint64_t{options.site_counters && SiteCountersEnabled() ? 1u : 0u});
  for (const std::string& e : compile.extra) key.Add("compile.extra", e);
  return key.Hex();
}

// The instrumented PTX with the probes inlined, or nullopt when there is
// nothing to inline, inlining is off, or the module cannot be read.
static std::optional<std::string> InlinedPtx(std::string_view ptx) {
  if (!InliningEnabled()) return std::nullopt;
  absl::StatusOr<Module> m = ParsePtx(ptx, "<instrumented>");
  if (!m.ok() || InlineProbeCalls(*m) == 0) return std::nullopt;
  return PrintPtx(*m);
}

namespace {

// The line of the first error in a ptxas message ("... in.ptx, line 1697;
// error : ..."), or 0.
uint64_t FirstErrorLine(std::string_view message, std::string* error_text) {
  size_t pos = 0;
  while ((pos = message.find(", line ", pos)) != std::string_view::npos) {
    pos += 7;
    uint64_t line = 0;
    size_t end = pos;
    while (end < message.size() && message[end] >= '0' && message[end] <= '9') {
      line = line * 10 + static_cast<uint64_t>(message[end] - '0');
      ++end;
    }
    if (end == pos || message.substr(end, 8) != "; error ") continue;
    size_t eol = message.find('\n', end);
    std::string_view text = message.substr(end + 8, eol == std::string_view::npos ? eol : eol - end - 8);
    while (!text.empty() && (text.front() == ' ' || text.front() == ':')) text.remove_prefix(1);
    *error_text = std::string(text);
    return line;
  }
  return 0;
}

// The name of the .entry whose text holds line `line` (1-based) of `ptx`,
// or "" when the line is outside every kernel (in a probe or helper function
// all kernels share).
std::string EntryAtLine(std::string_view ptx, uint64_t line) {
  size_t pos = 0;
  for (uint64_t l = 1; l < line && pos != std::string_view::npos; ++l) {
    pos = ptx.find('\n', pos);
    if (pos != std::string_view::npos) ++pos;
  }
  if (pos == std::string_view::npos) return "";
  // The last function header before the line.
  const std::string_view before = ptx.substr(0, pos);
  const size_t entry = before.rfind(".entry ");
  const size_t func = before.rfind(".func ");
  if (entry == std::string_view::npos || (func != std::string_view::npos && func > entry)) {
    return "";
  }
  size_t b = entry + 7;
  while (b < ptx.size() && (ptx[b] == ' ' || ptx[b] == '\t')) ++b;
  size_t e = b;
  while (e < ptx.size() && ptx[e] != '(' && ptx[e] != ' ' && ptx[e] != '\n' && ptx[e] != '\t') ++e;
  return std::string(ptx.substr(b, e - b));
}

// At most this many kernels are dropped from a module one after another for
// ptxas errors; past it the module loads uninstrumented.
constexpr size_t kMaxRejectedKernels = 8;

// `ptx` with `.maxnreg cap` in the header of each kernel of `names`.
std::string WithRegisterCap(std::string_view ptx, const std::vector<std::string>& names,
                            uint32_t cap) {
  std::string out(ptx);
  for (const std::string& name : names) {
    const std::string entry = absl::StrCat(".entry ", name, "(");
    const size_t at = out.find(entry);
    if (at == std::string::npos) continue;
    const size_t body = out.find("\n{", at);
    if (body == std::string::npos) continue;
    out.insert(body, absl::StrCat("\n.maxnreg ", cap));
  }
  return out;
}

// Occupancy guard: probe code must not lower the occupancy that registers
// allow a kernel. Kernels that needed at most kRegisterCap registers
// without probes and need more with them (a rarely taken probe path, such
// as a block leader's ring reserve, counts for every thread) are compiled
// again with `.maxnreg kRegisterCap`; the result is kept when ptxas
// spills nothing more in them or in the module's functions they call (the
// probe helpers may spill a little, below). On vec_add with kernel_trace
// (12 -> 38 registers, 6 instead of 8 resident blocks per SM) this took
// the probe's cost from 2.17x to 1.87x native.
void CapRegisters(std::string_view module_ptx, const CompileOptions& compile,
                  CompiledInstrumentation* out) {
  const std::vector<FunctionResources> with = ParseResourceUsage(out->compiled.info_log);
  auto registers = [](const std::vector<FunctionResources>& usage, const std::string& name) {
    for (const FunctionResources& f : usage) {
      if (f.name == name) return f.registers;
    }
    return 0u;
  };
  std::vector<std::string> over;
  for (const InstrumentedKernel& k : out->result.instrumented) {
    if (registers(with, k.name) > kRegisterCap) over.push_back(k.name);
  }
  // nvJitLink refuses a capped kernel that calls a helper compiled with
  // more registers ("calls function ... with regcount of 85"): only ptxas'
  // whole-program compile can honour the cap.
  if (over.empty() || !absl::StartsWith(PtxCompilerName(), "ptxas")) return;
  absl::StatusOr<CompiledCubin> original = CompilePtx(module_ptx, compile);
  if (!original.ok()) return;
  const std::vector<FunctionResources> without = ParseResourceUsage(original->info_log);
  std::vector<std::string> capped;
  for (const std::string& name : over) {
    const uint32_t before = registers(without, name);
    const std::string entry = absl::StrCat(".entry ", name, "(");
    const size_t at = out->result.ptx.find(entry);
    const size_t body = at == std::string::npos ? at : out->result.ptx.find("\n{", at);
    if (body == std::string::npos) continue;
    const std::string_view header = std::string_view(out->result.ptx).substr(at, body - at);
    // A kernel that bounds its own registers or blocks keeps its bounds.
    if (absl::StrContains(header, ".maxnreg") || absl::StrContains(header, ".minnctapersm")) {
      continue;
    }
    if (before != 0 && before <= kRegisterCap) capped.push_back(name);
  }
  if (capped.empty()) return;
  std::string text = WithRegisterCap(out->result.ptx, capped, kRegisterCap);
  absl::StatusOr<CompiledCubin> c = CompilePtx(text, compile);
  if (!c.ok()) return;
  // The cap binds the functions the kernels call too (ptxas compiles them
  // with the kernel). The kernels and the module's own functions may not
  // spill more than they did uncapped; the probe helpers, which run only
  // when a probe calls them, may spill a little (kernel_trace's ring
  // reserve spills 16 bytes under the cap, in the block leader only, and
  // vec_add still gained the 2.17x -> 1.87x above).
  for (const FunctionResources& f : ParseResourceUsage(c->info_log)) {
    uint64_t before = 0;
    for (const FunctionResources& w : with) {
      if (w.name == f.name) before = w.spill_bytes;
    }
    const bool helper = absl::StartsWith(f.name, "__cuprobe_");
    if (f.spill_bytes > before + (helper ? kHelperSpillBytes : 0)) return;
    if (std::find(capped.begin(), capped.end(), f.name) != capped.end() &&
        f.registers > kRegisterCap) {
      return;
    }
  }
  out->result.ptx = std::move(text);
  out->compiled = *std::move(c);
}

}  // namespace

absl::StatusOr<CompiledInstrumentation> InstrumentAndCompileUncached(
    std::string_view module_ptx, const ProbeBundle& bundle, InstrumentOptions options,
    const CompileOptions& compile_options) {
  // Verbose: the occupancy guard reads every kernel's registers.
  CompileOptions compile = compile_options;
  compile.verbose = true;
  CompiledInstrumentation out;
  CUPROBE_ASSIGN_OR_RETURN(out.result, InstrumentPtx(module_ptx, bundle, options));
  if (out.result.instrumented.empty()) return out;
  std::string compiled_text;  // what ptxas saw last, for its line numbers
  // Compiles out.result.ptx, inlined when possible (never worse than
  // without inlining: the calls are compiled when ptxas refuses the result).
  auto compile_result = [&]() -> absl::StatusOr<CompiledCubin> {
    std::optional<std::string> inlined = InlinedPtx(out.result.ptx);
    if (inlined && options.fault_inlined) {
      *inlined += "\n.visible .entry __cp_fault()\n{\nmov.u32 %__cp_a, %__cp_b;\nret;\n}\n";
    }
    compiled_text = inlined ? *inlined : out.result.ptx;
    absl::StatusOr<CompiledCubin> c = CompilePtx(compiled_text, compile);
    if (inlined && c.ok()) {
      out.result.ptx = *std::move(inlined);
    } else if (inlined) {
      compiled_text = out.result.ptx;
      c = CompilePtx(compiled_text, compile);
      if (c.ok()) {
        out.result.warnings.push_back("the probes could not be inlined into this module's "
                                      "kernels (ptxas refused the result); they are called "
                                      "instead");
      }
    }
    return c;
  };
  absl::StatusOr<CompiledCubin> c = compile_result();
  if (!c.ok() && !options.indirect_calls &&
      absl::StrContains(c.status().message(), "Register allocation failed")) {
    options.indirect_calls = true;
    CUPROBE_ASSIGN_OR_RETURN(out.result, InstrumentPtx(module_ptx, bundle, options));
    compiled_text = out.result.ptx;
    c = CompilePtx(compiled_text, compile);
    if (c.ok()) {
      out.result.warnings.push_back(
          "ptxas could not allocate registers around direct probe calls (C7600); the probes "
          "are called through function pointers, which costs more registers");
    }
  }
  // ptxas refusing one kernel's instrumented code costs that kernel only:
  // it is left as it was and the others are compiled again.
  std::vector<std::pair<std::string, std::string>> rejected;  // kernel, ptxas' error
  while (!c.ok() && rejected.size() < kMaxRejectedKernels) {
    std::string error;
    const uint64_t line = FirstErrorLine(c.status().message(), &error);
    const std::string kernel = line == 0 ? std::string() : EntryAtLine(compiled_text, line);
    const bool instrumented =
        std::any_of(out.result.instrumented.begin(), out.result.instrumented.end(),
                    [&](const InstrumentedKernel& k) { return k.name == kernel; });
    if (!instrumented) break;  // not one kernel's fault: the module fails
    rejected.emplace_back(kernel, error);
    options.skip_kernels.push_back(kernel);
    CUPROBE_ASSIGN_OR_RETURN(out.result, InstrumentPtx(module_ptx, bundle, options));
    if (out.result.instrumented.empty()) break;
    c = compile_result();
  }
  for (const auto& [kernel, error] : rejected) {
    for (SkippedKernel& k : out.result.skipped) {
      if (k.name == kernel) k.reason = absl::StrCat("ptxas rejected its instrumented code: ", error);
    }
  }
  if (out.result.instrumented.empty() && !rejected.empty()) return out;  // every kernel refused
  if (!c.ok()) return c.status();
  out.compiled = *std::move(c);
  if (RegisterCapEnabled()) CapRegisters(module_ptx, compile, &out);
  return out;
}

namespace {

absl::StatusOr<InstrumentedModule> CompileAndStore(std::string_view module_ptx,
                                                   const ProbeBundle& bundle,
                                                   const InstrumentOptions& options,
                                                   const CompileCache& cache,
                                                   const CompileOptions& compile,
                                                   const std::string& key) {
  CUPROBE_ASSIGN_OR_RETURN(CompiledInstrumentation c,
                           InstrumentAndCompileUncached(module_ptx, bundle, options, compile));
  InstrumentedModule m;
  m.instrumented = std::move(c.result.instrumented);
  m.skipped = std::move(c.result.skipped);
  m.warnings = std::move(c.result.warnings);
  m.site_counters = std::move(c.result.site_counters);
  m.cache_key = key;
  if (m.instrumented.empty()) return m;
  m.cubin = std::move(c.compiled.cubin);
  if (!key.empty()) (void)cache.Store(key, EncodeInstrumentedModule(m));
  return m;
}

std::optional<InstrumentedModule> FromCache(const CompileCache& cache, const std::string& key) {
  std::optional<std::string> hit = cache.Lookup(key);
  if (!hit) return std::nullopt;
  absl::StatusOr<InstrumentedModule> m = DecodeInstrumentedModule(*hit);
  if (!m.ok()) return std::nullopt;
  m->cache_hit = true;
  m->cache_key = key;
  return *std::move(m);
}

}  // namespace

absl::StatusOr<InstrumentedModule> InstrumentAndCompile(std::string_view module_ptx,
                                                        const ProbeBundle& bundle,
                                                        const InstrumentOptions& options,
                                                        const CompileCache& cache,
                                                        CompileOptions compile) {
  compile.sm = options.sm;
  std::string key;
  if (cache.enabled()) {
    CUPROBE_ASSIGN_OR_RETURN(key, InstrumentCacheKey(module_ptx, bundle, options, compile));
    if (std::optional<InstrumentedModule> m = FromCache(cache, key)) return *std::move(m);
  }
  return CompileAndStore(module_ptx, bundle, options, cache, compile, key);
}

absl::StatusOr<InstrumentedModule> InstrumentAndCompileLazy(
    std::string_view module_identity,
    const std::function<absl::StatusOr<std::string>()>& extract_ptx, const ProbeBundle& bundle,
    const InstrumentOptions& options, const CompileCache& cache, CompileOptions compile) {
  compile.sm = options.sm;
  std::string key;
  if (cache.enabled()) {
    CUPROBE_ASSIGN_OR_RETURN(
        key, InstrumentCacheKey(module_identity, bundle, options, compile, /*is_identity=*/true));
    if (std::optional<InstrumentedModule> m = FromCache(cache, key)) return *std::move(m);
  }
  CUPROBE_ASSIGN_OR_RETURN(std::string ptx, extract_ptx());
  return CompileAndStore(ptx, bundle, options, cache, compile, key);
}

}  // namespace cuprobe
