// File: tests/report/perfetto_trace_reader.h
//
// Reads a Perfetto protobuf trace back the way Perfetto's trace processor
// does for the subset report/perfetto_writer.h writes: track descriptors;
// per packet sequence its cleared state, defaults (track, timestamp clock),
// incremental clock and interned names and categories; TrackEvent slices
// paired BEGIN to END per track after a stable sort by time; flows. Every
// rule the writer relies on is checked, and a breach is an error: a
// malformed wire format, a packet before its sequence was cleared, an
// unknown interned id or clock, an END without a BEGIN, a slice left open.
//
//   absl::StatusOr<PerfettoTrace> t = ReadPerfettoTrace(file_bytes);
//   for (const PerfettoSlice& s : t->slices) ...  // in start order per track
#ifndef CUPROBE_TESTS_REPORT_PERFETTO_TRACE_READER_H_
#define CUPROBE_TESTS_REPORT_PERFETTO_TRACE_READER_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cuprobe {

struct PerfettoTrack {
  uint64_t uuid = 0;
  uint64_t parent_uuid = 0;
  std::string name;       // TrackDescriptor.name, or the process / thread name
  bool is_process = false;
  bool is_thread = false;
  int64_t pid = 0;
  int64_t tid = 0;
};

struct PerfettoSlice {
  uint64_t track = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  std::string name;
  std::string category;  // "" without one
  std::vector<uint64_t> flows_out;
  std::vector<uint64_t> flows_in;
  uint32_t depth = 0;  // nesting on its track
};

struct PerfettoTrace {
  size_t packets = 0;
  std::map<uint64_t, PerfettoTrack> tracks;  // by uuid
  std::vector<PerfettoSlice> slices;         // by track, then start
  size_t sequences = 0;                      // packet sequences with slices
};

[[nodiscard]] absl::StatusOr<PerfettoTrace> ReadPerfettoTrace(std::string_view bytes);

// One protobuf field of a message; `bytes` views the decoded input.
struct ProtoField {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t value = 0;      // varint or fixed64
  std::string_view bytes;  // length-delimited
};
// The fields of one message, in order; DataLoss on malformed input.
[[nodiscard]] absl::StatusOr<std::vector<ProtoField>> DecodeProtoFields(std::string_view in);

}  // namespace cuprobe

#endif  // CUPROBE_TESTS_REPORT_PERFETTO_TRACE_READER_H_
