#include "cupti_hook/init_state.h"

#include <sys/syscall.h>
#include <unistd.h>

namespace cuprobe {
namespace {
thread_local int tls_depth = 0;
thread_local uint64_t tls_tid = 0;
}  // namespace

std::string_view HookStateName(HookState state) {
  switch (state) {
    case HookState::kUninit: return "UNINIT";
    case HookState::kInitializing: return "INITIALIZING";
    case HookState::kReady: return "READY";
    case HookState::kDisabled: return "DISABLED";
    case HookState::kStopping: return "STOPPING";
    case HookState::kStopped: return "STOPPED";
  }
  return "?";
}

uint64_t CurrentThreadId() {
  if (tls_tid == 0) tls_tid = static_cast<uint64_t>(::syscall(SYS_gettid));
  return tls_tid;
}

bool InitStateMachine::Transition(HookState from, HookState to) {
  return state_.compare_exchange_strong(from, to, std::memory_order_acq_rel);
}

bool InitStateMachine::TryBeginInit() {
  if (!Transition(HookState::kUninit, HookState::kInitializing)) return false;
  owner_.store(CurrentThreadId(), std::memory_order_release);
  return true;
}

bool InitStateMachine::FinishInit() {
  if (owner() != CurrentThreadId()) return false;
  return Transition(HookState::kInitializing, HookState::kReady);
}

bool InitStateMachine::Disable(std::string_view reason) {
  {
    std::lock_guard<std::mutex> lock(reason_mu_);
    HookState s = state();
    if (s != HookState::kInitializing && s != HookState::kReady) return false;
    if (reason_.empty()) reason_ = std::string(reason);
  }
  return Transition(HookState::kInitializing, HookState::kDisabled) ||
         Transition(HookState::kReady, HookState::kDisabled);
}

bool InitStateMachine::TryBeginStop() {
  // INITIALIZING is deliberately absent: a teardown racing init (an exit() on
  // another thread during cuInit) must not tear down what the owner is still
  // building. The owner's own atexit path runs after init returns.
  return Transition(HookState::kReady, HookState::kStopping) ||
         Transition(HookState::kDisabled, HookState::kStopping) ||
         Transition(HookState::kUninit, HookState::kStopping);
}

void InitStateMachine::FinishStop() {
  Transition(HookState::kStopping, HookState::kStopped);
}

std::string InitStateMachine::reason() const {
  std::lock_guard<std::mutex> lock(reason_mu_);
  return reason_;
}

ReentrancyGuard::ReentrancyGuard() { ++tls_depth; }
ReentrancyGuard::~ReentrancyGuard() { --tls_depth; }
bool ReentrancyGuard::Active() { return tls_depth > 0; }

}  // namespace cuprobe
