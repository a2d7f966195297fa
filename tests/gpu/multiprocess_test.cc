// Several processes under one cuprobe session, and several sessions on one
// GPU (issue 10's single-GPU part): a launcher's children share the trace
// (ids qualified by process, one GPU track group per process), the probes'
// maps belong to one process at a time and continue from one process to
// the next, and two cuprobe sessions side by side each count exactly.
#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <regex>
#include <set>
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

std::string Cuprobe() { return BuildDir() + "/bin/cuprobe"; }
std::string CountProbe() { return BuildDir() + "/probes/count_entries.cpb"; }

// Every "work=W tail=T" line multistream printed: (W, T) per process.
std::vector<std::pair<uint64_t, uint64_t>> WorkLines(const std::string& out) {
  std::vector<std::pair<uint64_t, uint64_t>> lines;
  std::regex line(R"(work=(\d+) tail=(\d+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it) {
    lines.push_back({std::stoull((*it)[1].str()), std::stoull((*it)[2].str())});
  }
  return lines;
}

// Instances of `kernel` in a JSON report (0 if absent).
uint64_t Instances(const std::string& json, const std::string& kernel) {
  std::smatch k;
  std::regex row("\"name\":\"" + kernel +
                 R"re(\([^"]*\)","raw_name":"[^"]*","time_percent":[\d.]+,"instances":(\d+))re");
  return std::regex_search(json, k, row) ? std::stoull(k[1]) : 0;
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

class MultiProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine";
    char tmpl[] = "/tmp/cuprobe-multiprocess-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  // multistream with `args`, as a shell word list.
  std::string Multistream(const std::string& args) const {
    return SamplePath("multistream") + " " + args;
  }
  std::string dir_;
};

// Two programs started by one shell under one `cuprobe trace`, running at the
// same time on the GPU: every launch of both is in the summary, the report
// counts two processes, and the timeline has a GPU track group per process
// with one flow arrow per kernel.
TEST_F(MultiProcess, TwoProcessesShareOneTraceSession) {
  const std::string app = Multistream("4 8 2 5");
  ProcessResult r = RunProcess({Cuprobe(), "trace", "-o", dir_ + "/t", "--format",
                                "table,json,chrome", "--", "sh", "-c",
                                app + " & " + app + "; wait"},
                               {}, 240);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = WorkLines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  const std::string json = ReadWholeFile(dir_ + "/t.json");
  EXPECT_EQ(Instances(json, "work"), lines[0].first + lines[1].first) << json.substr(0, 2000);
  EXPECT_EQ(Instances(json, "tail"), 8u);
  EXPECT_THAT(json, HasSubstr("\"processes\":2")) << json.substr(0, 2000);
  EXPECT_THAT(json, HasSubstr("\"dropped_records\":0")) << json.substr(0, 2000);

  const std::string chrome = ReadWholeFile(dir_ + "/t.trace.json");
  std::set<std::string> gpu_groups;
  std::regex group(R"re("name":"GPU 0 \([^"]*pid (\d+)\)")re");
  for (auto it = std::sregex_iterator(chrome.begin(), chrome.end(), group);
       it != std::sregex_iterator(); ++it) {
    gpu_groups.insert((*it)[1].str());
  }
  EXPECT_EQ(gpu_groups.size(), 2u) << "one GPU track group per process";
  const uint64_t kernels = lines[0].first + lines[1].first + 8;
  EXPECT_EQ(Count(chrome, "\"ph\":\"f\""), kernels) << "one arrow per launched kernel";
  EXPECT_EQ(Count(chrome, "\"ph\":\"s\""), kernels);
}

// Processes one after another under one `cuprobe run`: the second makes the
// maps again from the first's last snapshot, so the counts are the sum.
TEST_F(MultiProcess, SequentialProcessesAddUpInOneProbeSession) {
  const std::string app = Multistream("4 50");
  ProcessResult r = RunProcess({Cuprobe(), "run", "-p", CountProbe(), "--quiet", "-o",
                                dir_ + "/r", "--format", "json", "--", "sh", "-c",
                                app + " && " + app},
                               {{"CUPROBE_LOG", "info"}}, 240);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = WorkLines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0].first, 200u);
  EXPECT_EQ(SumOfEntries(ReadWholeFile(dir_ + "/r.maps.txt")), 2 * (200 * 1024 + 4)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("continue from their last published snapshot")) << r.err;
  EXPECT_EQ(Instances(ReadWholeFile(dir_ + "/r.json"), "work"), 400u);
}

// Two programs at the same time under one `cuprobe run`: the first to make
// the maps holds them; the other runs uninstrumented with one message naming
// the holder. Both programs' results are right, and both are traced.
TEST_F(MultiProcess, ConcurrentProcessesOneHoldsTheProbes) {
  const std::string app = Multistream("4 8 3 5");
  ProcessResult r = RunProcess({Cuprobe(), "run", "-p", CountProbe(), "--quiet", "-o",
                                dir_ + "/r", "--format", "json", "--", "sh", "-c",
                                app + " & " + app + "; wait"},
                               {}, 240);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = WorkLines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  const uint64_t entries = SumOfEntries(ReadWholeFile(dir_ + "/r.maps.txt"));
  const uint64_t a = lines[0].first * 1024 + 4, b = lines[1].first * 1024 + 4;
  EXPECT_TRUE(entries == a || entries == b)
      << "entries " << entries << ", one process's count is " << a << " or " << b;
  EXPECT_THAT(r.err, HasSubstr("held by pid")) << r.err;
  EXPECT_EQ(Instances(ReadWholeFile(dir_ + "/r.json"), "work"), lines[0].first + lines[1].first);
}

// Two cuprobe sessions side by side on one GPU: each counts its own program
// exactly.
TEST_F(MultiProcess, TwoSessionsOnOneGpuEachExact) {
  std::string cmd;
  for (const char* name : {"a", "b"}) {
    absl::StrAppend(&cmd, Cuprobe(), " run -p ", CountProbe(), " --quiet -o ", dir_, "/", name,
                    " -- ", Multistream("4 8 3 5"), " > ", dir_, "/", name, ".out 2> ", dir_,
                    "/", name, ".err & ");
  }
  cmd += "wait";
  ProcessResult r = RunProcess({"sh", "-c", cmd}, {}, 240);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name : {"a", "b"}) {
    const std::string out = ReadWholeFile(dir_ + "/" + name + ".out");
    auto lines = WorkLines(out);
    ASSERT_EQ(lines.size(), 1u) << out << ReadWholeFile(dir_ + "/" + name + ".err");
    EXPECT_EQ(SumOfEntries(ReadWholeFile(dir_ + "/" + name + ".maps.txt")),
              lines[0].first * 1024 + 4)
        << name;
  }
}

}  // namespace
}  // namespace cuprobe::testing
