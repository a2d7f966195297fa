// GPU tier: the hook injected into a real CUDA program through
// CUDA_INJECTION64_PATH. Skips when this machine has no GPU.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe::testing {
namespace {

using ::testing::HasSubstr;

class Injection : public ::testing::Test {
 protected:
  void SetUp() override {
    // (Children exec, so initializing CUDA here leaks no context into them.)
    if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine";
  }
};

TEST_F(Injection, InitializeInjectionRunsAndAppIsUnchanged) {
  ProcessResult native = RunProcess({SamplePath("vec_add"), "1048576", "10"});
  ASSERT_EQ(native.exit_code, 0) << native.err;
  ProcessResult hooked = RunProcess({SamplePath("vec_add"), "1048576", "10"},
                                    {{"CUDA_INJECTION64_PATH", HookPath()},
                                     {"CUPROBE_LOG", "info"}});
  EXPECT_EQ(hooked.exit_code, native.exit_code);
  EXPECT_EQ(hooked.out, native.out) << "the app's stdout must be byte-identical";
  EXPECT_THAT(hooked.err, HasSubstr("hook ready: subscribed to CUPTI as 'cuprobe'")) << hooked.err;
  EXPECT_THAT(hooked.out, ::testing::Not(HasSubstr("cuprobe"))) << "the hook never writes stdout";
}

TEST_F(Injection, FailingAppKeepsItsExitCode) {
  // vec_add rejects a bad argument with exit code 64, with or without the hook.
  ProcessResult native = RunProcess({SamplePath("vec_add"), "0"});
  ProcessResult hooked =
      RunProcess({SamplePath("vec_add"), "0"}, {{"CUDA_INJECTION64_PATH", HookPath()}});
  EXPECT_EQ(native.exit_code, 64);
  EXPECT_EQ(hooked.exit_code, 64);
}

}  // namespace
}  // namespace cuprobe::testing
