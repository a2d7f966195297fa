// GPU tier: process and context events the hook must survive
// (tests/gpu/testdata/lifecycle.cu): fork() with the child exiting through
// exit(), exit() called from a second thread while kernels run,
// cudaDeviceReset in the middle of a run, two contexts made with
// cuCtxCreate, a child that execs a CUDA program, a program that
// subscribes to CUPTI itself (a profiler of its own) before its first CUDA
// call, and code loaded before its context is current. Each mode runs natively, under `cuprobe trace` and under
// `cuprobe run` with a counting probe: the program's output and exit code
// must be the native ones, with no hang, and the counts exact where the
// design says they are. Skips without a GPU.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gpu/map_lines.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kN = 10;
constexpr uint64_t kThreads = 4096;  // lifecycle.cu's grid

std::string Cuprobe() { return BuildDir() + "/bin/cuprobe"; }

class Lifecycle : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine";
    char tmpl[] = "/tmp/cuprobe-lifecycle-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    app_ = {SamplePath("lifecycle"), GetParam(), std::to_string(kN)};
    native_ = RunProcess(app_, {}, 60);
    ASSERT_FALSE(native_.timed_out);
  }
  // `cuprobe <args> -- app`; the same output and exit code as natively.
  // `env`: more settings for cuprobe and the program.
  ProcessResult Under(std::vector<std::string> args,
                      std::vector<std::pair<std::string, std::string>> env = {}) {
    args.insert(args.begin(), Cuprobe());
    args.push_back("--");
    args.insert(args.end(), app_.begin(), app_.end());
    env.emplace_back("CUPROBE_LOG", "info");
    ProcessResult r = RunProcess(args, env, 120);
    EXPECT_FALSE(r.timed_out) << "hung: " << r.err;
    EXPECT_EQ(r.exit_code, native_.exit_code) << r.err;
    EXPECT_EQ(r.term_signal, native_.term_signal) << r.err;
    EXPECT_EQ(r.out, native_.out) << r.err;
    return r;
  }
  std::string dir_;
  std::vector<std::string> app_;
  ProcessResult native_;
};

// Launches of bump in the kernel summary ("Instances" column), -1 if absent.
int64_t BumpInstances(const std::string& report) {
  std::smatch m;
  std::regex row(R"(\n\s+[\d.]+\s+\d+\s+(\d+)\s[^\n]*bump\()");
  if (!std::regex_search(report, m, row)) return -1;
  return std::stoll(m[1]);
}

uint64_t ExpectedLaunches(const std::string& mode) {
  if (mode == "contexts") return 4 * kN;   // A, B, A, then B after A is destroyed
  if (mode == "fork_exec") return 3 * kN;  // 2N + the child's N
  return 2 * kN;
}

TEST_P(Lifecycle, TraceKeepsTheProgramsBehaviourAndCounts) {
  const std::string mode = GetParam();
  ProcessResult r = Under({"trace", "-o", dir_ + "/t"});
  if (mode == "exit_thread") {
    EXPECT_EQ(native_.exit_code, 7) << native_.err;
    return;  // the launch loop is cut short at an arbitrary point
  }
  EXPECT_EQ(native_.exit_code, 0) << native_.err;
  if (mode == "cupti_owner") {
    // The program's own subscriber came first: the hook steps aside, names
    // it, and traces nothing; the program's subscription stands.
    EXPECT_THAT(native_.out, HasSubstr("subscribed=yes"));
    EXPECT_THAT(r.err, HasSubstr("lifecycle-owner")) << r.err;
    EXPECT_EQ(BumpInstances(r.err), -1) << r.err;
    return;
  }
  EXPECT_EQ(BumpInstances(r.err), static_cast<int64_t>(ExpectedLaunches(mode))) << r.err;
}

