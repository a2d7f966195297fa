#include "cupti_hook/watcher.h"

#include <utility>

#include "cupti_hook/init_state.h"

namespace cuprobe {

Watcher::Watcher(std::chrono::milliseconds interval, std::function<void()> tick)
    : interval_(interval), tick_(std::move(tick)) {}

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

bool Watcher::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return thread_.joinable() && !stop_;
}

uint64_t Watcher::ticks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ticks_;
}

void Watcher::Run() {
  // Whatever the tick calls (CUPTI, the driver) must fall through our callbacks.
  ReentrancyGuard guard;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, interval_, [this] { return stop_ || poked_; });
    if (stop_) break;
    poked_ = false;
    ++ticks_;
    lock.unlock();
    tick_();
    lock.lock();
  }
}

}  // namespace cuprobe
