// File: report/trace_report.cc
#include "report/trace_report.h"

#include <cxxabi.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cuprobe {
namespace {

constexpr std::string_view kGraphLaunchName = "[cuGraphLaunch]";
constexpr std::string_view kCudaGraphLaunchName = "[cudaGraphLaunch]";

double Percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

std::string OneDecimal(double v) { return absl::StrFormat("%.1f", v); }

// What one summary row accumulates; rows are keyed by name and sorted after.
struct Group {
  std::vector<uint64_t> durations;
  uint64_t bytes = 0;
  uint64_t errors = 0;
};

// ---- text tables -----------------------------------------------------------

struct Column {
  std::string_view header;
  bool right_align;
};

// Renders rows of cells under `columns`: one leading space, two between
// columns (as nsys does), a dash rule under the headers. The last column is
// not padded, so lines carry no trailing spaces.
std::string RenderTable(absl::Span<const Column> columns,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(columns.size());
  for (size_t c = 0; c < columns.size(); ++c) width[c] = columns[c].header.size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < columns.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto append_line = [&](auto cell_of) {
    out += ' ';
    for (size_t c = 0; c < columns.size(); ++c) {
      std::string_view cell = cell_of(c);
      const bool last = c + 1 == columns.size();
      if (c > 0) out += "  ";
      if (columns[c].right_align) {
        out.append(width[c] - cell.size(), ' ');
        out += cell;
      } else {
        out += cell;
        if (!last) out.append(width[c] - cell.size(), ' ');
      }
    }
    out += '\n';
  };
  append_line([&](size_t c) { return columns[c].header; });
  std::vector<std::string> rules;
  for (size_t c = 0; c < columns.size(); ++c) {
    rules.emplace_back(columns[c].right_align ? width[c] : columns[c].header.size(), '-');
  }
  append_line([&](size_t c) { return std::string_view(rules[c]); });
  for (const auto& row : rows) {
    append_line([&](size_t c) { return std::string_view(row[c]); });
  }
  return out;
}

std::string RenderCsv(absl::Span<const Column> columns,
                      const std::vector<std::vector<std::string>>& rows) {
  std::string out;
  for (size_t c = 0; c < columns.size(); ++c) {
    if (c > 0) out += ',';
    AppendCsvField(&out, columns[c].header);
  }
  out += '\n';
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) out += ',';
      AppendCsvField(&out, row[c]);
    }
    out += '\n';
  }
  return out;
}

constexpr Column kKernelColumns[] = {
    {"Time (%)", true}, {"Total Time (ns)", true}, {"Instances", true},
    {"Avg (ns)", true}, {"Med (ns)", true},        {"Min (ns)", true},
    {"Max (ns)", true}, {"StdDev (ns)", true},     {"Name", false},
};

std::vector<std::vector<std::string>> KernelCells(absl::Span<const KernelSummaryRow> rows) {
  std::vector<std::vector<std::string>> cells;
  cells.reserve(rows.size());
  for (const auto& r : rows) {
    cells.push_back({OneDecimal(r.time_percent), absl::StrCat(r.time.total_ns),
                     absl::StrCat(r.time.count), OneDecimal(r.time.avg_ns),
                     OneDecimal(r.time.median_ns), absl::StrCat(r.time.min_ns),
                     absl::StrCat(r.time.max_ns), OneDecimal(r.time.stddev_ns), r.name});
  }
  return cells;
}

constexpr Column kLatencyColumns[] = {
    {"Kernels", true}, {"Avg (ns)", true}, {"Med (ns)", true}, {"Min (ns)", true},
    {"P99 (ns)", true}, {"Max (ns)", true}, {"Name", false},
};

std::vector<std::vector<std::string>> LatencyCells(absl::Span<const LatencySummaryRow> rows) {
  std::vector<std::vector<std::string>> cells;
  cells.reserve(rows.size());
  for (const auto& r : rows) {
    cells.push_back({absl::StrCat(r.latency.count), OneDecimal(r.latency.avg_ns),
                     OneDecimal(r.latency.median_ns), absl::StrCat(r.latency.min_ns),
                     absl::StrCat(r.p99_ns), absl::StrCat(r.latency.max_ns), r.name});
  }
  return cells;
}

