// File: tests/report/trace_report_test.cc
//
// TraceData and the statistics of the trace report: duration statistics,
// names (demangling, unknown names, launch API names), launches joined with
// their kernels (from API activity; runtime and driver records of one call),
// decoding records (short, long, unaligned, unknown, name records), the
// summary's rows, and launch latency. The output formats are in
// trace_report_format_test.cc.
//
// Part of trace_report_test (tests/report/CMakeLists.txt); the fixture trace is in
// trace_report_test_util.h.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "probe/trace_records.h"
#include "report/trace_chrome.h"
#include "report/trace_data.h"
#include "report/trace_report.h"
#include "tests/report/trace_report_test_util.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;
using ::cuprobe::testing::kBase;
using ::cuprobe::testing::kPid;
using ::cuprobe::testing::kVecAdd;
using ::cuprobe::testing::kReduce;
using ::cuprobe::testing::kScale;
using ::cuprobe::testing::kLambda;
using ::cuprobe::testing::kBogus;
using ::cuprobe::testing::kAppName;
using ::cuprobe::testing::MakeLaunch;
using ::cuprobe::testing::MakeKernel;
using ::cuprobe::testing::MakeMemcpy;
using ::cuprobe::testing::MakeMemset;
using ::cuprobe::testing::kLaunches;
using ::cuprobe::testing::kKernels;
using ::cuprobe::testing::kHtoD;
using ::cuprobe::testing::kDtoH;
using ::cuprobe::testing::kDtoD;
using ::cuprobe::testing::kPageable;
using ::cuprobe::testing::kPinned;
using ::cuprobe::testing::kDevice;
using ::cuprobe::testing::MakeFixture;

// ---- statistics -----------------------------------------------------------

TEST(DurationStatsTest, EvenCountMedianIsMeanOfMiddlePair) {
  const uint64_t d[] = {400, 100, 300, 200};
  DurationStats s = ComputeDurationStats(d);
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.total_ns, 1000u);
  EXPECT_EQ(s.min_ns, 100u);
  EXPECT_EQ(s.max_ns, 400u);
  EXPECT_DOUBLE_EQ(s.avg_ns, 250.0);
  EXPECT_DOUBLE_EQ(s.median_ns, 250.0);
  // Sample deviation: sum of squares 50000 over n-1 = 3.
  EXPECT_DOUBLE_EQ(s.stddev_ns, std::sqrt(50000.0 / 3.0));
}

TEST(DurationStatsTest, OddCountMedianIsMiddle) {
  const uint64_t d[] = {1000, 3000, 2000};
  DurationStats s = ComputeDurationStats(d);
  EXPECT_EQ(s.total_ns, 6000u);
  EXPECT_DOUBLE_EQ(s.median_ns, 2000.0);
  EXPECT_DOUBLE_EQ(s.stddev_ns, 1000.0);
}

TEST(DurationStatsTest, OneInstanceHasZeroDeviation) {
  const uint64_t d[] = {500};
  DurationStats s = ComputeDurationStats(d);
  EXPECT_EQ(s.count, 1u);
  EXPECT_DOUBLE_EQ(s.median_ns, 500.0);
  EXPECT_DOUBLE_EQ(s.stddev_ns, 0.0);
}

TEST(DurationStatsTest, EmptyIsAllZero) {
  DurationStats s = ComputeDurationStats({});
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.total_ns, 0u);
  EXPECT_DOUBLE_EQ(s.stddev_ns, 0.0);
}

TEST(DurationTest, EndBeforeStartIsZero) {
  EXPECT_EQ(DurationNs(100, 50), 0u);
  EXPECT_EQ(DurationNs(100, 150), 50u);
}

// ---- names -------------------------------------------------------------------

TEST(DemangleTest, ItaniumNames) {
  EXPECT_EQ(DemangleKernelName("_Z7vec_addPKfS0_Pfi"),
            "vec_add(float const*, float const*, float*, int)");
  EXPECT_EQ(DemangleKernelName("_Z6reduceILi256EEvPKfPfi"),
            "void reduce<256>(float const*, float*, int)");
  EXPECT_EQ(DemangleKernelName("_ZN6detail5scaleEPff"), "detail::scale(float*, float)");
}

