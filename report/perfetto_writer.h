// File: report/perfetto_writer.h
//
// A Perfetto trace (the protobuf format Perfetto's UI and trace processor
// read natively: `Trace { repeated TracePacket packet = 1; }`) written as
// it is produced, for timelines too large for JSON. Each packet is one
// `packet` field of the Trace message, so the bytes handed to the sink so
// far are always a valid trace: a run cut short keeps what it wrote.
//
// What it writes, with the field numbers of Perfetto's public protos
// (protos/perfetto/trace/trace_packet.proto, track_event/*.proto,
// interned_data/interned_data.proto):
//   - TrackDescriptor packets (60) for processes, threads and named tracks
//     (a GPU stream), each with the uuid its slices refer to;
//   - slices as TrackEvent pairs (11): SLICE_BEGIN with the interned name
//     and category, SLICE_END at the end time, on one packet sequence
//     (trusted_packet_sequence_id 10) whose first packet clears the
//     incremental state (sequence_flags 13); names and categories are
//     interned (interned_data 12) the first time they appear;
//   - flows (flow_ids 47 / terminating_flow_ids 48, fixed64): a launch's
//     slice starts the flow that its kernel's slice ends.
// Timestamps (8) are the caller's nanoseconds, written as given.
//
// Hand-written encoder rather than libprotobuf: the hook links the report
// (standalone mode) and may not carry a C++ runtime with static state, and
// the subset is a dozen fields. A kernel's slice costs about 55 bytes with
// its flow (BEGIN and END packets).
//
//   PerfettoWriter w([&](std::string_view bytes) { return file.Append(bytes); });
//   uint64_t process = w.ProcessTrack(pid, "python3");
//   uint64_t stream = w.NamedTrack(process, "GPU 0, stream 7");
//   w.Slice(stream, start_ns, end_ns, "gemm_kernel", "kernel", 0, correlation);
//   absl::Status s = w.Finish();
#ifndef CUPROBE_REPORT_PERFETTO_WRITER_H_
#define CUPROBE_REPORT_PERFETTO_WRITER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace cuprobe {

class PerfettoWriter {
 public:
  // Takes the bytes as they are produced, in order (a file's append).
  using Sink = std::function<absl::Status(std::string_view bytes)>;
  // Bytes are handed to `sink` whenever `flush_bytes` have gathered, and
  // at Finish.
  explicit PerfettoWriter(Sink sink, size_t flush_bytes = size_t{1} << 20);
  PerfettoWriter(const PerfettoWriter&) = delete;
  PerfettoWriter& operator=(const PerfettoWriter&) = delete;

  // Tracks; each returns the uuid slices go on.
  uint64_t ProcessTrack(int32_t pid, std::string_view name);
  uint64_t ThreadTrack(int32_t pid, int64_t tid, std::string_view name);
  uint64_t NamedTrack(uint64_t parent_uuid, std::string_view name);

  // A slice [start_ns, end_ns] on `track`. `flow_out` (not 0) starts a
  // flow, `flow_in` (not 0) ends one; the same id joins the two slices.
  void Slice(uint64_t track, uint64_t start_ns, uint64_t end_ns, std::string_view name,
             std::string_view category, uint64_t flow_out = 0, uint64_t flow_in = 0);

  // Hands the rest to the sink. The first sink error is kept and returned
  // (later writes are dropped).
  absl::Status Finish();

  [[nodiscard]] uint64_t bytes_written() const { return bytes_written_; }
  [[nodiscard]] uint64_t slices() const { return slices_; }

 private:
  // Interned ids of `name` in `table` (new ones are added to `interned`,
  // the packet's InternedData, under `field`).
  uint64_t Intern(absl::flat_hash_map<std::string, uint64_t>& table, std::string_view name,
                  uint32_t field, std::string& interned);
  void Descriptor(uint64_t uuid, const std::string& body);
  // Appends one TracePacket with `body` as a Trace.packet field.
  void Packet(const std::string& body);
  void MaybeFlush(bool force);

  Sink sink_;
  const size_t flush_bytes_;
  std::string buffer_;
  absl::Status status_;
  uint64_t bytes_written_ = 0;
  uint64_t slices_ = 0;
  uint64_t next_uuid_ = 1;
  bool first_packet_ = true;
  absl::flat_hash_map<std::string, uint64_t> names_;
  absl::flat_hash_map<std::string, uint64_t> categories_;
};

}  // namespace cuprobe

#endif  // CUPROBE_REPORT_PERFETTO_WRITER_H_
