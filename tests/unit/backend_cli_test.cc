// File: tests/unit/backend_cli_test.cc
//
// The CLI side of the probe backends (CUPROBE_BACKEND): `cuprobe run
// --backend` reaching the program's environment, and `cuprobe inspect`
// telling each kernel's backend on the nvcc-built image fixtures of
// tests/ptx_rewriter (SASS and PTX, SASS only, a bare cubin whose PTX lies
// in a Triton cache). No GPU: the program run is `env`, which never loads
// CUDA. Parsing of --backend is in args_test.cc.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loader/args.h"
#include "loader/inspect_command.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kFixtures = CUPROBE_IMAGE_FIXTURE_DIR;

// --- cuprobe run --backend: what the program's environment gets.

class RunBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cuprobe-backend-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `cuprobe run [flags] -p empty.cpb -- env` (or `cuprobe trace -- env`
  // when `flags` starts with "trace"), with `env` set for cuprobe itself.
  // env never loads CUDA, so the hook is never injected: any readable file
  // passes as CUPROBE_HOOK.
  testing::ProcessResult Run(std::vector<std::string> flags,
                             std::vector<std::pair<std::string, std::string>> env) {
    const bool trace = !flags.empty() && flags[0] == "trace";
    std::vector<std::string> argv = {testing::BuildDir() + "/bin/cuprobe",
                                     trace ? "trace" : "run"};
    argv.insert(argv.end(), flags.begin() + (trace ? 1 : 0), flags.end());
    if (!trace) {
      argv.insert(argv.end(), {"-p", testing::BuildDir() + "/probes/empty.cpb", "--quiet"});
    }
    argv.insert(argv.end(), {"-o", (dir_ / "r").string(), "--format", "table", "--", "env"});
    env.emplace_back("CUPROBE_HOOK", "/dev/null");
    return testing::RunProcess(argv, env, /*timeout_s=*/60);
  }

  fs::path dir_;
};

