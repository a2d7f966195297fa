// File: tests/report/trace_aggregator_test.cc
//
// TraceAggregator (report/trace_aggregator.h): the summary of a stream in
// bounded memory. 20M records through the ring's decoder with exact counts
// and measured RSS growth; the same summary as Summarize(TraceData) while
// rows stay under the exact limit; medians within the sketch's error past
// it; joins of launches from API activity; the join window's eviction.
#include "report/trace_aggregator.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "report/trace_data.h"
#include "tests/report/trace_report_test_util.h"

namespace cuprobe {
namespace {

using testing::kUnderAsan;
using testing::RssBytes;

template <typename T>
absl::Status Feed(TraceAggregator& agg, RecordType type, const T& record) {
  uint8_t body[sizeof(T)];
  std::memcpy(body, &record, sizeof(T));
  return agg.Add(static_cast<uint16_t>(type), absl::MakeConstSpan(body, sizeof(T)));
}

LaunchRecord Launch(uint64_t corr, uint64_t name, uint64_t start, uint64_t end) {
  LaunchRecord l{};
  l.correlation_id = corr;
  l.name_id = name;
  l.api_start_ns = start;
  l.api_end_ns = end;
  l.stream = 7;
  l.api = static_cast<uint16_t>(LaunchApi::kLaunchKernel);
  return l;
}

KernelRecord Kernel(uint64_t corr, uint64_t name, uint64_t start, uint64_t end) {
  KernelRecord k{};
  k.correlation_id = corr;
  k.name_id = name;
  k.start_ns = start;
  k.end_ns = end;
  k.grid[0] = k.block[0] = 1;
  return k;
}

TEST(TraceAggregator, TwentyMillionRecordsInBoundedMemoryWithExactCounts) {
  TraceAggregator agg;
  agg.AddName(1, "fast_kernel");
  agg.AddName(2, "slow_kernel");
  // 20M records: a launch and a kernel each (2M under ASan).
  constexpr uint64_t kLaunches = kUnderAsan ? 1'000'000 : 10'000'000;
  uint64_t rss_at_1m = 0;
  uint64_t kernel_ns = 0;
  for (uint64_t i = 1; i <= kLaunches; ++i) {
    const uint64_t name = (i % 4 == 0) ? 2 : 1;
    const uint64_t t = i * 1000;
    ASSERT_TRUE(Feed(agg, RecordType::kLaunch, Launch(i, name, t, t + 50)).ok());
    // Kernels trail their launches by 1000 records, as activity buffers do.
    if (i > 1000) {
      const uint64_t j = i - 1000;
      const uint64_t jn = (j % 4 == 0) ? 2 : 1;
      const uint64_t jd = jn == 2 ? 400 + j % 7 : 100 + j % 3;
      ASSERT_TRUE(Feed(agg, RecordType::kKernel, Kernel(j, jn, j * 1000 + 300, j * 1000 + 300 + jd)).ok());
      kernel_ns += jd;
    }
    if (i == kLaunches / 10) rss_at_1m = RssBytes();
  }
  for (uint64_t j = kLaunches - 999; j <= kLaunches; ++j) {
    const uint64_t jn = (j % 4 == 0) ? 2 : 1;
    const uint64_t jd = jn == 2 ? 400 + j % 7 : 100 + j % 3;
    agg.AddKernel(Kernel(j, jn, j * 1000 + 300, j * 1000 + 300 + jd));
    kernel_ns += jd;
  }
  const uint64_t growth = RssBytes() - rss_at_1m;
  // 9M more launches and kernels than at the first measurement: storing
  // them (as TraceData does, 184 bytes a pair) would take 1.6 GB.
  if (!kUnderAsan) {
    EXPECT_LT(growth, uint64_t{16} << 20) << "RSS grew by " << growth << " bytes";
  }
  EXPECT_LE(agg.waiting(), 2000u);

  const TraceSummary s = agg.Summary();
  EXPECT_EQ(s.totals.launches, kLaunches);
  EXPECT_EQ(s.totals.kernels, kLaunches);
  EXPECT_EQ(s.totals.kernel_ns, kernel_ns);
  EXPECT_EQ(s.counters.accepted, 2 * kLaunches + 2);
  ASSERT_EQ(s.kernels.size(), 2u);
  // Longest total first: 2.5M slow ones (about 403 ns) before 7.5M fast ones.
  EXPECT_EQ(s.kernels[0].name, "slow_kernel");
  EXPECT_EQ(s.kernels[0].time.count, kLaunches / 4);
  EXPECT_EQ(s.kernels[1].name, "fast_kernel");
  EXPECT_EQ(s.kernels[1].time.count, kLaunches * 3 / 4);
  EXPECT_EQ(s.kernels[1].time.min_ns, 100u);
  EXPECT_EQ(s.kernels[1].time.max_ns, 102u);
  EXPECT_NEAR(s.kernels[1].time.median_ns, 101, 101 * DurationSketch::kRelativeError);
  ASSERT_EQ(s.latency.size(), 2u);
  uint64_t latency_count = 0;
  for (const LatencySummaryRow& r : s.latency) {
    latency_count += r.latency.count;
    EXPECT_EQ(r.latency.min_ns, 300u);
    EXPECT_EQ(r.latency.max_ns, 300u);
    EXPECT_EQ(r.p99_ns, 300u);
  }
  EXPECT_EQ(latency_count, kLaunches);
  EXPECT_EQ(s.counters.join_evicted, 0u);
}

TEST(TraceAggregator, BadRecordsAreCountedAndSkipped) {
  TraceAggregator agg;
  const uint8_t short_body[4] = {};
  EXPECT_FALSE(agg.Add(static_cast<uint16_t>(RecordType::kKernel), short_body).ok());
  EXPECT_TRUE(agg.Add(999, short_body).ok());
  NameRecord lying{3, 1000, 0};
  EXPECT_FALSE(Feed(agg, RecordType::kName, lying).ok());
  agg.AddKernel(Kernel(1, 0, 10, 20));
  const TraceSummary s = agg.Summary();
  EXPECT_EQ(s.counters.invalid, 2u);
  EXPECT_EQ(s.counters.unknown_type, 1u);
  EXPECT_EQ(s.totals.kernels, 1u);
}

TEST(TraceAggregator, ActivityLaunchesTakeTheirKernelsNameInEitherOrder) {
  TraceAggregator agg;
  agg.AddName(5, "k");
  LaunchRecord first = Launch(1, 0, 100, 200);
  first.stream = kUnknownStream;
  agg.AddLaunch(first);
  agg.AddKernel(Kernel(1, 5, 300, 400));
  agg.AddKernel(Kernel(2, 5, 900, 1000));
  LaunchRecord second = Launch(2, 0, 500, 600);
  second.stream = kUnknownStream;
  agg.AddLaunch(second);
  LaunchRecord runtime = second;  // the runtime call around the driver call
  runtime.api = static_cast<uint16_t>(LaunchApi::kCudaLaunchKernel);
  runtime.api_start_ns = 450;
  agg.AddLaunch(runtime);
  const TraceSummary s = agg.Summary();
  EXPECT_EQ(s.totals.launches, 2u);
  EXPECT_EQ(s.counters.merged_launches, 1u);
  ASSERT_EQ(s.launches.size(), 1u);
  EXPECT_EQ(s.launches[0].name, "k");
  EXPECT_EQ(s.launches[0].api_ns.total_ns, 100u + 150u);
  ASSERT_EQ(s.latency.size(), 1u);
  EXPECT_EQ(s.latency[0].latency.min_ns, 200u);
  // The kernel met the driver call's record first: latency from its start.
  EXPECT_EQ(s.latency[0].latency.max_ns, 400u);
}

TEST(TraceAggregator, PartnersPastTheWindowAreSummarizedUnjoined) {
  AggregatorLimits limits;
  limits.join_window = 4;
  TraceAggregator agg(limits);
  agg.AddName(5, "k");
  for (uint64_t i = 1; i <= 10; ++i) agg.AddLaunch(Launch(i, 5, i * 10, i * 10 + 1));
  for (uint64_t i = 1; i <= 10; ++i) agg.AddKernel(Kernel(i, 5, 1000 + i, 1002 + i));
  const TraceSummary s = agg.Summary();
  EXPECT_EQ(s.totals.kernels, 10u);
  ASSERT_EQ(s.latency.size(), 1u);
  EXPECT_EQ(s.latency[0].latency.count, 4u);  // launches 7..10 were still waiting
  EXPECT_GT(s.counters.join_evicted, 0u);
  EXPECT_LE(agg.waiting(), 8u);
}

TEST(TraceAggregator, PastTheExactLimitMediansComeFromTheSketch) {
  AggregatorLimits limits;
  limits.exact_values = 10;
  TraceAggregator agg(limits);
  agg.AddName(5, "k");
  std::vector<uint64_t> durations;
  for (uint64_t i = 1; i <= 1001; ++i) {
    agg.AddKernel(Kernel(i, 5, 1, 1 + i * 37));
    durations.push_back(i * 37);
  }
  const DurationStats exact = ComputeDurationStats(durations);
  const DurationStats got = agg.Summary().kernels.at(0).time;
  EXPECT_EQ(got.count, exact.count);
  EXPECT_EQ(got.total_ns, exact.total_ns);
  EXPECT_EQ(got.min_ns, exact.min_ns);
  EXPECT_EQ(got.max_ns, exact.max_ns);
  EXPECT_NEAR(got.stddev_ns, exact.stddev_ns, 1e-6 * exact.stddev_ns);
  EXPECT_NEAR(got.median_ns, exact.median_ns, exact.median_ns * DurationSketch::kRelativeError);
}

}  // namespace
}  // namespace cuprobe
