// File: cupti_hook/init_state.h
//
// The hook's single-owner lifecycle:
//
//   UNINIT -> INITIALIZING(owner) -> READY | DISABLED(reason) -> STOPPING -> STOPPED
//
// Exactly one thread wins init (compare-and-swap on the state). While the state
// is not READY, every intercepted call falls through untouched. Calls that the
// hook itself makes (a driver call inside a callback re-enters the callback)
// always fall through, through the thread-local ReentrancyGuard:
//
//   void OnCallback(...) {
//     if (!state.IsReady() || ReentrancyGuard::Active()) return;   // fall through
//     ReentrancyGuard guard;
//     ...                                                          // may call the driver
//   }
#ifndef CUPROBE_CUPTI_HOOK_INIT_STATE_H_
#define CUPROBE_CUPTI_HOOK_INIT_STATE_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace cuprobe {

enum class HookState : uint8_t {
  kUninit = 0,
  kInitializing = 1,
  kReady = 2,
  kDisabled = 3,
  kStopping = 4,
  kStopped = 5,
};

[[nodiscard]] std::string_view HookStateName(HookState state);

class InitStateMachine {
 public:
  InitStateMachine() = default;
  InitStateMachine(const InitStateMachine&) = delete;
  InitStateMachine& operator=(const InitStateMachine&) = delete;

  // UNINIT -> INITIALIZING. True for the one caller that becomes the owner.
  [[nodiscard]] bool TryBeginInit();
  // INITIALIZING -> READY. Only the owner thread may call it; false otherwise.
  bool FinishInit();
  // INITIALIZING or READY -> DISABLED(reason). The first reason sticks.
  // False if already stopping/stopped/disabled.
  bool Disable(std::string_view reason);
  // UNINIT/READY/DISABLED -> STOPPING. True for the one caller that must run
  // teardown; every later call (or one during init by another thread) is false.
  [[nodiscard]] bool TryBeginStop();
  // STOPPING -> STOPPED.
  void FinishStop();

  [[nodiscard]] HookState state() const { return state_.load(std::memory_order_acquire); }
  [[nodiscard]] bool IsReady() const { return state() == HookState::kReady; }
  [[nodiscard]] std::string reason() const;
  // The thread id (gettid) of the init owner, 0 if none yet.
  [[nodiscard]] uint64_t owner() const { return owner_.load(std::memory_order_acquire); }

 private:
  bool Transition(HookState from, HookState to);

  std::atomic<HookState> state_{HookState::kUninit};
  std::atomic<uint64_t> owner_{0};
  mutable std::mutex reason_mu_;
  std::string reason_;
};

// Marks "this thread is inside the hook". Nestable.
class ReentrancyGuard {
 public:
  ReentrancyGuard();
  ~ReentrancyGuard();
  ReentrancyGuard(const ReentrancyGuard&) = delete;
  ReentrancyGuard& operator=(const ReentrancyGuard&) = delete;
  [[nodiscard]] static bool Active();
};

// gettid(), cached per thread.
[[nodiscard]] uint64_t CurrentThreadId();

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_INIT_STATE_H_
