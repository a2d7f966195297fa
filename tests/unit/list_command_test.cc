// File: tests/unit/list_command_test.cc
//
// `cuprobe list` on the CPU: its arguments, its patterns, the lines it
// prints, each kernel's backend on the nvcc-built image fixtures of
// tests/ptx_rewriter and the samples, and the binary end to end (a file, a
// pid without a session, a program that never loads CUDA). The hook's side
// (list requests, CUPROBE_LIST) is in late_attach_test.cc; a real program's
// list on the GPU in tests/gpu/run_test.cc.
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loader/args.h"
#include "loader/list_command.h"
#include "probe/trace_records.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kFixtures = CUPROBE_IMAGE_FIXTURE_DIR;

absl::StatusOr<ListOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), {"cuprobe", "list"});
  absl::StatusOr<CliArgs> parsed = ParseArgs(args);
  if (!parsed.ok()) return parsed.status();
  EXPECT_EQ(parsed->command, Command::kList);
  return parsed->list;
}

TEST(ListArgs, OneOperandIsTheTargetTwoArePatternAndTarget) {
  absl::StatusOr<ListOptions> o = Parse({"app"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->target, "app");
  EXPECT_EQ(o->pattern, "");
  o = Parse({"-v", "--sm", "80", "mem:*gemm*", "4242"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->pattern, "mem:*gemm*");
  EXPECT_EQ(o->target, "4242");
  EXPECT_TRUE(o->verbose);
  EXPECT_EQ(o->sm, 80u);
  // Before `--`, the one operand is the pattern.
  o = Parse({"exit:*", "--", "python3", "-v", "train.py"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->pattern, "exit:*");
  EXPECT_TRUE(o->target.empty());
  EXPECT_THAT(o->command, ::testing::ElementsAre("python3", "-v", "train.py"));
}

TEST(ListArgs, MistakesSayWhatIsExpected) {
  EXPECT_THAT(Parse({}).status().message(), HasSubstr("list needs a file, a pid or a program"));
  EXPECT_THAT(Parse({"a", "b", "c"}).status().message(), HasSubstr("got 'c' too"));
  EXPECT_THAT(Parse({"a", "b", "--", "x"}).status().message(), HasSubstr("got 'b' too"));
  EXPECT_THAT(Parse({"--"}).status().message(), HasSubstr("no program after '--'"));
  EXPECT_THAT(Parse({"--pid", "3"}).status().message(), HasSubstr("unknown option '--pid'"));
  EXPECT_THAT(Parse({"--sm", "x", "f"}).status().message(), HasSubstr("--sm expects a number"));
  absl::StatusOr<CliArgs> help = ParseArgs({"cuprobe", "list", "--help"});
  ASSERT_TRUE(help.ok());
  EXPECT_EQ(help->command, Command::kHelp);
  EXPECT_EQ(help->help_topic, "list");
  EXPECT_THAT(UsageText("list"), HasSubstr("cuprobe list [options] [PATTERN] -- program"));
  EXPECT_THAT(UsageText(""), HasSubstr("  list "));
}

TEST(ListPattern, PointsAndGlobs) {
  ListPattern p = ParseListPattern("");
  EXPECT_TRUE(p.entry && p.exit && p.mem);
  EXPECT_EQ(p.glob, "*");
  p = ParseListPattern("mem:*gemm*");
  EXPECT_TRUE(p.mem && !p.entry && !p.exit);
  EXPECT_EQ(p.glob, "*gemm*");
  p = ParseListPattern("*:vec*");
  EXPECT_TRUE(p.entry && p.exit && p.mem);
  EXPECT_EQ(p.glob, "vec*");
  p = ParseListPattern("exit:");
  EXPECT_TRUE(p.exit && !p.entry);
  EXPECT_EQ(p.glob, "*");
  // A C++ scope is part of the glob, not a point.
  p = ParseListPattern("ns::scale*");
  EXPECT_TRUE(p.entry && p.exit && p.mem);
  EXPECT_EQ(p.glob, "ns::scale*");
}

TEST(ListFormat, OneLinePerPointSortedAndAligned) {
  std::vector<ListedKernel> kernels = {
      {"_ZN2ns5scaleIfEEvPT_S1_", kCatalogBackendPatch, std::nullopt},
      {"add_one", kCatalogBackendPtx, std::nullopt},
  };
  ListText t = FormatList(kernels, ParseListPattern(""), /*verbose=*/false);
  EXPECT_EQ(t.lines,
            "entry:add_one           ptx\n"
            "exit:add_one            ptx\n"
            "mem:add_one             ptx\n"
            "entry:ns::scale<float>  patch\n"
            "exit:ns::scale<float>   patch\n"
            "mem:ns::scale<float>    patch\n");
  EXPECT_EQ(t.summary, "6 attach point(s) of 2 kernel(s): 1 ptx, 1 patch (SASS only)\n");

  t = FormatList(kernels, ParseListPattern("exit:ns::*"), /*verbose=*/true);
  EXPECT_EQ(t.lines, "exit:ns::scale<float>   patch  _ZN2ns5scaleIfEEvPT_S1_\n");
  // The mangled name matches too, as in probe sections.
  t = FormatList(kernels, ParseListPattern("entry:_ZN2ns*"), false);
  EXPECT_EQ(t.lines, "entry:ns::scale<float>  patch\n");
  t = FormatList(kernels, ParseListPattern("nothing*"), false);
  EXPECT_EQ(t.lines, "");
  EXPECT_EQ(t.summary, "0 attach point(s) of 0 kernel(s): 0 ptx, 0 patch (SASS only)\n");
}

TEST(ListFormat, LaunchesAndKernelsWithoutAnImage) {
  std::vector<ListedKernel> kernels = {{"k1", kCatalogBackendPtx, 12},
                                       {"k2", 0, 3},
                                       {"k3", kCatalogBackendPatch, 0}};
  ListText t = FormatList(kernels, ParseListPattern("entry:*"), false);
  EXPECT_EQ(t.lines,
            "entry:k1  ptx  launches=12\n"
            "entry:k2  ?  launches=3\n"
            "entry:k3  patch  launches=0\n");
  EXPECT_THAT(t.summary, HasSubstr("1 ptx, 1 patch (SASS only), 1 unknown (image not kept)"));
}

std::vector<std::pair<std::string, uint16_t>> Backends(const std::string& path, uint32_t sm) {
  absl::StatusOr<std::vector<ListedKernel>> k = ListFileKernels(path, sm, {});
  EXPECT_TRUE(k.ok()) << k.status();
  std::vector<std::pair<std::string, uint16_t>> out;
  if (k.ok()) {
    for (const ListedKernel& x : *k) out.emplace_back(x.mangled, x.backend);
  }
  return out;
}

// multi_default.fatbin: SASS sm_75, PTX compute_80, SASS+PTX sm_90, SASS
// sm_100, PTX compute_120; the same four kernels in each, listed once.
TEST(ListFile, EachKernelOnceWithTheBackendForTheSm) {
  auto at90 = Backends(kFixtures + "/multi_default.fatbin", 90);
  EXPECT_EQ(at90.size(), 4u);
  for (const auto& [name, backend] : at90) EXPECT_EQ(backend, kCatalogBackendPtx) << name;
  auto at75 = Backends(kFixtures + "/multi_default.fatbin", 75);
  EXPECT_EQ(at75.size(), 4u);
  for (const auto& [name, backend] : at75) EXPECT_EQ(backend, kCatalogBackendPatch) << name;
  // A bare cubin: SASS only.
  for (const auto& [name, backend] : Backends(kFixtures + "/kernels_sm90.cubin", 90)) {
    EXPECT_EQ(backend, kCatalogBackendPatch) << name;
  }
}

TEST(ListFile, SamplesBuiltWithAndWithoutPtx) {
  using P = std::pair<std::string, uint16_t>;
  EXPECT_THAT(Backends(testing::SamplePath("vec_add"), 90),
              ::testing::UnorderedElementsAre(P("_Z7vec_addPKfS0_Pfi", kCatalogBackendPtx),
                                              P("_Z5scalePffi", kCatalogBackendPtx)));
  EXPECT_THAT(Backends(testing::SamplePath("vec_add_sass"), 90),
              ::testing::Each(::testing::Field(&P::second, kCatalogBackendPatch)));
  // mixed: one translation unit with PTX, one SASS only.
  EXPECT_THAT(Backends(testing::SamplePath("mixed"), 90),
              ::testing::UnorderedElementsAre(P("_Z7add_onePii", kCatalogBackendPtx),
                                              P("_Z7add_twoPii", kCatalogBackendPatch)));
  EXPECT_FALSE(ListFileKernels("/nonexistent/app", 90, {}).ok());
}

testing::ProcessResult Cli(std::vector<std::string> args,
                           std::vector<std::pair<std::string, std::string>> env = {}) {
  args.insert(args.begin(), {testing::BuildDir() + "/bin/cuprobe", "list"});
  return testing::RunProcess(args, env, /*timeout_s=*/60);
}

TEST(ListCli, FileToStdoutCountToStderr) {
  testing::ProcessResult r = Cli({"exit:vec*", testing::SamplePath("vec_add")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "exit:vec_add   ptx\n");
  EXPECT_EQ(r.err, "1 attach point(s) of 1 kernel(s): 1 ptx, 0 patch (SASS only)\n");
  r = Cli({"/nonexistent/app"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot read '/nonexistent/app'"));
  r = Cli({"--sm", "90", testing::SourceDir() + "/README.md"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, Not(HasSubstr("entry:")));
}

TEST(ListCli, APidWithoutASessionIsNamed) {
  testing::ProcessResult r = Cli({"999999999"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("999999999"));
}

// A program that never loads CUDA: its own output and exit code, the hook
// asked to list (CUPROBE_LIST=1), and an empty list.
TEST(ListCli, AProgramRunsAsItWouldWithItsExitCode) {
  testing::ProcessResult r =
      Cli({"--", "sh", "-c", "env | grep '^CUPROBE_LIST='; exit 3"}, {{"CUPROBE_HOOK", "/dev/null"}});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out, "CUPROBE_LIST=1\n");
  EXPECT_THAT(r.err, HasSubstr("0 attach point(s) of 0 kernel(s)"));
}

}  // namespace
}  // namespace cuprobe