TEST(DemangleTest, KeepsRawNameWhenNotMangledOrBroken) {
  EXPECT_EQ(DemangleKernelName("_Zbogus"), "_Zbogus");
  EXPECT_EQ(DemangleKernelName("my_c_kernel"), "my_c_kernel");
  // A bare type encoding must not become "int".
  EXPECT_EQ(DemangleKernelName("i"), "i");
  EXPECT_EQ(DemangleKernelName(""), "");
}

TEST(TraceDataTest, NameFallsBackToUnknown) {
  TraceData data;
  data.AddName(7, "k");
  EXPECT_EQ(data.Name(7), "k");
  EXPECT_EQ(data.Name(8), kUnknownName);
  EXPECT_EQ(data.Name(0), "<unknown>");
  data.AddName(7, "k2");  // a later name replaces it
  EXPECT_EQ(data.Name(7), "k2");
}

// Launches recorded from API activity (stream kUnknownStream) take their
// name, grid, block and shared memory from the kernel record of the same
// correlation id, whichever arrives first; graph launches, launches with a
// stream handle and launches whose kernel never came keep theirs (reported
// as launches without a kernel record).
TEST(TraceDataTest, LaunchesFromActivityTakeTheirShapeFromTheirKernel) {
  auto activity_launch = [](uint64_t correlation, LaunchApi api) {
    LaunchRecord l = MakeLaunch({kPid, correlation, 0, api, 100, 200, kUnknownStream, 0});
    std::memset(l.grid, 0, sizeof(l.grid));
    std::memset(l.block, 0, sizeof(l.block));
    l.shared_mem_bytes = 0;
    return l;
  };
  TraceData data;
  data.AddName(kVecAdd, "_Z7vec_addPKfS0_Pfi");
  data.AddName(kReduce, "_Z6reducePfi");
  // Kernel 2 before any such launch, so before the join began.
  data.AddKernel(MakeKernel({2, kReduce, 0, 7, 1000, 500, 64, 512, 32}));
  data.AddLaunch(activity_launch(1, LaunchApi::kLaunchKernel));   // its kernel comes later
  data.AddLaunch(activity_launch(2, LaunchApi::kLaunchKernelEx));  // its kernel came first
  data.AddLaunch(activity_launch(3, LaunchApi::kGraphLaunch));
  data.AddLaunch(activity_launch(4, LaunchApi::kLaunchKernel));   // no kernel ever
  LaunchRecord from_callback = MakeLaunch({kPid, 5, kVecAdd, LaunchApi::kLaunchKernel, 0, 1, 0x10, 0});
  data.AddLaunch(from_callback);
  data.AddKernel(MakeKernel({1, kVecAdd, 0, 7, 2000, 500, 4096, 256, 16}));
  data.AddKernel(MakeKernel({3, kVecAdd, 0, 7, 3000, 500, 8, 32, 16}));  // a graph's node
  data.AddKernel(MakeKernel({5, kReduce, 0, 7, 4000, 500, 1, 1, 16}));
  const std::vector<LaunchRecord>& l = data.launches();
  ASSERT_EQ(l.size(), 5u);
  EXPECT_EQ(data.Name(l[0].name_id), "_Z7vec_addPKfS0_Pfi");
  EXPECT_EQ(l[0].grid[0], 4096u);
  EXPECT_EQ(l[0].grid[1], 1u);
  EXPECT_EQ(l[0].block[0], 256u);
  EXPECT_EQ(l[0].shared_mem_bytes, 0u);
  EXPECT_EQ(l[0].stream, kUnknownStream) << "the stream handle stays unknown";
  EXPECT_EQ(data.Name(l[1].name_id), "_Z6reducePfi");
  EXPECT_EQ(l[1].grid[0], 64u);
  EXPECT_EQ(l[1].block[0], 512u);
  EXPECT_EQ(l[1].shared_mem_bytes, 1024u);
  EXPECT_EQ(l[2].name_id, 0u) << "a graph launch names no kernel";
  EXPECT_EQ(l[2].grid[0], 0u);
  EXPECT_EQ(l[3].name_id, 0u);
  EXPECT_EQ(l[3].grid[0], 0u);
  EXPECT_EQ(l[4].name_id, static_cast<uint64_t>(kVecAdd)) << "a callback's record is left alone";
  EXPECT_EQ(l[4].grid[0], 256u);
  // The summary counts them under their kernels' names, and the timeline
  // says the stream is unknown.
  TraceSummary summary = Summarize(data);
  std::map<std::string, uint64_t> calls;
  for (const auto& r : summary.launches) calls[r.raw_name] = r.api_ns.count;
  EXPECT_EQ(calls["_Z7vec_addPKfS0_Pfi"], 2u);  // launches 1 and 5
  EXPECT_EQ(calls["_Z6reducePfi"], 1u);
  EXPECT_EQ(calls["[cuGraphLaunch]"], 1u);
  EXPECT_EQ(calls[std::string(kNoKernelRecordName)], 1u);
  EXPECT_FALSE(calls.contains(std::string(kUnknownName)));
  const std::string trace = FormatChromeTrace(data);
  EXPECT_THAT(trace, HasSubstr("\"stream\":\"unknown\""));
  EXPECT_THAT(trace, HasSubstr("\"stream\":\"0x10\""));
  EXPECT_THAT(trace, HasSubstr("\"kernel\":\"[launch without a kernel record]\""));
}

