// GPU tier: `cuprobe run` end to end. The reference probes
// (samples/threadhist, kernel_trace, mem_trace) on vec_add and the tiled
// matmul, with exact expected values computed from the workloads; the programs' own output (which checks
// every result) must equal the native run's. Skips without a GPU.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <fstream>
#include <regex>
#include <thread>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "cuprobe/abi.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/map_print.h"
#include "tests/gpu/map_lines.h"
#include "tests/gpu/probe_expectations.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string Cuprobe() { return BuildDir() + "/bin/cuprobe"; }
// Probes run from the bundles the build compiled (build/probes/*.cpb): the
// GPU machine has no clang-19 to compile C probes.
std::string Probe(const std::string& name) { return BuildDir() + "/probes/" + name + ".cpb"; }
// The eBPF object of a sample probe (the build keeps them for the fuzz
// corpus): several -p take sources or objects, and the GPU machine has no clang.
std::string ProbeObject(const std::string& name) {
  return BuildDir() + "/tests/compiler/corpus/bpf_object/" + name + ".o";
}

class Run : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine";
    char tmpl[] = "/tmp/cuprobe-run-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  // Runs `cuprobe run -p probe [extra] -- app`, checks the app's stdout
  // against its native run, and returns the final maps text.
  std::string RunProbe(const std::string& probe, const std::vector<std::string>& app,
                       const std::vector<std::string>& extra = {},
                       std::vector<std::pair<std::string, std::string>> env = {}) {
    ProcessResult native = RunProcess(app);
    EXPECT_EQ(native.exit_code, 0) << native.err;
    prefix_ = dir_ + "/run" + std::to_string(runs_++);
    std::vector<std::string> argv = {Cuprobe(), "run", "-p", probe, "-o", prefix_, "--format",
                                     "json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("--");
    argv.insert(argv.end(), app.begin(), app.end());
    env.emplace_back("CUPROBE_LOG", "info");
    last_ = RunProcess(argv, env, 300);
    EXPECT_EQ(last_.exit_code, 0) << last_.err;
    EXPECT_EQ(last_.out, native.out) << "the program's results must not change";
    EXPECT_THAT(last_.err, HasSubstr("instrumented")) << last_.err;
    return ReadWholeFile(prefix_ + ".maps.txt");
  }
  std::string dir_, prefix_;
  ProcessResult last_;
  int runs_ = 0;
};

TEST_F(Run, ThreadhistCountsEveryThreadExitExactly) {
  const int n = 1 << 20, iterations = 10;
  std::string maps = RunProbe(Probe("threadhist"),
                              {SamplePath("vec_add"), std::to_string(n),
                               std::to_string(iterations)});
  // Every one of the n threads leaves vec_add once per launch.
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@thread_exits[0]: sum ",
                                           int64_t{n} * iterations, " over ", n,
                                           " threads (min ", iterations, ", max ", iterations,
                                           ")")))
      << maps;
}

// threadhist's exit add is a thread-range counter: the launch's first
// thread records the launch's size and the host adds 1 to each thread id
// below it. With CUPROBE_SITE_COUNTERS=0 every thread adds to its own slot
// through the helper. Both are exact, for a grid whose last block has
// threads past n (they exit too), and for more threads than the map's 1M
// ids (the rest refused and counted).
TEST_F(Run, ThreadhistThreadRangesAreExactAndMatchTheHelperPath) {
  for (const char* counters : {"1", "0"}) {
    SCOPED_TRACE(absl::StrCat("CUPROBE_SITE_COUNTERS=", counters));
    // n = 1000: 4 blocks of 256, 1,024 threads, 3 launches.
    std::string maps = RunProbe(Probe("threadhist"), {SamplePath("vec_add"), "1000", "3"}, {},
                                {{"CUPROBE_SITE_COUNTERS", counters}});
    EXPECT_THAT(maps, HasSubstr("@thread_exits[0]: sum 3072 over 1024 threads (min 3, max 3)"))
        << maps;
    EXPECT_THAT(maps, Not(HasSubstr("refused"))) << maps;
    // 2^21 threads, 2 launches: ids 0..2^20-1 twice, 2 x 2^20 refusals.
    maps = RunProbe(Probe("threadhist"), {SamplePath("vec_add"), "2097152", "2"}, {},
                    {{"CUPROBE_SITE_COUNTERS", counters}});
    EXPECT_THAT(maps, HasSubstr("@thread_exits[0]: sum 2097152 over 1048576 threads (min 2, max 2)"))
        << maps;
    EXPECT_THAT(maps, HasSubstr("(2097152 updates refused")) << maps;
  }
}

constexpr uint32_t kLoad = 1, kStore = 2;  // CUPROBE_ACCESS_*

