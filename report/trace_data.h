// File: report/trace_data.h
//
// TraceData accumulates the trace records of one process (see
// probe/trace_records.h) for the report: names, launches, kernels, memory
// operations and processes. The consumer of the record ring feeds it each
// record's type and body; the hook (standalone mode) and tests may add the
// structs directly:
//
//   TraceData data;
//   for (const auto& [type, body] : ring_records) {
//     absl::Status s = data.Add(type, body);   // short/garbled body: error,
//     if (!s.ok()) CUPROBE_LOG(kWarning, ...); // counted, record skipped
//   }
//   data.AddDropped(ring.lost_records());
//   std::string_view name = data.Name(data.kernels()[0].name_id);
//
// Records of an unknown type are counted and skipped (a newer hook may emit
// types this reader does not know). Bodies may be longer than the struct
// (padding to a multiple of 8, or a future version's extra fields); only the
// struct's bytes are read.
//
// Several processes may share one session: the hook qualifies correlation
// and name ids with the writing process (probe/trace_records.h,
// ProcessQualifiedId), so one TraceData takes them all.
//
// Not thread-safe: one consumer thread feeds it.
#ifndef CUPROBE_REPORT_TRACE_DATA_H_
#define CUPROBE_REPORT_TRACE_DATA_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "probe/trace_records.h"

namespace cuprobe {

// Returned by TraceData::Name() for a name_id without a NameRecord (and for 0).
inline constexpr std::string_view kUnknownName = "<unknown>";

// "NameRecord", "KernelRecord", ... or "unknown record" for a type without one.
[[nodiscard]] std::string_view RecordTypeName(uint16_t type);

// What takes decoded records: TraceData (keeps them all), TraceAggregator
// (report/trace_aggregator.h: the summary in bounded memory) and
// PerfettoTimeline (report/trace_perfetto.h: streams the timeline).
class RecordConsumer {
 public:
  virtual ~RecordConsumer() = default;
  // A later name for the same id replaces it.
  virtual void AddName(uint64_t name_id, std::string_view name) = 0;
  virtual void AddProcess(const ProcessRecord& record) = 0;
  virtual void AddLaunch(const LaunchRecord& record) = 0;
  virtual void AddKernel(const KernelRecord& record) = 0;
  virtual void AddMemcpy(const MemcpyRecord& record) = 0;
  virtual void AddMemset(const MemsetRecord& record) = 0;
  virtual void AddProbeKernel(const ProbeKernelRecord& record) = 0;
  // `cuprobe list`'s records; reports have no use for them.
  virtual void AddCatalogKernel(const CatalogKernelRecord& record) { (void)record; }
};

struct TraceCounters {
  uint64_t accepted = 0;      // records stored (Add and the Add* calls)
  uint64_t invalid = 0;       // rejected by Add: short body, bad NameRecord
  uint64_t unknown_type = 0;  // skipped by Add: type this reader does not know
  uint64_t dropped = 0;       // lost before reaching us (AddDropped: ring overflow)
  // Launch records from API activity merged into the launch of the same
  // correlation id (a runtime call and the driver call inside it).
  uint64_t merged_launches = 0;
  // Launches and kernels summarized without their partner because it came
  // later than the join window allows (TraceAggregator).
  uint64_t join_evicted = 0;
};

// Decodes one ring record (`type` is RecordHeader::type, `body` the bytes
// after the header, trailing padding allowed) and hands it to `consumer`.
// A short or garbled body returns InvalidArgument naming the record type
// and the sizes, counts into counters.invalid and hands nothing on; an
// unknown type returns OK and counts into counters.unknown_type.
[[nodiscard]] absl::Status DecodeRecord(uint16_t type, absl::Span<const uint8_t> body,
                                        RecordConsumer& consumer, TraceCounters& counters);

class TraceData final : public RecordConsumer {
 public:
  TraceData() = default;
  TraceData(const TraceData&) = delete;
  TraceData& operator=(const TraceData&) = delete;
  TraceData(TraceData&&) = default;
  TraceData& operator=(TraceData&&) = default;

