// File: tests/report/duration_sketch_test.cc
//
// DurationSketch (report/duration_sketch.h) against the exact statistics
// (ComputeDurationStats and nearest-rank percentiles over sorted copies):
// counts, totals, extremes exact, mean and deviation to rounding, quantiles
// within the stated relative error, merges equal to one stream, memory
// bounded by the value range, not the count.
#include "report/duration_sketch.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "report/trace_report.h"

namespace cuprobe {
namespace {

double ExactAtRank(std::vector<uint64_t> v, uint64_t rank) {
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[rank - 1]);
}

void ExpectWithin(double got, double exact, const char* what) {
  if (exact == 0) {
    EXPECT_EQ(got, 0) << what;
    return;
  }
  EXPECT_LE(std::abs(got - exact) / exact, DurationSketch::kRelativeError + 1e-12)
      << what << ": " << got << " vs " << exact;
}

void ExpectMatches(const std::vector<uint64_t>& values, const DurationSketch& s) {
  const DurationStats exact = ComputeDurationStats(values);
  const DurationStats got = s.Stats();
  EXPECT_EQ(got.count, exact.count);
  EXPECT_EQ(got.total_ns, exact.total_ns);
  EXPECT_EQ(got.min_ns, exact.min_ns);
  EXPECT_EQ(got.max_ns, exact.max_ns);
  EXPECT_DOUBLE_EQ(got.avg_ns, exact.avg_ns);
  EXPECT_NEAR(got.stddev_ns, exact.stddev_ns, 1e-6 * std::max(1.0, exact.stddev_ns));
  // The median of an even count mixes two ranks, each within the bound.
  ExpectWithin(got.median_ns, exact.median_ns, "median");
  for (uint32_t percent : {1u, 10u, 50u, 90u, 99u, 100u}) {
    const uint64_t rank = NearestRank(values.size(), percent);
    ExpectWithin(s.ValueAtRank(rank), ExactAtRank(values, rank), "percentile");
  }
}

TEST(DurationSketch, EmptyAndSingleValues) {
  DurationSketch empty;
  EXPECT_EQ(empty.Stats().count, 0u);
  EXPECT_EQ(empty.ValueAtRank(1), 0);
  DurationSketch one;
  one.Add(3616);
  EXPECT_EQ(one.Stats().median_ns, 3616) << "clamped to min and max: exact";
  EXPECT_EQ(one.ValueAtRank(NearestRank(1, 99)), 3616);
  EXPECT_EQ(one.Stats().stddev_ns, 0);
  DurationSketch zeros;
  for (int i = 0; i < 5; ++i) zeros.Add(0);
  zeros.Add(7);
  EXPECT_EQ(zeros.ValueAtRank(5), 0) << "zeros are exact";
  EXPECT_EQ(zeros.ValueAtRank(6), 7);
}

TEST(DurationSketch, QuantilesWithinTheBoundOnEveryShape) {
  std::mt19937_64 rng(36);
  std::vector<std::vector<uint64_t>> shapes;
  std::uniform_int_distribution<uint64_t> uniform(1000, 5000);
  std::lognormal_distribution<double> lognormal(9.0, 2.0);
  std::vector<uint64_t> a, b, c, d;
  for (int i = 0; i < 20001; ++i) a.push_back(uniform(rng));
  for (int i = 0; i < 20000; ++i) b.push_back(static_cast<uint64_t>(lognormal(rng)));
  for (int i = 0; i < 1000; ++i) c.push_back(i % 10 == 0 ? 0 : 3584 + i % 3);  // with zeros
  for (int i = 0; i < 64; ++i) d.push_back(uint64_t{1} << i);                   // 1 ns .. 2^63 ns
  for (const std::vector<uint64_t>* v : {&a, &b, &c, &d}) {
    DurationSketch s;
    for (uint64_t x : *v) s.Add(x);
    ExpectMatches(*v, s);
  }
}

TEST(DurationSketch, MergedSketchesEqualOneStream) {
  std::mt19937_64 rng(37);
  std::lognormal_distribution<double> lognormal(8.0, 1.5);
  std::vector<uint64_t> all;
  DurationSketch whole, parts[3];
  for (int i = 0; i < 30000; ++i) {
    const uint64_t x = static_cast<uint64_t>(lognormal(rng)) + (i % 3 == 2 ? 1000000 : 0);
    all.push_back(x);
    whole.Add(x);
    parts[i % 3].Add(x);
  }
  DurationSketch merged;
  for (const DurationSketch& p : parts) merged.Merge(p);
  merged.Merge(DurationSketch());  // an empty one changes nothing
  ExpectMatches(all, merged);
  EXPECT_EQ(merged.Stats().median_ns, whole.Stats().median_ns);
  for (uint64_t rank : {uint64_t{1}, uint64_t{15000}, uint64_t{29700}, uint64_t{30000}}) {
    EXPECT_EQ(merged.ValueAtRank(rank), whole.ValueAtRank(rank)) << rank;
  }
}

// Memory follows the range of the values, never their count: 10M values
// spanning 1 ns to 2^64 - 1 ns fit in the 2,219 counters the header states.
TEST(DurationSketch, MemoryIsBoundedByTheRange) {
  DurationSketch s;
  std::mt19937_64 rng(38);
  for (int i = 0; i < 10'000'000; ++i) s.Add(1000 + rng() % 4000);
  const size_t narrow = s.buckets();
  EXPECT_LE(narrow, 100u) << "1-5 us in 1% steps";
  s.Add(1);
  s.Add(UINT64_MAX);
  EXPECT_LE(s.buckets(), 2219u);
  EXPECT_EQ(s.count(), 10'000'002u);
}

TEST(DurationSketch, NearestRankIsTheReportsRank) {
  EXPECT_EQ(NearestRank(1, 99), 1u);
  EXPECT_EQ(NearestRank(100, 99), 99u);
  EXPECT_EQ(NearestRank(101, 99), 100u);
  EXPECT_EQ(NearestRank(0, 50), 1u);
}

}  // namespace
}  // namespace cuprobe
