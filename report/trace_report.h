// File: report/trace_report.h
//
// The summary of a trace, in the style of `nsys stats`: per kernel name (the
// cuda_gpu_kern_sum report), per launched kernel name (API calls on the CPU),
// and per memory-operation kind. Rendered as an aligned text table, CSV or
// JSON. The Chrome/Perfetto timeline is in report/trace_chrome.h.
//
//   TraceData data = ...;                        // report/trace_data.h
//   TraceSummary summary = Summarize(data);
//   std::string text = FormatSummaryText(summary);   // all tables
//   CUPROBE_RETURN_IF_ERROR(WriteFile("report.json", FormatSummaryJson(summary)));
//
// Output looks like (FormatKernelSummaryTable; tests/report/golden/ has more):
//
//   Time (%)  Total Time (ns)  Instances  Avg (ns)  Med (ns)  Min (ns)  Max (ns)  StdDev (ns)  Name
//   --------  ---------------  ---------  --------  --------  --------  --------  -----------  ----
//       74.4             6000          3    2000.0    2000.0      1000      3000       1000.0  void reduce<256>(float const*, float*, int)
//       12.4             1000          4     250.0     250.0       100       400        129.1  vec_add(float const*, float const*, float*, int)
//        6.2              500          1     500.0     500.0       500       500          0.0  detail::scale(float*, float)
//
// Everything here builds strings (no iostreams, no exceptions, no static
// state): it is also linked into libcuprobe_hook.so, which writes the report
// itself in standalone mode.
#ifndef CUPROBE_REPORT_TRACE_REPORT_H_
#define CUPROBE_REPORT_TRACE_REPORT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "report/trace_data.h"

