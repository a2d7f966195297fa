// File: tests/ptx_rewriter/instrument_command_test.cc
//
// `cuprobe instrument` and `cuprobe inspect` on nvcc-built fixtures:
// argument parsing, the whole offline pipeline (image -> PTX -> rewrite ->
// link -> PTX or cubin), --stats, and the errors a user meets.
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "cuprobe/abi.h"
#include "loader/args.h"
#include "loader/inspect_command.h"
#include "loader/instrument_command.h"
#include "probe/bundle.h"
#include "ptx_rewriter/builtin_probes.h"
#include "ptx_rewriter/ptx_parser.h"
#include "ptx_rewriter/settings.h"
#include "tests/ptx_rewriter/fixtures.h"
#include "tests/ptx_rewriter/ptx_test_util.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kFixtures = CUPROBE_IMAGE_FIXTURE_DIR;

absl::StatusOr<CliArgs> Parse(std::vector<std::string> argv) {
  argv.insert(argv.begin(), "cuprobe");
  return ParseArgs(argv);
}

TEST(InstrumentArgsTest, ParsesEveryOption) {
  absl::StatusOr<CliArgs> a =
      Parse({"instrument", "--probe", "builtin:count", "-k", "add*", "--entry", "--exit", "--mem",
             "--mem-spaces", "global,shared", "--sm", "80", "--helpers", "h.ptx", "--kernel-id",
             "7", "--stats", "app", "-o", "out.cubin"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->command, Command::kInstrument);
  const InstrumentCommandOptions& o = a->instrument;
  EXPECT_EQ(o.probe, "builtin:count");
  EXPECT_EQ(o.kernels, "add*");
  EXPECT_TRUE(o.entry && o.exit && o.mem && o.stats);
  EXPECT_EQ(o.mem_spaces, (1u << 1) | (1u << 2));
  EXPECT_EQ(o.sm, 80u);
  EXPECT_EQ(o.helpers, "h.ptx");
  EXPECT_EQ(o.first_kernel_id, 7u);
  EXPECT_EQ(o.input, "app");
  EXPECT_EQ(o.output, "out.cubin");
  EXPECT_EQ(Parse({"instrument", "-h"})->help_topic, "instrument");
  EXPECT_EQ(Parse({"help", "instrument"})->help_topic, "instrument");
  EXPECT_THAT(UsageText("instrument"), HasSubstr("builtin:count"));
}

TEST(InstrumentArgsTest, RejectsIncompleteCommands) {
  auto message = [](std::vector<std::string> argv) {
    absl::StatusOr<CliArgs> a = Parse(std::move(argv));
    return a.ok() ? std::string("ok") : std::string(a.status().message());
  };
  EXPECT_THAT(message({"instrument", "--entry", "app", "-o", "x.ptx"}), HasSubstr("needs --probe"));
  EXPECT_THAT(message({"instrument", "-p", "builtin:count", "app", "-o", "x.ptx"}),
              HasSubstr("at least one attach point"));
  // A bundle attaches where its sections say: no flag is needed.
  EXPECT_EQ(message({"instrument", "-p", "probe.cpb", "app", "-o", "x.ptx"}), "ok");
  EXPECT_THAT(message({"instrument", "-p", "builtin:count", "--entry", "app"}), HasSubstr("-o"));
  EXPECT_THAT(message({"instrument", "-p", "builtin:count", "--entry", "app", "-o", "x.bin"}),
              HasSubstr("must end in .cubin or .ptx"));
  EXPECT_THAT(message({"instrument", "-p", "b", "--entry", "a", "b", "-o", "x.ptx"}),
              HasSubstr("one input file"));
  EXPECT_THAT(message({"instrument", "-p", "b", "--mem", "--mem-spaces", "texture", "a", "-o",
                       "x.ptx"}),
              HasSubstr("unknown space 'texture'"));
  EXPECT_THAT(message({"instrument", "--bogus"}), HasSubstr("unknown option '--bogus'"));
}

// No --entry/--exit/--mem with a bundle: its own attach points, globs and
// memory spaces; -k and --mem-spaces only when given.
TEST(InstrumentArgsTest, BundleWithoutFlagsUsesItsOwnAttachPoints) {
  absl::StatusOr<CliArgs> a = Parse({"instrument", "-p", "probe.cpb", "app", "-o", "x.ptx"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->instrument.UsesBundleAttachPoints());
  EXPECT_EQ(a->instrument.kernels, "") << "the programs' own globs";
  EXPECT_EQ(a->instrument.mem_spaces, 0u) << "the programs' own spaces";
  for (const char* flag : {"--entry", "--exit", "--mem"}) {
    a = Parse({"instrument", "-p", "probe.cpb", flag, "app", "-o", "x.ptx"});
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_FALSE(a->instrument.UsesBundleAttachPoints()) << flag;
  }
  // An explicit '*' is an override like any other glob.
  a = Parse({"instrument", "-p", "probe.cpb", "-k", "*", "app", "-o", "x.ptx"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->instrument.UsesBundleAttachPoints());
  EXPECT_EQ(a->instrument.kernels, "*");
}

// Programs for a bundle file: builtin:count's probe at each attach point,
// with its glob and memory spaces, as `cuprobe compile` writes them from
// sections cuprobe/entry/GLOB, cuprobe/exit/GLOB, cuprobe/mem/GLOB.
struct Section {
  AttachKind attach;
  std::string glob;
  uint32_t mem_spaces = (1u << CUPROBE_SPACE_GLOBAL) | (1u << CUPROBE_SPACE_GENERIC);
};

void WriteSectionsBundle(const std::string& path, const std::vector<Section>& sections) {
  absl::StatusOr<ProbeBundle> b = BuiltinBundle("builtin:count", {.entry = true});
  ASSERT_TRUE(b.ok()) << b.status();
  const ProbeProgram proto = b->programs[0];
  b->programs.clear();
  b->source_name = "sections.bpf.c";
  for (const Section& s : sections) {
    ProbeProgram p = proto;
    const char* point = s.attach == AttachKind::kEntry  ? "entry"
                        : s.attach == AttachKind::kExit ? "exit"
                                                        : "mem";
    p.name = absl::StrCat(point, "_", b->programs.size());
    p.section = absl::StrCat("cuprobe/", point, "/", s.glob);
    p.attach = s.attach;
    p.kernel_glob = s.glob;
    p.mem_spaces = s.mem_spaces;
    b->programs.push_back(std::move(p));
  }
  const std::vector<uint8_t> bytes = WriteBundle(*b);
  testing::WriteTextFile(path, std::string_view(reinterpret_cast<const char*>(bytes.data()),
                                                bytes.size()));
}

class InstrumentCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir();
    RewriterSettings settings = saved_;
    settings.cache_dir = dir_ + "/cache";
    SetRewriterSettings(settings);
    o_.probe = "builtin:count";
    o_.entry = true;
    o_.exit = true;
    o_.mem = true;
    o_.helpers = kFixtures + "/test_helpers.ptx";
  }
  void TearDown() override {
    SetRewriterSettings(saved_);
    std::filesystem::remove_all(dir_);
  }
  std::string dir_;
  const RewriterSettings saved_ = CurrentRewriterSettings();
  InstrumentCommandOptions o_;
};

TEST_F(InstrumentCommandTest, HostExecutableToPtx) {
  o_.input = kFixtures + "/host_app";
  o_.output = dir_ + "/out.ptx";
  o_.kernels = "add_one";
  absl::StatusOr<std::string> report = InstrumentFile(o_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(*report, HasSubstr("(PTX sm_90): 4 kernel(s) with PTX"));
  EXPECT_THAT(*report, HasSubstr("instrumented 1 kernel(s) with builtin:count"));
  EXPECT_THAT(*report, HasSubstr("id 0    add_one(float*, int)  [_Z7add_onePfi]"));
  EXPECT_THAT(*report, HasSubstr("entry 1, exit sites 1, memory sites 2"));
  const std::string ptx = testing::ReadTextFile(o_.output);
  absl::StatusOr<Module> m = ParsePtx(ptx);
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<std::string> ptxas = testing::RunPtxas(ptx);
  EXPECT_TRUE(ptxas.ok()) << ptxas.status();
}

TEST_F(InstrumentCommandTest, FatbinToCubinWithStatsAndCache) {
  o_.input = kFixtures + "/multi_default.fatbin";
  o_.output = dir_ + "/out.cubin";
  o_.stats = true;
  o_.first_kernel_id = 10;
  absl::StatusOr<std::string> report = InstrumentFile(o_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(*report, HasSubstr("instrumented 4 kernel(s)"));
  EXPECT_THAT(*report, HasSubstr("id 10 "));
  EXPECT_THAT(*report, HasSubstr("registers 8 -> "));
  EXPECT_THAT(*report, HasSubstr("compiled with nvJitLink"));
  const std::string cubin = testing::ReadTextFile(o_.output);
  EXPECT_EQ(cubin.substr(0, 4), "\x7f" "ELF");
  // Without --stats (and -verbose, which changes the cubin's notes) the
  // first run compiles and fills the cache, the second is a hit with the
  // same bytes.
  o_.stats = false;
  report = InstrumentFile(o_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(*report, HasSubstr("compiled with nvJitLink"));
  const std::string compiled = testing::ReadTextFile(o_.output);
  report = InstrumentFile(o_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(*report, HasSubstr("from the compile cache"));
  EXPECT_TRUE(testing::ReadTextFile(o_.output) == compiled) << "the cache hit differs";
}

TEST_F(InstrumentCommandTest, ErrorsSayWhatToDo) {
  o_.output = dir_ + "/out.ptx";
  o_.input = kFixtures + "/kernels_sm90.cubin";
  absl::StatusOr<std::string> r = InstrumentFile(o_);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("no PTX usable on sm_90 (SASS only?)"));

  o_.input = kFixtures + "/kernels_sm90.ptx";
  o_.kernels = "nothing*";
  r = InstrumentFile(o_);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("no kernel of " + o_.input + " matches --kernels 'nothing*' (4 kernel(s)"));

  o_.kernels = "*";
  o_.helpers = "/nonexistent/helpers.ptx";
  r = InstrumentFile(o_);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("/nonexistent/helpers.ptx"));

  o_.helpers.clear();
  o_.probe = kFixtures + "/kernels_sm90.ptx";  // not a bundle
  r = InstrumentFile(o_);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("--probe " + o_.probe + ": "));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("not a cuprobe probe bundle"));

  o_.probe = "builtin:nope";
  r = InstrumentFile(o_);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("built-in probes: builtin:count"));
}