TEST_P(Lifecycle, ProbesNeverBreakTheProgram) {
  const std::string mode = GetParam();
  const std::string prefix = dir_ + "/r";
  ProcessResult r = Under({"run", "-p", BuildDir() + "/probes/count_entries.cpb", "-o", prefix});
  const std::string maps = ReadWholeFile(prefix + ".maps.txt");
  std::smatch m;
  const bool counted = std::regex_search(maps, m, std::regex(R"(@entries\[\d+\]: (\d+))"));
  if (mode == "fork") {
    // The child never ran CUDA; the parent's 2N launches all counted.
    ASSERT_TRUE(counted) << maps;
    EXPECT_EQ(std::stoull(m[1]), 2 * kN * kThreads) << maps;
  } else if (mode == "fork_exec") {
    // The parent holds the maps while its child (a second CUDA process of
    // the session) runs: the child runs uninstrumented, traced.
    ASSERT_TRUE(counted) << maps;
    EXPECT_EQ(std::stoull(m[1]), 2 * kN * kThreads) << maps << r.err;
  } else if (mode == "cupti_owner") {
    EXPECT_FALSE(counted) << maps;
    EXPECT_THAT(r.err, HasSubstr("lifecycle-owner")) << r.err;
  } else if (mode == "contexts") {
    // The maps (virtual-memory allocations, no rings) are shared by both
    // contexts: every launch counts, A's, B's and A's again. A is destroyed
    // while B still has instrumented modules: the maps move to B and B's
    // last N launches count into the same memory, which outlived A.
    ASSERT_TRUE(counted) << maps;
    EXPECT_EQ(std::stoull(m[1]), 4 * kN * kThreads) << maps << r.err;
    EXPECT_THAT(r.err, HasSubstr("another CUDA context shares the probes' maps")) << r.err;
    EXPECT_THAT(r.err, HasSubstr("the maps go on in another context")) << r.err;
    // A probe with a ring buffer: its ring is device memory too (mirrored
    // into the segment), so both contexts write events into it, one per
    // block of every launch, across A's destruction.
    ProcessResult ring =
        Under({"run", "-p", BuildDir() + "/probes/kernel_trace.cpb", "-o", dir_ + "/k"});
    EXPECT_THAT(ring.err, HasSubstr("another CUDA context shares the probes' maps")) << ring.err;
    EXPECT_THAT(ring.err, HasSubstr("640 records delivered, 0 dropped")) << ring.err;
    // With the ring in host memory (registered in A) B cannot share it: B
    // runs uninstrumented, with one message, and the program is unchanged.
    ProcessResult host_ring = Under({"run", "-p", BuildDir() + "/probes/kernel_trace.cpb", "-o",
                                     dir_ + "/h"},
                                    {{"CUPROBE_RING_DATA", "host"}});
    EXPECT_THAT(host_ring.err,
                HasSubstr("ring buffers (host memory registered in that context"))
        << host_ring.err;
    // A's 2N launches of 16 blocks, one event each; B's launches none.
    EXPECT_THAT(host_ring.err, HasSubstr("320 records delivered, 0 dropped")) << host_ring.err;
  } else if (mode == "reset") {
    // The maps' context is destroyed after N launches: their last snapshot
    // is published; the maps are made again in the new context from it, so
    // the N launches after the reset add to the same counts.
    ASSERT_TRUE(counted) << maps;
    EXPECT_EQ(std::stoull(m[1]), 2 * kN * kThreads) << maps << r.err;
    EXPECT_THAT(r.err, HasSubstr("continue from their last published snapshot")) << r.err;
  }
}

// A program's code loaded before any context is current on the loading
// thread (tests/gpu/testdata/lifecycle.cu): the runtime's launch-first
// program, a driver-API library loaded before the context is made, and one
// loaded on a thread with no context while the context lives on another.
// Each gives the exact counts of its reference order (cudaFree(0) first;
// the context made first), and no warning that probes were lost.
TEST(FirstContext, ProbesReachKernelsLoadedBeforeTheirContext) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine";
  char tmpl[] = "/tmp/cuprobe-first-context-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto entries = [&](const std::string& mode) -> uint64_t {
    const std::vector<std::string> app = {SamplePath("lifecycle"), mode, std::to_string(kN)};
    ProcessResult native = RunProcess(app, {}, 60);
    EXPECT_EQ(native.exit_code, 0) << mode << ": " << native.err;
    const std::string prefix = dir + "/" + mode;
    std::vector<std::string> args = {Cuprobe(), "run", "-p",
                                     BuildDir() + "/probes/count_entries.cpb", "-o", prefix, "--"};
    args.insert(args.end(), app.begin(), app.end());
    ProcessResult r = RunProcess(args, {{"CUPROBE_LOG", "info"}}, 120);
    EXPECT_FALSE(r.timed_out) << mode << " hung: " << r.err;
    EXPECT_EQ(r.exit_code, 0) << mode << ": " << r.err;
    EXPECT_EQ(r.out, native.out) << mode << ": " << r.err;
    for (const char* warning : {"cannot reach their maps", "cannot be kept", "not instrumented",
                                "no kernel was instrumented"}) {
      EXPECT_THAT(r.err, Not(HasSubstr(warning))) << mode << ": " << r.err;
    }
    return SumOfEntries(ReadWholeFile(prefix + ".maps.txt"));
  };
  // The launch with n = 0, then N: every thread of each enters.
  EXPECT_EQ(entries("free_first"), (kN + 1) * kThreads);
  EXPECT_EQ(entries("launch_first"), (kN + 1) * kThreads);
  EXPECT_EQ(entries("context_first"), kN * kThreads);
  EXPECT_EQ(entries("library_first"), kN * kThreads);
  EXPECT_EQ(entries("library_thread"), kN * kThreads);
}