// Two -p in one run: compiled together, both exact.
TEST_F(Run, TwoProbesInOneRunAreBothExact) {
  const int n = 1 << 20, iterations = 3;
  std::string maps = RunProbe(ProbeObject("threadhist"),
                              {SamplePath("vec_add"), std::to_string(n), std::to_string(iterations)},
                              {"-p", ProbeObject("mem_trace")});
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@thread_exits[0]: sum ", int64_t{n} * iterations,
                                           " over ", n, " threads (min ", iterations, ", max ",
                                           iterations, ")")))
      << maps;
  std::map<std::string, uint32_t> ids = KernelIds(maps);
  ASSERT_TRUE(ids.count("vec_add")) << maps;
  auto count = AccessCounts(maps, "accesses");
  EXPECT_EQ((count[{ids["vec_add"], kLoad}]), uint64_t{2} * n * iterations) << maps;
  EXPECT_EQ((count[{ids["vec_add"], kStore}]), uint64_t{1} * n * iterations) << maps;
}

TEST_F(Run, MemTraceCountsMatchTheWorkloadsExactly) {
  {
    const uint64_t n = 1 << 20, iterations = 5;
    std::string maps = RunProbe(Probe("mem_trace"),
                                {SamplePath("vec_add"), std::to_string(n),
                                 std::to_string(iterations)});
    std::map<std::string, uint32_t> ids = KernelIds(maps);
    ASSERT_TRUE(ids.count("vec_add") && ids.count("scale")) << maps;
    auto count = AccessCounts(maps, "accesses");
    auto bytes = AccessCounts(maps, "bytes");
    // vec_add: c[i] = a[i] + b[i]; scale: c[i] *= f.
    EXPECT_EQ((count[{ids["vec_add"], kLoad}]), 2 * n * iterations) << maps;
    EXPECT_EQ((count[{ids["vec_add"], kStore}]), n * iterations) << maps;
    EXPECT_EQ((count[{ids["scale"], kLoad}]), n) << maps;
    EXPECT_EQ((count[{ids["scale"], kStore}]), n) << maps;
    EXPECT_EQ((bytes[{ids["vec_add"], kLoad}]), 4 * 2 * n * iterations) << maps;
    EXPECT_EQ(count.size(), 4u) << "no other kind of access: " << maps;
    // Its sites reduce to constant adds, so they were site counters; calling
    // the probe at every access instead gives the same maps.
    std::string called = RunProbe(Probe("mem_trace"),
                                  {SamplePath("vec_add"), std::to_string(n),
                                   std::to_string(iterations)},
                                  {}, {{"CUPROBE_SITE_COUNTERS", "0"}});
    EXPECT_EQ(AccessCounts(called, "accesses"), count) << called;
    EXPECT_EQ(AccessCounts(called, "bytes"), bytes) << called;
    // Probes placed after their access (CUPROBE_MEM_PROBE_AFTER=1) count the
    // same.
    std::string after = RunProbe(Probe("mem_trace"),
                                 {SamplePath("vec_add"), std::to_string(n),
                                  std::to_string(iterations)},
                                 {}, {{"CUPROBE_SITE_COUNTERS", "0"},
                                      {"CUPROBE_MEM_PROBE_AFTER", "1"}});
    EXPECT_EQ(AccessCounts(after, "accesses"), count) << after;
    EXPECT_EQ(AccessCounts(after, "bytes"), bytes) << after;
  }
  {
    const uint64_t n = 512, iterations = 3, tile = 16;
    std::string maps = RunProbe(Probe("mem_trace"),
                                {SamplePath("matmul"), std::to_string(n),
                                 std::to_string(iterations)});
    std::map<std::string, uint32_t> ids = KernelIds(maps);
    ASSERT_TRUE(ids.count("matmul_tiled")) << maps;
    auto count = AccessCounts(maps, "accesses");
    // Global only (the probe skips shared memory): 2 loads per tile and
    // thread, one store per thread.
    EXPECT_EQ((count[{ids["matmul_tiled"], kLoad}]), 2 * n * n * (n / tile) * iterations) << maps;
    EXPECT_EQ((count[{ids["matmul_tiled"], kStore}]), n * n * iterations) << maps;
  }
}

TEST_F(Run, KernelTraceGivesOneEventPerBlock) {
  const int n = 1 << 20, iterations = 4;
  std::string maps = RunProbe(Probe("kernel_trace"),
                              {SamplePath("vec_add"), std::to_string(n),
                               std::to_string(iterations)},
                              {"--events", "json", "--quiet"});
  ExpectOneEventPerVecAddBlock(maps, prefix_ + ".events", n, iterations);
}

