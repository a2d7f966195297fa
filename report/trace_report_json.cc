// File: report/trace_report_json.cc
//
// The JSON form of a trace summary (FormatSummaryJson, its layout in
// report/trace_report.h) and the string escaping every JSON output of the
// report shares (AppendJsonString: also the Chrome timeline's). Written by
// hand, as the rest of the report: no library, no exceptions.
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "report/trace_report.h"

namespace cuprobe {
namespace {

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
  AppendField(&out, "unjoined_records", c.join_evicted);
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

}  // namespace cuprobe
