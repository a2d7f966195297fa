// File: report/trace_summary.cc
//
// ComputeDurationStats (nsys' statistics of a set of durations), and
// Summarize of a whole TraceData: its records fed to a TraceAggregator with
// no limits (report/trace_aggregator.h), so rows are built in one place.
// How the rows are rendered is in trace_report.cc (tables, CSV),
// trace_report_json.cc and trace_prometheus.cc.
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "report/trace_aggregator.h"
#include "report/trace_report.h"

namespace cuprobe {

DurationStats ComputeDurationStats(absl::Span<const uint64_t> durations_ns) {
  DurationStats s;
  if (durations_ns.empty()) return s;
  std::vector<uint64_t> sorted(durations_ns.begin(), durations_ns.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  s.count = n;
  for (uint64_t d : sorted) s.total_ns += d;
  s.min_ns = sorted.front();
  s.max_ns = sorted.back();
  s.avg_ns = static_cast<double>(s.total_ns) / static_cast<double>(n);
  s.median_ns = n % 2 == 1 ? static_cast<double>(sorted[n / 2])
                           : (static_cast<double>(sorted[n / 2 - 1]) +
                              static_cast<double>(sorted[n / 2])) / 2.0;
  if (n > 1) {
    // Two passes (mean first): a one-pass sum-of-squares formula cancels
    // catastrophically when the spread is small next to the values.
    double sum_sq = 0;
    for (uint64_t d : sorted) {
      const double dev = static_cast<double>(d) - s.avg_ns;
      sum_sq += dev * dev;
    }
    s.stddev_ns = std::sqrt(sum_sq / static_cast<double>(n - 1));
  }
  return s;
}

TraceSummary Summarize(const TraceData& data) {
  TraceAggregator agg(AggregatorLimits::Unbounded());
  for (const auto& [id, name] : data.names()) agg.AddName(id, name);
  for (const ProcessRecord& p : data.processes()) agg.AddProcess(p);
  for (const LaunchRecord& l : data.launches()) agg.AddLaunch(l);
  for (const KernelRecord& k : data.kernels()) agg.AddKernel(k);
  for (const MemcpyRecord& m : data.memcpys()) agg.AddMemcpy(m);
  for (const MemsetRecord& m : data.memsets()) agg.AddMemset(m);
  TraceSummary summary = agg.Summary();
  summary.counters = data.counters();
  return summary;
}

}  // namespace cuprobe
