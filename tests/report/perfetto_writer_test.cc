// File: tests/report/perfetto_writer_test.cc
//
// PerfettoWriter (report/perfetto_writer.h), decoded back with a small
// protobuf wire-format reader: the Trace's packets, the track descriptors,
// the slices' BEGIN/END events on a sequence per track with delta-encoded
// timestamps, interning (each name once per sequence, its incremental state
// cleared first), flows, absolute timestamps out of order, the bytes per
// kernel, and a sink that fails; the whole trace also read back by
// tests/report/perfetto_trace_reader.h as trace processor reads it.
#include "report/perfetto_writer.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/report/perfetto_trace_reader.h"

namespace cuprobe {
namespace {

using ::testing::ElementsAre;

using Field = ProtoField;

// The fields of one message (tests/report/perfetto_trace_reader.h); fails
// the test on malformed input.
std::vector<Field> Decode(std::string_view in) {
  absl::StatusOr<std::vector<Field>> fields = DecodeProtoFields(in);
  EXPECT_TRUE(fields.ok()) << fields.status();
  return fields.ok() ? *std::move(fields) : std::vector<Field>();
}

const Field* Find(const std::vector<Field>& fields, uint32_t number) {
  for (const Field& f : fields) {
    if (f.number == number) return &f;
  }
  return nullptr;
}

// A sink that appends to `out`.
PerfettoWriter::Sink AppendTo(std::string& out) {
  return [&out](std::string_view bytes) {
    out.append(bytes);
    return absl::OkStatus();
  };
}

std::vector<std::vector<Field>> Packets(std::string_view trace) {
  std::vector<std::vector<Field>> packets;
  for (const Field& f : Decode(trace)) {
    EXPECT_EQ(f.number, 1u) << "Trace.packet";
    EXPECT_EQ(f.wire, 2u);
    packets.push_back(Decode(f.bytes));
  }
  return packets;
}

TEST(PerfettoWriter, TracksSlicesInterningAndFlows) {
  std::string trace;
  PerfettoWriter w(AppendTo(trace));
  const uint64_t process = w.ProcessTrack(4242, "python3");
  const uint64_t thread = w.ThreadTrack(4242, 4243, "main");
  const uint64_t stream = w.NamedTrack(process, "GPU 0, stream 7");
  EXPECT_THAT((std::vector<uint64_t>{process, thread, stream}), ElementsAre(1, 2, 3));
  w.Slice(thread, 1000, 1500, "cudaLaunchKernel", "launch", /*flow_out=*/77);
  w.Slice(stream, 2000, 5000, "gemm", "kernel", 0, /*flow_in=*/77);
  w.Slice(stream, 6000, 9000, "gemm", "");
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_EQ(w.bytes_written(), trace.size());
  EXPECT_EQ(w.slices(), 3u);
  EXPECT_EQ(w.absolute_timestamps(), 0u);

  // As trace processor reads it.
  absl::StatusOr<PerfettoTrace> read = ReadPerfettoTrace(trace);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->sequences, 2u) << "one per track with slices";
  ASSERT_EQ(read->tracks.size(), 3u);
  EXPECT_TRUE(read->tracks.at(process).is_process);
  EXPECT_EQ(read->tracks.at(process).pid, 4242);
  EXPECT_EQ(read->tracks.at(process).name, "python3");
  EXPECT_TRUE(read->tracks.at(thread).is_thread);
  EXPECT_EQ(read->tracks.at(thread).tid, 4243);
  EXPECT_EQ(read->tracks.at(thread).name, "main");
  EXPECT_EQ(read->tracks.at(stream).name, "GPU 0, stream 7");
  EXPECT_EQ(read->tracks.at(stream).parent_uuid, process);
  ASSERT_EQ(read->slices.size(), 3u);
  const PerfettoSlice& launch = read->slices[0];
  EXPECT_EQ(launch.track, thread);
  EXPECT_EQ(launch.start_ns, 1000u);
  EXPECT_EQ(launch.end_ns, 1500u);
  EXPECT_EQ(launch.name, "cudaLaunchKernel");
  EXPECT_EQ(launch.category, "launch");
  EXPECT_THAT(launch.flows_out, ElementsAre(77u));
  const PerfettoSlice& k1 = read->slices[1];
  EXPECT_EQ(k1.track, stream);
  EXPECT_EQ(k1.start_ns, 2000u);
  EXPECT_EQ(k1.end_ns, 5000u);
  EXPECT_EQ(k1.name, "gemm");
  EXPECT_THAT(k1.flows_in, ElementsAre(77u));
  EXPECT_EQ(read->slices[2].start_ns, 6000u);
  EXPECT_EQ(read->slices[2].end_ns, 9000u);
  EXPECT_EQ(read->slices[2].category, "");

