#include "cupti_hook/capture_range.h"

#include <algorithm>

namespace cuprobe {

CaptureRanges::Change CaptureRanges::Open(uint32_t correlation_id) {
  absl::MutexLock lock(&mu_);
  if (is_open_) return Change::kUnchanged;
  int n = count_.load(std::memory_order_relaxed);
  if (n == kMaxRanges) {
    if (full_reported_) return Change::kUnchanged;
    full_reported_ = true;
    return Change::kFull;
  }
  // Ranges stay sorted and disjoint, which Contains' binary search needs,
  // even when a start on one thread took its id before a stop on another.
  uint32_t begin = correlation_id;
  if (n > 0) begin = std::max(begin, ranges_[n - 1].end.load(std::memory_order_relaxed));
  ranges_[n].begin.store(begin, std::memory_order_relaxed);
  ranges_[n].end.store(kOpenEnd, std::memory_order_relaxed);
  count_.store(n + 1, std::memory_order_release);
  is_open_ = true;
  return Change::kOpened;
}

CaptureRanges::Change CaptureRanges::Close(uint32_t correlation_id) {
  absl::MutexLock lock(&mu_);
  if (!is_open_) return Change::kUnchanged;
  Range& last = ranges_[count_.load(std::memory_order_relaxed) - 1];
  last.end.store(std::max(correlation_id, last.begin.load(std::memory_order_relaxed)),
                 std::memory_order_release);
  is_open_ = false;
  return Change::kClosed;
}

bool CaptureRanges::Contains(uint32_t correlation_id) const {
  const int n = count_.load(std::memory_order_acquire);
  // The last range that begins at or before the id.
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (ranges_[mid].begin.load(std::memory_order_relaxed) <= correlation_id) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return false;
  return correlation_id < ranges_[lo - 1].end.load(std::memory_order_acquire);
}

bool CaptureRanges::open() const {
  absl::MutexLock lock(&mu_);
  return is_open_;
}

}  // namespace cuprobe