// More block events than the ring holds: the tiled matmul at n = 2048 has
// 16,384 blocks per launch, 163,840 over 10 launches, and kernel_trace's
// 4 MiB ring holds about 92,000 records. `run` consumes the ring every
// millisecond while the program runs, so every event arrives (at 2 ms per
// launch the ring would hold 11 launches' worth of them). Both ways of
// reserving in the device ring: reserving first (the default), whose
// compiled probe takes the inline path that reads the consumer's tail, and
// checking the head first (CUPROBE_RING_DATA=device).
TEST_F(Run, KernelTraceStreamsMoreEventsThanItsRingHolds) {
  for (const char* ring_data : {"speculative", "device"}) {
    SCOPED_TRACE(ring_data);
    const int n = 2048, iterations = 10, blocks = (n / 16) * (n / 16);
    std::string maps = RunProbe(Probe("kernel_trace"),
                                {SamplePath("matmul"), std::to_string(n),
                                 std::to_string(iterations)},
                                {"--events", "json", "--quiet"},
                                {{"CUPROBE_RING_DATA", ring_data}});
    ProcessResult r = RunProcess(
        {"python3", "-c",
         "import json,sys,collections,struct\n"
         "c=collections.Counter()\n"
         "for l in open(sys.argv[1]):\n"
         "  e=json.loads(l)\n"
         "  if e.get('map')!='block_events': continue\n"
         "  ts,k,sm,bx,by,bz,_=struct.unpack('<QIIIIII',bytes.fromhex(e['hex']))\n"
         "  c[(k,bx,by,bz)]+=1\n"
         "print(len(c), sorted(collections.Counter(c.values()).items()))\n",
         prefix_ + ".events"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, absl::StrCat(blocks, " [(", iterations, ", ", blocks, ")]\n")) << maps;
    EXPECT_THAT(maps, HasSubstr(absl::StrCat(blocks * iterations, " records delivered, 0 dropped")))
        << maps;
  }
}

TEST_F(Run, ProbeReadsKernelArgumentsAndPrints) {
  std::string maps = RunProbe(Probe("vec_add_args"),
                              {SamplePath("vec_add"), "65536", "7"});
  ExpectVecAddArgsSeen(maps, ReadWholeFile(prefix_ + ".events"), 65536, 7);
}

TEST_F(Run, KernelsInCudaGraphsRunInstrumented) {
  const int n = 65536, launches = 20;
  std::string maps = RunProbe(Probe("count_entries"),
                              {SamplePath("cudagraph"), std::to_string(n),
                               std::to_string(launches)});
  std::map<std::string, uint32_t> ids = KernelIds(maps);
  ASSERT_TRUE(ids.count("scale_add") && ids.count("bump")) << maps;
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@entries[", ids["scale_add"], "]: ",
                                           int64_t{2} * n * launches)))
      << maps;
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@entries[", ids["bump"], "]: ",
                                           int64_t{n} * launches)))
      << maps;
}

bool HavePython(const std::string& module) {
  return RunProcess({"python3", "-c", "import " + module}).exit_code == 0;
}

TEST_F(Run, TritonKernelIsInstrumentedFromTritonsCache) {
  if (!HavePython("triton")) GTEST_SKIP() << "no Triton here";
  const int n = 1 << 20, iterations = 5;
  // Its own Triton cache, so the native run below is what fills it.
  std::string cache = dir_ + "/triton-cache";
  ::setenv("TRITON_CACHE_DIR", cache.c_str(), 1);
  std::string maps = RunProbe(Probe("count_entries"),
                              {"python3", SourceDir() + "/samples/triton_add/add.py",
                               std::to_string(n), std::to_string(iterations)});
  ::unsetenv("TRITON_CACHE_DIR");
  std::map<std::string, uint32_t> ids = KernelIds(maps);
  ASSERT_TRUE(ids.count("add_kernel")) << maps << last_.err;
  // iterations x ceil(n / 1024) programs x 4 warps of 32 threads.
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@entries[", ids["add_kernel"], "]: ",
                                           int64_t{iterations} * (n / 1024) * 128)))
      << maps;
}

TEST_F(Run, PyTorchSassOnlyKernelsAreNamedAndLeftAlone) {
  if (!HavePython("torch")) GTEST_SKIP() << "no PyTorch here";
  std::vector<std::string> app = {"python3", SourceDir() + "/samples/torch_mlp/train_step.py"};
  ProcessResult native = RunProcess(app, {}, 300);
  ASSERT_EQ(native.exit_code, 0) << native.err;
  std::string prefix = dir_ + "/torch";
  std::vector<std::string> argv = {Cuprobe(), "run", "-p", Probe("count_entries"), "-o", prefix,
                                   "--format", "json", "--"};
  argv.insert(argv.end(), app.begin(), app.end());
  ProcessResult r = RunProcess(argv, {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, native.out) << "PyTorch's results must not change";
  EXPECT_THAT(r.err, HasSubstr("are traced but not instrumented (`cuprobe run --backend auto`")) << r.err;
  // Traced all the same.
  ProcessResult k = RunProcess({"python3", "-c",
                                "import json,sys\n"
                                "print(json.load(open(sys.argv[1]))['totals']['kernels'])\n",
                                prefix + ".json"});
  int64_t kernels = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(k.out), &kernels)) << k.out << k.err;
  EXPECT_GT(kernels, 5);
}

