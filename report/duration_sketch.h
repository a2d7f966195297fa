// File: report/duration_sketch.h
//
// Statistics of a stream of durations in bounded memory, for summaries that
// must not keep every launch (a training run launches hundreds of millions
// of kernels). Exact: count, total, min, max, mean and the sample standard
// deviation (Welford's update; Chan's formula to merge). Approximate: the
// quantiles, from log-spaced buckets (the DDSketch construction): a value v
// >= 1 ns falls in bucket i = ceil(log_gamma(v)), gamma = (1 + a) / (1 - a),
// and a quantile is reported as its bucket's representative 2 gamma^i /
// (gamma + 1), clamped to [min, max], which is within a relative error of
// a = kRelativeError of some value of that rank. A zero has a bucket of its
// own (reported exactly). Buckets span at most ceil(log_gamma(2^64)) + 1 =
// 2,219 counters (17 KiB), whatever the count; in practice a few hundred.
// Sketches of the same kind merge exactly (the counts add up), so per-thread
// or per-process sketches can be combined.
//
//   DurationSketch s;
//   for (uint64_t ns : durations) s.Add(ns);
//   DurationStats stats = s.Stats();      // median within 1%, the rest exact
//   double p99 = s.ValueAtRank(NearestRank(s.count(), 99));
#ifndef CUPROBE_REPORT_DURATION_SKETCH_H_
#define CUPROBE_REPORT_DURATION_SKETCH_H_

#include <cstdint>
#include <vector>

#include "report/trace_report.h"

namespace cuprobe {

class DurationSketch {
 public:
  // The quantiles' relative error bound.
  static constexpr double kRelativeError = 0.01;

  void Add(uint64_t ns);
  void Merge(const DurationSketch& other);

  [[nodiscard]] uint64_t count() const { return count_; }
  [[nodiscard]] uint64_t total_ns() const { return total_ns_; }
  [[nodiscard]] uint64_t min_ns() const { return count_ == 0 ? 0 : min_ns_; }
  [[nodiscard]] uint64_t max_ns() const { return max_ns_; }
  // Counters held (the memory the sketch takes, 8 bytes each).
  [[nodiscard]] size_t buckets() const { return counts_.size(); }

  // The value of 1-based rank `rank` in sorted order (1 .. count), within
  // kRelativeError; 0 for an empty sketch.
  [[nodiscard]] double ValueAtRank(uint64_t rank) const;
  // As ComputeDurationStats (trace_report.h): the median of an even count
  // is the mean of the two middle values; only the median is approximate.
  [[nodiscard]] DurationStats Stats() const;

 private:
  static int32_t BucketOf(uint64_t ns);
  static double Representative(int32_t bucket);

  uint64_t count_ = 0;
  uint64_t total_ns_ = 0;
  uint64_t min_ns_ = UINT64_MAX;
  uint64_t max_ns_ = 0;
  double mean_ = 0;  // Welford
  double m2_ = 0;
  uint64_t zeros_ = 0;
  int32_t first_bucket_ = 0;      // bucket of counts_[0]
  std::vector<uint64_t> counts_;  // buckets first_bucket_ .. first_bucket_ + size - 1
};

// The nearest rank (1-based) of percentile `percent` among `count` values:
// ceil(count * percent / 100), at least 1.
[[nodiscard]] uint64_t NearestRank(uint64_t count, uint32_t percent);

}  // namespace cuprobe

#endif  // CUPROBE_REPORT_DURATION_SKETCH_H_
