// GPU tier: the patch backend (`cuprobe run --backend patch`, and auto), probes
// through the Compute Sanitizer patching API. The same workload built with
// SASS only (samples vec_add_sass, matmul_sass: code=sm_90, no PTX) under
// the patch backend must give exactly the maps the PTX build gives under
// the PTX backend, and exactly what the workload implies; the programs'
// output must equal their native runs'. Skips without a GPU.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gpu/map_lines.h"
#include "tests/gpu/probe_expectations.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Cuprobe() { return BuildDir() + "/bin/cuprobe"; }
std::string Probe(const std::string& name) { return BuildDir() + "/probes/" + name + ".cpb"; }

bool HavePython(const std::string& module) {
  return RunProcess({"python3", "-c", "import " + module}).exit_code == 0;
}

class Patch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine";
    char tmpl[] = "/tmp/cuprobe-patch-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  // `cuprobe run --backend B -p probe -- app`: the app's stdout must equal
  // its native run's; returns the final maps text.
  std::string RunProbe(const std::string& backend, const std::string& probe,
                       const std::vector<std::string>& app,
                       const std::vector<std::string>& extra = {},
                       std::vector<std::pair<std::string, std::string>> env = {}) {
    ProcessResult native = RunProcess(app);
    EXPECT_EQ(native.exit_code, 0) << native.err;
    prefix_ = dir_ + "/run" + std::to_string(runs_++);
    std::vector<std::string> argv = {Cuprobe(), "run", "--backend", backend, "-p", probe,
                                     "-o", prefix_, "--format", "json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("--");
    argv.insert(argv.end(), app.begin(), app.end());
    env.emplace_back("CUPROBE_LOG", "info");
    last_ = RunProcess(argv, env, 150);
    EXPECT_EQ(last_.exit_code, 0) << last_.err;
    EXPECT_EQ(last_.out, native.out) << "the program's results must not change";
    return ReadWholeFile(prefix_ + ".maps.txt");
  }
  std::string dir_, prefix_;
  ProcessResult last_;
  int runs_ = 0;
};

// The same counts keyed by kernel name, so that runs whose ids differ compare.
std::map<std::pair<std::string, uint32_t>, uint64_t> ByName(const std::string& maps,
                                                           const std::string& map) {
  std::map<uint32_t, std::string> names;
  for (const auto& [name, id] : KernelIds(maps)) names[id] = name;
  std::map<std::pair<std::string, uint32_t>, uint64_t> out;
  for (const auto& [key, value] : AccessCounts(maps, map)) out[{names[key.first], key.second}] = value;
  return out;
}

TEST_F(Patch, ThreadhistOnSassOnlyKernelsIsExactAndEqualsThePtxBackend) {
  const int n = 1 << 20, iterations = 10;
  const std::string line = absl::StrCat("@thread_exits[0]: sum ", int64_t{n} * iterations,
                                        " over ", n, " threads (min ", iterations, ", max ",
                                        iterations, ")");
  std::string ptx = RunProbe("ptx", Probe("threadhist"),
                             {SamplePath("vec_add"), std::to_string(n), std::to_string(iterations)});
  EXPECT_THAT(ptx, HasSubstr(line)) << ptx;
  std::string patch = RunProbe("patch", Probe("threadhist"),
                               {SamplePath("vec_add_sass"), std::to_string(n),
                                std::to_string(iterations)});
  EXPECT_THAT(patch, HasSubstr(line)) << patch << last_.err;
  EXPECT_THAT(last_.err, HasSubstr("patch backend")) << last_.err;
}

TEST_F(Patch, EntryCountsEqualGridTimesBlockOnSassOnlyKernels) {
  const int n = 1 << 20, iterations = 3;
  std::string maps = RunProbe("patch", Probe("count_entries"),
                              {SamplePath("vec_add_sass"), std::to_string(n),
                               std::to_string(iterations)});
  std::map<std::string, uint32_t> ids = KernelIds(maps);
  ASSERT_TRUE(ids.count("vec_add") && ids.count("scale")) << maps << last_.err;
  // vec_add: n threads per launch; scale: one launch of n threads.
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@entries[", ids["vec_add"], "]: ",
                                           int64_t{n} * iterations)))
      << maps;
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@entries[", ids["scale"], "]: ", n))) << maps;
}

