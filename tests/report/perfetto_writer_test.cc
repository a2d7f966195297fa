// File: tests/report/perfetto_writer_test.cc
//
// PerfettoWriter (report/perfetto_writer.h), decoded back with a small
// protobuf wire-format reader: the Trace's packets, the track descriptors,
// the slices' BEGIN/END events, interning (each name once, the sequence's
// incremental state cleared first), flows, the bytes per kernel, and a sink
// that fails.
#include "report/perfetto_writer.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuprobe {
namespace {

using ::testing::ElementsAre;

struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t value = 0;  // varint or fixed64
  std::string bytes;   // length-delimited
};

// The fields of one message; fails the test on malformed input.
std::vector<Field> Decode(std::string_view in) {
  std::vector<Field> out;
  size_t i = 0;
  auto varint = [&](uint64_t* v) {
    *v = 0;
    for (int shift = 0; i < in.size() && shift < 64; shift += 7) {
      const uint8_t b = static_cast<uint8_t>(in[i++]);
      *v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  };
  while (i < in.size()) {
    uint64_t tag = 0;
    if (!varint(&tag)) {
      ADD_FAILURE() << "bad tag at " << i;
      return out;
    }
    Field f;
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire = static_cast<uint32_t>(tag & 7);
    if (f.wire == 0) {
      EXPECT_TRUE(varint(&f.value));
    } else if (f.wire == 1) {
      EXPECT_LE(i + 8, in.size());
      for (int b = 0; b < 8 && i < in.size(); ++b) {
        f.value |= uint64_t{static_cast<uint8_t>(in[i++])} << (8 * b);
      }
    } else if (f.wire == 2) {
      uint64_t n = 0;
      EXPECT_TRUE(varint(&n));
      EXPECT_LE(i + n, in.size());
      f.bytes = std::string(in.substr(i, n));
      i += n;
    } else {
      ADD_FAILURE() << "wire type " << f.wire;
      return out;
    }
    out.push_back(std::move(f));
  }
  return out;
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
  w.Slice(stream, 6000, 9000, "gemm", "kernel");
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_EQ(w.bytes_written(), trace.size());
  EXPECT_EQ(w.slices(), 3u);

  const std::vector<std::vector<Field>> packets = Packets(trace);
  ASSERT_EQ(packets.size(), 3u + 3u * 2u);
  // Descriptors: uuid, then process {pid 1, process_name 6}, thread {pid,
  // tid, thread_name 5}, or name 2 + parent_uuid 5.
  const std::vector<Field> d0 = Decode(Find(packets[0], 60)->bytes);
  EXPECT_EQ(Find(d0, 1)->value, 1u);
  const std::vector<Field> proc = Decode(Find(d0, 3)->bytes);
  EXPECT_EQ(Find(proc, 1)->value, 4242u);
  EXPECT_EQ(Find(proc, 6)->bytes, "python3");
  const std::vector<Field> thr = Decode(Find(Decode(Find(packets[1], 60)->bytes), 4)->bytes);
  EXPECT_EQ(Find(thr, 2)->value, 4243u);
  EXPECT_EQ(Find(thr, 5)->bytes, "main");
  const std::vector<Field> d2 = Decode(Find(packets[2], 60)->bytes);
  EXPECT_EQ(Find(d2, 2)->bytes, "GPU 0, stream 7");
  EXPECT_EQ(Find(d2, 5)->value, process);

  // The first slice: state cleared, both names interned, flow started.
  const std::vector<Field>& b0 = packets[3];
  EXPECT_EQ(Find(b0, 8)->value, 1000u);
  EXPECT_EQ(Find(b0, 10)->value, 1u);
  EXPECT_EQ(Find(b0, 13)->value, 1u) << "SEQ_INCREMENTAL_STATE_CLEARED";
  const std::vector<Field> interned = Decode(Find(b0, 12)->bytes);
  const std::vector<Field> category = Decode(Find(interned, 1)->bytes);
  EXPECT_EQ(Find(category, 2)->bytes, "launch");
  const std::vector<Field> name = Decode(Find(interned, 2)->bytes);
  EXPECT_EQ(Find(name, 1)->value, 1u);
  EXPECT_EQ(Find(name, 2)->bytes, "cudaLaunchKernel");
  const std::vector<Field> e0 = Decode(Find(b0, 11)->bytes);
  EXPECT_EQ(Find(e0, 9)->value, 1u) << "TYPE_SLICE_BEGIN";
  EXPECT_EQ(Find(e0, 11)->value, thread);
  EXPECT_EQ(Find(e0, 10)->value, 1u);
  EXPECT_EQ(Find(e0, 3)->value, 1u);
  EXPECT_EQ(Find(e0, 47)->wire, 1u) << "fixed64";
  EXPECT_EQ(Find(e0, 47)->value, 77u);
  const std::vector<Field> end0 = Decode(Find(packets[4], 11)->bytes);
  EXPECT_EQ(Find(end0, 9)->value, 2u) << "TYPE_SLICE_END";
  EXPECT_EQ(Find(packets[4], 8)->value, 1500u);
  EXPECT_EQ(Find(packets[4], 12), nullptr);

  // The kernel ends the flow; its names are new; the second "gemm" slice
  // interns nothing and needs the sequence's state.
  const std::vector<Field> e1 = Decode(Find(packets[5], 11)->bytes);
  EXPECT_EQ(Find(e1, 48)->value, 77u);
  EXPECT_EQ(Find(e1, 10)->value, 2u);
  EXPECT_EQ(Find(packets[5], 13)->value, 2u) << "SEQ_NEEDS_INCREMENTAL_STATE";
  EXPECT_NE(Find(packets[5], 12), nullptr);
  EXPECT_EQ(Find(packets[7], 12), nullptr) << "gemm and kernel were interned already";
  EXPECT_EQ(Find(Decode(Find(packets[7], 11)->bytes), 10)->value, 2u);
}

// A kernel with its flow, at today's epoch nanoseconds: within the 60
// bytes a kernel event may cost.
TEST(PerfettoWriter, AKernelSliceCostsAtMostSixtyBytes) {
  std::string trace;
  PerfettoWriter w(AppendTo(trace));
  const uint64_t stream = w.NamedTrack(0, "stream 7");
  const uint64_t t0 = 1'765'000'000'000'000'000;
  w.Slice(stream, t0, t0 + 3000, "gemm", "kernel", 0, 1);
  ASSERT_TRUE(w.Finish().ok());
  const size_t before = trace.size();
  w.Slice(stream, t0 + 10000, t0 + 13000, "gemm", "kernel", 0, 123456789);
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_LE(trace.size() - before, 60u);
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
  EXPECT_EQ(Packets(all).size(), 1u + 40u);

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