// One launch call may leave a runtime record and a driver record with one
// correlation id (cudaLaunchKernel and the cuLaunchKernel inside it): they
// merge into one launch with the runtime call's times, API and result,
// whichever comes first, and it joins its kernel once. A failed runtime
// launch is reported without a kernel record, with its error counted; a
// runtime graph launch as "[cudaGraphLaunch]"; a call CUPTI could not time
// (start and end 0) neither moves the timeline's origin nor the summary's
// first timestamp.
TEST(TraceDataTest, RuntimeAndDriverRecordsOfOneCallMergeIntoOneLaunch) {
  auto activity_launch = [](uint64_t correlation, LaunchApi api, uint64_t start, uint64_t end,
                            uint16_t result = 0) {
    LaunchRecord l = MakeLaunch({kPid, correlation, 0, api, start, end, kUnknownStream, result});
    std::memset(l.grid, 0, sizeof(l.grid));
    std::memset(l.block, 0, sizeof(l.block));
    return l;
  };
  TraceData data;
  data.AddName(kVecAdd, "_Z7vec_addPKfS0_Pfi");
  data.AddLaunch(activity_launch(1, LaunchApi::kLaunchKernel, 110, 150));  // inner call first
  data.AddLaunch(activity_launch(1, LaunchApi::kCudaLaunchKernel, 100, 200));
  data.AddLaunch(activity_launch(2, LaunchApi::kCudaLaunchKernel, 300, 400));  // outer first
  data.AddKernel(MakeKernel({1, kVecAdd, 0, 7, 1000, 500, 4096, 256, 16}));
  data.AddLaunch(activity_launch(2, LaunchApi::kLaunchKernel, 310, 350));
  data.AddKernel(MakeKernel({2, kVecAdd, 0, 7, 2000, 500, 4096, 256, 16}));
  data.AddLaunch(activity_launch(3, LaunchApi::kCudaLaunchKernel, 500, 520, /*result=*/1));
  // A kernel record with the failed call's correlation id (it cannot happen;
  // here it shows the failed launch is not waiting to be joined).
  data.AddKernel(MakeKernel({3, kReduce, 0, 7, 2500, 100, 1, 1, 16}));
  data.AddLaunch(activity_launch(4, LaunchApi::kCudaGraphLaunch, 600, 700));
  data.AddKernel(MakeKernel({4, kVecAdd, 0, 7, 3000, 500, 8, 32, 16, 9, 1}));
  LaunchRecord untimed = activity_launch(5, LaunchApi::kCudaLaunchKernel, 0, 0);
  untimed.api_start_ns = untimed.api_end_ns = 0;
  data.AddLaunch(untimed);
  data.AddKernel(MakeKernel({5, kVecAdd, 0, 7, 4000, 500, 4096, 256, 16}));
  // The driver record joins its kernel before the runtime record comes.
  data.AddLaunch(activity_launch(6, LaunchApi::kLaunchKernel, 810, 850));
  data.AddKernel(MakeKernel({6, kVecAdd, 0, 7, 5000, 500, 4096, 256, 16}));
  data.AddLaunch(activity_launch(6, LaunchApi::kCudaLaunchKernel, 800, 900));

  const std::vector<LaunchRecord>& l = data.launches();
  ASSERT_EQ(l.size(), 6u);
  EXPECT_EQ(data.counters().merged_launches, 3u);
  for (int i : {0, 1, 5}) {
    SCOPED_TRACE(i);
    EXPECT_EQ(l[i].api, static_cast<uint16_t>(LaunchApi::kCudaLaunchKernel));
    EXPECT_EQ(data.Name(l[i].name_id), "_Z7vec_addPKfS0_Pfi");
    EXPECT_EQ(l[i].grid[0], 4096u);
  }
  EXPECT_EQ(l[0].api_start_ns, kBase + 100);
  EXPECT_EQ(l[0].api_end_ns, kBase + 200);
  EXPECT_EQ(l[1].api_start_ns, kBase + 300);
  EXPECT_EQ(l[1].api_end_ns, kBase + 400);
  EXPECT_EQ(l[5].api_start_ns, kBase + 800);
  EXPECT_EQ(l[5].api_end_ns, kBase + 900);
  EXPECT_EQ(l[2].name_id, 0u) << "a failed call launched nothing";
  EXPECT_EQ(l[2].grid[0], 0u);
  EXPECT_EQ(l[3].name_id, 0u) << "a graph launch names no kernel";
  EXPECT_EQ(data.Name(l[4].name_id), "_Z7vec_addPKfS0_Pfi");

  TraceSummary summary = Summarize(data);
  std::map<std::string, std::pair<uint64_t, uint64_t>> calls;  // name -> (calls, errors)
  for (const auto& r : summary.launches) calls[r.raw_name] = {r.api_ns.count, r.errors};
  EXPECT_EQ(calls["_Z7vec_addPKfS0_Pfi"], std::make_pair(uint64_t{4}, uint64_t{0}));
  EXPECT_EQ(calls[std::string(kNoKernelRecordName)], std::make_pair(uint64_t{1}, uint64_t{1}));
  EXPECT_EQ(calls["[cudaGraphLaunch]"], std::make_pair(uint64_t{1}, uint64_t{0}));
  EXPECT_EQ(summary.totals.launches, 6u);
  EXPECT_EQ(summary.totals.launches_from_activity, 6u);
  EXPECT_EQ(summary.totals.first_ns, kBase + 100) << "the untimed call is not the first";
  const std::string json = FormatSummaryJson(summary);
  EXPECT_THAT(json, HasSubstr("\"launches\":6,\"launches_from_activity\":6,\"launch_records_merged\":3"));
  EXPECT_THAT(FormatSummaryText(summary), HasSubstr("6 launches (1 failed, 6 from API activity)"));

  const std::string trace = FormatChromeTrace(data);
  EXPECT_THAT(trace, HasSubstr("\"name\":\"cudaLaunchKernel\""));
  EXPECT_THAT(trace, HasSubstr("\"name\":\"cudaGraphLaunch\""));
  EXPECT_THAT(trace, ::testing::Not(HasSubstr("\"name\":\"cuLaunchKernel\"")))
      << "the driver records were merged away";
  EXPECT_THAT(trace, HasSubstr(absl::StrCat("\"origin_ns\":\"", kBase + 100, "\"")));
}