TEST_F(Patch, MemTraceOnSassOnlyKernelsEqualsThePtxBackend) {
  const uint64_t n = 1 << 20, iterations = 5;
  constexpr uint32_t kLoad = 1, kStore = 2;
  std::string ptx = RunProbe("ptx", Probe("mem_trace"),
                             {SamplePath("vec_add"), std::to_string(n), std::to_string(iterations)});
  std::string patch = RunProbe("patch", Probe("mem_trace"),
                               {SamplePath("vec_add_sass"), std::to_string(n),
                                std::to_string(iterations)});
  auto count = ByName(patch, "accesses");
  EXPECT_EQ((count[{"vec_add", kLoad}]), 2 * n * iterations) << patch << last_.err;
  EXPECT_EQ((count[{"vec_add", kStore}]), n * iterations) << patch;
  EXPECT_EQ(count, ByName(ptx, "accesses")) << "ptx:\n" << ptx << "\npatch:\n" << patch;
  EXPECT_EQ(ByName(patch, "bytes"), ByName(ptx, "bytes")) << patch;
}

TEST_F(Patch, MemTraceOfATiledMatmulCountsGlobalAccessesOnly) {
  const uint64_t n = 512, iterations = 3, tile = 16;
  constexpr uint32_t kLoad = 1, kStore = 2;
  std::string maps = RunProbe("patch", Probe("mem_trace"),
                              {SamplePath("matmul_sass"), std::to_string(n),
                               std::to_string(iterations)});
  auto count = ByName(maps, "accesses");
  EXPECT_EQ((count[{"matmul_tiled", kLoad}]), 2 * n * n * (n / tile) * iterations) << maps;
  EXPECT_EQ((count[{"matmul_tiled", kStore}]), n * n * iterations) << maps;
}

// mem_trace summarizes (abi.h, site counters): the patch backend counts
// each access class instead of calling the probe. Counted or called, the
// maps are the same.
TEST_F(Patch, SiteCountersCountWhatTheCalledProbeCounts) {
  const std::vector<std::string> app = {SamplePath("matmul_sass"), "256", "2"};
  std::string counted = RunProbe("patch", Probe("mem_trace"), app);
  EXPECT_THAT(last_.err, HasSubstr("counts its memory accesses in site counters")) << last_.err;
  std::string called = RunProbe("patch", Probe("mem_trace"), app, {},
                                {{"CUPROBE_SITE_COUNTERS", "0"}});
  EXPECT_THAT(last_.err, Not(HasSubstr("site counters"))) << last_.err;
  EXPECT_FALSE(ByName(counted, "accesses").empty()) << counted;
  EXPECT_EQ(ByName(counted, "accesses"), ByName(called, "accesses")) << counted << called;
  EXPECT_EQ(ByName(counted, "bytes"), ByName(called, "bytes")) << counted << called;
  // A probe that reads the address is called at every access.
  RunProbe("patch", Probe("mem_regions"), app);
  EXPECT_THAT(last_.err, Not(HasSubstr("site counters"))) << last_.err;
}

// Arguments reach a patched kernel's probe: each launch's own, with
// printk from the probe (a ring buffer and read-only format strings).
TEST_F(Patch, ProbeReadsKernelArgumentsAndPrints) {
  std::string maps = RunProbe("patch", Probe("vec_add_args"),
                              {SamplePath("vec_add_sass"), "65536", "7"});
  ExpectVecAddArgsSeen(maps, ReadWholeFile(prefix_ + ".events"), 65536, 7);
}

// kernel_trace: one ring-buffer event per block (the probe's leader thread
// at entry), every block of every launch, as under the PTX backend.
TEST_F(Patch, KernelTraceGivesOneEventPerBlock) {
  const int n = 1 << 20, iterations = 4;
  std::string maps = RunProbe("patch", Probe("kernel_trace"),
                              {SamplePath("vec_add_sass"), std::to_string(n),
                               std::to_string(iterations)},
                              {"--events", "json", "--quiet"});
  ExpectOneEventPerVecAddBlock(maps, prefix_ + ".events", n, iterations);
}