  // The bytes: descriptors on sequence 1; each track's sequence starts with
  // its cleared state, defaults and clock; timestamps are deltas; names are
  // interned once per sequence.
  const std::vector<std::vector<Field>> packets = Packets(trace);
  ASSERT_EQ(packets.size(), 3u + 2u + 3u * 2u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Find(packets[i], 10)->value, 1u);
  const std::vector<Field>& start = packets[3];
  EXPECT_EQ(Find(start, 10)->value, 2u);
  EXPECT_EQ(Find(start, 13)->value, 1u) << "SEQ_INCREMENTAL_STATE_CLEARED";
  const std::vector<Field> defaults = Decode(Find(start, 59)->bytes);
  EXPECT_EQ(Find(defaults, 58)->value, 64u) << "the sequence's incremental clock";
  EXPECT_EQ(Find(Decode(Find(defaults, 11)->bytes), 11)->value, thread);
  const std::vector<Field> snapshot = Decode(Find(start, 6)->bytes);
  ASSERT_EQ(snapshot.size(), 2u);
  EXPECT_EQ(Find(Decode(snapshot[0].bytes), 1)->value, 6u) << "BOOTTIME";
  EXPECT_EQ(Find(Decode(snapshot[0].bytes), 2)->value, 1000u);
  EXPECT_EQ(Find(Decode(snapshot[1].bytes), 1)->value, 64u);
  EXPECT_EQ(Find(Decode(snapshot[1].bytes), 3)->value, 1u) << "is_incremental";
  const std::vector<Field>& b0 = packets[4];
  EXPECT_EQ(Find(b0, 8)->value, 0u);
  EXPECT_EQ(Find(b0, 58), nullptr);
  EXPECT_EQ(Find(b0, 13)->value, 2u) << "SEQ_NEEDS_INCREMENTAL_STATE";
  const std::vector<Field> e0 = Decode(Find(b0, 11)->bytes);
  EXPECT_EQ(Find(e0, 11), nullptr) << "the track is the sequence's default";
  EXPECT_EQ(Find(e0, 47)->wire, 1u) << "fixed64";
  EXPECT_EQ(Find(packets[5], 8)->value, 500u);
  EXPECT_EQ(Find(packets[5], 12), nullptr);
  EXPECT_NE(Find(packets[7], 12), nullptr) << "a new sequence interns its own names";
  EXPECT_EQ(Find(packets[9], 12), nullptr) << "gemm was interned already";
  EXPECT_EQ(Find(packets[9], 8)->value, 1000u) << "6000 - 5000";
}

// A slice that starts before its track's last timestamp (nested API calls,
// records out of order) keeps its times through an absolute timestamp.
TEST(PerfettoWriter, SlicesOutOfOrderGetAbsoluteTimestamps) {
  std::string trace;
  PerfettoWriter w(AppendTo(trace));
  const uint64_t thread = w.ThreadTrack(1, 2, "t");
  w.Slice(thread, 1000, 5000, "cudaLaunchKernel", "");
  w.Slice(thread, 1200, 4000, "cuLaunchKernel", "");  // inside the first
  w.Slice(thread, 6000, 7000, "cudaLaunchKernel", "");
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_EQ(w.absolute_timestamps(), 1u);
  absl::StatusOr<PerfettoTrace> read = ReadPerfettoTrace(trace);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->slices.size(), 3u);
  EXPECT_EQ(read->slices[1].name, "cuLaunchKernel");
  EXPECT_EQ(read->slices[1].start_ns, 1200u);
  EXPECT_EQ(read->slices[1].end_ns, 4000u);
  EXPECT_EQ(read->slices[1].depth, 1u);
  EXPECT_EQ(read->slices[2].start_ns, 6000u);
  EXPECT_EQ(read->slices[2].end_ns, 7000u);
  const std::vector<std::vector<Field>> packets = Packets(trace);
  EXPECT_EQ(Find(packets[4], 58)->value, 6u) << "BOOTTIME";
  EXPECT_EQ(Find(packets[4], 8)->value, 1200u);
}

