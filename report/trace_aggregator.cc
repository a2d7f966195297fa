// File: report/trace_aggregator.cc
//
// TraceAggregator: records folded into summary rows as they arrive (one
// step per record type), the launch/kernel joins kept in windows of the
// last arrivals, and Summary(): rows merged by name, sorted as nsys sorts.
#include "report/trace_aggregator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

namespace cuprobe {
namespace {

// Keys of the launch rows that have no name id (name ids have a nonzero
// low half: ProcessQualifiedId of a local id >= 1).
constexpr uint64_t kNoKernelRecordKey = 0;
constexpr uint64_t kGraphLaunchKey = uint64_t{1} << 32;
constexpr uint64_t kCudaGraphLaunchKey = uint64_t{2} << 32;

uint64_t LaunchKey(const LaunchRecord& l) {
  if (l.name_id != 0) return l.name_id;
  if (IsGraphLaunch(l.api)) {
    return l.api == static_cast<uint16_t>(LaunchApi::kCudaGraphLaunch) ? kCudaGraphLaunchKey
                                                                        : kGraphLaunchKey;
  }
  return kNoKernelRecordKey;
}

double Percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

// Bucket of v in bpftrace's log2 histogram: 0 -> 0, [2^(b-1), 2^b) -> b.
size_t Log2Bucket(uint64_t v) { return v == 0 ? 0 : 64 - static_cast<size_t>(__builtin_clzll(v)); }

// Groups keyed by id, merged by the raw name each id carries.
template <typename Key, typename NameOf>
absl::flat_hash_map<std::string_view, DurationGroup> ByName(
    const absl::flat_hash_map<Key, DurationGroup>& groups, NameOf name_of, size_t exact_limit) {
  absl::flat_hash_map<std::string_view, DurationGroup> by_name;
  for (const auto& [key, group] : groups) by_name[name_of(key)].Merge(group, exact_limit);
  return by_name;
}

template <typename Row, typename Less>
void SortRows(std::vector<Row>& rows, Less less) {
  std::sort(rows.begin(), rows.end(), less);
}

}  // namespace

// ---- DurationGroup ----

void DurationGroup::Add(uint64_t ns, size_t exact_limit) {
  sketch_.Add(ns);
  if (!exact_complete_) return;
  if (exact_.size() < exact_limit) {
    exact_.push_back(ns);
    return;
  }
  exact_complete_ = false;
  std::vector<uint64_t>().swap(exact_);
}

void DurationGroup::Merge(const DurationGroup& other, size_t exact_limit) {
  sketch_.Merge(other.sketch_);
  bytes += other.bytes;
  errors += other.errors;
  if (!exact_complete_) return;
  if (!other.exact_complete_ || exact_.size() + other.exact_.size() > exact_limit) {
    exact_complete_ = false;
    std::vector<uint64_t>().swap(exact_);
    return;
  }
  exact_.insert(exact_.end(), other.exact_.begin(), other.exact_.end());
}

DurationStats DurationGroup::Stats() const {
  return exact_complete_ ? ComputeDurationStats(exact_) : sketch_.Stats();
}

uint64_t DurationGroup::P99() const {
  const uint64_t n = count();
  if (n == 0) return 0;
  const uint64_t rank = NearestRank(n, 99);
  if (!exact_complete_) return static_cast<uint64_t>(std::llround(sketch_.ValueAtRank(rank)));
  std::vector<uint64_t> v = exact_;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(rank - 1), v.end());
  return v[rank - 1];
}

// ---- TraceAggregator: records in ----

TraceAggregator::TraceAggregator(AggregatorLimits limits) : limits_(limits) {}

