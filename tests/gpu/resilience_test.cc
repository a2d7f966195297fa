// GPU tier: the application survives whatever happens to cuprobe around it.
//  - The CLI killed with SIGKILL while the traced program runs: the program
//    finishes normally with its own output and exit code, and the hook
//    removes the orphaned session segment when the program exits.
//  - A missing, corrupt or foreign session segment handed to the hook: one
//    clear stderr line, and the program's output and exit code are exactly
//    those of the native run.
// Skips without a GPU.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe::testing {
namespace {

using ::testing::HasSubstr;

std::string Cuprobe() { return BuildDir() + "/bin/cuprobe"; }

// Session segments in /dev/shm whose names start with `prefix`.
std::vector<std::string> ShmEntries(const std::string& prefix) {
  std::vector<std::string> names;
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) {
    if (absl::StartsWith(e->d_name, prefix)) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  return names;
}

class Resilience : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine";
    char tmpl[] = "/tmp/cuprobe-resilience-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  std::string dir_;
};

TEST_F(Resilience, CliKilledWithSigkillTheProgramFinishesNormally) {
  // 100 launches with a 20 ms pause after each: about 2 s of traced run.
  std::vector<std::string> app = {SamplePath("vec_add"), "65536", "100", "20"};
  ProcessResult native = RunProcess(app);
  ASSERT_EQ(native.exit_code, 0) << native.err;

  // The program runs under a shell that records its exit code, because once
  // the CLI is gone nobody can wait for the program but init.
  std::string out = dir_ + "/app.out", rc = dir_ + "/app.rc";
  std::string script = absl::StrCat("\"$0\" \"$1\" \"$2\" \"$3\" > '", out, "'; echo $? > '", rc,
                                    ".tmp'; mv '", rc, ".tmp' '", rc, "'");
  pid_t cli = ::fork();
  if (cli == 0) {
    int null_fd = ::open("/dev/null", O_WRONLY);
    ::dup2(null_fd, 2);
    std::vector<std::string> argv = {Cuprobe(), "trace", "-o", dir_ + "/killed", "--", "/bin/sh",
                                     "-c", script, app[0], app[1], app[2], app[3]};
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ASSERT_GT(cli, 0);
  // Let the program initialize CUDA under the hook and start launching.
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  std::string session_prefix = absl::StrCat("cuprobe-", ::getuid(), "-", cli, "-");
  EXPECT_EQ(ShmEntries(session_prefix).size(), 1u) << "the CLI's session exists while it runs";
  ASSERT_EQ(::kill(cli, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(cli, &status, 0), cli);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  // The program carries on and finishes on its own.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (::access(rc.c_str(), R_OK) != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(::access(rc.c_str(), R_OK), 0) << "the program did not finish within 60 s";
  EXPECT_EQ(ReadWholeFile(rc), "0\n");
  EXPECT_EQ(ReadWholeFile(out), native.out) << "the program's output is unchanged";
  // The hook saw that its creator is gone and removed the segment.
  EXPECT_THAT(ShmEntries(session_prefix), ::testing::IsEmpty());
}

// The children of `pid` (from /proc; Linux 3.5+), or empty.
std::vector<pid_t> Children(pid_t pid) {
  std::vector<pid_t> out;
  std::ifstream in(absl::StrCat("/proc/", pid, "/task/", pid, "/children"));
  pid_t child;
  while (in >> child) out.push_back(child);
  return out;
}

// The program killed with SIGKILL while its kernels run (launching
// continuously on 4 streams): the hook gets no chance to stop; the CLI still
// reports what reached the ring, dies of the same signal, and leaves no
// session segment behind.
TEST_F(Resilience, ProgramKilledWithSigkillWhileItsKernelsRun) {
  pid_t cli = ::fork();
  if (cli == 0) {
    int null_fd = ::open("/dev/null", O_WRONLY);
    ::dup2(null_fd, 1);
    std::vector<std::string> argv = {Cuprobe(), "trace", "-o", dir_ + "/killed", "--format",
                                     "table,json", "--", SamplePath("multistream"), "4", "8",
                                     "60", "1"};
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    int err_fd = ::open((dir_ + "/cli.err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(err_fd, 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ASSERT_GT(cli, 0);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // CUDA up, kernels flowing
  std::vector<pid_t> children = Children(cli);
  ASSERT_EQ(children.size(), 1u) << "the program under the CLI";
  const std::string session_prefix = absl::StrCat("cuprobe-", ::getuid(), "-", cli, "-");
  EXPECT_EQ(ShmEntries(session_prefix).size(), 1u);
  ASSERT_EQ(::kill(children[0], SIGKILL), 0);
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  pid_t waited = 0;
  while ((waited = ::waitpid(cli, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (waited != cli) ::kill(cli, SIGKILL);
  ASSERT_EQ(waited, cli) << "the CLI did not finish within 60 s of the program's death";
  const std::string err = ReadWholeFile(dir_ + "/cli.err");
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << err;
  EXPECT_THAT(err, HasSubstr("the program was killed by signal 9")) << err;
  const std::string json = ReadWholeFile(dir_ + "/killed.json");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(json, m, std::regex(R"re("name":"work\([^"]*\)"[^}]*"instances":(\d+))re")))
      << json.substr(0, 2000);
  EXPECT_GT(std::stoull(m[1]), 1000u) << "the kernels traced before the kill are reported";
  EXPECT_THAT(ShmEntries(session_prefix), ::testing::IsEmpty());
}

struct BadSegmentCase {
  std::string file;     // tests/corpus/segment/<file>
  std::string message;  // part of the hook's stderr line
};

// The corpus segments that Session::Open rejects (tests/corpus/segment/EXPECTED).
std::vector<BadSegmentCase> RejectedCorpus() {
  std::vector<BadSegmentCase> cases;
  std::ifstream in(SourceDir() + "/tests/corpus/segment/EXPECTED");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    if (f.size() < 3 || f[1] == "OK") continue;
    cases.push_back({f[0], f[2] == "-" ? "" : f[2]});
  }
  return cases;
}

TEST_F(Resilience, BadSegmentsDisableTheHookAndTheProgramRunsUnchanged) {
  std::vector<std::string> app = {SamplePath("vec_add"), "65536", "5"};
  ProcessResult native = RunProcess(app);
  ASSERT_EQ(native.exit_code, 0) << native.err;

  std::vector<BadSegmentCase> cases = RejectedCorpus();
  ASSERT_GE(cases.size(), 15u) << "the corpus list was not read";
  // A name that does not exist at all.
  cases.push_back({"", "is not usable"});
  int n = 0;
  for (const BadSegmentCase& c : cases) {
    std::string name = absl::StrCat("cuprobe-test-", ::getpid(), "-", n++);
    std::string path = "/dev/shm/" + name;
    if (!c.file.empty()) {
      std::string bytes = ReadWholeFile(SourceDir() + "/tests/corpus/segment/" + c.file);
      int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
      ASSERT_GE(fd, 0) << path;
      ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
      ::close(fd);
    }
    ProcessResult r = RunProcess(
        app, {{"CUDA_INJECTION64_PATH", HookPath()}, {"CUPROBE_SESSION", name}});
    ::unlink(path.c_str());
    SCOPED_TRACE(c.file.empty() ? std::string("missing segment") : c.file);
    EXPECT_EQ(r.exit_code, native.exit_code);
    EXPECT_EQ(r.out, native.out);
    std::vector<std::string> lines = absl::StrSplit(r.err, '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), 1u) << "exactly one line from cuprobe:\n" << r.err;
    EXPECT_THAT(lines[0], HasSubstr(name));
    EXPECT_THAT(lines[0], HasSubstr("the application runs unchanged"));
    if (!c.message.empty()) {
      EXPECT_THAT(lines[0], HasSubstr(c.message));
    }
  }
}

TEST_F(Resilience, SegmentRemovedWhileTheProgramRuns) {
  // The name goes away (rm /dev/shm/...) while the hook writes: its mapping
  // stays valid, the program finishes unchanged, and the CLI still reports.
  std::vector<std::string> app = {SamplePath("vec_add"), "65536", "40", "20"};
  ProcessResult native = RunProcess(app);
  ASSERT_EQ(native.exit_code, 0) << native.err;
  std::string prefix = absl::StrCat("cuprobe-", ::getuid(), "-");
  std::vector<std::string> before = ShmEntries(prefix);
  std::atomic<bool> removed{false};
  std::thread remover([&] {
    for (int i = 0; i < 200; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (const std::string& e : ShmEntries(prefix)) {
        if (std::find(before.begin(), before.end(), e) == before.end()) {
          removed = ::unlink(("/dev/shm/" + e).c_str()) == 0;
          return;
        }
      }
    }
  });
  std::vector<std::string> argv = {Cuprobe(), "trace", "-o", dir_ + "/removed", "--format",
                                   "json", "--"};
  argv.insert(argv.end(), app.begin(), app.end());
  ProcessResult r = RunProcess(argv);
  remover.join();
  EXPECT_TRUE(removed) << "the session's segment was never seen running, so never removed";
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, native.out);
  EXPECT_EQ(::access((dir_ + "/removed.json").c_str(), R_OK), 0) << r.err;
}

}  // namespace
}  // namespace cuprobe::testing
