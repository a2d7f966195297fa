// File: tests/fuzz/trace_records_fuzz.cc
//
// Fuzz target of the trace reader: the records the session ring carries
// (probe/trace_records.h), written by a hook in another process, through
// TraceData (decoding, the join of launches from API activity with their
// kernels, the merge of a runtime and a driver record of one call) and every
// report the CLI writes from them (text, CSV, JSON, Prometheus, Chrome
// trace). The input is a sequence of records:
//
//   u16 type, u16 body length, body bytes ...    (little-endian; a short
//                                                 tail ends the sequence)
//
// Errors from TraceData::Add are the expected outcome of a bad body; any
// crash, hang or out-of-bounds access is a bug. Checked: the counters add
// up (every record accepted, invalid or of an unknown type), and the JSON
// summary names every launch and kernel it counted.
//
//   ninja -C build-fuzz trace_records_fuzz     (configured as in maps_region_fuzz.cc)
//   build-fuzz/bin/trace_records_fuzz -max_total_time=60 /tmp/new tests/corpus/trace_records
//
// Normal builds link this file with corpus_main.cc (ctest
// trace_records_fuzz_corpus) and replay tests/corpus/trace_records
// (tests/corpus/trace_records/make_seeds.py writes those seeds).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "report/trace_chrome.h"
#include "report/trace_data.h"
#include "report/trace_report.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "trace_records_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cuprobe::TraceData trace;
  uint64_t fed = 0;
  size_t at = 0;
  while (size - at >= 4) {
    uint16_t type, length;
    std::memcpy(&type, data + at, 2);
    std::memcpy(&length, data + at + 2, 2);
    at += 4;
    const size_t body = std::min<size_t>(length, size - at);
    (void)trace.Add(type, absl::MakeConstSpan(data + at, body));
    at += body;
    ++fed;
  }
  trace.AddDropped(size % 3);
  const cuprobe::TraceCounters& c = trace.counters();
  Check(c.accepted + c.invalid + c.unknown_type == fed, "counters do not add up");
  Check(trace.launches().size() + c.merged_launches <= c.accepted, "more launches than records");

  const cuprobe::TraceSummary summary = cuprobe::Summarize(trace);
  Check(summary.totals.launches == trace.launches().size(), "launch total");
  Check(summary.totals.kernels == trace.kernels().size(), "kernel total");
  Check(summary.totals.launches_from_activity <= summary.totals.launches, "activity launches");
  const std::string json = cuprobe::FormatSummaryJson(summary);
  Check(json.find(absl::StrCat("\"launches\":", summary.totals.launches, ",")) != std::string::npos,
        "JSON launch total");
  (void)cuprobe::FormatSummaryText(summary);
  (void)cuprobe::FormatKernelSummaryCsv(summary.kernels);
  (void)cuprobe::FormatLaunchSummaryCsv(summary.launches);
  (void)cuprobe::FormatMemOpSummaryCsv(summary.memcpy);
  (void)cuprobe::FormatPrometheus(summary, {{"job", "fuzz"}});
  (void)cuprobe::FormatChromeTrace(trace);
  return 0;
}
