#include "cupti_hook/watcher.h"

#include <algorithm>
#include <utility>

#include "cupti_hook/init_state.h"

namespace cuprobe {

Watcher::Watcher(std::chrono::milliseconds interval, std::function<void()> tick,
                 std::function<void()> wake)
    : interval_(interval), tick_(std::move(tick)), wake_(std::move(wake)) {}

Watcher::~Watcher() { Stop(); }

void Watcher::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] { Run(); });
}

void Watcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // Join outside the lock: the thread takes mu_ to see stop_.
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Watcher::Poke() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    poked_ = true;
  }
  cv_.notify_all();
}

void Watcher::WakeAt(Clock::time_point at) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_at_ = at;
  }
  cv_.notify_all();
}

bool Watcher::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return thread_.joinable() && !stop_;
}

uint64_t Watcher::ticks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ticks_;
}

uint64_t Watcher::wakes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wakes_;
}

void Watcher::Run() {
  // Whatever the tick calls (CUPTI, the driver) must fall through our callbacks.
  ReentrancyGuard guard;
  std::unique_lock<std::mutex> lock(mu_);
  Clock::time_point next_tick = Clock::now() + interval_;
  while (!stop_) {
    const Clock::time_point now = Clock::now();
    if (poked_ || now >= next_tick) {
      poked_ = false;
      ++ticks_;
      lock.unlock();
      tick_();
      lock.lock();
      next_tick = Clock::now() + interval_;
    } else if (now >= wake_at_) {
      wake_at_ = Clock::time_point::max();
      if (wake_) {
        ++wakes_;
        lock.unlock();
        wake_();
        lock.lock();
      }
    } else {
      // Woken early (Poke, WakeAt, Stop, or spuriously): the loop looks again.
      cv_.wait_until(lock, std::min(next_tick, wake_at_));
    }
  }
}

}  // namespace cuprobe