// samples/cublas_probe on its PyTorch matmul: every kernel that ran has
// blocks, and cuBLAS's gemm loaded (with cp.async: CUPROBE_PATCH_ASYNC_COPIES)
// and stored global memory.
TEST_F(Patch, CublasProbeSampleSeesTheGemm) {
  if (!HavePython("torch")) GTEST_SKIP() << "no PyTorch here";
  std::string maps = RunProbe("patch", Probe("cublas_probe"),
                              {"python3", SourceDir() + "/samples/cublas_probe/mm.py"}, {},
                              {{"CUPROBE_PATCH_ASYNC_COPIES", "1"}});
  std::map<std::string, uint32_t> ids = KernelIds(maps);
  ASSERT_GE(ids.size(), 2u) << maps << last_.err;
  bool gemm = false;
  auto bytes = ByName(maps, "global_bytes");
  for (const auto& [name, id] : ids) {
    SCOPED_TRACE(name);
    EXPECT_THAT(maps, HasSubstr(absl::StrCat("@blocks[", id, "]: "))) << maps;
    if (name.find("gemm") == std::string::npos) continue;
    gemm = true;
    EXPECT_GT((bytes[{name, 1}]), 0u) << maps;
    EXPECT_GT((bytes[{name, 2}]), 0u) << maps;
  }
  EXPECT_TRUE(gemm) << "a cuBLAS gemm kernel among them: " << maps;
}

// Each kernel's site counters are set up inside the driver's launch
// callback while the maps are published every second: the program must
// neither wait on the publish nor lose a count (mem_trace summarizes).
TEST_F(Patch, MemTraceOnPyTorchRunsWhileTheMapsArePublished) {
  if (!HavePython("torch")) GTEST_SKIP() << "no PyTorch here";
  std::string maps = RunProbe("patch", Probe("mem_trace"),
                              {"python3", SourceDir() + "/samples/cublas_probe/mm.py"});
  EXPECT_THAT(last_.err, HasSubstr("--- maps at")) << "published while it ran";
  EXPECT_THAT(last_.err, HasSubstr("counts its memory accesses in site counters")) << last_.err;
  bool gemm = false;
  for (const auto& [key, value] : ByName(maps, "accesses")) {
    if (key.first.find("gemm") == std::string::npos) continue;
    gemm = true;
    EXPECT_GT(value, 0u) << key.first;
  }
  EXPECT_TRUE(gemm) << maps;
}

// --backend auto: in one program, the module with PTX is rewritten (and
// not patched: its counts would double) and the SASS-only one patched;
// every thread's entry is counted once.
// Modules load lazily by default (at a kernel's first use, or when the
// hook reads the rewritten module's globals); eagerly, the rewritten image
// reaches the patch backend's module-load callback, which must skip it.
TEST_F(Patch, AutoRewritesPtxKernelsAndPatchesTheOthers) {
  const int n = 1 << 20, iterations = 3;
  for (const char* loading : {"LAZY", "EAGER"}) {
    SCOPED_TRACE(loading);
    std::string maps = RunProbe("auto", Probe("count_entries"),
                                {SamplePath("mixed"), std::to_string(n), std::to_string(iterations)},
                                {}, {{"CUDA_MODULE_LOADING", loading}});
    std::map<std::string, uint32_t> ids = KernelIds(maps);
    ASSERT_TRUE(ids.count("add_one") && ids.count("add_two")) << maps << last_.err;
    EXPECT_NE(ids["add_one"], ids["add_two"]);
    const std::string patched =
        absl::StrCat("@entries[", ids["add_two"], "]: ", int64_t{n} * iterations);
    const std::string rewritten =
        absl::StrCat("@entries[", ids["add_one"], "]: ", int64_t{n} * iterations);
    EXPECT_THAT(maps, HasSubstr(patched)) << maps;
    EXPECT_THAT(maps, HasSubstr(rewritten)) << maps;
    EXPECT_THAT(last_.err, HasSubstr("hook ready: auto backend")) << last_.err;
    EXPECT_THAT(last_.err, HasSubstr("instrumented 1 kernel(s)")) << last_.err;
    EXPECT_THAT(last_.err, Not(HasSubstr("cannot reach their maps"))) << last_.err;
    if (std::string(loading) == "EAGER") {
      // The rewritten module is seen loading and left unpatched (a patched
      // copy would count add_one twice).
      EXPECT_THAT(last_.err, HasSubstr("modules rewritten from their PTX are not patched"))
          << last_.err;
    }
  }
  // The PTX backend alone, eagerly: the library loads before the context
  // and reaches it after the context's creation; its first launch fills it.
  std::string maps = RunProbe("ptx", Probe("count_entries"),
                              {SamplePath("mixed"), std::to_string(n), std::to_string(iterations)},
                              {}, {{"CUDA_MODULE_LOADING", "EAGER"}});
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@entries[0]: ", int64_t{n} * iterations))) << maps;
}