void TraceAggregator::NoteSpan(uint64_t start, uint64_t end) {
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

void TraceAggregator::AddName(uint64_t name_id, std::string_view name) {
  names_.insert_or_assign(name_id, std::string(name));
  ++counters_.accepted;
}

void TraceAggregator::AddProcess(const ProcessRecord& record) {
  processes_.push_back(record);
  ++counters_.accepted;
}

void TraceAggregator::AddProbeKernel(const ProbeKernelRecord& record) {
  probe_kernels_.push_back(record);
  ++counters_.accepted;
}

std::string_view TraceAggregator::Name(uint64_t name_id) const {
  auto it = names_.find(name_id);
  return it == names_.end() ? kUnknownName : std::string_view(it->second);
}

void TraceAggregator::AddLaunch(const LaunchRecord& record) {
  ++counters_.accepted;
  NoteSpan(record.api_start_ns, record.api_end_ns);
  if (record.stream == kUnknownStream) {
    AddActivityLaunch(record);
    return;
  }
  ++totals_.launches;
  SummarizeLaunch(record, launches_);
  if (IsGraphLaunch(record.api)) return;
  if (!launch_starts_.try_emplace(record.correlation_id, record.api_start_ns).second) return;
  launch_starts_order_.push_back(record.correlation_id);
  EvictLaunchStarts();
}

void TraceAggregator::AddActivityLaunch(const LaunchRecord& record) {
  auto [it, first] = activity_launches_.try_emplace(record.correlation_id, record);
  if (!first) {
    // The runtime call the app made and the driver call inside it: one
    // launch, timed as the runtime call.
    ++counters_.merged_launches;
    LaunchRecord& kept = it->second;
    if (IsRuntimeLaunch(record.api) && !IsRuntimeLaunch(kept.api)) {
      kept.api_start_ns = record.api_start_ns;
      kept.api_end_ns = record.api_end_ns;
      kept.api = record.api;
      kept.result = record.result;
      if (auto s = launch_starts_.find(record.correlation_id); s != launch_starts_.end()) {
        s->second = record.api_start_ns;
      }
    }
    return;
  }
  ++totals_.launches;
  ++totals_.launches_from_activity;
  activity_launches_order_.push_back(record.correlation_id);
  LaunchRecord& l = it->second;
  const bool joins = !IsGraphLaunch(l.api) && l.result == 0;
  auto k = waiting_kernels_.find(l.correlation_id);
  if (k != waiting_kernels_.end()) {
    if (joins) {
      l.name_id = k->second.name_id;
      std::memcpy(l.grid, k->second.grid, sizeof(l.grid));
      std::memcpy(l.block, k->second.block, sizeof(l.block));
      l.shared_mem_bytes = k->second.shared_bytes;
    }
    if (!IsGraphLaunch(l.api)) AddLatency(k->second.name_id, l.api_start_ns, k->second.start_ns);
    waiting_kernels_.erase(k);
  } else if (!IsGraphLaunch(l.api) &&
             launch_starts_.try_emplace(l.correlation_id, l.api_start_ns).second) {
    launch_starts_order_.push_back(l.correlation_id);
    EvictLaunchStarts();
  }
  EvictActivityLaunches();
}

void TraceAggregator::SummarizeLaunch(const LaunchRecord& l,
                                      absl::flat_hash_map<uint64_t, DurationGroup>& groups) const {
  DurationGroup& g = groups[LaunchKey(l)];
  g.Add(DurationNs(l.api_start_ns, l.api_end_ns), limits_.exact_values);
  if (l.result != 0) ++g.errors;
}

void TraceAggregator::AddLatency(uint64_t name_id, uint64_t api_start_ns,
                                 uint64_t kernel_start_ns) {
  const uint64_t d = DurationNs(api_start_ns, kernel_start_ns);
  latency_[name_id].Add(d, limits_.exact_values);
  // All 65 buckets: the last one printed is then never read as "and above".
  if (latency_log2_.empty()) latency_log2_.resize(65);
  ++latency_log2_[Log2Bucket(d)];
}

void TraceAggregator::AddKernel(const KernelRecord& k) {
  ++counters_.accepted;
  ++totals_.kernels;
  const uint64_t d = DurationNs(k.start_ns, k.end_ns);
  kernels_[k.name_id].Add(d, limits_.exact_values);
  totals_.kernel_ns += d;
  NoteSpan(k.start_ns, k.end_ns);
  if (k.graph_node_id != 0) return;  // its launch is a graph's: no latency, no name
  // A launch from API activity waiting for its name.
  if (auto a = activity_launches_.find(k.correlation_id); a != activity_launches_.end()) {
    LaunchRecord& l = a->second;
    if (!IsGraphLaunch(l.api) && l.result == 0 && l.name_id == 0) {
      l.name_id = k.name_id;
      std::memcpy(l.grid, k.grid, sizeof(l.grid));
      std::memcpy(l.block, k.block, sizeof(l.block));
      l.shared_mem_bytes = k.dynamic_shared_bytes;
    }
  }
  if (auto s = launch_starts_.find(k.correlation_id); s != launch_starts_.end()) {
    AddLatency(k.name_id, s->second, k.start_ns);
    launch_starts_.erase(s);
    return;
  }
  WaitingKernel w{k.name_id, k.start_ns, {}, {}, k.dynamic_shared_bytes};
  std::memcpy(w.grid, k.grid, sizeof(w.grid));
  std::memcpy(w.block, k.block, sizeof(w.block));
  if (!waiting_kernels_.try_emplace(k.correlation_id, w).second) return;
  waiting_kernels_order_.push_back(k.correlation_id);
  EvictWaitingKernels();
}

void TraceAggregator::AddMemcpy(const MemcpyRecord& m) {
  ++counters_.accepted;
  ++totals_.memcpys;
  DurationGroup& g = memcpys_[m.copy_kind];
  const uint64_t d = DurationNs(m.start_ns, m.end_ns);
  g.Add(d, limits_.exact_values);
  g.bytes += m.bytes;
  totals_.memcpy_ns += d;
  totals_.memcpy_bytes += m.bytes;
  NoteSpan(m.start_ns, m.end_ns);
}

void TraceAggregator::AddMemset(const MemsetRecord& m) {
  ++counters_.accepted;
  ++totals_.memsets;
  const uint64_t d = DurationNs(m.start_ns, m.end_ns);
  memsets_.Add(d, limits_.exact_values);
  memsets_.bytes += m.bytes;
  totals_.memset_ns += d;
  totals_.memset_bytes += m.bytes;
  NoteSpan(m.start_ns, m.end_ns);
}

// ---- the join windows ----

void TraceAggregator::EvictLaunchStarts() {
  while (launch_starts_order_.size() > limits_.join_window) {
    counters_.join_evicted += launch_starts_.erase(launch_starts_order_.front());
    launch_starts_order_.pop_front();
  }
}

void TraceAggregator::EvictWaitingKernels() {
  while (waiting_kernels_order_.size() > limits_.join_window) {
    counters_.join_evicted += waiting_kernels_.erase(waiting_kernels_order_.front());
    waiting_kernels_order_.pop_front();
  }
}

void TraceAggregator::EvictActivityLaunches() {
  while (activity_launches_order_.size() > limits_.join_window) {
    auto it = activity_launches_.find(activity_launches_order_.front());
    activity_launches_order_.pop_front();
    if (it == activity_launches_.end()) continue;
    const LaunchRecord& l = it->second;
    SummarizeLaunch(l, launches_);
    activity_launches_.erase(it);
  }
}

// ---- Summary ----

namespace {

template <typename Row>
bool ByTotalThenName(const Row& a, const Row& b, uint64_t ta, uint64_t tb) {
  if (ta != tb) return ta > tb;
  if (a.name != b.name) return a.name < b.name;
  return a.raw_name < b.raw_name;
}

MemOpSummaryRow MemOpRow(std::string_view operation, const DurationGroup& g, uint64_t all_ns) {
  MemOpSummaryRow row;
  row.operation = std::string(operation);
  row.total_bytes = g.bytes;
  row.time = g.Stats();
  row.time_percent = Percent(row.time.total_ns, all_ns);
  return row;
}

}  // namespace

TraceSummary TraceAggregator::Summary() const {
  TraceSummary summary;
  summary.totals = totals_;
  TraceTotals& totals = summary.totals;
  const size_t limit = limits_.exact_values;
  auto name_of = [this](uint64_t id) { return Name(id); };

  for (auto& [raw, g] : ByName(kernels_, name_of, limit)) {
    KernelSummaryRow row;
    row.raw_name = std::string(raw);
    row.name = DemangleKernelName(raw);
    row.time = g.Stats();
    row.time_percent = Percent(row.time.total_ns, totals.kernel_ns);
    summary.kernels.push_back(std::move(row));
  }
  SortRows(summary.kernels, [](const KernelSummaryRow& a, const KernelSummaryRow& b) {
    return ByTotalThenName(a, b, a.time.total_ns, b.time.total_ns);
  });

  absl::flat_hash_map<uint64_t, DurationGroup> launches = launches_;
  for (const auto& [id, l] : activity_launches_) SummarizeLaunch(l, launches);
  auto launch_name = [this](uint64_t key) -> std::string_view {
    if (key == kNoKernelRecordKey) return kNoKernelRecordName;
    if (key == kGraphLaunchKey) return "[cuGraphLaunch]";
    if (key == kCudaGraphLaunchKey) return "[cudaGraphLaunch]";
    return Name(key);
  };
  for (auto& [raw, g] : ByName(launches, launch_name, limit)) {
    LaunchSummaryRow row;
    row.raw_name = std::string(raw);
    row.name = DemangleKernelName(raw);
    row.errors = g.errors;
    row.api_ns = g.Stats();
    totals.launch_errors += g.errors;
    totals.launch_api_ns += row.api_ns.total_ns;
    summary.launches.push_back(std::move(row));
  }
  SortRows(summary.launches, [](const LaunchSummaryRow& a, const LaunchSummaryRow& b) {
    return ByTotalThenName(a, b, a.api_ns.total_ns, b.api_ns.total_ns);
  });

  for (const auto& [kind, g] : memcpys_) {
    summary.memcpy.push_back(MemOpRow(MemcpyKindName(kind), g, totals.memcpy_ns));
  }
  SortRows(summary.memcpy, [](const MemOpSummaryRow& a, const MemOpSummaryRow& b) {
    if (a.time.total_ns != b.time.total_ns) return a.time.total_ns > b.time.total_ns;
    return a.operation < b.operation;
  });
  if (memsets_.count() > 0) {
    summary.memset.push_back(MemOpRow(kMemsetOperationName, memsets_, totals.memset_ns));
  }

  for (auto& [raw, g] : ByName(latency_, name_of, limit)) {
    LatencySummaryRow row;
    row.raw_name = std::string(raw);
    row.name = DemangleKernelName(raw);
    row.latency = g.Stats();
    row.p99_ns = g.P99();
    summary.latency.push_back(std::move(row));
  }
  SortRows(summary.latency, [](const LatencySummaryRow& a, const LatencySummaryRow& b) {
    if (a.latency.median_ns != b.latency.median_ns) return a.latency.median_ns > b.latency.median_ns;
    if (a.name != b.name) return a.name < b.name;
    return a.raw_name < b.raw_name;
  });
  summary.latency_log2 = latency_log2_;

  totals.processes = processes_.size();
  totals.names = names_.size();
  totals.span_ns = totals.last_ns - totals.first_ns;
  summary.counters = counters_;
  return summary;
}

}  // namespace cuprobe
