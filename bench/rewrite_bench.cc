// File: bench/rewrite_bench.cc
//
// CPU benchmark of the PTX rewriter: for PTX modules of growing size, the
// time to parse, to parse + print, to rewrite (InstrumentPtx with
// builtin:count at entry, exit and every global/generic access: parse,
// passes, link, print -- ptxas excluded), to compile the result with
// nvJitLink (cold), and to get it from the compile cache (hit).
//
//   build/bench/rewrite_bench [--no-compile] [--compile-limit BYTES] [--reps N] [FILE.ptx ...]
//
// Without files it uses the test corpus (build/tests/ptx_rewriter/corpus,
// fixtures) and two synthetic modules made of 4 and 16 renamed copies of the
// CUB corpus. Prints one row per module; figures are medians of --reps runs
// (compile: one run). docs/PERFORMANCE.md ("Rewriter") records them.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ptx_rewriter/builtin_probes.h"
#include "ptx_rewriter/compile.h"
#include "ptx_rewriter/content_hash.h"
#include "ptx_rewriter/instrument.h"
#include "ptx_rewriter/link_pass.h"
#include "ptx_rewriter/ptx_parser.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

double MedianMs(int reps, const std::function<void()>& f) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// `copies` copies of a module's functions and variables, every symbol
// renamed per copy: a bigger module of the same kind of code.
std::string Replicate(const std::string& ptx, int copies) {
  absl::StatusOr<cuprobe::Module> m = cuprobe::ParsePtx(ptx);
  if (!m.ok()) return "";
  std::string header, body;
  std::vector<std::string> names;
  for (const cuprobe::Function& f : m->functions) names.emplace_back(f.name);
  for (const cuprobe::ModuleItem& item : m->items) {
    if (!item.is_function && item.statement.kind == cuprobe::StatementKind::kDeclaration &&
        item.statement.linkage != ".extern") {
      names.emplace_back(item.statement.operands);
    }
  }
  const std::string printed = cuprobe::PrintPtx(*m);
  const size_t first = printed.find(".address_size");
  const size_t rest = printed.find('\n', first) + 1;
  header = printed.substr(0, rest);
  const std::string module_body = printed.substr(rest);
  std::string out = header;
  for (int c = 0; c < copies; ++c) {
    absl::flat_hash_map<std::string, std::string> renames;
    for (const std::string& n : names) renames[n] = absl::StrCat(n, "_copy", c);
    std::optional<std::string> r = cuprobe::RenameIdentifiers(module_body, renames);
    std::string copy = r ? *r : module_body;
    // Keep one copy of extern declarations (vprintf ...): drop them after the first.
    out += copy;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cuprobe;
  bool compile = true;
  int reps = 5;
  size_t compile_limit = 4u << 20;  // cold compiles of bigger modules take minutes
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-compile") {
      compile = false;
    } else if (a == "--compile-limit" && i + 1 < argc) {
      compile_limit = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      files.push_back(a);
    }
  }
  const std::string build = CUPROBE_BINARY_DIR;
  const std::string fixtures = build + "/tests/ptx_rewriter/fixtures";
  const std::string corpus = build + "/tests/ptx_rewriter/corpus";
  struct Input {
    std::string name;
    std::string ptx;
  };
  std::vector<Input> inputs;
  if (files.empty()) {
    for (const char* f : {"/kernels_sm90.ptx", "/clang_kernels.ptx"}) {
      inputs.push_back({f + 1, Read(fixtures + f)});
    }
    for (const char* f : {"/device_features.ptx", "/thrust_algorithms.ptx", "/cub_algorithms.ptx"}) {
      inputs.push_back({f + 1, Read(corpus + f)});
    }
    const std::string cub = inputs.back().ptx;
    inputs.push_back({"cub x4 (synthetic)", Replicate(cub, 4)});
    inputs.push_back({"cub x16 (synthetic)", Replicate(cub, 16)});
  } else {
    for (const std::string& f : files) inputs.push_back({f, Read(f)});
  }
  const std::string helpers = Read(fixtures + "/test_helpers.ptx");
  BuiltinBundleOptions bo;
  bo.entry = bo.exit = bo.memory = true;
  absl::StatusOr<ProbeBundle> bundle = BuiltinBundle("builtin:count", bo);
  if (!bundle.ok() || helpers.empty()) {
    std::fprintf(stderr, "rewrite_bench: needs the test fixtures (ninja cuprobe_image_fixtures "
                         "cuprobe_ptx_corpus): %s\n", std::string(bundle.status().message()).c_str());
    return 1;
  }
  char tmpl[] = "/tmp/cuprobe_bench_cache_XXXXXX";
  const std::string cache_dir = mkdtemp(tmpl) ? tmpl : "";
  const CompileCache cache(cache_dir);

  std::printf("%-22s %9s %7s %8s %9s %8s %9s %8s %9s %10s %8s %8s\n", "module", "bytes", "kernels",
              "parse ms", "parse MB/s", "print ms", "rewrite ms", "rw MB/s", "hash GB/s",
              "compile ms", "hit ms", "hit id ms");
  for (const Input& in : inputs) {
    if (in.ptx.empty()) {
      std::printf("%-24s (missing; build the test corpus first)\n", in.name.c_str());
      continue;
    }
    absl::StatusOr<Module> m = ParsePtx(in.ptx);
    if (!m.ok()) {
      std::printf("%-24s parse error: %s\n", in.name.c_str(), std::string(m.status().message()).c_str());
      continue;
    }
    size_t kernels = 0;
    for (const Function& f : m->functions) kernels += f.is_kernel && f.has_body;
    const double mb = static_cast<double>(in.ptx.size()) / 1e6;
    const double parse_ms = MedianMs(reps, [&] { (void)ParsePtx(in.ptx); });
    const double print_ms = MedianMs(reps, [&] {
      absl::StatusOr<Module> p = ParsePtx(in.ptx);
      (void)PrintPtx(*p);
    });
    InstrumentOptions options;
    options.helper_ptx = helpers;
    std::string rewritten;
    const double rewrite_ms = MedianMs(reps, [&] {
      absl::StatusOr<InstrumentResult> r = InstrumentPtx(in.ptx, *bundle, options);
      if (r.ok()) rewritten = std::move(r->ptx);
    });
    const double hash_ms = MedianMs(std::max(reps, 5), [&] { (void)HashBytes(in.ptx); });
    double compile_ms = -1, hit_ms = -1, hit_id_ms = -1;
    if (compile && in.ptx.size() > compile_limit) {
      std::fprintf(stderr, "%s: not compiled (larger than --compile-limit)\n", in.name.c_str());
    } else if (compile) {
      const auto t0 = Clock::now();
      absl::StatusOr<InstrumentedModule> cold = InstrumentAndCompile(in.ptx, *bundle, options, cache);
      compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (!cold.ok()) {
        std::fprintf(stderr, "%s: %s\n", in.name.c_str(),
                     std::string(cold.status().message()).substr(0, 300).c_str());
      } else {
        hit_ms = MedianMs(std::max(reps, 5), [&] {
          absl::StatusOr<InstrumentedModule> hit = InstrumentAndCompile(in.ptx, *bundle, options, cache);
          if (!hit.ok() || !hit->cache_hit) std::fprintf(stderr, "%s: no cache hit\n", in.name.c_str());
        });
        // The hook's path: the key from the module's identity (the stored,
        // compressed fatbin entry), the PTX extracted only on a miss.
        const std::string id = "bench:" + HashHex(HashBytes(in.ptx));
        auto extract = [&]() -> absl::StatusOr<std::string> { return in.ptx; };
        (void)InstrumentAndCompileLazy(id, extract, *bundle, options, cache);
        hit_id_ms = MedianMs(std::max(reps, 5), [&] {
          absl::StatusOr<InstrumentedModule> hit =
              InstrumentAndCompileLazy(id, extract, *bundle, options, cache);
          if (!hit.ok() || !hit->cache_hit) std::fprintf(stderr, "%s: no id hit\n", in.name.c_str());
        });
      }
    }
    std::printf("%-22s %9zu %7zu %8.2f %9.0f %8.2f %9.2f %8.0f %9.1f %10.0f %8.3f %8.3f\n",
                in.name.c_str(), in.ptx.size(), kernels, parse_ms, mb / (parse_ms / 1e3), print_ms,
                rewrite_ms, mb / (rewrite_ms / 1e3), mb / 1e3 / (hash_ms / 1e3), compile_ms, hit_ms,
                hit_id_ms);
    std::fflush(stdout);
  }
  std::filesystem::remove_all(cache_dir);
  return 0;
}
