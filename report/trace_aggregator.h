// File: report/trace_aggregator.h
//
// TraceAggregator builds the summary of a trace (report/trace_report.h)
// while its records stream in, in memory that does not grow with the
// number of records: a one-hour training run launches hundreds of millions
// of kernels, and `cuprobe trace` aggregates them as it drains the ring.
//
//   TraceAggregator agg;
//   for (const auto& [type, body] : ring_records) {
//     absl::Status s = agg.Add(type, body);   // as TraceData::Add
//   }
//   TraceSummary summary = agg.Summary();     // any time, as often as wanted
//
// What it keeps:
//   - one row per kernel name, launched name, memcpy kind and for memsets,
//     each with exact count, total, min, max, mean and standard deviation;
//     the row's durations themselves while there are at most
//     AggregatorLimits::exact_values of them (medians and p99 then exact,
//     as nsys computes them), and beyond that a DurationSketch
//     (report/duration_sketch.h: median and p99 within 1% relative error);
//   - names, processes and instrumented kernels (bounded by the program's
//     distinct kernels, not its launches);
//   - the joins of launches with their kernels by correlation id, for
//     launch latency and to name launches recorded from API activity: a
//     record waits for its partner among the last AggregatorLimits::
//     join_window arrivals of its kind. One whose partner comes later than
//     that is summarized unjoined (a launch from API activity then as
//     kNoKernelRecordName, a kernel without a latency) and counted in
//     TraceCounters::join_evicted.
// At the default limits a trace of any length holds at most about 100 MB
// (measured in tests/report/trace_aggregator_test.cc).
//
// Not thread-safe: one consumer thread feeds it.
#ifndef CUPROBE_REPORT_TRACE_AGGREGATOR_H_
#define CUPROBE_REPORT_TRACE_AGGREGATOR_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "report/duration_sketch.h"
#include "report/trace_data.h"
#include "report/trace_report.h"

namespace cuprobe {

struct AggregatorLimits {
  // Durations a summary row keeps exactly; beyond, its quantiles come
  // from the sketch.
  size_t exact_values = 1024;
  // Launches (kernels) that may wait for their kernel (launch) at once.
  size_t join_window = size_t{1} << 19;
  // No limit: everything exact and joined (Summarize of a TraceData).
  static AggregatorLimits Unbounded() { return {SIZE_MAX, SIZE_MAX}; }
};

// The durations of one summary row.
class DurationGroup {
 public:
  void Add(uint64_t ns, size_t exact_limit);
  void Merge(const DurationGroup& other, size_t exact_limit);
  [[nodiscard]] DurationStats Stats() const;
  // The nearest-rank 99th percentile.
  [[nodiscard]] uint64_t P99() const;
  [[nodiscard]] uint64_t count() const { return sketch_.count(); }

  uint64_t bytes = 0;
  uint64_t errors = 0;

 private:
  DurationSketch sketch_;
  std::vector<uint64_t> exact_;
  bool exact_complete_ = true;
};

class TraceAggregator final : public RecordConsumer {
 public:
  explicit TraceAggregator(AggregatorLimits limits = AggregatorLimits());
  TraceAggregator(const TraceAggregator&) = delete;
  TraceAggregator& operator=(const TraceAggregator&) = delete;

  [[nodiscard]] absl::Status Add(uint16_t type, absl::Span<const uint8_t> body) {
    return DecodeRecord(type, body, *this, counters_);
  }
  void AddName(uint64_t name_id, std::string_view name) override;
  void AddProcess(const ProcessRecord& record) override;
  // As TraceData::AddLaunch: a launch from API activity (kUnknownStream)
  // takes its kernel's name; a second one of its correlation id merges.
  void AddLaunch(const LaunchRecord& record) override;
  void AddKernel(const KernelRecord& record) override;
  void AddMemcpy(const MemcpyRecord& record) override;
  void AddMemset(const MemsetRecord& record) override;
  void AddProbeKernel(const ProbeKernelRecord& record) override;
  void AddDropped(uint64_t count) { counters_.dropped += count; }

  // Everything added so far; launches still waiting for their kernel are
  // summarized as they stand (and go on waiting).
  [[nodiscard]] TraceSummary Summary() const;

  [[nodiscard]] std::string_view Name(uint64_t name_id) const;
  [[nodiscard]] const std::vector<ProcessRecord>& processes() const { return processes_; }
  [[nodiscard]] const std::vector<ProbeKernelRecord>& probe_kernels() const {
    return probe_kernels_;
  }
  [[nodiscard]] const TraceCounters& counters() const { return counters_; }
  // Records waiting for a partner now (bounded by the join window).
  [[nodiscard]] size_t waiting() const {
    return launch_starts_.size() + waiting_kernels_.size() + activity_launches_.size();
  }

 private:
  // A kernel whose launch has not come yet.
  struct WaitingKernel {
    uint64_t name_id;
    uint64_t start_ns;
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shared_bytes;
  };

  void NoteSpan(uint64_t start, uint64_t end);
  void AddActivityLaunch(const LaunchRecord& record);
  void SummarizeLaunch(const LaunchRecord& l,
                       absl::flat_hash_map<uint64_t, DurationGroup>& groups) const;
  void AddLatency(uint64_t name_id, uint64_t api_start_ns, uint64_t kernel_start_ns);
  // Drops the oldest entries of `order` beyond the join window.
  void EvictLaunchStarts();
  void EvictWaitingKernels();
  void EvictActivityLaunches();

  AggregatorLimits limits_;
  TraceCounters counters_;
  absl::flat_hash_map<uint64_t, std::string> names_;
  std::vector<ProcessRecord> processes_;
  std::vector<ProbeKernelRecord> probe_kernels_;

  // Summary rows, keyed by name id (merged by name in Summary()).
  absl::flat_hash_map<uint64_t, DurationGroup> kernels_;
  absl::flat_hash_map<uint64_t, DurationGroup> launches_;  // LaunchKey()
  absl::flat_hash_map<uint8_t, DurationGroup> memcpys_;
  DurationGroup memsets_;
  absl::flat_hash_map<uint64_t, DurationGroup> latency_;
  std::vector<uint64_t> latency_log2_;
  TraceTotals totals_;
  bool have_time_ = false;

  // The joins: correlation id -> API start of a launch waiting for its
  // kernel; kernels waiting for their launch; launches from API activity
  // waiting for their kernel and for a second record (runtime + driver).
  absl::flat_hash_map<uint64_t, uint64_t> launch_starts_;
  std::deque<uint64_t> launch_starts_order_;
  absl::flat_hash_map<uint64_t, WaitingKernel> waiting_kernels_;
  std::deque<uint64_t> waiting_kernels_order_;
  absl::flat_hash_map<uint64_t, LaunchRecord> activity_launches_;
  std::deque<uint64_t> activity_launches_order_;
};

}  // namespace cuprobe

#endif  // CUPROBE_REPORT_TRACE_AGGREGATOR_H_
