// File: report/trace_prometheus.cc
//
// FormatPrometheus: a trace summary in the Prometheus text exposition
// format, so that the reports of many ranks and machines can be collected
// and compared (the families and labels are listed in report/trace_report.h).
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "report/trace_report.h"

namespace cuprobe {
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

}  // namespace cuprobe