// Bucket of v in bpftrace's log2 histogram: 0 -> 0, [2^(b-1), 2^b) -> b.
size_t Log2Bucket(uint64_t v) { return v == 0 ? 0 : 64 - static_cast<size_t>(__builtin_clzll(v)); }

constexpr Column kLaunchColumns[] = {
    {"Calls", true},        {"Errors", true},   {"Total API Time (ns)", true},
    {"Avg API (ns)", true}, {"Min (ns)", true}, {"Max (ns)", true},
    {"Name", false},
};

std::vector<std::vector<std::string>> LaunchCells(absl::Span<const LaunchSummaryRow> rows) {
  std::vector<std::vector<std::string>> cells;
  cells.reserve(rows.size());
  for (const auto& r : rows) {
    cells.push_back({absl::StrCat(r.api_ns.count), absl::StrCat(r.errors),
                     absl::StrCat(r.api_ns.total_ns), OneDecimal(r.api_ns.avg_ns),
                     absl::StrCat(r.api_ns.min_ns), absl::StrCat(r.api_ns.max_ns), r.name});
  }
  return cells;
}

constexpr Column kMemOpColumns[] = {
    {"Time (%)", true}, {"Total Time (ns)", true}, {"Count", true},
    {"Total Bytes", true}, {"Avg (ns)", true}, {"Med (ns)", true},
    {"Min (ns)", true}, {"Max (ns)", true}, {"StdDev (ns)", true},
    {"Operation", false},
};

std::vector<std::vector<std::string>> MemOpCells(absl::Span<const MemOpSummaryRow> rows) {
  std::vector<std::vector<std::string>> cells;
  cells.reserve(rows.size());
  for (const auto& r : rows) {
    cells.push_back({OneDecimal(r.time_percent), absl::StrCat(r.time.total_ns),
                     absl::StrCat(r.time.count), absl::StrCat(r.total_bytes),
                     OneDecimal(r.time.avg_ns), OneDecimal(r.time.median_ns),
                     absl::StrCat(r.time.min_ns), absl::StrCat(r.time.max_ns),
                     OneDecimal(r.time.stddev_ns), r.operation});
  }
  return cells;
}

// ---- JSON ------------------------------------------------------------------

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid
// (overlong forms, surrogates and code points above U+10FFFF are invalid).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t len;
  uint32_t min;
  if (b0 < 0x80) return 1;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  uint32_t cp = b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

void AppendKey(std::string* out, std::string_view key) {
  AppendJsonString(out, key);
  *out += ':';
}

template <typename T>
void AppendField(std::string* out, std::string_view key, T value, bool first = false) {
  if (!first) *out += ',';
  AppendKey(out, key);
  absl::StrAppend(out, value);
}

void AppendDecimalField(std::string* out, std::string_view key, double value, int decimals) {
  *out += ',';
  AppendKey(out, key);
  absl::StrAppend(out, absl::StrFormat("%.*f", decimals, value));
}

void AppendStringField(std::string* out, std::string_view key, std::string_view value,
                       bool first = false) {
  if (!first) *out += ',';
  AppendKey(out, key);
  AppendJsonString(out, value);
}

void AppendStats(std::string* out, const DurationStats& s, std::string_view suffix) {
  AppendField(out, absl::StrCat("total", suffix), s.total_ns);
  AppendDecimalField(out, absl::StrCat("avg", suffix), s.avg_ns, 1);
  AppendDecimalField(out, absl::StrCat("median", suffix), s.median_ns, 1);
  AppendField(out, absl::StrCat("min", suffix), s.min_ns);
  AppendField(out, absl::StrCat("max", suffix), s.max_ns);
  AppendDecimalField(out, absl::StrCat("stddev", suffix), s.stddev_ns, 1);
}

template <typename Row, typename AppendRow>
void AppendArray(std::string* out, std::string_view key, const std::vector<Row>& rows,
                 AppendRow append_row) {
  absl::StrAppend(out, "  ");
  AppendKey(out, key);
  if (rows.empty()) {
    *out += "[],\n";
    return;
  }
  *out += "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    *out += "    {";
    append_row(rows[i]);
    *out += i + 1 < rows.size() ? "},\n" : "}\n";
  }
  *out += "  ],\n";
}