TEST(TraceReportTest, LaunchApiNames) {
  EXPECT_EQ(LaunchApiName(static_cast<uint16_t>(LaunchApi::kLaunchKernel)), "cuLaunchKernel");
  EXPECT_EQ(LaunchApiName(static_cast<uint16_t>(LaunchApi::kGraphLaunch)), "cuGraphLaunch");
  EXPECT_EQ(LaunchApiName(static_cast<uint16_t>(LaunchApi::kCudaLaunchKernel)),
            "cudaLaunchKernel");
  EXPECT_EQ(LaunchApiName(static_cast<uint16_t>(LaunchApi::kCudaLaunchKernelEx)),
            "cudaLaunchKernelExC");
  EXPECT_EQ(LaunchApiName(static_cast<uint16_t>(LaunchApi::kCudaLaunchCooperativeKernel)),
            "cudaLaunchCooperativeKernel");
  EXPECT_EQ(LaunchApiName(static_cast<uint16_t>(LaunchApi::kCudaGraphLaunch)), "cudaGraphLaunch");
  EXPECT_EQ(LaunchApiName(99), "cuLaunch (api 99)");
  EXPECT_TRUE(IsGraphLaunch(static_cast<uint16_t>(LaunchApi::kCudaGraphLaunch)));
  EXPECT_FALSE(IsGraphLaunch(static_cast<uint16_t>(LaunchApi::kCudaLaunchKernel)));
  EXPECT_TRUE(IsRuntimeLaunch(static_cast<uint16_t>(LaunchApi::kCudaLaunchCooperativeKernel)));
  EXPECT_FALSE(IsRuntimeLaunch(static_cast<uint16_t>(LaunchApi::kGraphLaunch)));
}