TEST_F(Patch, ThePtxBackendNamesSassOnlyKernelsAndPointsToPatch) {
  std::string maps = RunProbe("ptx", Probe("threadhist"), {SamplePath("vec_add_sass"), "4096", "2"});
  EXPECT_THAT(last_.err, HasSubstr("--backend auto")) << last_.err;
  EXPECT_THAT(maps, Not(HasSubstr("sum 8192"))) << maps;
}

// Every kernel of a PyTorch training step (cuBLAS, PyTorch's own: SASS
// only) gets the entry probe: per kernel, the threads that entered equal
// the sum of grid x block over its launch records, and PyTorch's results
// are unchanged.
TEST_F(Patch, PyTorchEntryCountsEqualTheLaunchRecordsForEveryKernel) {
  if (!HavePython("torch")) GTEST_SKIP() << "no PyTorch here";
  std::vector<std::string> app = {"python3", SourceDir() + "/samples/torch_mlp/train_step.py"};
  ProcessResult native = RunProcess(app, {}, 300);
  ASSERT_EQ(native.exit_code, 0) << native.err;
  std::string prefix = dir_ + "/torch";
  std::vector<std::string> argv = {Cuprobe(), "run", "--backend", "patch", "-p",
                                   Probe("count_entries"), "-o", prefix, "--format", "chrome",
                                   "--"};
  argv.insert(argv.end(), app.begin(), app.end());
  ProcessResult r = RunProcess(argv, {{"CUPROBE_LOG", "info"}}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, native.out) << "PyTorch's results must not change";
  // Threads launched per kernel (demangled name), from the timeline.
  ProcessResult t = RunProcess(
      {"python3", "-c",
       "import json,sys,collections\n"
       "d=collections.Counter()\n"
       "for e in json.load(open(sys.argv[1]))['traceEvents']:\n"
       "  a=e.get('args',{})\n"
       "  if 'grid' in a and 'kernel' in a and e.get('cat')=='cuda_api':\n"
       "    g,b=a['grid'],a['block']\n"
       "    d[a['kernel']]+=g[0]*g[1]*g[2]*b[0]*b[1]*b[2]\n"
       "for k,v in sorted(d.items()): print('%s\\t%d'%(k,v))\n",
       prefix + ".trace.json"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  std::map<std::string, uint64_t> launched;
  for (std::string_view line : absl::StrSplit(t.out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    ASSERT_EQ(f.size(), 2u) << line;
    ASSERT_TRUE(absl::SimpleAtoi(f[1], &launched[f[0]])) << line;
  }
  std::string maps = ReadWholeFile(prefix + ".maps.txt");
  // Whole demangled names: PyTorch's have parentheses inside
  // ("(anonymous namespace)"), and several share what precedes them.
  std::map<std::string, uint32_t> ids;
  std::regex line(R"(\n  \[(\d+)\] ([^\n]+))");
  for (auto it = std::sregex_iterator(maps.begin(), maps.end(), line);
       it != std::sregex_iterator(); ++it) {
    ids[(*it)[2].str()] = static_cast<uint32_t>(std::stoul((*it)[1].str()));
  }
  ASSERT_GT(ids.size(), 5u) << maps << r.err;
  for (const auto& [name, id] : ids) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(launched.count(name)) << t.out;
    EXPECT_THAT(maps, HasSubstr(absl::StrCat("@entries[", id, "]: ", launched[name], "\n")))
        << maps;
  }
  EXPECT_EQ(ids.size(), launched.size()) << "every kernel got the probe:\n" << t.out << maps;
}

}  // namespace
}  // namespace cuprobe::testing