TEST_F(Run, TracesLikeTraceDoes) {
  std::string maps = RunProbe(Probe("threadhist"), {SamplePath("vec_add"), "4096", "3"});
  ProcessResult r = RunProcess({"python3", SourceDir() + "/tests/gpu/summary_lines.py",
                                prefix_ + ".json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("K\t3\tvec_add(float const*, float const*, float*, int)"));
  EXPECT_THAT(r.out, HasSubstr("K\t1\tscale(float*, float, int)"));
}

// The pid of a running process whose command line is exactly `argv`, or 0.
int FindProcess(const std::vector<std::string>& argv) {
  std::string want;
  for (const std::string& a : argv) want += a + '\0';
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return 0;
  int found = 0;
  while (dirent* e = ::readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    if (ReadWholeFile(absl::StrCat("/proc/", pid, "/cmdline")) == want) found = pid;
  }
  ::closedir(proc);
  return found;
}

// Late attach: vec_add runs under `cuprobe trace` (151 launches, 20 ms
// apart); `cuprobe attach PID -p threadhist -d 1` adds the probe while it
// runs. Every launch made while attached is redirected to the instrumented
// twin as a whole, so each of the 65,536 threads exits it the same number
// of times R (1 <= R < 151); the program's results and its trace (151
// vec_add instances) are unchanged.
TEST_F(Run, LateAttachInstrumentsARunningProgram) {
  const std::vector<std::string> app = {SamplePath("vec_add"), "65536", "151", "20"};
  ProcessResult native = RunProcess(app);
  ASSERT_EQ(native.exit_code, 0) << native.err;
  const std::string trace_prefix = dir_ + "/traced";
  ProcessResult traced;
  std::thread program([&] {
    std::vector<std::string> argv = {Cuprobe(), "trace", "-o", trace_prefix, "--"};
    argv.insert(argv.end(), app.begin(), app.end());
    traced = RunProcess(argv, {{"CUPROBE_LOG", "info"}}, 120);
  });
  int pid = 0;
  for (int i = 0; i < 500 && pid == 0; ++i) {
    pid = FindProcess(app);
    if (pid == 0) ::usleep(10000);
  }
  ProcessResult attach;
  const std::string attach_prefix = dir_ + "/attach";
  // The hook is ready once the program initialized CUDA: retry until then.
  for (int attempt = 0; pid != 0 && attempt < 50; ++attempt) {
    attach = RunProcess({Cuprobe(), "attach", std::to_string(pid), "-p", Probe("threadhist"),
                         "-d", "1", "--quiet", "-o", attach_prefix},
                        {{"CUPROBE_LOG", "info"}}, 60);
    if (attach.exit_code == 0) break;
    ::usleep(50000);
  }
  program.join();
  ASSERT_NE(pid, 0) << "the traced program was not found";
  ASSERT_EQ(attach.exit_code, 0) << attach.err;
  EXPECT_THAT(attach.err, HasSubstr(absl::StrCat("attached to pid ", pid))) << attach.err;
  EXPECT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(traced.out, native.out) << "the program's results must not change";
  EXPECT_THAT(traced.err, HasSubstr("late attach: launches of 1 kernel(s)")) << traced.err;

  const std::string maps = ReadWholeFile(attach_prefix + ".maps.txt");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      maps, m,
      std::regex(R"(@thread_exits\[0\]: sum (\d+) over (\d+) threads \(min (\d+), max (\d+)\))")))
      << maps;
  const uint64_t sum = std::stoull(m[1]), threads = std::stoull(m[2]);
  const uint64_t min = std::stoull(m[3]), max = std::stoull(m[4]);
  EXPECT_EQ(threads, 65536u);
  EXPECT_EQ(min, max) << "every redirected launch runs whole";
  EXPECT_GE(min, 1u);
  EXPECT_LT(min, 151u);
  EXPECT_EQ(sum, min * 65536u);
  // Redirected launches are still traced under the kernel's name.
  std::smatch row;
  ASSERT_TRUE(std::regex_search(traced.err, row, std::regex(R"(\n[^\n]*\b151\b[^\n]*vec_add\()")))
      << traced.err;
}

// A probe written as bpftime's GPU examples are (tests/gpu/probes/
// bpftime_idioms.bpf.c), unchanged semantics on the GPU: exact entry and
// exit counts through bpf_map_lookup_elem; one printk line per format per
// launch although clang merged the two calls; one perf-event record per
// block through map type 1527 with a NULL context; and helper 507, which
// ends the upper half of scale's threads before they scale (so vec_add
// reports exactly those results wrong, and their exit probe never runs).
TEST_F(Run, BpftimeIdiomsRunOnTheGpu) {
  const int n = 65536, iterations = 3, blocks = n / 256;
  const std::string prefix = dir_ + "/bpftime";
  ProcessResult r = RunProcess({Cuprobe(), "run", "-p", Probe("bpftime_idioms"), "--events",
                                "json", "--quiet", "-o", prefix, "--format", "json", "--",
                                SamplePath("vec_add"), std::to_string(n),
                                std::to_string(iterations)},
                               {}, 300);
  EXPECT_EQ(r.exit_code, 1) << "vec_add checks its results: " << r.err;
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("vec_add: FAILED: ", n / 2, " of ", n,
                                            " results wrong")))
      << r.err;
  const std::string maps = ReadWholeFile(prefix + ".maps.txt");
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@counts[0]: ", n * iterations, "\n"))) << maps;
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@counts[1]: ", n * iterations, "\n"))) << maps;
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@counts[2]: ", n / 2, "\n"))) << maps;

  const std::string events = ReadWholeFile(prefix + ".events");
  auto occurrences = [&](const std::string& what) {
    size_t count = 0;
    for (size_t at = 0; (at = events.find(what, at)) != std::string::npos; ++at) ++count;
    return count;
  };
  EXPECT_EQ(occurrences("even thread 0!"), size_t{iterations}) << events;
  EXPECT_EQ(occurrences("odd thread 1"), size_t{iterations}) << events;
  ProcessResult py = RunProcess(
      {"python3", "-c",
       "import json,sys,collections,struct\n"
       "c=collections.Counter()\n"
       "for l in open(sys.argv[1]):\n"
       "  e=json.loads(l)\n"
       "  if e.get('map')!='blocks': continue\n"
       "  b,t=struct.unpack('<QQ',bytes.fromhex(e['hex']))\n"
       "  c[(b,t)]+=1\n"
       "print(len(c), sorted(collections.Counter(c.values()).items()), sorted({t for _,t in c}))\n",
       prefix + ".events"});
  ASSERT_EQ(py.exit_code, 0) << py.err;
  EXPECT_EQ(py.out, absl::StrCat(blocks, " [(", iterations, ", ", blocks, ")] [256]\n")) << events;
}