// The report without its last line (the time it took).
std::string WithoutTiming(const std::string& report) {
  return report.substr(0, report.rfind("wrote "));
}

TEST_F(InstrumentCommandTest, BundleWithoutFlagsAttachesWhereItsSectionsSay) {
  // Only an exit program: exits only, on every kernel.
  const std::string exit_only = dir_ + "/exit.cpb";
  ASSERT_NO_FATAL_FAILURE(WriteSectionsBundle(exit_only, {{AttachKind::kExit, "*"}}));
  o_ = InstrumentCommandOptions{};
  o_.probe = exit_only;
  o_.helpers = kFixtures + "/test_helpers.ptx";
  o_.input = kFixtures + "/kernels_sm90.ptx";
  o_.output = dir_ + "/bundle.ptx";
  o_.stats = true;
  absl::StatusOr<std::string> bundle = InstrumentFile(o_);
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  EXPECT_THAT(*bundle, HasSubstr("instrumented 4 kernel(s) with sections.bpf.c"));
  EXPECT_THAT(*bundle, HasSubstr("exit sites 1"));
  EXPECT_THAT(*bundle, Not(HasSubstr("entry ")));
  EXPECT_THAT(*bundle, Not(HasSubstr("memory sites")));
  const std::string bundle_ptx = testing::ReadTextFile(o_.output);

  // The same as builtin:count --exit: sites, registers and PTX.
  o_.probe = "builtin:count";
  o_.exit = true;
  o_.output = dir_ + "/flags.ptx";
  absl::StatusOr<std::string> flags = InstrumentFile(o_);
  ASSERT_TRUE(flags.ok()) << flags.status();
  std::string expected = WithoutTiming(*flags);
  expected.replace(expected.find("builtin:count"), 13, "sections.bpf.c");
  EXPECT_EQ(WithoutTiming(*bundle), expected);
  EXPECT_EQ(bundle_ptx, testing::ReadTextFile(o_.output));
}