  // Decodes one record: `type` is RecordHeader::type, `body` the bytes after
  // the header (trailing padding allowed). An invalid body returns
  // InvalidArgument naming the record type and the sizes, counts as invalid
  // and stores nothing. An unknown type returns OK and counts as unknown_type.
  [[nodiscard]] absl::Status Add(uint16_t type, absl::Span<const uint8_t> body) {
    return DecodeRecord(type, body, *this, counters_);
  }

  // Direct adds (the hook, tests). A later name for the same id replaces it.
  void AddName(uint64_t name_id, std::string_view name) override;
  void AddProcess(const ProcessRecord& record) override;
  // A launch record whose stream is kUnknownStream (recorded from CUPTI's
  // driver or runtime API activity) gets its name, grid, block and shared
  // memory from the first kernel record of the same correlation id,
  // whichever of the two arrives first; graph launches and failed calls
  // keep theirs. A second such record of the same correlation id (the driver
  // call inside a runtime call) is merged into the first: one launch, with
  // the runtime call's times, API and result.
  void AddLaunch(const LaunchRecord& record) override;
  void AddKernel(const KernelRecord& record) override;
  void AddMemcpy(const MemcpyRecord& record) override;
  void AddMemset(const MemsetRecord& record) override;
  void AddProbeKernel(const ProbeKernelRecord& record) override;
  // Records the producer lost (ring full): reported in the summary.
  void AddDropped(uint64_t count) { counters_.dropped += count; }

  // The name for `name_id`, or kUnknownName. The view stays valid until the
  // next AddName/Add of a name record.
  [[nodiscard]] std::string_view Name(uint64_t name_id) const;
  [[nodiscard]] bool HasName(uint64_t name_id) const { return names_.contains(name_id); }

  [[nodiscard]] const std::vector<ProcessRecord>& processes() const { return processes_; }
  [[nodiscard]] const std::vector<LaunchRecord>& launches() const { return launches_; }
  [[nodiscard]] const std::vector<KernelRecord>& kernels() const { return kernels_; }
  [[nodiscard]] const std::vector<MemcpyRecord>& memcpys() const { return memcpys_; }
  [[nodiscard]] const std::vector<MemsetRecord>& memsets() const { return memsets_; }
  [[nodiscard]] const std::vector<ProbeKernelRecord>& probe_kernels() const {
    return probe_kernels_;
  }
  // The name of the instrumented kernel with this id ("" when none).
  [[nodiscard]] std::string_view ProbeKernelName(uint32_t kernel_id) const;
  [[nodiscard]] size_t name_count() const { return names_.size(); }
  [[nodiscard]] const absl::flat_hash_map<uint64_t, std::string>& names() const { return names_; }
  [[nodiscard]] const TraceCounters& counters() const { return counters_; }

 private:
  void IndexKernel(size_t index);

  // The join of launches from API activity with their kernels, kept
  // from the first such launch on: launches still waiting for their kernel,
  // and kernels no launch has claimed yet (by correlation id, to index).
  bool joining_ = false;
  absl::flat_hash_map<uint64_t, size_t> launches_waiting_;
  absl::flat_hash_map<uint64_t, size_t> kernels_unclaimed_;
  // Every launch from API activity by correlation id, to merge a second.
  absl::flat_hash_map<uint64_t, size_t> activity_launches_;

  absl::flat_hash_map<uint64_t, std::string> names_;
  std::vector<ProcessRecord> processes_;
  std::vector<LaunchRecord> launches_;
  std::vector<KernelRecord> kernels_;
  std::vector<MemcpyRecord> memcpys_;
  std::vector<MemsetRecord> memsets_;
  std::vector<ProbeKernelRecord> probe_kernels_;
  TraceCounters counters_;
};

}  // namespace cuprobe

#endif  // CUPROBE_REPORT_TRACE_DATA_H_
