// File: report/duration_sketch.cc
#include "report/duration_sketch.h"

#include <algorithm>
#include <cmath>

namespace cuprobe {
namespace {

constexpr double kGamma = (1 + DurationSketch::kRelativeError) / (1 - DurationSketch::kRelativeError);
const double kLogGamma = std::log(kGamma);

}  // namespace

int32_t DurationSketch::BucketOf(uint64_t ns) {
  // ns >= 1: bucket i holds (gamma^(i-1), gamma^i]; bucket 0 holds 1.
  return static_cast<int32_t>(std::ceil(std::log(static_cast<double>(ns)) / kLogGamma));
}

double DurationSketch::Representative(int32_t bucket) {
  return 2 * std::pow(kGamma, bucket) / (kGamma + 1);
}

void DurationSketch::Add(uint64_t ns) {
  ++count_;
  total_ns_ += ns;
  min_ns_ = std::min(min_ns_, ns);
  max_ns_ = std::max(max_ns_, ns);
  const double delta = static_cast<double>(ns) - mean_;
  mean_ += delta / static_cast<double>(count_);
  m2_ += delta * (static_cast<double>(ns) - mean_);
  if (ns == 0) {
    ++zeros_;
    return;
  }
  const int32_t b = BucketOf(ns);
  if (counts_.empty()) {
    first_bucket_ = b;
    counts_.assign(1, 0);
  } else if (b < first_bucket_) {
    counts_.insert(counts_.begin(), static_cast<size_t>(first_bucket_ - b), 0);
    first_bucket_ = b;
  } else if (b >= first_bucket_ + static_cast<int32_t>(counts_.size())) {
    counts_.resize(static_cast<size_t>(b - first_bucket_ + 1), 0);
  }
  ++counts_[static_cast<size_t>(b - first_bucket_)];
}

void DurationSketch::Merge(const DurationSketch& other) {
  if (other.count_ == 0) return;
  if (count_ == 0) {
    *this = other;
    return;
  }
  const double n_a = static_cast<double>(count_), n_b = static_cast<double>(other.count_);
  const double delta = other.mean_ - mean_;
  const double n = n_a + n_b;
  mean_ += delta * n_b / n;
  m2_ += other.m2_ + delta * delta * n_a * n_b / n;
  count_ += other.count_;
  total_ns_ += other.total_ns_;
  min_ns_ = std::min(min_ns_, other.min_ns_);
  max_ns_ = std::max(max_ns_, other.max_ns_);
  zeros_ += other.zeros_;
  if (other.counts_.empty()) return;
  if (counts_.empty()) {
    first_bucket_ = other.first_bucket_;
    counts_ = other.counts_;
    return;
  }
  const int32_t first = std::min(first_bucket_, other.first_bucket_);
  const int32_t end =
      std::max(first_bucket_ + static_cast<int32_t>(counts_.size()),
               other.first_bucket_ + static_cast<int32_t>(other.counts_.size()));
  std::vector<uint64_t> merged(static_cast<size_t>(end - first), 0);
  for (size_t i = 0; i < counts_.size(); ++i) {
    merged[static_cast<size_t>(first_bucket_ - first) + i] += counts_[i];
  }
  for (size_t i = 0; i < other.counts_.size(); ++i) {
    merged[static_cast<size_t>(other.first_bucket_ - first) + i] += other.counts_[i];
  }
  first_bucket_ = first;
  counts_ = std::move(merged);
}

double DurationSketch::ValueAtRank(uint64_t rank) const {
  if (count_ == 0) return 0;
  rank = std::clamp<uint64_t>(rank, 1, count_);
  if (rank <= zeros_) return 0;
  uint64_t seen = zeros_;
  for (size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      const double v = Representative(first_bucket_ + static_cast<int32_t>(i));
      return std::clamp(v, static_cast<double>(min_ns_), static_cast<double>(max_ns_));
    }
  }
  return static_cast<double>(max_ns_);  // not reached: the counts add up to count_
}

DurationStats DurationSketch::Stats() const {
  DurationStats s;
  if (count_ == 0) return s;
  s.count = count_;
  s.total_ns = total_ns_;
  s.min_ns = min_ns_;
  s.max_ns = max_ns_;
  s.avg_ns = static_cast<double>(total_ns_) / static_cast<double>(count_);
  s.median_ns = count_ % 2 == 1
                    ? ValueAtRank(count_ / 2 + 1)
                    : (ValueAtRank(count_ / 2) + ValueAtRank(count_ / 2 + 1)) / 2.0;
  if (count_ > 1) s.stddev_ns = std::sqrt(std::max(m2_, 0.0) / static_cast<double>(count_ - 1));
  return s;
}

uint64_t NearestRank(uint64_t count, uint32_t percent) {
  return std::max<uint64_t>((count * percent + 99) / 100, 1);
}

}  // namespace cuprobe