// ---- decoding ----------------------------------------------------------------

absl::Span<const uint8_t> Bytes(const std::vector<uint8_t>& v) { return absl::MakeConstSpan(v); }

template <typename T>
std::vector<uint8_t> BodyOf(const T& record, size_t extra = 0) {
  std::vector<uint8_t> v(sizeof(T) + extra, 0);
  std::memcpy(v.data(), &record, sizeof(T));
  return v;
}

TEST(TraceDataTest, FixtureDecodesEveryRecord) {
  TraceData data = MakeFixture();
  EXPECT_EQ(data.processes().size(), 1u);
  EXPECT_EQ(data.launches().size(), std::size(kLaunches));
  EXPECT_EQ(data.kernels().size(), std::size(kKernels));
  EXPECT_EQ(data.memcpys().size(), 4u);
  EXPECT_EQ(data.memsets().size(), 2u);
  EXPECT_EQ(data.name_count(), 6u);
  EXPECT_EQ(data.counters().invalid, 0u);
  EXPECT_EQ(data.counters().unknown_type, 0u);
  EXPECT_EQ(data.counters().accepted, 1 + 6 + std::size(kLaunches) + std::size(kKernels) + 6);
  EXPECT_EQ(data.Name(kLambda), "lambda_kernel, \"fast\" path");
  // Decoded from padded bytes, the fields survive exactly.
  const KernelRecord& k = data.kernels().back();
  EXPECT_EQ(k.start_ns, kBase + 22000);
  EXPECT_EQ(k.graph_node_id, 5u);
  EXPECT_EQ(k.registers_per_thread, 24u);
}

TEST(TraceDataTest, ShortBodiesAreRejectedWithSizes) {
  TraceData data;
  struct Case {
    RecordType type;
    size_t need;
    const char* name;
  } cases[] = {
      {RecordType::kLaunch, sizeof(LaunchRecord), "LaunchRecord"},
      {RecordType::kKernel, sizeof(KernelRecord), "KernelRecord"},
      {RecordType::kMemcpy, sizeof(MemcpyRecord), "MemcpyRecord"},
      {RecordType::kMemset, sizeof(MemsetRecord), "MemsetRecord"},
      {RecordType::kProcess, sizeof(ProcessRecord), "ProcessRecord"},
      {RecordType::kName, sizeof(NameRecord), "NameRecord"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> body(c.need - 8, 0);
    absl::Status s = data.Add(static_cast<uint16_t>(c.type), Bytes(body));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(s.message(),
              absl::StrFormat("%s (type %d) body is %d bytes, shorter than the %d-byte record",
                              c.name, static_cast<int>(c.type), c.need - 8, c.need));
  }
  EXPECT_EQ(data.counters().invalid, std::size(cases));
  EXPECT_EQ(data.counters().accepted, 0u);
  EXPECT_TRUE(data.kernels().empty());
  EXPECT_TRUE(data.launches().empty());
}

TEST(TraceDataTest, NameRecordLengthMustFitTheBody) {
  TraceData data;
  NameRecord r{7, 100, 0};
  std::vector<uint8_t> body = BodyOf(r, 20);  // 20 bytes follow, 100 declared
  absl::Status s = data.Add(static_cast<uint16_t>(RecordType::kName), Bytes(body));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "NameRecord (type 1) for name_id 7 declares 100 name bytes, but the 36-byte body "
            "holds only 20 after its 16-byte header");
  EXPECT_FALSE(data.HasName(7));
  EXPECT_EQ(data.counters().invalid, 1u);
}

