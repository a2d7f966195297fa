#include "cupti_hook/capture_range.h"

#include <algorithm>

namespace cuprobe {

int64_t CaptureRanges::Widen(uint32_t correlation_id) const {
  int64_t high = high_.load(std::memory_order_relaxed);
  // The signed distance from the high mark's low 32 bits: ids behind it (a
  // record that arrives late) are negative, ids past a wrap positive.
  const auto delta = static_cast<int32_t>(correlation_id - static_cast<uint32_t>(high));
  const int64_t wide = high + delta;
  // Moved only in steps of 2^30 or more, so the threads that see every
  // launch do not all write the same line; a failed exchange means another
  // thread moved it.
  if (delta > (1 << 30)) {
    (void)high_.compare_exchange_strong(high, wide, std::memory_order_relaxed);
  }
  return wide;
}

CaptureRanges::Change CaptureRanges::Open(uint32_t correlation_id, int* number) {
  absl::MutexLock lock(&mu_);
  if (is_open_) return Change::kUnchanged;
  const int n = count_.load(std::memory_order_relaxed);
  if (n == limit_) {
    if (full_reported_) return Change::kUnchanged;
    full_reported_ = true;
    return Change::kFull;
  }
  // Ranges stay sorted and disjoint, which Contains' binary search needs,
  // even when a start on one thread took its id before a stop on another.
  int64_t begin = Widen(correlation_id);
  if (n > 0) begin = std::max(begin, ranges_[n - 1].end.load(std::memory_order_relaxed));
  ranges_[n].begin.store(begin, std::memory_order_relaxed);
  ranges_[n].end.store(kOpenEnd, std::memory_order_relaxed);
  count_.store(n + 1, std::memory_order_release);
  is_open_ = true;
  if (number != nullptr) *number = n + 1;
  return Change::kOpened;
}

CaptureRanges::Change CaptureRanges::Close(uint32_t correlation_id, int* number) {
  absl::MutexLock lock(&mu_);
  if (!is_open_) return Change::kUnchanged;
  const int n = count_.load(std::memory_order_relaxed);
  Range& last = ranges_[n - 1];
  last.end.store(std::max(Widen(correlation_id), last.begin.load(std::memory_order_relaxed)),
                 std::memory_order_release);
  is_open_ = false;
  if (number != nullptr) *number = n;
  return Change::kClosed;
}

bool CaptureRanges::Contains(uint32_t correlation_id) const {
  // 0 is CUPTI's "no correlation id" (some copies and sets): never in a
  // range, and not widened, which would read it as an id 2^32 ahead once
  // the real ones pass 2^31 and move the high mark there.
  if (correlation_id == 0) return false;
  // Widened before anything else: the ids of calls before the first range
  // move the high mark too.
  const int64_t id = Widen(correlation_id);
  const int n = count_.load(std::memory_order_acquire);
  // The last range that begins at or before the id.
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (ranges_[mid].begin.load(std::memory_order_relaxed) <= id) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return false;
  return id < ranges_[lo - 1].end.load(std::memory_order_acquire);
}

bool CaptureRanges::open() const {
  absl::MutexLock lock(&mu_);
  return is_open_;
}

}  // namespace cuprobe