TEST_F(InstrumentCommandTest, BundleWithoutFlagsEqualsTheFlagsOfItsSections) {
  // add_one at entry and exit, every kernel's memory: no flag, and the three
  // flags, give the same report and PTX; --exit alone drops the others.
  const std::string path = dir_ + "/mixed.cpb";
  ASSERT_NO_FATAL_FAILURE(WriteSectionsBundle(path, {{AttachKind::kEntry, "add_one"},
                                                     {AttachKind::kExit, "add_one"},
                                                     {AttachKind::kMemory, "*"}}));
  o_ = InstrumentCommandOptions{};
  o_.probe = path;
  o_.helpers = kFixtures + "/test_helpers.ptx";
  o_.input = kFixtures + "/kernels_sm90.ptx";
  o_.output = dir_ + "/out.ptx";
  auto run = [&](bool entry, bool exit, bool mem) {
    o_.entry = entry;
    o_.exit = exit;
    o_.mem = mem;
    absl::StatusOr<std::string> r = InstrumentFile(o_);
    EXPECT_TRUE(r.ok()) << r.status();
    return std::pair(r.ok() ? WithoutTiming(*r) : "", testing::ReadTextFile(o_.output));
  };
  const auto [report, ptx] = run(false, false, false);
  EXPECT_THAT(report, HasSubstr("instrumented 4 kernel(s) with sections.bpf.c"));
  EXPECT_THAT(report, HasSubstr("[_Z7add_onePfi]\n           entry 1, exit sites 1, memory sites 2"));
  EXPECT_THAT(report, HasSubstr("plain_c\n           memory sites 1"));
  const auto [flags_report, flags_ptx] = run(true, true, true);
  EXPECT_EQ(report, flags_report);
  EXPECT_EQ(ptx, flags_ptx);
  const auto [exit_report, exit_ptx] = run(false, true, false);
  EXPECT_THAT(exit_report, HasSubstr("instrumented 1 kernel(s)"));
  EXPECT_THAT(exit_report, HasSubstr("[_Z7add_onePfi]\n           exit sites 1\n"));
  EXPECT_NE(ptx, exit_ptx);
}

