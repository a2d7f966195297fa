// File: loader/child_process.h
//
// Runs the traced program as a child with the caller's stdio and extra
// environment variables, forwards termination signals sent to cuprobe, and
// reports how the child ended.
//
//   CUPROBE_ASSIGN_OR_RETURN(ChildProcess child,
//                            ChildProcess::Spawn({"./app", "-n", "3"}, {{"K", "V"}}));
//   ChildExit exit = child.Wait();
//   return exit.ExitCodeForShell();
#ifndef CUPROBE_LOADER_CHILD_PROCESS_H_
#define CUPROBE_LOADER_CHILD_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace cuprobe {

struct ChildExit {
  int exit_code = 0;    // valid when signal == 0
  int signal = 0;       // the signal that killed the child, 0 if it exited
  bool core_dumped = false;

  // What a shell would show as $?: the exit code or 128 + signal.
  [[nodiscard]] int ExitCodeForShell() const { return signal != 0 ? 128 + signal : exit_code; }
  [[nodiscard]] std::string Describe() const;
};

class ChildProcess {
 public:
  // Starts argv[0] (looked up in PATH) with this process's environment plus
  // `env`. A program that does not exist or cannot be executed is an error
  // naming it. Installs forwarding of SIGTERM, SIGHUP, SIGINT and SIGQUIT sent
  // to cuprobe with kill(); terminal-generated ones already reach the child.
  static absl::StatusOr<ChildProcess> Spawn(
      const std::vector<std::string>& argv,
      const std::vector<std::pair<std::string, std::string>>& env);

  ChildProcess(ChildProcess&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Blocks until the child ends (EINTR-safe) and removes the forwarding.
  ChildExit Wait();
  [[nodiscard]] pid_t pid() const { return pid_; }

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
};

// Re-raises `signal` on this process with its default action (used to end
// cuprobe the way the child ended). Returns only if the signal did not kill.
void RaiseDefault(int signal);

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_CHILD_PROCESS_H_
