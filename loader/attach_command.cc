// File: loader/attach_command.cc
//
// `cuprobe attach`: probes for a program already running under `cuprobe
// trace`. A session of their own is handed to the program's hook (late
// attach), watched until a signal, --duration or the program's exit, then
// detached, and the final maps printed.
#include "loader/attach_command.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loader/run_command.h"
#include "maps/segment.h"
#include "probe/bundle.h"
#include "support/log.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

std::atomic<int> g_stop_signal{0};

void OnStopSignal(int signal) { g_stop_signal.store(signal); }

// SIGINT and SIGTERM end the attach (detach, final maps) instead of the CLI.
class StopSignals {
 public:
  StopSignals() {
    struct sigaction sa = {};
    sa.sa_handler = OnStopSignal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ = {};
  struct sigaction old_term_ = {};
};

bool Alive(uint32_t pid) {
  return pid != 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

// Waits until `session`'s hook status leaves `from` (or `deadline`).
uint32_t WaitForState(const Session& session, uint32_t from,
                      std::chrono::steady_clock::time_point deadline) {
  uint32_t state = session.session_state();
  while (state == from && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    state = session.session_state();
  }
  return state;
}

// The session of the traced program to attach to: writable, its hook
// tracing, and running no probes of its own.
absl::StatusOr<Session> OpenTarget(const std::string& target_name) {
  absl::StatusOr<Session> target = Session::Open(target_name, /*writable=*/true);
  if (!target.ok()) {
    return absl::Status(target.status().code(), absl::StrCat("cannot attach to ", target_name,
                                                             ": ", target.status().message()));
  }
  const uint32_t state = target->session_state();
  if (state != static_cast<uint32_t>(SessionState::kHookReady)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot attach to ", target_name, ": its hook is ",
        SessionStateName(static_cast<SessionState>(state)),
        state == static_cast<uint32_t>(SessionState::kHookDisabled)
            ? absl::StrCat(" (", target->HookReason(), ")")
            : std::string(), ", not tracing"));
  }
  if (!target->bundle_bytes().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot attach to ", target_name, ": it runs probes of its own (`cuprobe run`); late "
        "attach works on programs started with `cuprobe trace`"));
  }
  return target;
}

// Asks the target's hook to load the probes of session `probes`, and waits
// for its answer. On failure the probes' session is removed.
absl::Status Attach(Session& target, Session& probes, uint32_t program_pid) {
  absl::Status requested = target.RequestAttach(probes.name());
  if (!requested.ok()) {
    (void)probes.Remove();
    return requested;
  }
  // The hook acts on requests at its heartbeat (100 ms by default).
  const uint32_t answer =
      WaitForState(probes, static_cast<uint32_t>(SessionState::kCreated),
                   std::chrono::steady_clock::now() + std::chrono::seconds(10));
  if (answer != static_cast<uint32_t>(SessionState::kHookReady)) {
    (void)target.RequestDetach();
    std::string why =
        answer == static_cast<uint32_t>(SessionState::kCreated)
            ? std::string("the program's hook did not answer within 10 s (is the program "
                          "stopped, or its hook run with CUPROBE_LATE_ATTACH=0?)")
            : probes.HookReason();
    (void)probes.Remove();
    return absl::FailedPreconditionError(
        absl::StrCat("pid ", program_pid, " did not attach the probes: ", why));
  }
  return absl::OkStatus();
}

// Drains events and prints the maps every interval until a stop signal,
// the end of --duration or the program's exit; returns which it was.
const char* WatchUntilStop(const AttachOptions& options, Session& probes, uint32_t program_pid,
                           ProbePrinter& printer) {
  const auto start = std::chrono::steady_clock::now();
  auto next_print = start + std::chrono::milliseconds(options.run.trace.interval_ms);
  while (true) {
    if (g_stop_signal.load() != 0) {
      return g_stop_signal.load() == SIGTERM ? "SIGTERM" : "Ctrl-C";
    }
    if (options.duration_s > 0 &&
        std::chrono::steady_clock::now() - start >= std::chrono::seconds(options.duration_s)) {
      return "the end of --duration";
    }
    const uint32_t s = probes.session_state();
    if (s != static_cast<uint32_t>(SessionState::kHookReady) || !Alive(program_pid)) {
      return "the program's exit";
    }
    printer.Drain(probes);
    if (std::chrono::steady_clock::now() >= next_print) {
      printer.Interval(probes);
      next_print += std::chrono::milliseconds(options.run.trace.interval_ms);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Detach: the hook stops redirecting, waits for the instrumented kernels,
// publishes the last snapshot and says kHookStopped.
void Detach(Session& target, const Session& probes) {
  (void)target.RequestDetach();
  uint32_t final_state = probes.session_state();
  if (final_state == static_cast<uint32_t>(SessionState::kHookReady)) {
    final_state = WaitForState(probes, final_state,
                               std::chrono::steady_clock::now() + std::chrono::seconds(15));
  }
  if (final_state != static_cast<uint32_t>(SessionState::kHookStopped)) {
    CUPROBE_LOG(kWarning, "the program did not confirm the detach; the maps below are its last "
                "published snapshot");
  }
}

}  // namespace

absl::StatusOr<int> RunAttach(const AttachOptions& options) {
  CUPROBE_ASSIGN_OR_RETURN(std::string target_name, FindTargetSession(options.target));
  CUPROBE_ASSIGN_OR_RETURN(Session target, OpenTarget(target_name));
  const uint32_t program_pid = target.header().hook_pid.load(std::memory_order_acquire);

  CUPROBE_ASSIGN_OR_RETURN(ProbeBundle bundle, LoadRunProbes(options.run));
  SessionOptions session_options;
  session_options.ring_capacity = RecordRing::kMinCapacity;  // no trace records here
  session_options.maps = bundle.maps;
  session_options.bundle = WriteBundle(bundle);
  CUPROBE_ASSIGN_OR_RETURN(Session probes, Session::Create(session_options));

  StopSignals signals;
  g_stop_signal.store(0);
  CUPROBE_RETURN_IF_ERROR(Attach(target, probes, program_pid));
  CUPROBE_LOG(kInfo, "attached to pid %d: kernels are instrumented at their next launch; "
              "Ctrl-C detaches", program_pid);

  ProbePrinter printer(options.run, bundle);
  const char* reason = WatchUntilStop(options, probes, program_pid, printer);
  Detach(target, probes);
  CUPROBE_LOG(kInfo, "detached from pid %d at %s", program_pid, reason);
  printer.Final(probes);
  (void)probes.Remove();
  return 0;
}

}  // namespace cuprobe
