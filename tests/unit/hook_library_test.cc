// The built libcuprobe_hook.so itself: what it exports, and that loading it and
// calling InitializeInjection on a machine without a GPU is harmless.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kHookPath = cuprobe::testing::HookPath();

std::string RunCommand(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

TEST(HookLibrary, ExportsInitializeInjectionOnly) {
  std::string out = RunCommand("nm -D --defined-only " + kHookPath);
  std::vector<std::string> symbols;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    ASSERT_EQ(parts.size(), 3u) << line;
    symbols.push_back(parts[2]);
  }
  EXPECT_THAT(symbols, ElementsAre("InitializeInjection"));
}

TEST(HookLibrary, NeedsNoLibstdcxxOrAbseil) {
  std::string out = RunCommand("readelf -d " + kHookPath);
  EXPECT_THAT(out, HasSubstr("libcupti.so"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("libstdc++")));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("libabsl")));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("libcuda.so")));
}

// Loads the library in a child process, as the driver would, and calls
// InitializeInjection with the child's stderr sent to a file.
TEST(HookLibrary, InitializeInjectionWithoutGpuReturnsOneAndSaysSoOnce) {
  void* probe = ::dlopen("libcuda.so.1", RTLD_NOW);
  if (probe != nullptr) {
    ::dlclose(probe);
    GTEST_SKIP() << "a CUDA driver is installed here; the GPU tests cover this";
  }
  char path[] = "/tmp/cuprobe-hook-test-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(fd, 2);
    void* lib = ::dlopen(kHookPath.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      std::fprintf(stderr, "dlopen: %s\n", ::dlerror());
      ::_exit(10);
    }
    auto init = reinterpret_cast<int (*)()>(::dlsym(lib, "InitializeInjection"));
    if (init == nullptr) ::_exit(11);
    int r = init();
    ::_exit(r == 1 ? 0 : 12);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::close(fd);
  std::ifstream in(path);
  std::stringstream err;
  err << in.rdbuf();
  ::unlink(path);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << err.str();
  std::string text = err.str();
  EXPECT_THAT(text, HasSubstr("cannot subscribe to CUPTI"));
  EXPECT_THAT(text, HasSubstr("the application runs unchanged"));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
}

}  // namespace
