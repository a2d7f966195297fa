// File: tests/test_process.h
//
// Runs a program for a test and captures its stdout, stderr and exit status:
//
//   ProcessResult r = RunProcess({SamplePath("vec_add"), "1024", "3"},
//                                {{"CUDA_INJECTION64_PATH", HookPath()}});
//   EXPECT_EQ(r.exit_code, 0);
//
// Also: HaveGpu(), true when a CUDA driver with at least one device is present.
#ifndef CUPROBE_TESTS_TEST_PROCESS_H_
#define CUPROBE_TESTS_TEST_PROCESS_H_

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace cuprobe::testing {

struct ProcessResult {
  int exit_code = -1;    // exit status, or -1 if killed by a signal
  int term_signal = 0;   // the signal that killed it, if any
  bool timed_out = false;
  std::string out;
  std::string err;
};

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `env` entries are added to (or override) this process's environment; an
// entry with an empty value removes the variable.
inline ProcessResult RunProcess(const std::vector<std::string>& argv,
                                const std::vector<std::pair<std::string, std::string>>& env = {},
                                int timeout_s = 120) {
  ProcessResult result;
  char out_path[] = "/tmp/cuprobe-test-out-XXXXXX";
  char err_path[] = "/tmp/cuprobe-test-err-XXXXXX";
  int out_fd = ::mkstemp(out_path);
  int err_fd = ::mkstemp(err_path);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    for (const auto& [k, v] : env) {
      if (v.empty()) {
        ::unsetenv(k.c_str());
      } else {
        ::setenv(k.c_str(), v.c_str(), 1);
      }
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s failed\n", args[0]);
    ::_exit(127);
  }
  int status = 0;
  for (int waited_ms = 0;; waited_ms += 10) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (waited_ms > timeout_s * 1000) {
      result.timed_out = true;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    ::usleep(10000);
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  ::close(out_fd);
  ::close(err_fd);
  result.out = ReadWholeFile(out_path);
  result.err = ReadWholeFile(err_path);
  ::unlink(out_path);
  ::unlink(err_path);
  return result;
}

inline bool HaveGpu() {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return false;
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(::dlsym(lib, "cuDeviceGetCount"));
  int n = 0;
  bool ok = init != nullptr && count != nullptr && init(0) == 0 && count(&n) == 0 && n > 0;
  return ok;
}

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_TEST_PROCESS_H_
