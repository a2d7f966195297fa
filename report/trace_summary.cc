// File: report/trace_summary.cc
//
// Summarize: a trace's records (TraceData) grouped into the rows of the
// nsys-style summaries (report/trace_report.h), one step per table: kernels
// by name, launch calls by launched name, memory operations by kind, and
// launch latency (each kernel against its launch call). Each step also adds
// its records to the totals and to the trace's time span. How the rows are
// rendered is in trace_report.cc (tables, CSV), trace_report_json.cc and
// trace_prometheus.cc.
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "report/trace_report.h"

namespace cuprobe {
namespace {

double Percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

// What one summary row accumulates; rows are keyed by name and sorted after.
struct Group {
  std::vector<uint64_t> durations;
  uint64_t bytes = 0;
  uint64_t errors = 0;
};

// Bucket of v in bpftrace's log2 histogram: 0 -> 0, [2^(b-1), 2^b) -> b.
size_t Log2Bucket(uint64_t v) { return v == 0 ? 0 : 64 - static_cast<size_t>(__builtin_clzll(v)); }

// The earliest start and latest end of every timed record seen, into
// totals.first_ns / last_ns.
class SpanTracker {
 public:
  explicit SpanTracker(TraceTotals& totals) : totals_(totals) {}

  void Note(uint64_t start, uint64_t end) {
    // CUPTI writes 0 for both when it could not time a call or kernel.
    if (start == 0) return;
    end = std::max(start, end);
    if (!have_time_) {
      totals_.first_ns = start;
      totals_.last_ns = end;
      have_time_ = true;
      return;
    }
    totals_.first_ns = std::min(totals_.first_ns, start);
    totals_.last_ns = std::max(totals_.last_ns, end);
  }