TEST_F(InstrumentCommandTest, KernelsAndMemSpacesReplaceTheBundlesOwn) {
  const std::string path = dir_ + "/shared.cpb";
  ASSERT_NO_FATAL_FAILURE(WriteSectionsBundle(
      path, {{AttachKind::kEntry, "add_one"},
             {AttachKind::kMemory, "add_one", 1u << CUPROBE_SPACE_SHARED}}));
  o_ = InstrumentCommandOptions{};
  o_.probe = path;
  o_.helpers = kFixtures + "/test_helpers.ptx";
  o_.input = kFixtures + "/kernels_sm90.ptx";
  o_.output = dir_ + "/out.ptx";
  // The bundle's own: add_one only, and its global accesses are not in the
  // memory program's spaces.
  absl::StatusOr<std::string> r = InstrumentFile(o_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, HasSubstr("instrumented 1 kernel(s)"));
  EXPECT_THAT(*r, HasSubstr("[_Z7add_onePfi]\n           entry 1\n"));
  // --mem-spaces replaces them; -k, even '*', replaces the globs.
  o_.mem_spaces = 1u << CUPROBE_SPACE_GLOBAL;
  o_.kernels = "*";
  r = InstrumentFile(o_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, HasSubstr("instrumented 4 kernel(s)"));
  EXPECT_THAT(*r, HasSubstr("[_Z7add_onePfi]\n           entry 1, memory sites 2"));
  // No kernel matching the bundle's globs names them, not --kernels.
  ASSERT_NO_FATAL_FAILURE(WriteSectionsBundle(
      path, {{AttachKind::kEntry, "nothing*"}, {AttachKind::kExit, "nada"}}));
  o_.kernels.clear();
  r = InstrumentFile(o_);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("matches the probe's kernel globs 'nothing*', 'nada' (4 kernel(s)"));
}

TEST(InspectCommandTest, MarksInstrumentableKernels) {
  InspectOptions o;
  o.path = kFixtures + "/multi_default.fatbin";
  absl::StatusOr<std::string> text = InspectFile(o);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("kernel add_one(float*, int)  [_Z7add_onePfi]  (instrumentable on sm_90)"));
  EXPECT_THAT(*text, HasSubstr("1 image(s), 12 kernel(s) in SASS, 4 kernel(s) instrumentable from PTX on sm_90"));
  o.path = kFixtures + "/kernels_sm90.cubin";
  text = InspectFile(o);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("(no PTX for sm_90: the kernels cannot be instrumented)"));
  EXPECT_THAT(*text, HasSubstr("0 kernel(s) instrumentable"));
}

// The toolkit's own libraries: every fatbin -- in .nv_fatbin and outside it
// (cuFFT keeps its modules in .ldata) -- reads without error, and every PTX
// chosen for sm_90 parses. Each library is its own ctest test.
class ToolkitLibraryTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ToolkitLibraryTest, InspectReadsEveryFatbin) {
  const std::string path = "/usr/local/cuda/lib64/" + GetParam();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not installed";
  InspectOptions o;
  o.path = path;
  absl::StatusOr<std::string> text = InspectFile(o);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, ::testing::Not(HasSubstr("unreadable")));
  const std::string last = text->substr(text->rfind('\n', text->size() - 2) + 1);
  std::printf("%s: %s", GetParam().c_str(), last.c_str());
  EXPECT_THAT(last, HasSubstr("kernel(s) in SASS"));
}

INSTANTIATE_TEST_SUITE_P(Cuda13, ToolkitLibraryTest,
                         ::testing::Values("libcublas.so", "libcufft.so", "libcusparse.so",
                                           "libcurand.so", "libcusolver.so"),
                         [](const auto& info) {
                           std::string n = info.param.substr(3, info.param.find('.') - 3);
                           return n;
                         });

}  // namespace
}  // namespace cuprobe
