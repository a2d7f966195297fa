#include "loader/child_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace cuprobe {
namespace {

std::atomic<pid_t> g_child{-1};
constexpr int kForwarded[] = {SIGTERM, SIGHUP, SIGINT, SIGQUIT};
struct sigaction g_saved[4];

void Forward(int sig, siginfo_t* info, void*) {
  pid_t child = g_child.load();
  if (child <= 0) return;
  // Signals from the terminal (SI_KERNEL) reach the whole foreground process
  // group, child included; forwarding them would deliver them twice.
  if (info != nullptr && info->si_code != SI_USER && info->si_code != SI_QUEUE) return;
  ::kill(child, sig);
}

void InstallForwarding() {
  for (size_t i = 0; i < std::size(kForwarded); ++i) {
    struct sigaction sa = {};
    sa.sa_sigaction = &Forward;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(kForwarded[i], &sa, &g_saved[i]);
  }
}

void RemoveForwarding() {
  for (size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &g_saved[i], nullptr);
}

}  // namespace

std::string ChildExit::Describe() const {
  if (signal != 0) {
    const char* name = ::sigdescr_np(signal);
    return absl::StrCat("killed by signal ", signal, " (", name != nullptr ? name : "?", ")",
                        core_dumped ? ", core dumped" : "");
  }
  return absl::StrCat("exited with code ", exit_code);
}

absl::StatusOr<ChildProcess> ChildProcess::Spawn(
    const std::vector<std::string>& argv,
    const std::vector<std::pair<std::string, std::string>>& env) {
  if (argv.empty() || argv[0].empty()) return absl::InvalidArgumentError("no program to run");
  // The child's environment: ours, with `env` replacing same-named entries.
  std::map<std::string, std::string> overrides(env.begin(), env.end());
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    std::string key(entry.substr(0, entry.find('=')));
    if (overrides.count(key) == 0) env_strings.emplace_back(entry);
  }
  for (const auto& [k, v] : overrides) env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), envp.data());
  if (rc != 0) {
    return absl::NotFoundError(absl::StrCat("cannot run '", argv[0], "': ", std::strerror(rc)));
  }
  g_child.store(pid);
  InstallForwarding();
  return ChildProcess(pid);
}

ChildExit ChildProcess::Wait() {
  ChildExit result;
  if (pid_ <= 0) return result;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0) {
    if (errno != EINTR) {
      result.exit_code = 127;
      break;
    }
  }
  g_child.store(-1);
  RemoveForwarding();
  pid_ = -1;
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
    result.core_dumped = WCOREDUMP(status);
  }
  return result;
}

void RaiseDefault(int signal) {
  struct sigaction sa = {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  ::sigaction(signal, &sa, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, signal);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(signal);
}

}  // namespace cuprobe