 private:
  TraceTotals& totals_;
  bool have_time_ = false;
};

// Kernels, grouped by raw name (several name ids may carry one name: the
// same kernel in two modules).
void SummarizeKernels(const TraceData& data, SpanTracker& span, TraceSummary& summary) {
  TraceTotals& totals = summary.totals;
  absl::flat_hash_map<std::string_view, Group> kernels;
  for (const KernelRecord& k : data.kernels()) {
    const uint64_t d = DurationNs(k.start_ns, k.end_ns);
    kernels[data.Name(k.name_id)].durations.push_back(d);
    totals.kernel_ns += d;
    span.Note(k.start_ns, k.end_ns);
  }
  totals.kernels = data.kernels().size();
  for (auto& [raw, group] : kernels) {
    KernelSummaryRow row;
    row.raw_name = std::string(raw);
    row.name = DemangleKernelName(raw);
    row.time = ComputeDurationStats(group.durations);
    row.time_percent = Percent(row.time.total_ns, totals.kernel_ns);
    summary.kernels.push_back(std::move(row));
  }
  std::sort(summary.kernels.begin(), summary.kernels.end(),
            [](const KernelSummaryRow& a, const KernelSummaryRow& b) {
              if (a.time.total_ns != b.time.total_ns) return a.time.total_ns > b.time.total_ns;
              if (a.name != b.name) return a.name < b.name;
              return a.raw_name < b.raw_name;
            });
}

// Launch API calls, grouped by kernel name.
void SummarizeLaunches(const TraceData& data, SpanTracker& span, TraceSummary& summary) {
  TraceTotals& totals = summary.totals;
  absl::flat_hash_map<std::string_view, Group> launches;
  for (const LaunchRecord& l : data.launches()) {
    Group& g = launches[LaunchReportName(data, l)];
    if (l.stream == kUnknownStream) ++totals.launches_from_activity;
    const uint64_t d = DurationNs(l.api_start_ns, l.api_end_ns);
    g.durations.push_back(d);
    if (l.result != 0) {
      ++g.errors;
      ++totals.launch_errors;
    }
    totals.launch_api_ns += d;
    span.Note(l.api_start_ns, l.api_end_ns);
  }
  totals.launches = data.launches().size();
  for (auto& [raw, group] : launches) {
    LaunchSummaryRow row;
    row.raw_name = std::string(raw);
    row.name = DemangleKernelName(raw);
    row.errors = group.errors;
    row.api_ns = ComputeDurationStats(group.durations);
    summary.launches.push_back(std::move(row));
  }
  std::sort(summary.launches.begin(), summary.launches.end(),
            [](const LaunchSummaryRow& a, const LaunchSummaryRow& b) {
              if (a.api_ns.total_ns != b.api_ns.total_ns) {
                return a.api_ns.total_ns > b.api_ns.total_ns;
              }
              if (a.name != b.name) return a.name < b.name;
              return a.raw_name < b.raw_name;
            });
}

MemOpSummaryRow MemOpRow(std::string_view operation, const Group& g, uint64_t all_ns) {
  MemOpSummaryRow row;
  row.operation = std::string(operation);
  row.total_bytes = g.bytes;
  row.time = ComputeDurationStats(g.durations);
  row.time_percent = Percent(row.time.total_ns, all_ns);
  return row;
}

// Memory operations: memcpys by kind, memsets in one row.
void SummarizeMemoryOps(const TraceData& data, SpanTracker& span, TraceSummary& summary) {
  TraceTotals& totals = summary.totals;
  absl::flat_hash_map<std::string_view, Group> memcpys;
  for (const MemcpyRecord& m : data.memcpys()) {
    Group& g = memcpys[MemcpyKindName(m.copy_kind)];
    const uint64_t d = DurationNs(m.start_ns, m.end_ns);
    g.durations.push_back(d);
    g.bytes += m.bytes;
    totals.memcpy_ns += d;
    totals.memcpy_bytes += m.bytes;
    span.Note(m.start_ns, m.end_ns);
  }
  totals.memcpys = data.memcpys().size();
  Group memsets;
  for (const MemsetRecord& m : data.memsets()) {
    const uint64_t d = DurationNs(m.start_ns, m.end_ns);
    memsets.durations.push_back(d);
    memsets.bytes += m.bytes;
    totals.memset_ns += d;
    totals.memset_bytes += m.bytes;
    span.Note(m.start_ns, m.end_ns);
  }
  totals.memsets = data.memsets().size();
  for (auto& [operation, group] : memcpys) {
    summary.memcpy.push_back(MemOpRow(operation, group, totals.memcpy_ns));
  }
  std::sort(summary.memcpy.begin(), summary.memcpy.end(),
            [](const MemOpSummaryRow& a, const MemOpSummaryRow& b) {
              if (a.time.total_ns != b.time.total_ns) return a.time.total_ns > b.time.total_ns;
              return a.operation < b.operation;
            });
  if (!memsets.durations.empty()) {
    summary.memset.push_back(MemOpRow(kMemsetOperationName, memsets, totals.memset_ns));
  }
}

// Launch latency: each kernel against the launch call of its correlation id.
void SummarizeLatency(const TraceData& data, TraceSummary& summary) {
  absl::flat_hash_map<uint64_t, uint64_t> launch_start;  // correlation id -> API start
  for (const LaunchRecord& l : data.launches()) {
    if (IsGraphLaunch(l.api)) continue;
    launch_start.emplace(l.correlation_id, l.api_start_ns);
  }
  absl::flat_hash_map<std::string_view, Group> latencies;
  for (const KernelRecord& k : data.kernels()) {
    auto it = launch_start.find(k.correlation_id);
    if (it == launch_start.end() || k.graph_node_id != 0) continue;
    const uint64_t d = DurationNs(it->second, k.start_ns);
    latencies[data.Name(k.name_id)].durations.push_back(d);
    // All 65 buckets: the last one printed is then never read as "and above".
    if (summary.latency_log2.empty()) summary.latency_log2.resize(65);
    ++summary.latency_log2[Log2Bucket(d)];
  }
  for (auto& [raw, group] : latencies) {
    LatencySummaryRow row;
    row.raw_name = std::string(raw);
    row.name = DemangleKernelName(raw);
    row.latency = ComputeDurationStats(group.durations);
    std::vector<uint64_t>& v = group.durations;
    const size_t rank = (v.size() * 99 + 99) / 100;  // nearest rank, 1-based
    std::nth_element(v.begin(), v.begin() + static_cast<long>(rank - 1), v.end());
    row.p99_ns = v[rank - 1];
    summary.latency.push_back(std::move(row));
  }
  std::sort(summary.latency.begin(), summary.latency.end(),
            [](const LatencySummaryRow& a, const LatencySummaryRow& b) {
              if (a.latency.median_ns != b.latency.median_ns) {
                return a.latency.median_ns > b.latency.median_ns;
              }
              if (a.name != b.name) return a.name < b.name;
              return a.raw_name < b.raw_name;
            });
}

}  // namespace

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
  TraceSummary summary;
  SpanTracker span(summary.totals);
  SummarizeKernels(data, span, summary);
  SummarizeLaunches(data, span, summary);
  SummarizeMemoryOps(data, span, summary);
  SummarizeLatency(data, summary);
  TraceTotals& totals = summary.totals;
  totals.processes = data.processes().size();
  totals.names = data.name_count();
  totals.span_ns = totals.last_ns - totals.first_ns;
  summary.counters = data.counters();
  return summary;
}

}  // namespace cuprobe
