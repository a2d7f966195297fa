// File: report/trace_report.cc
//
// The names a report gives records (demangled kernels, launch APIs, memcpy
// and memory kinds), the summaries as aligned text tables and CSV, and
// writing a report file. Summarize is in trace_summary.cc, the JSON and
// Prometheus forms in trace_report_json.cc and trace_prometheus.cc.
#include "report/trace_report.h"

#include <cxxabi.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cuprobe {
namespace {

constexpr std::string_view kGraphLaunchName = "[cuGraphLaunch]";
constexpr std::string_view kCudaGraphLaunchName = "[cudaGraphLaunch]";

std::string OneDecimal(double v) { return absl::StrFormat("%.1f", v); }

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

}  // namespace

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