// 16 threads launching on 16 streams for a minute (CUPROBE_STRESS_SECONDS),
// traced and with a counting probe in every kernel: the trace counts every
// launch the program made, no record is dropped, and the probe counts every
// thread of every kernel. The load (batches of 64 launches per thread, 5 ms
// apart: about 200,000 launches and 400,000 records a second) is below what
// the CLI drains (about 1.2 million records a second measured on the H200;
// 16 threads launching flat out make 585,000 launches a second, and the ring
// then drops what it cannot hold, counted).
TEST(Stress, SixteenThreadsForAMinuteTracedAndProbedExactly) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine";
  int seconds = 60;
  if (const char* s = std::getenv("CUPROBE_STRESS_SECONDS")) seconds = std::atoi(s);
  char tmpl[] = "/tmp/cuprobe-stress-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string prefix = std::string(tmpl) + "/s";
  ProcessResult r = RunProcess(
      {Cuprobe(), "run", "-p", BuildDir() + "/probes/count_entries.cpb", "--quiet", "-o", prefix,
       "--format", "table,json", "--", SamplePath("multistream"), "16", "64",
       std::to_string(seconds), "5"},
      {}, seconds + 180);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(work=(\d+) tail=16)"))) << r.out;
  const uint64_t work = std::stoull(m[1]);
  EXPECT_GT(work, 16u * 64u);
  const std::string json = ReadWholeFile(prefix + ".json");
  auto instances = [&](const std::string& kernel) -> uint64_t {
    std::smatch k;
    std::regex row("\"name\":\"" + kernel +
                   R"re(\([^"]*\)","raw_name":"[^"]*","time_percent":[\d.]+,"instances":(\d+))re");
    return std::regex_search(json, k, row) ? std::stoull(k[1]) : 0;
  };
  EXPECT_EQ(instances("work"), work) << "every launch traced";
  EXPECT_EQ(instances("tail"), 16u);
  EXPECT_THAT(json, HasSubstr("\"dropped_records\":0,")) << "no record lost below capacity";
  const std::string maps = ReadWholeFile(prefix + ".maps.txt");
  EXPECT_EQ(SumOfEntries(maps), work * 1024 + 16) << maps;
  std::printf("stress: %d s, %llu work launches traced and probed exactly\n", seconds,
              static_cast<unsigned long long>(work));
}

// Consecutive short instrumented runs, each 8 threads launching on 8
// streams under `cuprobe run` with a counting probe and full tracing: no
// crash, no hang, and every run's counts exact. CUPROBE_PROBE_STRESS_RUNS
// sets how many (default 20; the reliability figure is 1,000).
TEST(Stress, ShortInstrumentedRunsEightThreadsEightStreams) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine";
  int runs = 20;
  if (const char* s = std::getenv("CUPROBE_PROBE_STRESS_RUNS")) runs = std::atoi(s);
  char tmpl[] = "/tmp/cuprobe-probe-stress-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string prefix = std::string(tmpl) + "/s";
  // CUPROBE_PROBE_STRESS_SECONDS bounds the time (the runs done are reported).
  int limit_s = 0;
  if (const char* s = std::getenv("CUPROBE_PROBE_STRESS_SECONDS")) limit_s = std::atoi(s);
  int failures = 0, hangs = 0, done = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i, ++done) {
    if (limit_s > 0 && std::chrono::steady_clock::now() - start > std::chrono::seconds(limit_s)) {
      break;
    }
    ProcessResult r = RunProcess({Cuprobe(), "run", "-p", BuildDir() + "/probes/count_entries.cpb",
                                  "--quiet", "-o", prefix, "--format", "json", "--",
                                  SamplePath("multistream"), "8", "20"},
                                 {}, 60);
    bool ok = !r.timed_out && r.exit_code == 0 &&
              r.out.find("work=160 tail=8") != std::string::npos;
    uint64_t entries = 0;
    if (ok) {
      entries = SumOfEntries(ReadWholeFile(prefix + ".maps.txt"));
      ok = entries == 160 * 1024 + 8;
    }
    if (!ok) {
      ++failures;
      hangs += r.timed_out ? 1 : 0;
      ADD_FAILURE() << "run " << i << ": rc=" << r.exit_code << " signal=" << r.term_signal
                    << " timed_out=" << r.timed_out << " entries=" << entries << "\n" << r.err;
      if (failures > 3) break;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("probe stress: %d of %d runs in %.0f s, %d failures, %d hangs\n", done, runs,
              seconds, failures, hangs);
  EXPECT_EQ(failures, 0) << "of " << done << " runs";
}

INSTANTIATE_TEST_SUITE_P(Modes, Lifecycle,
                         ::testing::Values("fork", "exit_thread", "reset", "contexts", "fork_exec",
                                           "cupti_owner"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);  // Modes/Lifecycle.X/fork_exec
                         });

}  // namespace
}  // namespace cuprobe::testing
