// File: cupti_hook/watcher.h
//
// The watcher thread: every `interval` it runs `tick` (publish heartbeat and
// stats, flush completed activity buffers). It sleeps on a condition variable,
// so Stop() wakes it at once; Stop() joins it. Never detached. A `wake`
// callback, when given, runs at a time WakeAt() asks for, between ticks and
// without moving them (a capture range's lingering activity, turned off
// 1 ms after the last range closed rather than at the next tick).
//
//   Watcher watcher(std::chrono::milliseconds(100), [&] { PublishStats(); });
//   watcher.Start();
//   ...
//   watcher.Stop();   // joined: `tick` and `wake` are not running and never will again
#ifndef CUPROBE_CUPTI_HOOK_WATCHER_H_
#define CUPROBE_CUPTI_HOOK_WATCHER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace cuprobe {

class Watcher {
 public:
  using Clock = std::chrono::steady_clock;

  Watcher(std::chrono::milliseconds interval, std::function<void()> tick,
          std::function<void()> wake = nullptr);
  ~Watcher();  // Stop()s if still running.
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  void Start();
  // Idempotent. Returns after the thread has been joined.
  void Stop();
  // Runs one tick as soon as possible (e.g. after a context is destroyed).
  void Poke();
  // Runs `wake` once at `at` or soon after (at once when `at` has passed).
  // One time is kept: a later call replaces it. Nothing runs after Stop().
  // Any thread, also `wake` itself (to ask again).
  void WakeAt(Clock::time_point at);

  [[nodiscard]] bool running() const;
  [[nodiscard]] uint64_t ticks() const;
  [[nodiscard]] uint64_t wakes() const;  // `wake` calls so far

 private:
  void Run();

  const std::chrono::milliseconds interval_;
  const std::function<void()> tick_;
  const std::function<void()> wake_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool poked_ = false;
  Clock::time_point wake_at_ = Clock::time_point::max();  // max: none asked
  uint64_t ticks_ = 0;
  uint64_t wakes_ = 0;
  std::thread thread_;
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_WATCHER_H_
