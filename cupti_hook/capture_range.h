// File: cupti_hook/capture_range.h
//
// `cuprobe trace --capture-range cudaProfilerApi`: only what the program
// launches between its cudaProfilerStart and cudaProfilerStop calls (or
// cuProfilerStart/Stop, or torch.cuda.profiler.start/stop) is traced, as
// Nsight Systems' option of the same name does. Every start/stop pair is a
// range; a range still open at exit ends there.
//
// A range is kept as the span of CUPTI correlation ids between the start
// call and the stop call. Correlation ids come from one counter that every
// API call takes a number from, and a kernel, memcpy or memset activity
// record carries the id of the call that launched it. So "launched inside a
// range" is one comparison per record, and a kernel that runs after the
// stop call still counts when its launch came before it; a time window
// could not tell that kernel from one launched later.
//
//   CaptureRanges ranges;
//   ranges.Open(start_call_correlation_id);    // from the start call's callback
//   ranges.Close(stop_call_correlation_id);    // from the stop call's callback
//   if (ranges.Contains(record->correlationId)) Emit(...);
//
// Open and Close come from the program's threads and are serialized by a
// mutex; Contains runs on every launch and activity record and takes no lock.
#ifndef CUPROBE_CUPTI_HOOK_CAPTURE_RANGE_H_
#define CUPROBE_CUPTI_HOOK_CAPTURE_RANGE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>

#include "absl/synchronization/mutex.h"

namespace cuprobe {

class CaptureRanges {
 public:
  // Ranges past this many are not captured (Open returns kFull once). A
  // program that brackets every step of a long run still gets its first
  // 4096 steps.
  static constexpr int kMaxRanges = 4096;

  enum class Change { kOpened, kClosed, kUnchanged, kFull };

  // A start call: opens a range from `correlation_id` on. kUnchanged if one
  // is open already (a second start, or the driver call inside the
  // runtime's). kFull, once, when kMaxRanges ranges have been opened.
  Change Open(uint32_t correlation_id);
  // A stop call: the open range ends before `correlation_id`. kUnchanged if
  // none is open.
  Change Close(uint32_t correlation_id);

  // Whether the call with this correlation id was made inside a range: the
  // last range opened at or before it, and not yet closed before it.
  [[nodiscard]] bool Contains(uint32_t correlation_id) const;
  // Ranges opened so far.
  [[nodiscard]] int count() const { return count_.load(std::memory_order_acquire); }
  [[nodiscard]] bool open() const;

 private:
  static constexpr uint32_t kOpenEnd = std::numeric_limits<uint32_t>::max();
  struct Range {
    std::atomic<uint32_t> begin{0};
    std::atomic<uint32_t> end{kOpenEnd};  // exclusive; kOpenEnd while open
  };

  mutable absl::Mutex mu_;  // serializes Open and Close
  bool is_open_ ABSL_GUARDED_BY(mu_) = false;
  bool full_reported_ ABSL_GUARDED_BY(mu_) = false;
  // Filled in order; ranges_[i] is published by count_'s release store, and
  // only the last one's end changes after that.
  std::array<Range, kMaxRanges> ranges_;
  std::atomic<int> count_{0};
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_CAPTURE_RANGE_H_