// `cuprobe list -- program`: the kernels of every module the program loaded,
// with the backend each gets and its launches, after the program's own
// output and with its exit code. mixed's add_two is SASS only (patch).
TEST_F(Run, ListOfAProgramHasItsKernelsBackendsAndLaunches) {
  ProcessResult native = RunProcess({SamplePath("mixed"), "4096", "3"});
  ASSERT_EQ(native.exit_code, 0) << native.err;
  ProcessResult r = RunProcess({Cuprobe(), "list", "--", SamplePath("mixed"), "4096", "3"}, {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith(native.out)) << "the program's own output comes first";
  EXPECT_THAT(r.out, ContainsRegex("\nentry:add_one +ptx  launches=3\n")) << r.out;
  EXPECT_THAT(r.out, ContainsRegex("\nmem:add_two +patch  launches=3\n")) << r.out;
  EXPECT_THAT(r.err, HasSubstr("6 attach point(s) of 2 kernel(s): 1 ptx, 1 patch")) << r.err;
  r = RunProcess({Cuprobe(), "list", "exit:*one", "--", SamplePath("mixed"), "4096", "3"}, {}, 120);
  // (The columns are as wide as the whole list's, filtered or not.)
  EXPECT_THAT(r.out, ContainsRegex("\nexit:add_one +ptx  launches=3\n$")) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("entry:add_one"))) << r.out;
}

// `cuprobe list PID`: a program running under `cuprobe trace` answers with
// the kernels of the modules it has loaded; nothing else about it changes.
TEST_F(Run, ListOfARunningProgram) {
  const std::vector<std::string> app = {SamplePath("vec_add"), "65536", "101", "20"};
  ProcessResult traced;
  std::thread program([&] {
    std::vector<std::string> argv = {Cuprobe(), "trace", "-o", dir_ + "/listed", "--"};
    argv.insert(argv.end(), app.begin(), app.end());
    traced = RunProcess(argv, {}, 120);
  });
  int pid = 0;
  for (int i = 0; i < 500 && pid == 0; ++i) {
    pid = FindProcess(app);
    if (pid == 0) ::usleep(10000);
  }
  ProcessResult list;
  // The hook answers once the program initialized CUDA and loaded vec_add's
  // module (at its first launch, with lazy loading): retry until then.
  for (int attempt = 0; pid != 0 && attempt < 100; ++attempt) {
    list = RunProcess({Cuprobe(), "list", "-v", std::to_string(pid)}, {}, 60);
    if (list.exit_code == 0 && absl::StrContains(list.out, "vec_add")) break;
    ::usleep(20000);
  }
  program.join();
  ASSERT_NE(pid, 0) << "the traced program was not found";
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("entry:vec_add  ptx  _Z7vec_addPKfS0_Pfi\n")) << list.out;
  EXPECT_THAT(list.out, HasSubstr("mem:scale      ptx  _Z5scalePffi\n")) << list.out;
  EXPECT_THAT(list.out, Not(HasSubstr("launches="))) << list.out;
  EXPECT_EQ(traced.exit_code, 0) << traced.err;
  std::smatch row;
  EXPECT_TRUE(std::regex_search(traced.err, row, std::regex(R"(\n[^\n]*\b101\b[^\n]*vec_add\()")))
      << traced.err;
}

// No GPU needed: the probe is rejected before anything runs.
TEST(RunCli, BadProbeStopsBeforeTheProgramRuns) {
  char tmpl[] = "/tmp/cuprobe-run-cli-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string dir_ = tmpl;
  std::string bad = dir_ + "/bad.bpf.c";
  ASSERT_EQ(RunProcess({"sh", "-c",
                        "printf '#include \"cuprobe/probe.h\"\\nSEC(\"cuprobe/entry/*\") int p(struct "
                        "cuprobe_ctx *ctx) { ctx->kind = 1; return 0; }\\n' > " +
                            bad})
                .exit_code,
            0);
  std::string marker = dir_ + "/ran";
  ProcessResult r = RunProcess({Cuprobe(), "run", "-p", bad, "--", "touch", marker});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("bad.bpf.c"));
  EXPECT_NE(::access(marker.c_str(), F_OK), 0) << "nothing runs with a probe that fails to verify";
}

