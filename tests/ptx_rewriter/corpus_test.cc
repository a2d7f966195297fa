// File: tests/ptx_rewriter/corpus_test.cc
//
// The rewriter on real PTX nobody here wrote: CCCL's CUB and Thrust
// algorithms (radix sort, reduce, scan, histogram, select, sort_by_key,
// reduce_by_key, copy_if ... for several types), cooperative groups, wmma
// and mma, cp.async pipelines, warp shuffles and votes, dynamic shared
// memory, atomics, printf (corpus/*.cu, compiled by nvcc 13 at build time),
// and clang/LLVM NVPTX output (testdata/clang_kernels.cu). Every kernel goes
// through
//   - the round trip: parse -> print -> parse is stable, and ptxas reports
//     the same resource usage for the printed PTX as for the original;
//   - each pass (entry, exit, memory, context+entry): every kernel
//     instrumented, every memory site understood, the result assembled by
//     ptxas -arch=sm_90 (with direct probe calls, or indirect ones where
//     ptxas fails register allocation around direct calls, as Compile does);
//   - all passes together through nvJitLink (InstrumentAndCompileUncached,
//     what the hook runs): an sm_90 cubin with every kernel in it.
// 100% must pass; a failure names the kernels concerned.
#include <cstdlib>
#include <condition_variable>
#include <future>
#include <mutex>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cuprobe/abi.h"
#include "gtest/gtest.h"
#include "ptx_rewriter/instrument.h"
#include "ptx_rewriter/compile.h"
#include "ptx_rewriter/nvjitlink.h"
#include "ptx_rewriter/ptx_parser.h"
#include "tests/ptx_rewriter/ptx_test_util.h"

namespace cuprobe {
namespace {

const std::string kGoldenDir = std::string(CUPROBE_SOURCE_DIR) + "/tests/ptx_rewriter/golden/";

ProbeBundle CorpusBundle(bool entry, bool exit, bool memory, bool reads_args) {
  ProbeBundle b;
  b.source_name = "test_bundle";
  b.ptx = testing::ReadTextFile(kGoldenDir + "test_bundle.ptx");
  b.maps.resize(3);
  auto add = [&](std::string name, AttachKind kind, std::string fn) {
    ProbeProgram p;
    p.name = name;
    p.section = "cuprobe/" + name + "/*";
    p.attach = kind;
    p.kernel_glob = "*";
    p.ptx_function = fn;
    p.reads_args = reads_args && kind == AttachKind::kEntry;
    p.mem_spaces = (1u << CUPROBE_SPACE_GLOBAL) | (1u << CUPROBE_SPACE_GENERIC) |
                   (1u << CUPROBE_SPACE_SHARED) | (1u << CUPROBE_SPACE_LOCAL) |
                   (1u << CUPROBE_SPACE_CONST);
    b.programs.push_back(p);
  };
  if (entry) add("entry", AttachKind::kEntry, "on_entry");
  if (exit) add("exit", AttachKind::kExit, "on_exit");
  if (memory) add("mem", AttachKind::kMemory, "on_mem");
  return b;
}

// "ptxas <file>, line 123; error : ..." -> the function around line 123.
std::string WhereAreErrors(const std::string& ptx, const std::string& ptxas_output) {
  absl::StatusOr<Module> m = ParsePtx(ptx);
  if (!m.ok()) return "";
  std::map<uint32_t, std::string> starts;
  for (const Function& f : m->functions) starts[f.line] = std::string(f.name);
  std::string out;
  for (std::string_view line : absl::StrSplit(ptxas_output, '\n')) {
    const size_t at = line.find(", line ");
    if (at == std::string_view::npos) continue;
    uint32_t n = 0;
    std::string_view rest = line.substr(at + 7);
    if (!absl::SimpleAtoi(rest.substr(0, rest.find(';')), &n)) continue;
    auto it = starts.upper_bound(n);
    const std::string fn = it == starts.begin() ? "<module level>" : std::prev(it)->second;
    absl::StrAppend(&out, "\n  in ", fn, ": ", line);
  }
  return out;
}

// At most two ptxas processes at a time (the CI machines have 2 cores).
class Throttle {
 public:
  template <typename F>
  auto Run(F f) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return running_ < 2; });
    ++running_;
    lock.unlock();
    auto result = f();
    lock.lock();
    --running_;
    cv_.notify_one();
    return result;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int running_ = 0;
};

class CorpusTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CorpusTest, EveryKernelThroughEveryPass) {
  const std::string path = GetParam();
  const std::string original = testing::ReadTextFile(path);
  ASSERT_FALSE(original.empty()) << path;
  absl::StatusOr<Module> parsed = ParsePtx(original, path);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::vector<std::string> kernels;
  for (const Function& f : parsed->functions) {
    if (f.is_kernel && f.has_body) kernels.emplace_back(f.name);
  }
  ASSERT_FALSE(kernels.empty());
  std::printf("%s: %zu bytes, %zu kernels\n", path.c_str(), original.size(), kernels.size());

  // Round trip.
  const std::string printed = PrintPtx(*parsed);
  absl::StatusOr<Module> again = ParsePtx(printed, "printed");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(PrintPtx(*again), printed) << "print is not stable";

  const std::string helper = testing::ReadTextFile(kGoldenDir + "test_helper.ptx");
  struct Config {
    std::string name;
    ProbeBundle bundle;
  };
  const std::vector<Config> configs = {
      {"entry", CorpusBundle(true, false, false, false)},
      {"exit", CorpusBundle(false, true, false, false)},
      {"memory", CorpusBundle(false, false, true, false)},
      {"context", CorpusBundle(true, false, false, true)},
  };
  auto instrument = [&](const ProbeBundle& bundle, bool indirect,
                        const std::string& config) -> absl::StatusOr<std::string> {
    InstrumentOptions options;
    options.helper_ptx = helper;
    options.module_name = path;
    options.indirect_calls = indirect;
    absl::StatusOr<InstrumentResult> r = InstrumentPtx(original, bundle, options);
    if (!r.ok()) return r.status();
    std::vector<std::string> failed;
    for (const SkippedKernel& k : r->skipped) failed.push_back(absl::StrCat(k.name, ": ", k.reason));
    for (const InstrumentedKernel& k : r->instrumented) {
      if (k.stats.memory_sites_skipped > 0) {
        failed.push_back(absl::StrCat(k.name, ": ", k.stats.memory_sites_skipped,
                                      " memory site(s) without a usable address"));
      }
    }
    EXPECT_TRUE(failed.empty()) << config << " pass failed for " << failed.size() << " of "
                                << kernels.size() << " kernels:\n  " << absl::StrJoin(failed, "\n  ");
    EXPECT_EQ(r->instrumented.size(), kernels.size()) << config;
    // CUPROBE_CORPUS_DUMP=DIR keeps the rewritten modules for a closer look.
    if (const char* dump = std::getenv("CUPROBE_CORPUS_DUMP"); dump != nullptr && *dump) {
      testing::WriteTextFile(absl::StrCat(dump, "/", path.substr(path.rfind('/') + 1), ".", config,
                                          indirect ? ".indirect" : "", ".ptx"),
                             r->ptx);
    }
    return std::move(r->ptx);
  };

