// File: cupti_hook/capture_range.h
//
// `cuprobe trace --capture-range cudaProfilerApi`: only what the program
// launches between its cudaProfilerStart and cudaProfilerStop calls (or
// cuProfilerStart/Stop, or torch.cuda.profiler.start/stop) is traced. Every
// start/stop pair is a range; a range still open at exit ends there.
//
// A range is kept as the span of CUPTI correlation ids between the start
// call and the stop call. Correlation ids come from one counter that every
// API call takes a number from, and a kernel, memcpy or memset activity
// record carries the id of the call that launched it. So "launched inside a
// range" is one comparison per record, and a kernel that runs after the
// stop call still counts when its launch came before it; a time window
// could not tell that kernel from one launched later.
//
// The ids are 32 bits and wrap after 2^32 API calls (hours of a busy
// program). Each id is widened to 64 bits against the highest id seen so
// far, which moves forward whenever an id is more than 2^30 past it: right
// as long as a record arrives less than 2^31 calls after its call, and the
// hook sees an id (a launch, a traced kernel, copy or set, a start or stop)
// at least every 2^30 calls. Id 0 (CUPTI's "none") is in no range.
//
//   CaptureRanges ranges;
//   ranges.Open(start_call_correlation_id);    // from the start call's callback
//   ranges.Close(stop_call_correlation_id);    // from the stop call's callback
//   if (ranges.Contains(record->correlationId)) Emit(...);
//
// Open and Close come from the program's threads and are serialized by a
// mutex; Contains runs on every launch and activity record and takes no lock.
// At the edges a range is exact for the calls of the thread that starts and
// stops it. A call that another thread makes at the same moment may fall on
// either side, and its launch record (decided when the launch returns) and
// its kernel record (decided when CUPTI hands it over) may then fall on
// different sides.
#ifndef CUPROBE_CUPTI_HOOK_CAPTURE_RANGE_H_
#define CUPROBE_CUPTI_HOOK_CAPTURE_RANGE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>

#include "absl/synchronization/mutex.h"
#include "probe/capture_range_end.h"

namespace cuprobe {

class CaptureRanges {
 public:
  // Ranges past this many are not captured (Open returns kFull once). A
  // program that brackets every step of a long run still gets its first
  // 4096 steps.
  static constexpr int kMaxRanges = kMaxCaptureRanges;

  // `limit`: ranges captured at most (--capture-range-end repeat:N), 1 to
  // kMaxRanges (clamped).
  explicit CaptureRanges(int limit = kMaxRanges)
      : limit_(limit < 1 ? 1 : (limit > kMaxRanges ? kMaxRanges : limit)) {}

  enum class Change { kOpened, kClosed, kUnchanged, kFull };

  // A start call: opens a range from `correlation_id` on. kUnchanged if one
  // is open already (a second start, or the driver call inside the
  // runtime's). kFull, once, when limit() ranges have been opened.
  // *number: the range's number from 1 (for messages), when opened.
  Change Open(uint32_t correlation_id, int* number = nullptr);
  // A stop call: the open range ends before `correlation_id`. kUnchanged if
  // none is open. *number: the range's number, when closed.
  Change Close(uint32_t correlation_id, int* number = nullptr);

  // Whether the call with this correlation id was made inside a range: the
  // last range opened at or before it, and not yet closed before it.
  [[nodiscard]] bool Contains(uint32_t correlation_id) const;
  // Ranges opened so far.
  [[nodiscard]] int count() const { return count_.load(std::memory_order_acquire); }
  [[nodiscard]] int limit() const { return limit_; }
  [[nodiscard]] bool open() const;

 private:
  static constexpr int64_t kOpenEnd = std::numeric_limits<int64_t>::max();
  struct Range {
    std::atomic<int64_t> begin{0};
    std::atomic<int64_t> end{kOpenEnd};  // exclusive; kOpenEnd while open
  };
  // The id widened against high_, which it moves forward when more than
  // 2^30 past it.
  int64_t Widen(uint32_t correlation_id) const;