// One-liners (docs/ONELINERS.md), compiled on the build machine by `cuprobe
// compile -e` (build/probes/ol_*.cpb): the bundle keeps the one-liner, so
// its maps print by kernel name and access kind. vec_add launches vec_add
// `iterations` times over n threads, then scale once over n.
TEST_F(Run, OnelinersCountExactlyByKernelName) {
  const int64_t n = 1 << 20, iterations = 10;
  const std::vector<std::string> app = {SamplePath("vec_add"), std::to_string(n),
                                        std::to_string(iterations)};
  std::string maps = RunProbe(Probe("ol_exits"), app);
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@exits[vec_add]: ", n * iterations, "\n"))) << maps;
  EXPECT_THAT(maps, Not(HasSubstr("scale"))) << maps;

  maps = RunProbe(Probe("ol_accesses"), app);
  // vec_add reads a[i] and b[i] and writes c[i]; scale reads and writes x[i].
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@k[write, global]: ", n * (iterations + 1), "\n"
                                           "@k[read, global]: ", n * (2 * iterations + 1), "\n")))
      << maps;
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@sz:\n[4, 8)          ", n * (3 * iterations + 2))))
      << maps;

  maps = RunProbe(Probe("ol_threads"), app);
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@blocks[256, ", n / 256, "]: ", n * iterations)))
      << maps;
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@mx[vec_add]: ", n - 1, "\n"))) << maps;
  EXPECT_THAT(maps, HasSubstr("@mn: 0\n")) << maps;
  EXPECT_THAT(maps, HasSubstr("@t: 127\n")) << maps;  // the mean of 0..255
}

// Address-reading probes give the same maps inlined (the default: their
// partial reads of mem_info folded at each site) as called at every access
// (CUPROBE_INLINE=0) and as placed after their access
// (CUPROBE_MEM_PROBE_AFTER=1): addr_hist's page histogram and the one-liner
// `@a = hist(addr)`, on vec_add and the tiled matmul.
TEST_F(Run, AddressHistogramsAreTheSameInlinedOrCalled) {
  const std::vector<std::vector<std::string>> apps = {
      {SamplePath("vec_add"), "1048576", "3"}, {SamplePath("matmul"), "512", "2"}};
  for (const std::vector<std::string>& app : apps) {
    for (const char* probe : {"addr_hist", "ol_addr_hist"}) {
      SCOPED_TRACE(absl::StrCat(app[0], " ", probe));
      const std::string inlined = RunProbe(Probe(probe), app);
      const std::string called = RunProbe(Probe(probe), app, {}, {{"CUPROBE_INLINE", "0"}});
      const std::string after =
          RunProbe(Probe(probe), app, {}, {{"CUPROBE_MEM_PROBE_AFTER", "1"}});
      EXPECT_FALSE(inlined.empty());
      EXPECT_EQ(inlined, called);
      EXPECT_EQ(inlined, after) << "a probe after its access sees the same address";
    }
  }
  // vec_add's accesses, all in the histogram: 3 per thread per vec_add
  // launch, 2 in scale.
  const std::string maps = RunProbe(Probe("ol_addr_hist"), apps[0]);
  uint64_t total = 0;
  std::smatch m;
  std::string rest = maps;
  while (std::regex_search(rest, m, std::regex(R"([\)\]] +(\d+) \|)"))) {
    total += std::stoull(m[1]);
    rest = m.suffix();
  }
  EXPECT_EQ(total, uint64_t{1048576} * (3 * 3 + 2)) << maps;
}