TEST(TraceDataTest, NameRecordIdZeroIsRejected) {
  TraceData data;
  NameRecord r{0, 1, 0};
  std::vector<uint8_t> body = BodyOf(r, 8);
  absl::Status s = data.Add(static_cast<uint16_t>(RecordType::kName), Bytes(body));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("name_id 0"));
}

TEST(TraceDataTest, NameRecordWithPaddingKeepsOnlyItsBytes) {
  TraceData data;
  NameRecord r{9, 3, 0};
  std::vector<uint8_t> body = BodyOf(r, 8);  // "abc" + 5 bytes of padding
  std::memcpy(body.data() + sizeof(r), "abcXXXXX", 8);
  ASSERT_TRUE(data.Add(static_cast<uint16_t>(RecordType::kName), Bytes(body)).ok());
  EXPECT_EQ(data.Name(9), "abc");
  NameRecord empty{10, 0, 0};
  ASSERT_TRUE(data.Add(static_cast<uint16_t>(RecordType::kName), Bytes(BodyOf(empty))).ok());
  EXPECT_EQ(data.Name(10), "");
}

TEST(TraceDataTest, UnknownTypesAreCountedAndSkipped) {
  TraceData data;
  std::vector<uint8_t> body(24, 0);
  EXPECT_TRUE(data.Add(77, Bytes(body)).ok());
  EXPECT_TRUE(data.Add(0, {}).ok());
  EXPECT_EQ(data.counters().unknown_type, 2u);
  EXPECT_EQ(data.counters().invalid, 0u);
  EXPECT_EQ(data.counters().accepted, 0u);
  data.AddDropped(5);
  EXPECT_EQ(data.counters().dropped, 5u);
}

TEST(TraceDataTest, LongerBodiesAreAccepted) {
  // Padding, or fields a newer hook appends: only the struct's bytes count.
  TraceData data;
  KernelRecord k{};
  k.name_id = 3;
  k.end_ns = 10;
  ASSERT_TRUE(data.Add(static_cast<uint16_t>(RecordType::kKernel), Bytes(BodyOf(k, 16))).ok());
  ASSERT_EQ(data.kernels().size(), 1u);
  EXPECT_EQ(data.kernels()[0].end_ns, 10u);
}

TEST(TraceDataTest, UnalignedBodiesDecode) {
  TraceData data;
  MemsetRecord m{};
  m.bytes = 123;
  std::vector<uint8_t> buf(sizeof(m) + 1);
  std::memcpy(buf.data() + 1, &m, sizeof(m));
  ASSERT_TRUE(data.Add(static_cast<uint16_t>(RecordType::kMemset),
                       absl::MakeConstSpan(buf).subspan(1)).ok());
  EXPECT_EQ(data.memsets()[0].bytes, 123u);
}

// ---- the summary -------------------------------------------------------------

