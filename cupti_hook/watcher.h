// File: cupti_hook/watcher.h
//
// The watcher thread: every `interval` it runs `tick` (publish heartbeat and
// stats, flush completed activity buffers). It sleeps on a condition variable,
// so Stop() wakes it at once; Stop() joins it. Never detached.
//
//   Watcher watcher(std::chrono::milliseconds(100), [&] { PublishStats(); });
//   watcher.Start();
//   ...
//   watcher.Stop();   // joined: `tick` is not running and never will again
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
  Watcher(std::chrono::milliseconds interval, std::function<void()> tick);
  ~Watcher();  // Stop()s if still running.
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  void Start();
  // Idempotent. Returns after the thread has been joined.
  void Stop();
  // Runs one tick as soon as possible (e.g. after a context is destroyed).
  void Poke();

  [[nodiscard]] bool running() const;
  [[nodiscard]] uint64_t ticks() const;

 private:
  void Run();

  const std::chrono::milliseconds interval_;
  const std::function<void()> tick_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool poked_ = false;
  uint64_t ticks_ = 0;
  std::thread thread_;
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_WATCHER_H_