// tests/gpu/probes/uniform_adds: the compiler's warp-uniform adds (the
// first lane adds for its warp) give exactly what a per-lane add would,
// next to keys that differ per lane (grouped inline by counter, or by the
// helper where their deltas differ), a uniform key
// out of range, and values below, inside and past a linear histogram; HASH
// adds with keys of one, two and three words, uniform and per lane, and
// refused ones counted as the helpers count them.
TEST_F(Run, UniformAddsAreExact) {
  const int n = 1 << 16, launches = 2, threads = 256, blocks = n / threads;
  const std::string maps =
      RunProbe(Probe("uniform_adds"), {SamplePath("vec_add"), std::to_string(n),
                                       std::to_string(launches)});
  const uint64_t per_warp = uint64_t{32} * blocks * launches;
  for (int w = 0; w < 8; ++w) {
    const uint64_t want = w == 7 ? per_warp - 32 * launches : per_warp;  // block 0's is refused
    EXPECT_THAT(maps, HasSubstr(absl::StrCat("@warp_slots[", w, "]: ", want, "\n"))) << maps;
  }
  for (int slot = 0; slot < 5; ++slot) {
    uint64_t lanes = 0;
    for (int t = 0; t < threads; ++t) lanes += t % 5 == slot;
    EXPECT_THAT(maps, HasSubstr(absl::StrCat("@lane_slots[", slot, "]: ",
                                             2 * lanes * blocks * launches, "\n")))
        << maps;
    uint64_t voted = 0, lane_delta = 0;
    for (int b = 0; b < blocks; ++b) voted += (b % 3 + 1) * lanes * launches;
    for (int t = 0; t < threads; ++t) {
      if (t % 5 == slot) lane_delta += uint64_t((t & 3) + 1) * blocks * launches;
    }
    EXPECT_THAT(maps, HasSubstr(absl::StrCat("@voted_slots[", slot, "]: ", voted, "\n"))) << maps;
    EXPECT_THAT(maps, HasSubstr(absl::StrCat("@lane_delta_slots[", slot, "]: ", lane_delta, "\n")))
        << maps;
  }
  // Linear buckets: min 40, step 16, 10 buckets (0: below 40; 9: 168 and up).
  auto linear = [](int64_t v) -> size_t {
    if (v < 40) return 0;
    return std::min<size_t>(9, 1 + static_cast<size_t>((v - 40) / 16));
  };
  std::vector<uint64_t> warp_linear(10), lane_linear(10), warp_log2(12), bucket_log2(16);
  for (int t = 0; t < threads; ++t) {
    const int w = t / 32;
    warp_linear[linear(w * 40 + 4)] += uint64_t{blocks} * launches;
    lane_linear[linear(t)] += uint64_t{blocks} * launches;
    warp_log2[w == 0 ? 0 : 64 - __builtin_clzll(static_cast<uint64_t>(w))] +=
        uint64_t{blocks} * launches;
    // 2^(w + 5) + lane: bucket w + 6 for every lane of warp w.
    bucket_log2[w + 6] += uint64_t{blocks} * launches;
  }
  EXPECT_THAT(maps, HasSubstr("@warp_linear:\n" + FormatLinearHistogram(warp_linear,
                                                                        40 | uint64_t{16} << 32)))
      << maps;
  EXPECT_THAT(maps, HasSubstr("@lane_linear:\n" + FormatLinearHistogram(lane_linear,
                                                                        40 | uint64_t{16} << 32)))
      << maps;
  // Step 12 (a division): min 10, 12 buckets (11: 130 and up).
  std::vector<uint64_t> divided(12);
  for (int t = 0; t < threads; ++t) {
    divided[t < 10 ? 0 : std::min(11, 1 + (t - 10) / 12)] += uint64_t{blocks} * launches;
  }
  EXPECT_THAT(maps, HasSubstr("@divided_linear:\n" +
                              FormatLinearHistogram(divided, 10 | uint64_t{12} << 32)))
      << maps;
  // Lanes 30 and 31 refused, the others' adds all there.
  for (int k = 0; k < 30; ++k) {
    EXPECT_THAT(maps, HasSubstr(absl::StrCat("@some_refused[", k, "]: ",
                                             uint64_t{8} * blocks * launches, "\n")))
        << maps;
  }
  EXPECT_THAT(maps, HasSubstr("@warp_log2:\n" + FormatLog2Histogram(warp_log2))) << maps;
  EXPECT_THAT(maps, HasSubstr("@bucket_log2:\n" + FormatLog2Histogram(bucket_log2))) << maps;

  // HASH: a word key and a 16-byte key uniform across each warp, keys that
  // differ per lane, and maps with room for 4 of the 8 warps' keys.
  const uint64_t per_block = uint64_t{blocks} * launches;
  for (int w = 0; w < 8; ++w) {
    EXPECT_THAT(maps, HasSubstr(absl::StrCat("@warp_hash[", w, "]: ", 3 * per_warp, "\n")))
        << maps;
    EXPECT_THAT(maps, HasSubstr(absl::StrCat("@wide_hash[{warp: ", w, ", tag: 7, lane_bit: 0}]: ",
                                             2 * per_warp, "\n")))
        << maps;
    for (int bit = 0; bit < 2; ++bit) {
      EXPECT_THAT(maps, HasSubstr(absl::StrCat("@wide_lane_hash[{warp: ", w,
                                               ", tag: 7, lane_bit: ", bit, "}]: ", 16 * per_block,
                                               "\n")))
          << maps;
    }
  }
  for (int k = 0; k < 3; ++k) {
    uint64_t lanes = 0;
    for (int t = 0; t < threads; ++t) lanes += t % 3 == k;
    EXPECT_THAT(maps, HasSubstr(absl::StrCat("@lane_hash[", k, "]: ", lanes * per_block, "\n")));
  }
  // Exactly 4 keys get in, each with every add of its warps. The one- and
  // two-word helpers count one refusal per warp (its lanes share one
  // search), the one for keys by address one per lane.
  auto map_block = [&](const std::string& name) {
    const size_t at = maps.find("@" + name + "[");
    return at == std::string::npos ? std::string() : maps.substr(at, maps.find("\n\n", at) - at);
  };
  for (const auto& [name, refused] :
       {std::pair<std::string, uint64_t>{"full_hash", 4 * per_block},
        {"full_wide_hash", 4 * per_block}, {"full_big_hash", 4 * per_warp}}) {
    const std::string block = map_block(name);
    uint64_t keys = 0, sum = 0;
    std::smatch m;
    for (std::string rest = block; std::regex_search(rest, m, std::regex(R"(\]: (\d+)\n)"));
         rest = m.suffix()) {
      ++keys;
      sum += std::stoull(m[1]);
    }
    EXPECT_EQ(keys, 4u) << block;
    EXPECT_EQ(sum, 4 * per_warp) << block;
    EXPECT_THAT(block, HasSubstr(absl::StrCat("(", refused, " updates refused"))) << block;
  }
}

