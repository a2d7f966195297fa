// File: tests/report/trace_perfetto_test.cc
//
// PerfettoTimeline (report/trace_perfetto.h): the fixture trace streamed as
// a Perfetto timeline and read back as trace processor reads it
// (tests/report/perfetto_trace_reader.h): processes, threads and GPU stream
// tracks, every launch, kernel, copy and set with its exact times and
// name, flows from launches to their kernels, overlap tracks; records out
// of order; the bytes per kernel of a launch_loop-like run against the JSON
// timeline's; bounded memory over 2M launches.
#include "report/trace_perfetto.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "report/trace_chrome.h"
#include "report/trace_data.h"
#include "report/trace_report.h"
#include "tests/report/perfetto_trace_reader.h"
#include "tests/report/trace_report_test_util.h"

namespace cuprobe {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace cuprobe::testing;  // NOLINT: the fixture's names

PerfettoWriter::Sink AppendTo(std::string& out) {
  return [&out](std::string_view bytes) {
    out.append(bytes);
    return absl::OkStatus();
  };
}

// The tracks of `t` by name.
std::map<std::string, PerfettoTrack> TracksByName(const PerfettoTrace& t) {
  std::map<std::string, PerfettoTrack> out;
  for (const auto& [uuid, track] : t.tracks) out[track.name] = track;
  return out;
}

TEST(PerfettoTimeline, TheFixtureReadsBackWithEveryRecordAndFlow) {
  std::string bytes;
  PerfettoTimeline timeline(AppendTo(bytes));
  MakeFixtureStream().FeedTo(timeline);
  ASSERT_TRUE(timeline.Finish().ok());
  absl::StatusOr<PerfettoTrace> t = ReadPerfettoTrace(bytes);
  ASSERT_TRUE(t.ok()) << t.status();
  const TraceData data = MakeFixture();

  const std::map<std::string, PerfettoTrack> tracks = TracksByName(*t);
  ASSERT_TRUE(tracks.contains("vec_app"));
  const PerfettoTrack& process = tracks.at("vec_app");
  EXPECT_TRUE(process.is_process);
  EXPECT_EQ(process.pid, kPid);
  for (const char* name : {"Thread 4242", "Thread 4250"}) {
    ASSERT_TRUE(tracks.contains(name)) << name;
    EXPECT_TRUE(tracks.at(name).is_thread);
    EXPECT_EQ(tracks.at(name).pid, kPid);
  }
  for (const char* name : {"GPU 0, stream 7", "GPU 0, stream 13", "GPU 0, stream 14",
                           "GPU 1, stream 21"}) {
    ASSERT_TRUE(tracks.contains(name)) << name;
    EXPECT_EQ(tracks.at(name).parent_uuid, process.uuid) << name;
  }
  // The fixture's streams never overlap themselves, even with copies
  // arriving after the kernels that follow them.
  EXPECT_EQ(t->tracks.size(), 1u + 2u + 4u);

  // Every record is a slice with its times; kernels are demangled.
  std::multiset<std::tuple<std::string, uint64_t, uint64_t>> want, got;
  for (const LaunchRecord& l : data.launches()) {
    want.insert({LaunchApiName(l.api), l.api_start_ns, l.api_end_ns});
  }
  for (const KernelRecord& k : data.kernels()) {
    want.insert({DemangleKernelName(data.Name(k.name_id)), k.start_ns, k.end_ns});
  }
  for (const MemcpyRecord& m : data.memcpys()) {
    want.insert({std::string(MemcpyKindName(m.copy_kind)), m.start_ns, m.end_ns});
  }
  for (const MemsetRecord& m : data.memsets()) {
    want.insert({std::string(kMemsetOperationName), m.start_ns, m.end_ns});
  }
  for (const PerfettoSlice& s : t->slices) got.insert({s.name, s.start_ns, s.end_ns});
  EXPECT_EQ(got, want);
  EXPECT_EQ(timeline.slices(), want.size());
  EXPECT_EQ(timeline.kernels(), data.kernels().size());
  EXPECT_TRUE(got.contains({"vec_add(float const*, float const*, float*, int)", kBase + 10000,
                            kBase + 10100}));

  // Flows: each launch that has a kernel, by correlation id; none for the
  // graph launch (30) or the failed one (12).
  std::map<uint64_t, std::string> flow_from, flow_to;
  for (const PerfettoSlice& s : t->slices) {
    for (uint64_t f : s.flows_out) EXPECT_TRUE(flow_from.emplace(f, s.name).second);
    for (uint64_t f : s.flows_in) EXPECT_TRUE(flow_to.emplace(f, s.name).second);
  }
  std::set<uint64_t> from_ids, to_ids;
  for (const auto& [id, name] : flow_from) from_ids.insert(IdLocal(id));
  for (const auto& [id, name] : flow_to) to_ids.insert(IdLocal(id));
  EXPECT_EQ(from_ids, (std::set<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(to_ids, from_ids);
  EXPECT_EQ(flow_from.at(3), "cuLaunchKernelEx");
  EXPECT_EQ(flow_to.at(3), "void reduce<256>(float const*, float*, int)");
}

KernelRecord Kernel(uint64_t corr, uint32_t stream, uint64_t start, uint64_t end) {
  KernelRecord k{};
  k.correlation_id = ProcessQualifiedId(kPid, corr);
  k.name_id = kVecAdd;
  k.stream_id = stream;
  k.start_ns = start;
  k.end_ns = end;
  return k;
}

// Kernels that overlap on one stream (a graph's branches) go to overflow
// tracks; a stream's track takes a late record that fits between its
// slices; every track's slices nest or follow each other.
TEST(PerfettoTimeline, OverlappingWorkGoesToOverflowTracks) {
  std::string bytes;
  PerfettoTimeline timeline(AppendTo(bytes));
  timeline.AddName(kVecAdd, "k");
  timeline.AddKernel(Kernel(1, 7, 1000, 2000));
  timeline.AddKernel(Kernel(2, 7, 1500, 2500));  // overlaps the first
  timeline.AddKernel(Kernel(3, 7, 1600, 1700));  // overlaps both
  timeline.AddKernel(Kernel(4, 7, 3000, 4000));
  timeline.AddKernel(Kernel(5, 7, 2100, 2900));  // late, fits lane 0 between 1 and 4
  ASSERT_TRUE(timeline.Finish().ok());
  absl::StatusOr<PerfettoTrace> t = ReadPerfettoTrace(bytes);
  ASSERT_TRUE(t.ok()) << t.status();
  std::map<std::string, std::vector<uint64_t>> starts;  // by track name
  for (const PerfettoSlice& s : t->slices) {
    starts[t->tracks.at(s.track).name].push_back(s.start_ns);
    EXPECT_EQ(s.depth, 0u);
  }
  EXPECT_THAT(starts["GPU 0, stream 7"], ElementsAre(1000, 2100, 3000));
  EXPECT_THAT(starts["GPU 0, stream 7 (overlap 1)"], ElementsAre(1500));
  EXPECT_THAT(starts["GPU 0, stream 7 (overlap 2)"], ElementsAre(1600));
}

// launch_loop's pattern: a launch every 3 us, its 1.5 us kernel 5 us
// later, kernel records a thousand launches behind. The timeline costs a
// tenth of the JSON one per kernel, and under 60 bytes per event.
TEST(PerfettoTimeline, BytesPerKernelAreATenthOfTheJsonTimelines) {
  constexpr uint64_t kLaunches = 20000;
  std::string bytes;
  PerfettoTimeline timeline(AppendTo(bytes));
  TraceData records;
  auto both = [&](auto add) {
    add(static_cast<RecordConsumer&>(timeline));
    add(static_cast<RecordConsumer&>(records));
  };
  both([](RecordConsumer& c) { c.AddName(kVecAdd, "_Z7vec_addPKfS0_Pfi"); });
  both([](RecordConsumer& c) { c.AddProcess(ProcessRecord{kPid, 0, kBase, 0}); });
  for (uint64_t i = 1; i <= kLaunches + 1000; ++i) {
    if (i <= kLaunches) {
      LaunchRecord l{};
      l.correlation_id = ProcessQualifiedId(kPid, i);
      l.name_id = kVecAdd;
      l.api_start_ns = kBase + i * 3000;
      l.api_end_ns = l.api_start_ns + 2000 + i % 7;
      l.stream = 0x7000;
      l.pid = kPid;
      l.tid = kTidA;
      l.api = static_cast<uint16_t>(LaunchApi::kLaunchKernel);
      both([&](RecordConsumer& c) { c.AddLaunch(l); });
    }
    if (i > 1000) {
      const uint64_t j = i - 1000;
      KernelRecord k = Kernel(j, 7, kBase + j * 3000 + 5000, kBase + j * 3000 + 6500 + j % 5);
      both([&](RecordConsumer& c) { c.AddKernel(k); });
    }
  }
  ASSERT_TRUE(timeline.Finish().ok());
  const std::string json = FormatChromeTrace(records);
  const double per_kernel = static_cast<double>(bytes.size()) / kLaunches;
  const double per_event = static_cast<double>(bytes.size()) / timeline.slices();
  const double json_per_kernel = static_cast<double>(json.size()) / kLaunches;
  EXPECT_LE(per_event, 60.0);
  EXPECT_LE(per_kernel * 10, json_per_kernel)
      << per_kernel << " bytes per kernel (its launch included) vs JSON's " << json_per_kernel;
  RecordProperty("bytes_per_kernel", std::to_string(per_kernel));
  RecordProperty("json_bytes_per_kernel", std::to_string(json_per_kernel));

  absl::StatusOr<PerfettoTrace> t = ReadPerfettoTrace(bytes);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->slices.size(), 2 * kLaunches);
  size_t flows = 0;
  for (const PerfettoSlice& s : t->slices) flows += s.flows_in.size();
  EXPECT_EQ(flows, kLaunches);
}

// 2M launches and their kernels: the timeline keeps nothing of them.
TEST(PerfettoTimeline, TwoMillionLaunchesInBoundedMemory) {
  const uint64_t launches = kUnderAsan ? 200'000 : 2'000'000;
  uint64_t written = 0;
  PerfettoTimeline timeline([&](std::string_view b) {
    written += b.size();
    return absl::OkStatus();
  });
  timeline.AddName(kVecAdd, "_Z7vec_addPKfS0_Pfi");
  uint64_t rss_at_tenth = 0;
  for (uint64_t i = 1; i <= launches; ++i) {
    LaunchRecord l{};
    l.correlation_id = ProcessQualifiedId(kPid, i);
    l.api_start_ns = kBase + i * 3000;
    l.api_end_ns = l.api_start_ns + 2000;
    l.pid = kPid;
    l.tid = kTidA + static_cast<uint32_t>(i % 4);
    l.api = static_cast<uint16_t>(LaunchApi::kLaunchKernel);
    timeline.AddLaunch(l);
    timeline.AddKernel(Kernel(i, static_cast<uint32_t>(i % 3), kBase + i * 3000 + 500,
                              kBase + i * 3000 + 2400));
    if (i == launches / 10) rss_at_tenth = RssBytes();
  }
  ASSERT_TRUE(timeline.Finish().ok());
  EXPECT_EQ(timeline.slices(), 2 * launches);
  EXPECT_EQ(written, timeline.bytes_written());
  const uint64_t growth = RssBytes() - rss_at_tenth;
  if (!kUnderAsan) {
    EXPECT_LT(growth, uint64_t{8} << 20) << "RSS grew by " << growth << " bytes";
  }
}

}  // namespace
}  // namespace cuprobe