// The default keeps CUPTI's trace (GPU kernel times): ptx.
TEST_F(RunBackendTest, DefaultIsPtx) {
  testing::ProcessResult r = Run({}, {{"CUPROBE_BACKEND", ""}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\nCUPROBE_BACKEND=ptx\n"));
}

TEST_F(RunBackendTest, FlagReachesTheProgram) {
  for (const char* backend : {"ptx", "auto", "patch"}) {
    testing::ProcessResult r = Run({"--backend", backend}, {{"CUPROBE_BACKEND", ""}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("\nCUPROBE_BACKEND=", backend, "\n")));
  }
}

TEST_F(RunBackendTest, FlagReplacesTheEnvironmentsValueAndSaysSo) {
  testing::ProcessResult r = Run({"--backend=patch"}, {{"CUPROBE_BACKEND", "ptx"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\nCUPROBE_BACKEND=patch\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("CUPROBE_BACKEND=ptx")));
  EXPECT_THAT(r.err,
              HasSubstr("CUPROBE_BACKEND=ptx in the environment is replaced by --backend patch"));
}

TEST_F(RunBackendTest, InvalidValueIsAUsageError) {
  testing::ProcessResult r = Run({"--backend", "sass"}, {});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown --backend 'sass' (expected auto, ptx or patch)"));
  EXPECT_THAT(r.err, HasSubstr("Try 'cuprobe run --help'."));
  EXPECT_THAT(r.out, Not(HasSubstr("CUPROBE_BACKEND=")));  // nothing ran
}

TEST_F(RunBackendTest, TraceLeavesTheVariableAlone) {
  testing::ProcessResult r = Run({"trace"}, {{"CUPROBE_BACKEND", ""}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\nCUPROBE_SESSION="));  // the trace's own variables came
  EXPECT_THAT(r.out, Not(HasSubstr("CUPROBE_BACKEND=")));
  r = Run({"trace", "--backend", "patch"}, {});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown option '--backend'"));
}

// --- cuprobe inspect: each kernel's backend.

absl::StatusOr<std::string> Inspect(const std::string& path, uint32_t sm,
                                    std::vector<std::string> roots = {}) {
  InspectOptions o;
  o.path = path;
  o.sm = sm;
  o.ptx_search_roots = std::move(roots);
  return InspectFile(o);
}

// multi_default.fatbin: SASS sm_75, PTX compute_80, SASS+PTX sm_90, SASS
// sm_100, PTX compute_120; four kernels in each.
TEST(InspectBackendTest, KernelsInThePtxForTheSmGetThePtxBackend) {
  absl::StatusOr<std::string> text = Inspect(kFixtures + "/multi_default.fatbin", 90);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("    kernel add_one(float*, int)  [_Z7add_onePfi]  "
                               "(instrumentable on sm_90)  backend: ptx\n"));
  // The SASS entries' kernels are in that PTX too.
  EXPECT_THAT(*text, HasSubstr("    kernel plain_c  backend: ptx\n"));
  EXPECT_THAT(*text, Not(HasSubstr("backend: patch")));
  EXPECT_THAT(*text, HasSubstr("4 kernel(s) instrumentable from PTX on sm_90, "
                               "0 SASS-only kernel(s) for --backend auto or patch\n"));
}

TEST(InspectBackendTest, KernelsWithoutPtxForTheSmAreSassOnly) {
  // No PTX at or below sm_75 in the fatbin: only patching reaches its kernels.
  absl::StatusOr<std::string> text = Inspect(kFixtures + "/multi_default.fatbin", 75);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("    kernel plain_c  backend: patch (SASS only)\n"));
  EXPECT_THAT(*text, HasSubstr("    kernel add_one(float*, int)  [_Z7add_onePfi]  "
                               "backend: patch (SASS only)\n"));
  EXPECT_THAT(*text, Not(HasSubstr("backend: ptx")));
  EXPECT_THAT(*text, HasSubstr("(`cuprobe run --backend auto` patches their SASS instead)"));
  EXPECT_THAT(*text, HasSubstr("0 kernel(s) instrumentable from PTX on sm_75, "
                               "12 SASS-only kernel(s) for --backend auto or patch\n"));
}

TEST(InspectBackendTest, BareCubinIsSassOnlyUnlessItsPtxIsInATritonCache) {
  const fs::path root = fs::temp_directory_path() /
                        ("cuprobe-inspect-triton-" + std::to_string(::getpid()));
  const fs::path entry = root / "c0ffee";  // <root>/<hash>/<kernel>.{cubin,ptx}
  fs::create_directories(entry);
  fs::copy_file(kFixtures + "/kernels_sm90.cubin", entry / "kernels.cubin");

  absl::StatusOr<std::string> text = Inspect((entry / "kernels.cubin").string(), 90,
                                             {root.string()});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("    kernel plain_c  backend: patch (SASS only)\n"));
  EXPECT_THAT(*text, Not(HasSubstr("backend: ptx")));

  fs::copy_file(kFixtures + "/kernels_sm90.ptx", entry / "kernels.ptx");
  text = Inspect((entry / "kernels.cubin").string(), 90, {root.string()});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("    kernel plain_c  backend: ptx\n"));
  EXPECT_THAT(*text, Not(HasSubstr("backend: patch")));
  EXPECT_THAT(*text, HasSubstr("the hook takes the PTX found for it in Triton's cache"));

  // Outside the roots the PTX beside it is not found (nor by the hook).
  text = Inspect((entry / "kernels.cubin").string(), 90, {(root / "elsewhere").string()});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("    kernel plain_c  backend: patch (SASS only)\n"));
  fs::remove_all(root);
}

TEST(InspectBackendTest, HelpTextsExplainTheBackends) {
  EXPECT_THAT(UsageText("inspect"), HasSubstr("backend: patch (SASS only)"));
  EXPECT_THAT(UsageText("inspect"), HasSubstr("auto and patch patch its SASS"));
  EXPECT_THAT(UsageText("run"), HasSubstr("--backend B"));
  EXPECT_THAT(UsageText("run"), HasSubstr("cuprobe run --backend auto -p"));
  EXPECT_THAT(UsageText("run"), HasSubstr("(default: ptx)"));
  EXPECT_THAT(UsageText("trace"), Not(HasSubstr("--backend")));
}

}  // namespace
}  // namespace cuprobe