// samples/mem_trace/addr_trace: every global access is in an event, none
// lost below the ring's capacity: vec_add's 3 accesses per thread per
// launch (two loads, a store) and scale's 2 (a load, a store), each at its
// address, with a warp id that holds 32 lanes. vec_add's and scale's accesses
// are coalesced: one event per warp and access. bench/addr_trace_lanes (an
// event per lane) gives the same accesses.
TEST_F(Run, AddressTraceHasEveryAccess) {
  const int n = 1 << 16, launches = 3;
  const int64_t loads = int64_t{n} * (2 * launches + 1), stores = int64_t{n} * (launches + 1);
  for (const char* probe : {"addr_trace", "addr_trace_lanes"}) {
    SCOPED_TRACE(probe);
    const bool lanes = std::string(probe) == "addr_trace_lanes";
    std::string maps =
        RunProbe(Probe(probe), {SamplePath("vec_add"), std::to_string(n), std::to_string(launches)},
                 {"--events", "json", "--quiet"});
    // Either layout, expanded into one access per lane.
    ProcessResult r = RunProcess(
        {"python3", "-c",
         "import json,sys,collections,struct\n"
         "kinds=collections.Counter(); at=collections.Counter(); bad=0; events=0\n"
         "lanes=collections.defaultdict(set)\n"
         "for l in open(sys.argv[1]):\n"
         "  e=json.loads(l)\n"
         "  if e.get('map')!='accesses': continue\n"
         "  events+=1; b=bytes.fromhex(e['hex'])\n"
         "  if sys.argv[2]=='1':\n"
         "    a,k,w,sm,size,kind,lane=struct.unpack('<QIIHBBB3x',b); group=[(lane,a)]\n"
         "  else:\n"
         "    base,k,w,mask,sm,size,kind=struct.unpack('<QIIIHBB',b)\n"
         "    group=[(i,base+i*size) for i in range(32) if mask>>i&1]\n"
         "    bad+=not group\n"
         "  for lane,a in group:\n"
         "    kinds[kind]+=1; at[(k,kind,a)]+=1; lanes[(k,w)].add(lane)\n"
         "    bad+=size!=4 or a==0 or lane>31\n"
         "times=collections.Counter(at.values())\n"
         "print(sorted(kinds.items()), sorted(times.items()), bad,"
         " max(len(v) for v in lanes.values()), events)\n",
         prefix_ + ".events", lanes ? "1" : "0"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const int64_t events = lanes ? loads + stores : (loads + stores) / 32;
    // Each address of vec_add's 2n loads and n stores once per launch, of
    // scale's n and n once.
    EXPECT_EQ(r.out, absl::StrCat("[(", CUPROBE_ACCESS_LOAD, ", ", loads, "), (",
                                  CUPROBE_ACCESS_STORE, ", ", stores, ")] [(1, ", 2 * n, "), (",
                                  launches, ", ", 3 * n, ")] 0 32 ", events, "\n"))
        << maps;
    EXPECT_THAT(maps, HasSubstr(absl::StrCat(events, " records delivered, 0 dropped"))) << maps;
  }
}

// Live prints name kernels as the final one does: the names arrive with the
// trace's records while the program runs.
TEST_F(Run, OnelinerLiveMapsNameTheirKernels) {
  const std::vector<std::string> app = {SamplePath("vec_add"), "65536", "30", "20"};
  (void)RunProbe(Probe("ol_exits"), app, {"--interval", "100"});
  const size_t live = last_.err.find("--- maps at ");
  ASSERT_NE(live, std::string::npos) << last_.err;
  const std::string live_part = last_.err.substr(live, last_.err.find("--- final maps") - live);
  EXPECT_THAT(live_part, HasSubstr("@exits[vec_add]: ")) << live_part;
  EXPECT_THAT(live_part, Not(HasSubstr("kernel#"))) << live_part;
}

TEST_F(Run, OnelinerPrintfPrintsOneLinePerLaunch) {
  const int64_t n = 1 << 20;
  std::string maps = RunProbe(Probe("ol_printf"), {SamplePath("vec_add"), std::to_string(n), "4"});
  EXPECT_THAT(maps, HasSubstr("@g: 5\n")) << maps;  // 4 vec_add launches and scale
  const std::string events = ReadWholeFile(prefix_ + ".events");
  size_t lines = 0;
  for (size_t at = 0; (at = events.find(absl::StrCat("launch of ", n, " threads\n"), at)) !=
                      std::string::npos;
       ++at) {
    ++lines;
  }
  EXPECT_EQ(lines, 5u) << events;
}

}  // namespace
}  // namespace cuprobe::testing
