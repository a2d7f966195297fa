// File: report/perfetto_writer.h
//
// A Perfetto trace (the protobuf format Perfetto's UI and trace processor
// read natively: `Trace { repeated TracePacket packet = 1; }`) written as
// it is produced, for timelines too large for JSON. Each packet is one
// `packet` field of the Trace message, so the bytes handed to the sink so
// far are always a valid trace: a run cut short keeps what it wrote.
//
// What it writes, with the field numbers of Perfetto's public protos
// (protos/perfetto/trace/trace_packet.proto, trace_packet_defaults.proto,
// clock_snapshot.proto, track_event/*.proto, interned_data.proto):
//   - TrackDescriptor packets (60) for processes, threads and named tracks
//     (a GPU stream), each with the uuid its slices refer to, on packet
//     sequence 1;
//   - slices as TrackEvent pairs (11), SLICE_BEGIN with the interned name
//     (and category, when given), SLICE_END at the end time. Each track's
//     slices go on a packet sequence of their own (trusted_packet_sequence_id
//     10), whose first packet clears the incremental state (sequence_flags
//     13) and sets the sequence's defaults (59): the track (TrackEventDefaults
//     track_uuid 11) and a sequence-scoped incremental clock (id 64,
//     ClockSnapshot 6 with is_incremental, tied to BOOTTIME at the same
//     value). A packet's timestamp (8) is then the nanoseconds since the
//     previous one of its sequence: two or three bytes rather than nine. A
//     slice that starts before the sequence's last timestamp (nested API
//     calls, records out of order) is written with an absolute timestamp
//     (timestamp_clock_id 58 = BOOTTIME), as Perfetto's SDK does;
//   - names and categories interned (interned_data 12) per sequence, the
//     first time they appear on it;
//   - flows (flow_ids 47 / terminating_flow_ids 48, fixed64): a launch's
//     slice starts the flow that its kernel's slice ends.
// Timestamps are the caller's nanoseconds, kept exactly.
//
// Slices of one track must nest or follow each other (Perfetto pairs BEGIN
// and END per track); callers put overlapping work on tracks of its own.
//
// Hand-written encoder rather than libprotobuf: the hook links the report
// (standalone mode) and may not carry a C++ runtime with static state, and
// the subset is two dozen fields. A kernel's slice with its flow costs
// about 36 bytes (BEGIN and END packets).
//
//   PerfettoWriter w([&](std::string_view bytes) { return file.Append(bytes); });
//   uint64_t process = w.ProcessTrack(pid, "python3");
//   uint64_t stream = w.NamedTrack(process, "GPU 0, stream 7");
//   w.Slice(stream, start_ns, end_ns, "gemm_kernel", "", 0, correlation);
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

  // Tracks; each returns the uuid slices go on. ProcessTrack with the
  // `uuid` of an earlier one describes that track again (a name learnt late).
  uint64_t ProcessTrack(int32_t pid, std::string_view name, uint64_t uuid = 0);
  uint64_t ThreadTrack(int32_t pid, int64_t tid, std::string_view name);
  uint64_t NamedTrack(uint64_t parent_uuid, std::string_view name);

  // A slice [start_ns, end_ns] on `track` (a uuid these calls returned).
  // `category` may be empty (none). `flow_out` (not 0) starts a flow,
  // `flow_in` (not 0) ends one; the same id joins the two slices.
  void Slice(uint64_t track, uint64_t start_ns, uint64_t end_ns, std::string_view name,
             std::string_view category, uint64_t flow_out = 0, uint64_t flow_in = 0);

  // Hands the rest to the sink. The first sink error is kept and returned
  // (later writes are dropped).
  absl::Status Finish();

  [[nodiscard]] uint64_t bytes_written() const { return bytes_written_; }
  [[nodiscard]] uint64_t slices() const { return slices_; }
  // Slices written with an absolute timestamp (out of their track's order).
  [[nodiscard]] uint64_t absolute_timestamps() const { return absolute_timestamps_; }

 private:
  // The packet sequence of one track's slices.
  struct Sequence {
    uint32_t id = 0;
    uint64_t last_ns = 0;  // the incremental clock's value
    absl::flat_hash_map<std::string, uint64_t> names;
    absl::flat_hash_map<std::string, uint64_t> categories;
  };
  // The track's sequence, started (its first packet written) on first use.
  Sequence& SequenceOf(uint64_t track, uint64_t start_ns);
  // Interned id of `name` in `table` (a new one is added to `interned`,
  // the packet's InternedData, under `field`).
  static uint64_t Intern(absl::flat_hash_map<std::string, uint64_t>& table,
                         std::string_view name, uint32_t field, std::string& interned);
  // Appends the timestamp of `ns` to packet `p` on `seq`: a delta on its
  // incremental clock, or absolute when `ns` is before the clock's value.
  void Timestamp(std::string& p, Sequence& seq, uint64_t ns);
  void Descriptor(uint64_t uuid, const std::string& body);
  // Appends one TracePacket with `body` as a Trace.packet field.
  void Packet(const std::string& body);
  void MaybeFlush(bool force);

  Sink sink_;
  const size_t flush_bytes_;
  std::string buffer_;
  std::string packet_scratch_;  // Slice's packet, its capacity kept
  absl::Status status_;
  uint64_t bytes_written_ = 0;
  uint64_t slices_ = 0;
  uint64_t absolute_timestamps_ = 0;
  uint64_t next_uuid_ = 1;
  uint32_t next_sequence_ = 2;  // 1 carries the descriptors
  absl::flat_hash_map<uint64_t, Sequence> sequences_;  // by track uuid
};

}  // namespace cuprobe

#endif  // CUPROBE_REPORT_PERFETTO_WRITER_H_