TEST(SummaryTest, KernelRowsHaveExactStatistics) {
  TraceSummary summary = Summarize(MakeFixture());
  ASSERT_EQ(summary.kernels.size(), 6u);
  const auto& rows = summary.kernels;
  // Longest total first; scale and lambda tie at 500 ns: by name.
  EXPECT_EQ(rows[0].name, "void reduce<256>(float const*, float*, int)");
  EXPECT_EQ(rows[0].raw_name, "_Z6reduceILi256EEvPKfPfi");
  EXPECT_EQ(rows[1].name, "vec_add(float const*, float const*, float*, int)");
  EXPECT_EQ(rows[2].name, "detail::scale(float*, float)");
  EXPECT_EQ(rows[3].name, "lambda_kernel, \"fast\" path");
  EXPECT_EQ(rows[4].name, "_Zbogus");
  EXPECT_EQ(rows[5].name, "<unknown>");

  EXPECT_EQ(rows[0].time.count, 3u);
  EXPECT_EQ(rows[0].time.total_ns, 6000u);
  EXPECT_DOUBLE_EQ(rows[0].time.median_ns, 2000.0);
  EXPECT_DOUBLE_EQ(rows[0].time.stddev_ns, 1000.0);
  EXPECT_EQ(rows[1].time.count, 4u);
  EXPECT_EQ(rows[1].time.total_ns, 1000u);
  EXPECT_DOUBLE_EQ(rows[1].time.median_ns, 250.0);
  EXPECT_DOUBLE_EQ(rows[1].time.stddev_ns, std::sqrt(50000.0 / 3.0));
  EXPECT_EQ(rows[2].time.count, 1u);
  EXPECT_DOUBLE_EQ(rows[2].time.stddev_ns, 0.0);
  EXPECT_EQ(rows[3].time.count, 2u);
  EXPECT_DOUBLE_EQ(rows[3].time.stddev_ns, 0.0);

  EXPECT_EQ(summary.totals.kernels, 12u);
  EXPECT_EQ(summary.totals.kernel_ns, 8060u);
  EXPECT_DOUBLE_EQ(rows[0].time_percent, 100.0 * 6000 / 8060);
  double percent = 0;
  for (const auto& r : rows) percent += r.time_percent;
  EXPECT_NEAR(percent, 100.0, 1e-9);
}

TEST(SummaryTest, LaunchAndMemoryRows) {
  TraceSummary summary = Summarize(MakeFixture());
  // vec_add: 5 calls (one failed) of 4500, 3000, 2000, 1000, 300 ns.
  const LaunchSummaryRow* vec_add = nullptr;
  const LaunchSummaryRow* graph = nullptr;
  for (const auto& r : summary.launches) {
    if (r.raw_name == "_Z7vec_addPKfS0_Pfi") vec_add = &r;
    if (r.raw_name == "[cuGraphLaunch]") graph = &r;
  }
  ASSERT_NE(vec_add, nullptr);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(vec_add->api_ns.count, 5u);
  EXPECT_EQ(vec_add->errors, 1u);
  EXPECT_EQ(vec_add->api_ns.total_ns, 10800u);
  EXPECT_DOUBLE_EQ(vec_add->api_ns.avg_ns, 2160.0);
  EXPECT_EQ(vec_add->api_ns.min_ns, 300u);
  EXPECT_EQ(vec_add->api_ns.max_ns, 4500u);
  EXPECT_EQ(graph->api_ns.count, 1u);
  EXPECT_EQ(summary.launches.front().raw_name, "_Z7vec_addPKfS0_Pfi");  // longest API time
  EXPECT_EQ(summary.totals.launches, 13u);
  EXPECT_EQ(summary.totals.launch_errors, 1u);

  ASSERT_EQ(summary.memcpy.size(), 3u);
  EXPECT_EQ(summary.memcpy[0].operation, "[CUDA memcpy Host-to-Device]");
  EXPECT_EQ(summary.memcpy[0].time.count, 2u);
  EXPECT_EQ(summary.memcpy[0].total_bytes, 12288u);
  EXPECT_EQ(summary.memcpy[0].time.total_ns, 1800u);
  EXPECT_DOUBLE_EQ(summary.memcpy[0].time.median_ns, 900.0);
  EXPECT_EQ(summary.memcpy[1].operation, "[CUDA memcpy Device-to-Host]");
  EXPECT_EQ(summary.memcpy[2].operation, "[CUDA memcpy Device-to-Device]");
  ASSERT_EQ(summary.memset.size(), 1u);
  EXPECT_EQ(summary.memset[0].operation, "[CUDA memset]");
  EXPECT_EQ(summary.memset[0].total_bytes, 3072u);
  EXPECT_EQ(summary.memset[0].time.total_ns, 300u);
  EXPECT_DOUBLE_EQ(summary.memset[0].time_percent, 100.0);

  EXPECT_EQ(summary.totals.first_ns, kBase + 1000);
  EXPECT_EQ(summary.totals.last_ns, kBase + 23100);
  EXPECT_EQ(summary.totals.span_ns, 22100u);
}