  const int limit_;
  mutable absl::Mutex mu_;  // serializes Open and Close
  bool is_open_ ABSL_GUARDED_BY(mu_) = false;
  bool full_reported_ ABSL_GUARDED_BY(mu_) = false;
  // Filled in order; ranges_[i] is published by count_'s release store, and
  // only the last one's end changes after that.
  std::array<Range, kMaxRanges> ranges_;
  std::atomic<int> count_{0};
  // The highest widened id seen, give or take 2^30: readers move it forward.
  mutable std::atomic<int64_t> high_{0};
};

// When a capture range turns CUPTI's kernel, memcpy and memset activity
// off again. Turning it on at a start call and off at the stop call costs
// the program 40-160 us per range in all on an H100 (the two calls take the
// program's thread 12-45 us of it; 1,000 ranges of 100 empty kernels each
// took 1.51x native against 1.38x sharing one switch, and 1.78x against
// 1.41x with the activity left on, on a noisier machine;
// docs/PERFORMANCE.md). A program that brackets every step would pay that
// on every step, so ranges that follow each other closely share one
// switch:
//
//  - the first range of the run, and any range that opens kBackToBackNs or
//    more after the previous one closed, turns the activity off at its stop
//    (launch-bound work with the activity on cost 1.2-1.6x its time on
//    the H100 and H200: a switch is worth it once a gap is a millisecond
//    or more);
//  - a range that opens less than kBackToBackNs after the previous one
//    closed leaves it on at its stop ("lingering"); the next start then
//    finds it on, and the watcher turns it off once kBackToBackNs have
//    passed since the last close with no range opened (Watcher::WakeAt:
//    then, not at its next tick). The gaps' records are filtered by
//    correlation id as always.
//  - the last range a run may open (--capture-range-end repeat:N, the 4096
//    cap), and a range whose start CUPTI refused to turn the activity on
//    for, turn it off at their stop in any case.
//
// Timestamps are CUPTI's (ns). A clock that steps back reads as a long gap:
// the activity is then turned off as without this. Not thread-safe: the
// hook calls it under the mutex that orders its switching.
class RangeActivity {
 public:
  static constexpr uint64_t kBackToBackNs = 1'000'000;

  // A range opened at `now_ns` (the hook has turned the activity on before,
  // unless it was lingering).
  void Opened(uint64_t now_ns) {
    back_to_back_ = closed_ns_ != 0 && now_ns - closed_ns_ < kBackToBackNs;
    lingering_ = false;
  }
  // The open range closed at `now_ns`: whether to turn the activity off now
  // (else it lingers). `may_linger` false: off now whatever came before
  // (no range can open again; CUPTI refused to turn the activity on for
  // this range, so the next start must try again).
  [[nodiscard]] bool Closed(uint64_t now_ns, bool may_linger = true) {
    closed_ns_ = now_ns == 0 ? 1 : now_ns;
    lingering_ = back_to_back_ && may_linger;
    return !lingering_;
  }
  // The watcher's check (its wake, or a tick): whether to turn a lingering
  // activity off now.
  [[nodiscard]] bool Tick(uint64_t now_ns) {
    if (!lingering_ || now_ns - closed_ns_ < kBackToBackNs) return false;
    lingering_ = false;
    return true;
  }
  [[nodiscard]] bool lingering() const { return lingering_; }
  // How long from `now_ns` until Tick turns a lingering activity off (0:
  // due now).
  [[nodiscard]] uint64_t WaitNs(uint64_t now_ns) const {
    const uint64_t since = now_ns - closed_ns_;
    return since >= kBackToBackNs ? 0 : kBackToBackNs - since;
  }

 private:
  uint64_t closed_ns_ = 0;     // the last close; 0: none yet
  bool back_to_back_ = false;  // the open range came right after the last
  bool lingering_ = false;     // left on at the last close
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_CAPTURE_RANGE_H_