void AppendMemOpRow(std::string* out, const MemOpSummaryRow& r) {
  AppendStringField(out, "operation", r.operation, /*first=*/true);
  AppendDecimalField(out, "time_percent", r.time_percent, 3);
  AppendField(out, "count", r.time.count);
  AppendField(out, "total_bytes", r.total_bytes);
  AppendStats(out, r.time, "_ns");
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

std::string DemangleKernelName(std::string_view raw) {
  // __cxa_demangle also decodes bare type encodings ("i" -> "int"): only try
  // function names.
  if (raw.size() < 3 || raw.substr(0, 2) != "_Z") return std::string(raw);
  const std::string nul_terminated(raw);
  int status = 0;
  char* demangled = abi::__cxa_demangle(nul_terminated.c_str(), nullptr, nullptr, &status);
  if (status != 0 || demangled == nullptr) {
    std::free(demangled);
    return nul_terminated;
  }
  std::string result(demangled);
  std::free(demangled);
  return result;
}

std::string LaunchApiName(uint16_t api) {
  switch (static_cast<LaunchApi>(api)) {
    case LaunchApi::kLaunchKernel:
      return "cuLaunchKernel";
    case LaunchApi::kLaunchKernelEx:
      return "cuLaunchKernelEx";
    case LaunchApi::kLaunchCooperativeKernel:
      return "cuLaunchCooperativeKernel";
    case LaunchApi::kGraphLaunch:
      return "cuGraphLaunch";
    case LaunchApi::kCudaLaunchKernel:
      return "cudaLaunchKernel";
    case LaunchApi::kCudaLaunchKernelEx:
      return "cudaLaunchKernelExC";
    case LaunchApi::kCudaLaunchCooperativeKernel:
      return "cudaLaunchCooperativeKernel";
    case LaunchApi::kCudaGraphLaunch:
      return "cudaGraphLaunch";
  }
  return absl::StrCat("cuLaunch (api ", api, ")");
}

std::string_view LaunchReportName(const TraceData& data, const LaunchRecord& l) {
  if (l.name_id != 0) return data.Name(l.name_id);
  if (IsGraphLaunch(l.api)) {
    return l.api == static_cast<uint16_t>(LaunchApi::kCudaGraphLaunch) ? kCudaGraphLaunchName
                                                                        : kGraphLaunchName;
  }
  if (l.stream == kUnknownStream) return kNoKernelRecordName;
  return data.Name(l.name_id);
}

std::string_view MemcpyKindName(uint8_t copy_kind) {
  // CUpti_ActivityMemcpyKind (cupti_activity.h); not included here, so this
  // file needs no CUPTI headers.
  switch (copy_kind) {
    case 1: return "[CUDA memcpy Host-to-Device]";
    case 2: return "[CUDA memcpy Device-to-Host]";
    case 3: return "[CUDA memcpy Host-to-Array]";
    case 4: return "[CUDA memcpy Array-to-Host]";
    case 5: return "[CUDA memcpy Array-to-Array]";
    case 6: return "[CUDA memcpy Array-to-Device]";
    case 7: return "[CUDA memcpy Device-to-Array]";
    case 8: return "[CUDA memcpy Device-to-Device]";
    case 9: return "[CUDA memcpy Host-to-Host]";
    case 10: return "[CUDA memcpy Peer-to-Peer]";
    default: return "[CUDA memcpy Unknown]";
  }
}

std::string_view MemoryKindName(uint8_t memory_kind) {
  // CUpti_ActivityMemoryKind.
  switch (memory_kind) {
    case 1: return "Pageable";
    case 2: return "Pinned";
    case 3: return "Device";
    case 4: return "Array";
    case 5: return "Managed";
    case 6: return "Device Static";
    case 7: return "Managed Static";
    default: return "Unknown";
  }
}

namespace {

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

std::string FormatKernelSummaryTable(absl::Span<const KernelSummaryRow> rows) {
  return RenderTable(kKernelColumns, KernelCells(rows));
}

std::string FormatLaunchSummaryTable(absl::Span<const LaunchSummaryRow> rows) {
  return RenderTable(kLaunchColumns, LaunchCells(rows));
}

std::string FormatMemOpSummaryTable(absl::Span<const MemOpSummaryRow> rows) {
  return RenderTable(kMemOpColumns, MemOpCells(rows));
}

std::string FormatLatencySummaryTable(absl::Span<const LatencySummaryRow> rows) {
  return RenderTable(kLatencyColumns, LatencyCells(rows));
}

std::string FormatKernelSummaryCsv(absl::Span<const KernelSummaryRow> rows) {
  return RenderCsv(kKernelColumns, KernelCells(rows));
}

std::string FormatLaunchSummaryCsv(absl::Span<const LaunchSummaryRow> rows) {
  return RenderCsv(kLaunchColumns, LaunchCells(rows));
}

std::string FormatMemOpSummaryCsv(absl::Span<const MemOpSummaryRow> rows) {
  return RenderCsv(kMemOpColumns, MemOpCells(rows));
}

std::string FormatSummaryText(const TraceSummary& summary) {
  const TraceTotals& t = summary.totals;
  const TraceCounters& c = summary.counters;
  std::string out;
  auto section = [&out](std::string_view title, bool empty, std::string table) {
    absl::StrAppend(&out, title, ":\n\n");
    if (empty) {
      out += " (none)\n\n";
      return;
    }
    absl::StrAppend(&out, table, "\n");
  };
  section("CUDA GPU kernel summary (cuda_gpu_kern_sum)", summary.kernels.empty(),
          FormatKernelSummaryTable(summary.kernels));
  section("CUDA kernel launch summary (CPU API calls)", summary.launches.empty(),
          FormatLaunchSummaryTable(summary.launches));
  section("CUDA GPU memcpy summary", summary.memcpy.empty(),
          FormatMemOpSummaryTable(summary.memcpy));
  section("CUDA GPU memset summary", summary.memset.empty(),
          FormatMemOpSummaryTable(summary.memset));
  section("CUDA launch latency (launch call on the CPU to kernel start on the GPU)",
          summary.latency.empty(), FormatLatencySummaryTable(summary.latency));
  absl::StrAppend(&out, "Totals: ", t.kernels, " kernels (", t.kernel_ns, " ns), ", t.launches,
                  " launches (", t.launch_errors, " failed",
                  t.launches_from_activity != 0
                      ? absl::StrCat(", ", t.launches_from_activity, " from API activity")
                      : std::string(),
                  "), ", t.memcpys, " memcpys (",
                  t.memcpy_bytes, " bytes, ", t.memcpy_ns, " ns), ", t.memsets, " memsets (",
                  t.memset_bytes, " bytes, ", t.memset_ns, " ns); trace span ", t.span_ns,
                  " ns\n");
  if (c.dropped != 0 || c.invalid != 0 || c.unknown_type != 0) {
    absl::StrAppend(&out, "Warning: the trace is incomplete: ", c.dropped,
                    " records dropped (ring full), ", c.invalid, " invalid, ", c.unknown_type,
                    " of unknown type\n");
  }
  return out;
}

namespace {

// A label value in the exposition format: backslash, double quote and
// newline escaped; anything else as is (UTF-8 allowed).
std::string PromLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class PromWriter {
 public:
  explicit PromWriter(absl::Span<const std::pair<std::string, std::string>> labels) {
    for (const auto& [k, v] : labels) {
      absl::StrAppend(&common_, common_.empty() ? "" : ",", k, "=\"", PromLabelValue(v), "\"");
    }
  }
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  // `extra`: more labels, already rendered (k="v",...).
  void Sample(std::string_view name, std::string_view extra, std::string_view value) {
    std::string labels = common_;
    if (!extra.empty()) absl::StrAppend(&labels, labels.empty() ? "" : ",", extra);
    absl::StrAppend(&out_, name, labels.empty() ? "" : absl::StrCat("{", labels, "}"), " ",
                    value, "\n");
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string common_;
  std::string out_;
};

std::string Label(std::string_view key, std::string_view value) {
  return absl::StrCat(key, "=\"", PromLabelValue(value), "\"");
}

std::string Seconds(uint64_t ns) { return absl::StrFormat("%.9f", static_cast<double>(ns) * 1e-9); }
std::string Seconds(double ns) { return absl::StrFormat("%.9f", ns * 1e-9); }

}  // namespace

std::string FormatPrometheus(const TraceSummary& summary,
                             absl::Span<const std::pair<std::string, std::string>> labels) {
  PromWriter w(labels);
  w.Family("cuprobe_kernel_instances_total", "counter", "Kernels that ran on the GPU.");
  for (const KernelSummaryRow& r : summary.kernels) {
    w.Sample("cuprobe_kernel_instances_total", Label("kernel", r.name), absl::StrCat(r.time.count));
  }
  w.Family("cuprobe_kernel_seconds_total", "counter", "GPU time of kernels, start to end.");
  for (const KernelSummaryRow& r : summary.kernels) {
    w.Sample("cuprobe_kernel_seconds_total", Label("kernel", r.name), Seconds(r.time.total_ns));
  }
  w.Family("cuprobe_launch_calls_total", "counter", "Kernel launch API calls on the CPU.");
  for (const LaunchSummaryRow& r : summary.launches) {
    w.Sample("cuprobe_launch_calls_total", Label("kernel", r.name), absl::StrCat(r.api_ns.count));
  }
  w.Family("cuprobe_launch_errors_total", "counter", "Launch calls that returned an error.");
  for (const LaunchSummaryRow& r : summary.launches) {
    w.Sample("cuprobe_launch_errors_total", Label("kernel", r.name), absl::StrCat(r.errors));
  }
  w.Family("cuprobe_launch_api_seconds_total", "counter", "Time spent in launch API calls.");
  for (const LaunchSummaryRow& r : summary.launches) {
    w.Sample("cuprobe_launch_api_seconds_total", Label("kernel", r.name),
             Seconds(r.api_ns.total_ns));
  }
  w.Family("cuprobe_launch_latency_seconds", "summary",
           "Launch call on the CPU to kernel start on the GPU.");
  for (const LatencySummaryRow& r : summary.latency) {
    const std::string k = Label("kernel", r.name);
    w.Sample("cuprobe_launch_latency_seconds", absl::StrCat(k, ",quantile=\"0.5\""),
             Seconds(r.latency.median_ns));
    w.Sample("cuprobe_launch_latency_seconds", absl::StrCat(k, ",quantile=\"0.99\""),
             Seconds(r.p99_ns));
    w.Sample("cuprobe_launch_latency_seconds_sum", k, Seconds(r.latency.total_ns));
    w.Sample("cuprobe_launch_latency_seconds_count", k, absl::StrCat(r.latency.count));
  }
  w.Family("cuprobe_memory_operations_total", "counter", "Memcpy and memset operations.");
  for (const auto* rows : {&summary.memcpy, &summary.memset}) {
    for (const MemOpSummaryRow& r : *rows) {
      w.Sample("cuprobe_memory_operations_total", Label("operation", r.operation),
               absl::StrCat(r.time.count));
    }
  }
  w.Family("cuprobe_memory_bytes_total", "counter", "Bytes copied or set.");
  for (const auto* rows : {&summary.memcpy, &summary.memset}) {
    for (const MemOpSummaryRow& r : *rows) {
      w.Sample("cuprobe_memory_bytes_total", Label("operation", r.operation),
               absl::StrCat(r.total_bytes));
    }
  }
  w.Family("cuprobe_memory_seconds_total", "counter", "GPU time of memcpys and memsets.");
  for (const auto* rows : {&summary.memcpy, &summary.memset}) {
    for (const MemOpSummaryRow& r : *rows) {
      w.Sample("cuprobe_memory_seconds_total", Label("operation", r.operation),
               Seconds(r.time.total_ns));
    }
  }
  w.Family("cuprobe_trace_records_dropped_total", "counter",
           "Trace records lost before the report (ring full).");
  w.Sample("cuprobe_trace_records_dropped_total", "", absl::StrCat(summary.counters.dropped));
  return w.Take();
}

std::string FormatSummaryJson(const TraceSummary& summary) {
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"version\":", kTraceReportVersion, ",\n");
  AppendArray(&out, "kernels", summary.kernels, [&out](const KernelSummaryRow& r) {
    AppendStringField(&out, "name", r.name, /*first=*/true);
    AppendStringField(&out, "raw_name", r.raw_name);
    AppendDecimalField(&out, "time_percent", r.time_percent, 3);
    AppendField(&out, "instances", r.time.count);
    AppendStats(&out, r.time, "_ns");
  });
  AppendArray(&out, "launches", summary.launches, [&out](const LaunchSummaryRow& r) {
    AppendStringField(&out, "name", r.name, /*first=*/true);
    AppendStringField(&out, "raw_name", r.raw_name);
    AppendField(&out, "calls", r.api_ns.count);
    AppendField(&out, "errors", r.errors);
    AppendStats(&out, r.api_ns, "_api_ns");
  });
  AppendArray(&out, "memcpy", summary.memcpy,
              [&out](const MemOpSummaryRow& r) { AppendMemOpRow(&out, r); });
  AppendArray(&out, "memset", summary.memset,
              [&out](const MemOpSummaryRow& r) { AppendMemOpRow(&out, r); });
  AppendArray(&out, "launch_latency", summary.latency, [&out](const LatencySummaryRow& r) {
    AppendStringField(&out, "name", r.name, /*first=*/true);
    AppendStringField(&out, "raw_name", r.raw_name);
    AppendField(&out, "kernels", r.latency.count);
    AppendStats(&out, r.latency, "_ns");
    AppendField(&out, "p99_ns", r.p99_ns);
  });
  const TraceTotals& t = summary.totals;
  out += "  \"totals\":{";
  AppendField(&out, "kernels", t.kernels, /*first=*/true);
  AppendField(&out, "kernel_ns", t.kernel_ns);
  AppendField(&out, "launches", t.launches);
  AppendField(&out, "launches_from_activity", t.launches_from_activity);
  // A runtime and a driver record of one call, folded into one launch.
  AppendField(&out, "launch_records_merged", summary.counters.merged_launches);
  AppendField(&out, "launch_errors", t.launch_errors);
  AppendField(&out, "launch_api_ns", t.launch_api_ns);
  AppendField(&out, "memcpys", t.memcpys);
  AppendField(&out, "memcpy_bytes", t.memcpy_bytes);
  AppendField(&out, "memcpy_ns", t.memcpy_ns);
  AppendField(&out, "memsets", t.memsets);
  AppendField(&out, "memset_bytes", t.memset_bytes);
  AppendField(&out, "memset_ns", t.memset_ns);
  AppendField(&out, "processes", t.processes);
  AppendField(&out, "names", t.names);
  AppendField(&out, "first_ns", t.first_ns);
  AppendField(&out, "last_ns", t.last_ns);
  AppendField(&out, "span_ns", t.span_ns);
  AppendField(&out, "records", summary.counters.accepted);
  out += "},\n";
  const TraceCounters& c = summary.counters;
  out += "  \"dropped\":{";
  AppendField(&out, "dropped_records", c.dropped, /*first=*/true);
  AppendField(&out, "invalid_records", c.invalid);
  AppendField(&out, "unknown_type_records", c.unknown_type);
  out += "}\n}\n";
  return out;
}

void AppendJsonString(std::string* out, std::string_view text) {
  *out += '"';
  for (size_t i = 0; i < text.size();) {
    const auto ch = static_cast<unsigned char>(text[i]);
    if (ch >= 0x80) {
      const size_t len = Utf8SequenceLength(text, i);
      if (len == 0) {
        *out += "\\ufffd";
        ++i;
      } else {
        out->append(text.substr(i, len));
        i += len;
      }
      continue;
    }
    switch (ch) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (ch < 0x20 || ch == 0x7F) {
          absl::StrAppendFormat(out, "\\u%04x", ch);
        } else {
          *out += static_cast<char>(ch);
        }
    }
    ++i;
  }
  *out += '"';
}

void AppendCsvField(std::string* out, std::string_view field) {
  if (field.find_first_of(",\"\r\n") == std::string_view::npos) {
    out->append(field);
    return;
  }
  *out += '"';
  for (char ch : field) {
    if (ch == '"') *out += '"';
    *out += ch;
  }
  *out += '"';
}

absl::Status WriteFile(std::string_view path, std::string_view content) {
  const std::string p(path);
  const std::string what = absl::StrCat("cannot write report '", path, "'");
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, what);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return absl::ErrnoToStatus(err, what);
    }
    done += static_cast<size_t>(n);
  }
  // close() reports deferred write errors (NFS, a full disk).
  if (::close(fd) != 0) return absl::ErrnoToStatus(errno, what);
  return absl::OkStatus();
}

}  // namespace cuprobe