// A kernel with its flow, at today's epoch nanoseconds and a microsecond
// from the previous one: well within the 60 bytes a kernel event may cost.
TEST(PerfettoWriter, AKernelSliceCostsAtMostFortyBytes) {
  std::string trace;
  PerfettoWriter w(AppendTo(trace));
  const uint64_t stream = w.NamedTrack(0, "stream 7");
  const uint64_t t0 = 1'765'000'000'000'000'000;
  w.Slice(stream, t0, t0 + 3000, "gemm", "", 0, uint64_t{4242} << 32 | 1);
  ASSERT_TRUE(w.Finish().ok());
  const size_t before = trace.size();
  w.Slice(stream, t0 + 4000, t0 + 7000, "gemm", "", 0, uint64_t{4242} << 32 | 2);
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_LE(trace.size() - before, 40u);
}

TEST(PerfettoWriter, MalformedTracesAreRejectedByTheReader) {
  std::string trace;
  PerfettoWriter w(AppendTo(trace));
  const uint64_t stream = w.NamedTrack(0, "s");
  w.Slice(stream, 10, 20, "k", "");
  ASSERT_TRUE(w.Finish().ok());
  ASSERT_TRUE(ReadPerfettoTrace(trace).ok());
  // Where each packet ends (a one-byte tag, a varint length, the body).
  std::vector<size_t> ends;
  for (size_t pos = 0; pos < trace.size();) {
    ++pos;
    uint64_t n = 0;
    for (int shift = 0;; shift += 7) {
      const uint8_t b = static_cast<uint8_t>(trace[pos++]);
      n |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) break;
    }
    pos += n;
    ends.push_back(pos);
  }
  ASSERT_EQ(ends.size(), 4u) << "descriptor, sequence start, BEGIN, END";
  for (size_t cut = 1; cut < trace.size(); ++cut) {
    const absl::StatusOr<PerfettoTrace> r =
        ReadPerfettoTrace(std::string_view(trace).substr(0, cut));
    // Whole packets up to the slice's BEGIN read; the BEGIN alone leaves it open.
    const bool whole = cut == ends[0] || cut == ends[1];
    EXPECT_EQ(r.ok(), whole) << "cut at " << cut << ": " << r.status();
  }
}

TEST(PerfettoWriter, FlushesWholePacketsAndKeepsTheFirstSinkError) {
  std::vector<std::string> chunks;
  PerfettoWriter w(
      [&](std::string_view b) {
        chunks.emplace_back(b);
        return absl::OkStatus();
      },
      /*flush_bytes=*/64);
  const uint64_t stream = w.NamedTrack(0, "s");
  for (int i = 0; i < 20; ++i) w.Slice(stream, i * 10, i * 10 + 5, "k", "kernel");
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_GT(chunks.size(), 3u);
  std::string all;
  for (const std::string& c : chunks) {
    EXPECT_EQ(Packets(c).empty(), false) << "every chunk is whole packets";
    all += c;
  }
  EXPECT_EQ(Packets(all).size(), 1u + 1u + 40u);

  int calls = 0;
  PerfettoWriter failing(
      [&](std::string_view) {
        ++calls;
        return absl::ResourceExhaustedError("disk full");
      },
      /*flush_bytes=*/16);
  const uint64_t t = failing.NamedTrack(0, "s");
  failing.Slice(t, 1, 2, "k", "kernel");
  failing.Slice(t, 3, 4, "k", "kernel");
  EXPECT_EQ(failing.Finish().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(calls, 1) << "nothing more is written after an error";
  EXPECT_EQ(failing.bytes_written(), 0u);
}

}  // namespace
}  // namespace cuprobe
