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
#include <spawn.h>
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

// The environment of a child: this process's, with `env` applied.
inline std::vector<std::string> ChildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    const std::string key = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& [k, v] : env) overridden = overridden || k == key;
    if (!overridden) out.push_back(std::move(entry));
  }
  for (const auto& [k, v] : env) {
    if (!v.empty()) out.push_back(k + "=" + v);
  }
  return out;
}

// `env` entries are added to (or override) this process's environment; an
// entry with an empty value removes the variable. The child starts through
// posix_spawnp (PATH searched as execvp does), so nothing runs between fork
// and exec that could wait on a lock another thread of the test holds. A
// program that cannot start gives exit code 127 and "exec NAME failed", as
// tests that skip without a tool look for.
inline ProcessResult RunProcess(const std::vector<std::string>& argv,
                                const std::vector<std::pair<std::string, std::string>>& env = {},
                                int timeout_s = 120) {
  ProcessResult result;
  char out_path[] = "/tmp/cuprobe-test-out-XXXXXX";
  char err_path[] = "/tmp/cuprobe-test-err-XXXXXX";
  int out_fd = ::mkstemp(out_path);
  int err_fd = ::mkstemp(err_path);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::vector<std::string> environment = ChildEnvironment(env);
  std::vector<char*> envp;
  for (const auto& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  ::posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  pid_t pid = -1;
  const int spawned = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    ::close(out_fd);
    ::close(err_fd);
    ::unlink(out_path);
    ::unlink(err_path);
    result.exit_code = 127;
    result.err = "exec " + argv[0] + " failed\n";
    return result;
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