  // Everything below runs ptxas; at most two at a time.
  Throttle throttle;
  auto original_info = std::async(std::launch::async, [&] {
    return throttle.Run([&] { return testing::RunPtxas(original); });
  });
  auto printed_info = std::async(std::launch::async, [&] {
    return throttle.Run([&] { return testing::RunPtxas(printed); });
  });
  // Each pass alone: ptxas must accept the module. Direct probe calls first;
  // when ptxas fails register allocation around them (C7600), indirect calls
  // -- what InstrumentAndCompile does.
  std::vector<std::future<std::string>> passes;
  for (const Config& c : configs) {
    passes.push_back(std::async(std::launch::async, [&, &c = c]() -> std::string {
      absl::StatusOr<std::string> ptx = instrument(c.bundle, false, c.name);
      if (!ptx.ok()) return absl::StrCat(c.name, ": ", ptx.status().message());
      absl::StatusOr<std::string> info = throttle.Run([&] { return testing::RunPtxas(*ptx); });
      std::string note;
      if (!info.ok() && absl::StrContains(info.status().message(), "Register allocation failed")) {
        note = " (direct calls: C7600; indirect calls)";
        ptx = instrument(c.bundle, true, c.name);
        if (!ptx.ok()) return absl::StrCat(c.name, ": ", ptx.status().message());
        info = throttle.Run([&] { return testing::RunPtxas(*ptx); });
      }
      if (!info.ok()) {
        return absl::StrCat(c.name, note, ": ptxas rejects the rewritten PTX:",
                            WhereAreErrors(*ptx, std::string(info.status().message())), "\n",
                            info.status().message().substr(0, 2000));
      }
      std::printf("  %s: ptxas ok%s\n", c.name.c_str(), note.c_str());
      return "";
    }));
  }
  // All passes together, through nvJitLink, as the hook does it.
  auto jit = std::async(std::launch::async, [&] {
    return throttle.Run([&] {
      InstrumentOptions options;
      options.helper_ptx = helper;
      options.module_name = path;
      CompileOptions o;
      o.sm = 90;
      o.verbose = true;
      o.input_name = path;
      return InstrumentAndCompileUncached(original, CorpusBundle(true, true, true, true), options, o);
    });
  });

  absl::StatusOr<std::string> a = original_info.get(), b = printed_info.get();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << "printed PTX does not assemble:" << b.status()
                      << WhereAreErrors(printed, std::string(b.status().message()));
  EXPECT_EQ(testing::ResourceReport(*a), testing::ResourceReport(*b))
      << "ptxas reports different resource usage for the printed PTX";
  for (auto& f : passes) {
    const std::string failure = f.get();
    EXPECT_TRUE(failure.empty()) << failure;
  }
  absl::StatusOr<CompiledInstrumentation> all = jit.get();
  ASSERT_TRUE(all.ok()) << "all passes, nvJitLink: " << all.status().message().substr(0, 2000);
  EXPECT_EQ(all->result.instrumented.size(), kernels.size());
  EXPECT_GT(all->compiled.cubin.size(), 0u);
  for (const std::string& w : all->result.warnings) std::printf("  all: %s\n", w.c_str());
  std::map<std::string, FunctionResources> compiled;
  for (FunctionResources& f : ParseResourceUsage(all->compiled.info_log)) compiled[f.name] = f;
  std::vector<std::string> missing;
  for (const std::string& k : kernels) {
    if (!compiled.contains(k)) missing.push_back(k);
  }
  EXPECT_TRUE(missing.empty()) << "kernels missing from the nvJitLink cubin: "
                               << absl::StrJoin(missing, ", ");
}

std::vector<std::string> CorpusFiles() {
  return {std::string(CUPROBE_CORPUS_DIR) + "/device_features.ptx",
          std::string(CUPROBE_CORPUS_DIR) + "/thrust_algorithms.ptx",
          std::string(CUPROBE_CORPUS_DIR) + "/cub_algorithms.ptx",
          std::string(CUPROBE_IMAGE_FIXTURE_DIR) + "/clang_kernels.ptx"};
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusTest, ::testing::ValuesIn(CorpusFiles()),
                         [](const auto& info) {
                           std::string n = info.param.substr(info.param.rfind('/') + 1);
                           return n.substr(0, n.find('.'));
                         });

}  // namespace
}  // namespace cuprobe