TEST(SummaryTest, DirectAddsMatchDecodedRecords) {
  TraceData direct;
  direct.AddName(kAppName, "vec_app");
  direct.AddProcess(ProcessRecord{kPid, 0, kBase, kAppName});
  direct.AddName(kVecAdd, "_Z7vec_addPKfS0_Pfi");
  direct.AddName(kReduce, "_Z6reduceILi256EEvPKfPfi");
  direct.AddName(kScale, "_ZN6detail5scaleEPff");
  direct.AddName(kLambda, "lambda_kernel, \"fast\" path");
  direct.AddName(kBogus, "_Zbogus");
  for (const auto& l : kLaunches) direct.AddLaunch(MakeLaunch(l));
  for (const auto& k : kKernels) direct.AddKernel(MakeKernel(k));
  direct.AddMemcpy(MakeMemcpy(40, kHtoD, 0, 7, 1200, 600, 4096, kPageable, kDevice));
  direct.AddMemcpy(MakeMemcpy(41, kHtoD, 0, 7, 2000, 1200, 8192, kPinned, kDevice));
  direct.AddMemcpy(MakeMemcpy(42, kDtoD, 0, 13, 20000, 300, 1 << 20, kDevice, kDevice));
  direct.AddMemcpy(MakeMemcpy(43, kDtoH, 0, 7, 21000, 900, 4096, kDevice, kPageable));
  direct.AddMemset(MakeMemset(44, 14, 14500, 200, 1024, 0));
  direct.AddMemset(MakeMemset(45, 14, 23000, 100, 2048, 255));
  EXPECT_EQ(FormatSummaryJson(Summarize(direct)), FormatSummaryJson(Summarize(MakeFixture())));
  EXPECT_EQ(FormatChromeTrace(direct), FormatChromeTrace(MakeFixture()));
}

// Launch latency: kernel start minus the API start of the launch with the
// same correlation id; graph kernels and kernels without a launch record are
// left out; p99 is the nearest rank.
TEST(LaunchLatency, MatchesByCorrelationAndRanksP99) {
  TraceData data;
  data.AddName(1, "_Z1kv");
  for (uint32_t i = 1; i <= 100; ++i) {
    LaunchRecord l = {};
    l.correlation_id = i;
    l.name_id = 1;
    l.api_start_ns = 1000 * i;
    l.api_end_ns = 1000 * i + 10;
    data.AddLaunch(l);
    KernelRecord k = {};
    k.correlation_id = i;
    k.name_id = 1;
    k.start_ns = 1000 * i + 100 * i;  // latency 100 * i: 100 .. 10,000
    k.end_ns = k.start_ns + 50;
    data.AddKernel(k);
  }
  KernelRecord orphan = {};  // no launch record
  orphan.correlation_id = 500;
  orphan.name_id = 1;
  orphan.start_ns = 5;
  data.AddKernel(orphan);
  KernelRecord graph = {};  // launched from a graph
  graph.correlation_id = 7;
  graph.name_id = 1;
  graph.graph_node_id = 9;
  graph.start_ns = 1;
  data.AddKernel(graph);
  TraceSummary s = Summarize(data);
  ASSERT_EQ(s.latency.size(), 1u);
  EXPECT_EQ(s.latency[0].name, "k()");
  EXPECT_EQ(s.latency[0].latency.count, 100u);
  EXPECT_EQ(s.latency[0].latency.min_ns, 100u);
  EXPECT_EQ(s.latency[0].latency.max_ns, 10000u);
  EXPECT_EQ(s.latency[0].latency.median_ns, 5050.0);
  EXPECT_EQ(s.latency[0].p99_ns, 9900u);
  // log2 buckets: 100 -> [64, 128) = bucket 7; 10,000 -> [8192, 16384) = 14.
  ASSERT_EQ(s.latency_log2.size(), 65u);
  uint64_t total = 0;
  for (uint64_t c : s.latency_log2) total += c;
  EXPECT_EQ(total, 100u);
  EXPECT_EQ(s.latency_log2[7], 1u);
  EXPECT_EQ(s.latency_log2[14], 19u);  // 8200 .. 10,000
}

}  // namespace
}  // namespace cuprobe
