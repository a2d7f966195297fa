// File: cupti_hook/testing/event_log.h
//
// The ordered event log that FakeSeam and FakeOutput share with a test. The
// two fakes are called from different threads (the watcher ticks the seam
// while the main thread publishes a status), so every append to one log goes
// through one lock.
//
//   std::vector<std::string> events;
//   AppendEvent(&events, "Release");
#ifndef CUPROBE_CUPTI_HOOK_TESTING_EVENT_LOG_H_
#define CUPROBE_CUPTI_HOOK_TESTING_EVENT_LOG_H_

#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace cuprobe {

inline std::mutex& EventLogMutex() {
  static std::mutex mu;
  return mu;
}

// Appends `event` to `events` (if any) under the process-wide log lock.
inline void AppendEvent(std::vector<std::string>* events, std::string event) {
  if (events == nullptr) return;
  std::lock_guard<std::mutex> lock(EventLogMutex());
  events->push_back(std::move(event));
}

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_TESTING_EVENT_LOG_H_