namespace cuprobe {

// Bumped when a column or a JSON key changes meaning.
inline constexpr int kTraceReportVersion = 1;

// Statistics of a set of durations, as nsys computes them: the median of an
// even count is the mean of the two middle values; the standard deviation is
// the sample one (n - 1), 0 for a single value.
struct DurationStats {
  uint64_t count = 0;
  uint64_t total_ns = 0;
  uint64_t min_ns = 0;
  uint64_t max_ns = 0;
  double avg_ns = 0;
  double median_ns = 0;
  double stddev_ns = 0;
};
[[nodiscard]] DurationStats ComputeDurationStats(absl::Span<const uint64_t> durations_ns);

// end - start, or 0 when a record has end < start (an incomplete record).
[[nodiscard]] inline uint64_t DurationNs(uint64_t start_ns, uint64_t end_ns) {
  return end_ns > start_ns ? end_ns - start_ns : 0;
}

// The Itanium-demangled form of `raw` (abi::__cxa_demangle), or `raw` itself
// when it is not a mangled name ("_Z..."), or does not demangle.
[[nodiscard]] std::string DemangleKernelName(std::string_view raw);

// "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel",
// "cuGraphLaunch", "cudaLaunchKernel", "cudaLaunchKernelExC",
// "cudaLaunchCooperativeKernel", "cudaGraphLaunch"; "cuLaunch (api N)" for
// other values.
[[nodiscard]] std::string LaunchApiName(uint16_t api);

// The raw name a launch is reported under: its kernel's; "[cuGraphLaunch]"
// or "[cudaGraphLaunch]" for a graph launch; or kNoKernelRecordName for a
// launch recorded from API activity that no kernel record joined (the call
// failed, was captured into a graph, or its kernel record was lost).
inline constexpr std::string_view kNoKernelRecordName = "[launch without a kernel record]";
[[nodiscard]] std::string_view LaunchReportName(const TraceData& data, const LaunchRecord& l);
// nsys' operation names: "[CUDA memcpy Host-to-Device]", ...; "[CUDA memcpy
// Unknown]" for kinds outside CUpti_ActivityMemcpyKind 1..10.
[[nodiscard]] std::string_view MemcpyKindName(uint8_t copy_kind);
inline constexpr std::string_view kMemsetOperationName = "[CUDA memset]";
// "Pageable", "Pinned", "Device", ... (CUpti_ActivityMemoryKind); "Unknown".
[[nodiscard]] std::string_view MemoryKindName(uint8_t memory_kind);

// One row per kernel name (grouped by the raw name).
struct KernelSummaryRow {
  std::string name;      // demangled
  std::string raw_name;  // as recorded
  double time_percent = 0;  // of all kernels' total time
  DurationStats time;       // time.count = instances
};

// One row per launched kernel name; graph launches (name_id 0) are one row
// named "[cuGraphLaunch]".
struct LaunchSummaryRow {
  std::string name;
  std::string raw_name;
  uint64_t errors = 0;    // calls whose CUresult was not CUDA_SUCCESS
  DurationStats api_ns;   // api_ns.count = calls; time in the API call
};

// One row per memcpy kind, or the single memset row.
struct MemOpSummaryRow {
  std::string operation;  // MemcpyKindName() or kMemsetOperationName
  uint64_t total_bytes = 0;
  double time_percent = 0;  // of all memcpys' (or memsets') total time
  DurationStats time;       // time.count = operations
};

// Launch latency per kernel name: from the launch call on the CPU (API
// start) to the kernel's start on the GPU, for kernels whose launch record
// is in the trace (matched by correlation id). CUPTI puts both timestamps on
// one clock, so no calibration is left to do. Graph launches are not
// matched (one call starts many kernels).
struct LatencySummaryRow {
  std::string name;
  std::string raw_name;
  DurationStats latency;  // latency.count = matched kernels
  uint64_t p99_ns = 0;    // nearest-rank 99th percentile
};

struct TraceTotals {
  uint64_t kernels = 0;
  uint64_t kernel_ns = 0;
  uint64_t launches = 0;
  // Of those, recorded from CUPTI's API activity (CUPROBE_LAUNCH_TIMES=
  // activity) rather than launch callbacks.
  uint64_t launches_from_activity = 0;
  uint64_t launch_errors = 0;
  uint64_t launch_api_ns = 0;
  uint64_t memcpys = 0;
  uint64_t memcpy_bytes = 0;
  uint64_t memcpy_ns = 0;
  uint64_t memsets = 0;
  uint64_t memset_bytes = 0;
  uint64_t memset_ns = 0;
  uint64_t processes = 0;
  uint64_t names = 0;
  // Earliest start and latest end over launches, kernels and memory
  // operations (0 and 0 when there are none); span_ns = last - first.
  uint64_t first_ns = 0;
  uint64_t last_ns = 0;
  uint64_t span_ns = 0;
};

// Rows are sorted by total time, longest first; ties by name.
struct TraceSummary {
  std::vector<KernelSummaryRow> kernels;
  std::vector<LaunchSummaryRow> launches;
  std::vector<MemOpSummaryRow> memcpy;
  std::vector<MemOpSummaryRow> memset;
  // Sorted by median latency, longest first; ties by name.
  std::vector<LatencySummaryRow> latency;
  // Every matched kernel's latency in log2 buckets (bucket b holds
  // [2^(b-1), 2^b); 0 holds 0), as bpftrace's hist() (FormatLog2Histogram
  // of maps/map_print.h prints it).
  std::vector<uint64_t> latency_log2;
  TraceTotals totals;
  TraceCounters counters;  // dropped / invalid / unknown records
};
[[nodiscard]] TraceSummary Summarize(const TraceData& data);

// Aligned text tables: numbers right-aligned, % and averages with one
// decimal, the name column last and left-aligned. No trailing spaces.
[[nodiscard]] std::string FormatKernelSummaryTable(absl::Span<const KernelSummaryRow> rows);
[[nodiscard]] std::string FormatLaunchSummaryTable(absl::Span<const LaunchSummaryRow> rows);
[[nodiscard]] std::string FormatMemOpSummaryTable(absl::Span<const MemOpSummaryRow> rows);
[[nodiscard]] std::string FormatLatencySummaryTable(absl::Span<const LatencySummaryRow> rows);
// All tables with titles, totals, and a warning line when records were
// dropped, invalid or of unknown type.
[[nodiscard]] std::string FormatSummaryText(const TraceSummary& summary);

// The Prometheus text exposition format (version 0.0.4) of a summary, for
// aggregation across ranks and machines: every sample carries `labels`
// (e.g. {"host", "node7"}, {"rank", "3"}, {"pid", "4242"}) plus its own
// (kernel, kind, quantile). Counters for kernel instances and GPU seconds,
// launch calls and errors, memcpy/memset bytes and seconds, dropped records;
// a summary (quantiles 0.5 and 0.99, _sum, _count) for launch latency.
// Label values are escaped (\\, \", \n); names are sorted by the summary.
[[nodiscard]] std::string FormatPrometheus(
    const TraceSummary& summary, absl::Span<const std::pair<std::string, std::string>> labels);

// CSV (RFC 4180): a header row, then one row per line ("\n"); a field with a
// comma, quote, CR or LF is quoted, with quotes doubled. Same columns and
// number formats as the tables.
[[nodiscard]] std::string FormatKernelSummaryCsv(absl::Span<const KernelSummaryRow> rows);
[[nodiscard]] std::string FormatLaunchSummaryCsv(absl::Span<const LaunchSummaryRow> rows);
[[nodiscard]] std::string FormatMemOpSummaryCsv(absl::Span<const MemOpSummaryRow> rows);

// One JSON object: {"version", "kernels": [...], "launches": [...],
// "memcpy": [...], "memset": [...], "totals": {...}, "dropped": {...}}.
// "totals" also holds "records" (accepted); "dropped" holds the
// dropped_records, invalid_records and unknown_type_records counters.
// Times are integers in ns except avg/median/stddev (one decimal) and
// time_percent (three decimals).
[[nodiscard]] std::string FormatSummaryJson(const TraceSummary& summary);

// Appends `text` as a JSON string literal (quotes included): escapes '"',
// '\\' and every control character; bytes that are not valid UTF-8 become
// U+FFFD, so the output is always valid JSON.
void AppendJsonString(std::string* out, std::string_view text);
// Appends `field` as one CSV field, quoted when it needs to be.
void AppendCsvField(std::string* out, std::string_view field);

// Writes `content` to `path` (created 0644 or truncated). Errors name the
// path: "cannot write report 'x/y.json': No such file or directory".
[[nodiscard]] absl::Status WriteFile(std::string_view path, std::string_view content);

}  // namespace cuprobe

#endif  // CUPROBE_REPORT_TRACE_REPORT_H_
