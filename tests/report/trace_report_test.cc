// File: tests/report/trace_report_test.cc
//
// TraceData decoding, the summary statistics, and every report format. The
// fixture trace goes through the same path as the ring consumer: records are
// serialized as RecordHeader + body + padding, then decoded with Add().
//
// Golden files live in tests/report/golden/. After an intended change:
//   CUPROBE_UPDATE_GOLDEN=1 build/tests/trace_report_test
// rewrites them; review the diff before committing.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "report/trace_chrome.h"
#include "report/trace_data.h"
#include "probe/trace_records.h"
#include "report/trace_report.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;

// ---- building a record stream ---------------------------------------------

constexpr uint64_t kBase = 1'722'000'000'123'456'789;  // a CUPTI-like timestamp
constexpr uint32_t kPid = 4242;
constexpr uint32_t kTidA = 4242;  // main thread
constexpr uint32_t kTidB = 4250;  // a worker thread

enum NameId : uint64_t {
  kVecAdd = 1,
  kReduce = 2,
  kScale = 3,
  kLambda = 4,
  kBogus = 5,
  kNoSuchName = 99,  // never named
  kAppName = 100,
};

// Appends one ring record: header, body, zero padding to a multiple of 8.
class RecordStream {
 public:
  template <typename T>
  void Put(RecordType type, const T& body, std::string_view tail = {}) {
    const size_t body_size = sizeof(T) + tail.size();
    const size_t padded = (sizeof(RecordHeader) + body_size + 7) / 8 * 8;
    RecordHeader h{static_cast<uint32_t>(padded), static_cast<uint16_t>(type), 0};
    const size_t at = bytes_.size();
    bytes_.resize(at + padded, 0);
    std::memcpy(bytes_.data() + at, &h, sizeof(h));
    std::memcpy(bytes_.data() + at + sizeof(h), &body, sizeof(T));
    if (!tail.empty()) {
      std::memcpy(bytes_.data() + at + sizeof(h) + sizeof(T), tail.data(), tail.size());
    }
  }
  void Name(uint64_t id, std::string_view name) {
    NameRecord r{id, static_cast<uint32_t>(name.size()), 0};
    Put(RecordType::kName, r, name);
  }
  // Decodes the stream as the ring consumer does.
  void FeedTo(TraceData* data) const {
    size_t at = 0;
    while (at < bytes_.size()) {
      RecordHeader h;
      std::memcpy(&h, bytes_.data() + at, sizeof(h));
      ASSERT_GE(h.size, sizeof(h));
      absl::Span<const uint8_t> body(bytes_.data() + at + sizeof(h), h.size - sizeof(h));
      absl::Status s = data->Add(h.type, body);
      ASSERT_TRUE(s.ok()) << s;
      at += h.size;
    }
  }

 private:
  std::vector<uint8_t> bytes_;
};

struct LaunchSpec {
  uint32_t tid;
  uint64_t correlation;
  uint64_t name_id;
  LaunchApi api;
  uint64_t start, end;  // relative to kBase
  uint64_t stream;
  uint16_t result;
};

struct KernelSpec {
  uint64_t correlation;
  uint64_t name_id;
  uint32_t device, stream;
  uint64_t start, duration;  // relative to kBase
  uint32_t grid_x, block_x, registers;
  uint32_t graph_id = 0;
  uint64_t graph_node = 0;
};

LaunchRecord MakeLaunch(const LaunchSpec& s) {
  LaunchRecord r{};
  r.correlation_id = s.correlation;
  r.name_id = s.name_id;
  r.api_start_ns = kBase + s.start;
  r.api_end_ns = kBase + s.end;
  r.stream = s.stream;
  r.pid = kPid;
  r.tid = s.tid;
  r.grid[0] = 256;
  r.grid[1] = r.grid[2] = 1;
  r.block[0] = 128;
  r.block[1] = r.block[2] = 1;
  r.shared_mem_bytes = s.name_id == kReduce ? 1024 : 0;
  r.api = static_cast<uint16_t>(s.api);
  r.result = s.result;
  return r;
}

KernelRecord MakeKernel(const KernelSpec& s) {
  KernelRecord r{};
  r.correlation_id = s.correlation;
  r.name_id = s.name_id;
  r.start_ns = kBase + s.start;
  r.end_ns = kBase + s.start + s.duration;
  r.graph_node_id = s.graph_node;
  r.device = s.device;
  r.context = 1;
  r.stream_id = s.stream;
  r.grid[0] = s.grid_x;
  r.grid[1] = r.grid[2] = 1;
  r.block[0] = s.block_x;
  r.block[1] = r.block[2] = 1;
  r.dynamic_shared_bytes = s.name_id == kReduce ? 1024 : 0;
  r.static_shared_bytes = s.name_id == kReduce ? 256 : 0;
  r.registers_per_thread = s.registers;
  r.graph_id = s.graph_id;
  r.grid_id = 1000 + IdLocal(s.correlation);  // as %gridid: one per launch
  return r;
}

MemcpyRecord MakeMemcpy(uint64_t correlation, uint8_t kind, uint32_t device, uint32_t stream,
                        uint64_t start, uint64_t duration, uint64_t bytes, uint8_t src,
                        uint8_t dst) {
  MemcpyRecord r{};
  r.correlation_id = correlation;
  r.start_ns = kBase + start;
  r.end_ns = kBase + start + duration;
  r.bytes = bytes;
  r.device = device;
  r.context = 1;
  r.stream_id = stream;
  r.copy_kind = kind;
  r.src_kind = src;
  r.dst_kind = dst;
  return r;
}

MemsetRecord MakeMemset(uint64_t correlation, uint32_t stream, uint64_t start,
                        uint64_t duration, uint64_t bytes, uint32_t value) {
  MemsetRecord r{};
  r.correlation_id = correlation;
  r.start_ns = kBase + start;
  r.end_ns = kBase + start + duration;
  r.bytes = bytes;
  r.device = 0;
  r.context = 1;
  r.stream_id = stream;
  r.value = value;
  return r;
}

// The fixture: kernels with 4 (even), 3 (odd), 2, and 1 instances, a name
// that needs demangling, one that does not demangle, one with a comma and a
// quote, one never named; three streams on GPU 0 and one on GPU 1; launches
// from two CPU threads, a graph launch and a failed launch; memcpys of three
// kinds and two memsets.
//
// Timeline (ns after kBase); streams never overlap themselves:
//   stream 7:  memcpy HtoD 1200+600, HtoD 2000+1200, vec_add 10000+100,
//              12000+200, 14000+300, 15000+400, <unknown> 20000+10,
//              memcpy DtoH 21000+900
//   stream 13: reduce 11000+1000, 13000+3000, 17000+2000, memcpy DtoD 20000+300
//   stream 14: memset 14500+200, lambda 16000+250, 16500+250, scale 22000+500
//              (graph), memset 23000+100
//   GPU 1 stream 21: _Zbogus 19500+50
const LaunchSpec kLaunches[] = {
    {kTidA, 1, kVecAdd, LaunchApi::kLaunchKernel, 1000, 5500, 0x7000, 0},
    {kTidB, 3, kReduce, LaunchApi::kLaunchKernelEx, 2000, 7000, 0x13000, 0},
    {kTidA, 2, kVecAdd, LaunchApi::kLaunchKernel, 6000, 9000, 0x7000, 0},
    {kTidB, 4, kReduce, LaunchApi::kLaunchKernelEx, 8000, 10000, 0x13000, 0},
    {kTidA, 5, kVecAdd, LaunchApi::kLaunchKernel, 9500, 11500, 0x7000, 0},
    {kTidB, 6, kReduce, LaunchApi::kLaunchKernelEx, 10500, 12500, 0x13000, 0},
    {kTidA, 7, kVecAdd, LaunchApi::kLaunchKernel, 12000, 13000, 0x7000, 0},
    {kTidB, 9, kLambda, LaunchApi::kLaunchKernel, 13000, 14000, 0x14000, 0},
    {kTidA, 8, kLambda, LaunchApi::kLaunchKernel, 13500, 14500, 0x14000, 0},
    {kTidA, 10, kBogus, LaunchApi::kLaunchCooperativeKernel, 15000, 16000, 0x21000, 0},
    {kTidA, 11, kNoSuchName, LaunchApi::kLaunchKernel, 16500, 17000, 0x7000, 0},
    {kTidB, 30, 0, LaunchApi::kGraphLaunch, 18000, 21000, 0x14000, 0},
    {kTidB, 12, kVecAdd, LaunchApi::kLaunchKernelEx, 21500, 21800, 0x7000, 1},  // failed
};

const KernelSpec kKernels[] = {
    {1, kVecAdd, 0, 7, 10000, 100, 4096, 256, 16},
    {3, kReduce, 0, 13, 11000, 1000, 1024, 256, 32},
    {2, kVecAdd, 0, 7, 12000, 200, 4096, 256, 16},
    {4, kReduce, 0, 13, 13000, 3000, 1024, 256, 32},
    {5, kVecAdd, 0, 7, 14000, 300, 4096, 256, 16},
    {7, kVecAdd, 0, 7, 15000, 400, 4096, 256, 16},
    {8, kLambda, 0, 14, 16000, 250, 64, 64, 40},
    {9, kLambda, 0, 14, 16500, 250, 64, 64, 40},
    {6, kReduce, 0, 13, 17000, 2000, 1024, 256, 32},
    {10, kBogus, 1, 21, 19500, 50, 1, 32, 8},
    {11, kNoSuchName, 0, 7, 20000, 10, 1, 1, 4},
    {30, kScale, 0, 14, 22000, 500, 128, 128, 24, /*graph_id=*/1, /*graph_node=*/5},
};

constexpr uint8_t kHtoD = 1, kDtoH = 2, kDtoD = 8;
constexpr uint8_t kPageable = 1, kPinned = 2, kDevice = 3;

TraceData MakeFixture() {
  RecordStream stream;
  stream.Name(kAppName, "vec_app");
  stream.Put(RecordType::kProcess, ProcessRecord{kPid, 0, kBase, kAppName});
  stream.Name(kVecAdd, "_Z7vec_addPKfS0_Pfi");
  stream.Name(kReduce, "_Z6reduceILi256EEvPKfPfi");
  stream.Name(kScale, "_ZN6detail5scaleEPff");
  stream.Name(kLambda, "lambda_kernel, \"fast\" path");
  stream.Name(kBogus, "_Zbogus");
  for (const auto& l : kLaunches) stream.Put(RecordType::kLaunch, MakeLaunch(l));
  for (const auto& k : kKernels) stream.Put(RecordType::kKernel, MakeKernel(k));
  stream.Put(RecordType::kMemcpy, MakeMemcpy(40, kHtoD, 0, 7, 1200, 600, 4096, kPageable, kDevice));
  stream.Put(RecordType::kMemcpy, MakeMemcpy(41, kHtoD, 0, 7, 2000, 1200, 8192, kPinned, kDevice));
  stream.Put(RecordType::kMemcpy, MakeMemcpy(42, kDtoD, 0, 13, 20000, 300, 1 << 20, kDevice, kDevice));
  stream.Put(RecordType::kMemcpy, MakeMemcpy(43, kDtoH, 0, 7, 21000, 900, 4096, kDevice, kPageable));
  stream.Put(RecordType::kMemset, MakeMemset(44, 14, 14500, 200, 1024, 0));
  stream.Put(RecordType::kMemset, MakeMemset(45, 14, 23000, 100, 2048, 255));
  TraceData data;
  stream.FeedTo(&data);
  return data;
}

// ---- golden files and python ------------------------------------------------

std::string GoldenPath(std::string_view name) {
  return absl::StrCat(testing::SourceDir(), "/tests/report/golden/", name);
}

bool UpdateGolden() {
  const char* v = std::getenv("CUPROBE_UPDATE_GOLDEN");
  return v != nullptr && std::string_view(v) == "1";
}

void ExpectGolden(std::string_view name, const std::string& actual) {
  const std::string path = GoldenPath(name);
  if (UpdateGolden()) {
    ::mkdir(GoldenPath("").c_str(), 0755);  // first run: the folder may not exist
    absl::Status s = WriteFile(path, actual);
    ASSERT_TRUE(s.ok()) << s;
    std::fprintf(stderr, "updated golden file %s\n", path.c_str());
    return;
  }
  ASSERT_EQ(::access(path.c_str(), R_OK), 0)
      << "missing golden file " << path << "; run with CUPROBE_UPDATE_GOLDEN=1 to create it";
  const std::string expected = testing::ReadWholeFile(path);
  if (actual == expected) return;
  // Report the first differing line, not two whole files.
  const std::vector<std::string_view> want = absl::StrSplit(expected, '\n');
  const std::vector<std::string_view> got = absl::StrSplit(actual, '\n');
  size_t line = 0;
  while (line < want.size() && line < got.size() && want[line] == got[line]) ++line;
  ADD_FAILURE() << "output differs from " << path << " at line " << line + 1
                << " (CUPROBE_UPDATE_GOLDEN=1 rewrites it)\n  expected: "
                << (line < want.size() ? want[line] : "<end of file>")
                << "\n  actual:   " << (line < got.size() ? got[line] : "<end of output>");
}

std::string TempPath(std::string_view name) {
  return absl::StrCat(::testing::TempDir(), "/cuprobe_report_", ::getpid(), "_", name);
}

// Runs python3 -c `script` `path`; returns its stdout. Skips when there is no
// python3 (the exec fails with 127 and a message of ours).
testing::ProcessResult RunPython(const std::string& script, const std::string& path) {
  return testing::RunProcess({"python3", "-c", script, path}, {}, 60);
}

#define CUPROBE_SKIP_WITHOUT_PYTHON(r)                                         \
  if ((r).exit_code == 127 && (r).err.find("exec python3 failed") == 0) {      \
    GTEST_SKIP() << "python3 is not installed";                                \
  }

constexpr char kJsonLoad[] = "import json,sys; json.load(open(sys.argv[1], encoding='utf-8'))";

// Checks a Chrome trace the way the viewers read it.
constexpr char kChromeCheck[] = R"PY(
import json, sys
t = json.load(open(sys.argv[1], encoding='utf-8'))
assert t["displayTimeUnit"] == "ns", t.get("displayTimeUnit")
ev = t["traceEvents"]
eps = 1e-9
xs = [e for e in ev if e["ph"] == "X"]
for e in xs:
    assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
    assert e["ts"] >= 0, e
    for k in ("name", "cat", "pid", "tid", "args"):
        assert k in e, (k, e)
procs = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
threads = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
for e in xs:
    assert e["pid"] in procs, ("no process_name", e)
    assert (e["pid"], e["tid"]) in threads, ("no thread_name", e)
for i, e in enumerate(ev):
    e["_index"] = i
# Slices of one track must nest or be disjoint, or the viewers garble them.
tracks = {}
for x in xs:
    tracks.setdefault((x["pid"], x["tid"]), []).append(x)
for key, track in tracks.items():
    track.sort(key=lambda x: (x["ts"], -x["dur"]))
    open_ends = []
    for x in track:
        while open_ends and open_ends[-1] <= x["ts"] + eps:
            open_ends.pop()
        assert not open_ends or x["ts"] + x["dur"] <= open_ends[-1] + eps, ("overlap", key, x)
        open_ends.append(x["ts"] + x["dur"])
def on_track(e):
    # Slices of e's track that come before e in the file: Perfetto binds a
    # flow event only to a slice it has already read (same ts: file order).
    return [x for x in xs
            if x["pid"] == e["pid"] and x["tid"] == e["tid"] and x["_index"] < e["_index"]]
starts = {}
for e in ev:
    if e["ph"] == "s":
        assert e["id"] not in starts, ("duplicate flow start", e)
        starts[e["id"]] = e
        assert any(x["ts"] - eps <= e["ts"] <= x["ts"] + x["dur"] + eps for x in on_track(e)), \
            ("flow start outside a slice", e)
fs = [e for e in ev if e["ph"] == "f"]
for e in fs:
    s = starts.get(e["id"])
    assert s is not None, ("flow end without start", e)
    assert s["cat"] == e["cat"] and s["name"] == e["name"], (s, e)
    assert e.get("bp") == "e", e
    assert s["ts"] <= e["ts"], (s, e)
    assert any(abs(x["ts"] - e["ts"]) < eps and x["cat"] == "kernel" for x in on_track(e)), \
        ("flow end not at a kernel start", e)
assert len(fs) == len(starts), "flow start without end"
print("X=%d s=%d f=%d M=%d" % (len(xs), len(starts), len(fs),
                               sum(1 for e in ev if e["ph"] == "M")))
)PY";

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

// ---- formats against golden files ------------------------------------------

TEST(FormatTest, KernelTableGolden) {
  TraceSummary summary = Summarize(MakeFixture());
  const std::string table = FormatKernelSummaryTable(summary.kernels);
  ExpectGolden("kernel_summary.txt", table);
  EXPECT_THAT(table, ::testing::Not(HasSubstr(" \n")));  // no trailing spaces
}

TEST(FormatTest, SummaryTextGolden) {
  TraceData data = MakeFixture();
  data.AddDropped(3);
  ExpectGolden("summary.txt", FormatSummaryText(Summarize(data)));
}

// `name{label="value",...} number` with only \\, \" and \n escaped in values
// (the exposition format's grammar, written out: <regex> trips GCC 12's
// maybe-uninitialized warning in the sanitizer build).
bool WellFormedPromSample(std::string_view line) {
  size_t i = 0;
  auto name = [&](bool colon) {
    const size_t start = i;
    while (i < line.size() && (absl::ascii_isalnum(line[i]) || line[i] == '_' ||
                               (colon && line[i] == ':'))) {
      ++i;
    }
    return i > start && !absl::ascii_isdigit(line[start]);
  };
  if (!name(true) || i >= line.size() || line[i] != '{') return false;
  ++i;
  while (true) {
    if (!name(false) || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') return false;
    i += 2;
    while (i < line.size() && line[i] != '"') {
      if (line[i] == '\n') return false;
      if (line[i] == '\\') {
        if (i + 1 >= line.size() || (line[i + 1] != '\\' && line[i + 1] != '"' &&
                                     line[i + 1] != 'n')) {
          return false;
        }
        ++i;
      }
      ++i;
    }
    if (i >= line.size()) return false;
    ++i;  // closing quote
    if (i < line.size() && line[i] == ',') {
      ++i;
      continue;
    }
    if (i < line.size() && line[i] == '}') break;
    return false;
  }
  ++i;
  if (i >= line.size() || line[i] != ' ') return false;
  double value = 0;
  return absl::SimpleAtod(line.substr(i + 1), &value);
}

// The Prometheus exposition: golden, and every sample line is
// `name{labels} value` with labels escaped (the fixture has a kernel name
// with a quote and a comma).
TEST(FormatTest, PrometheusGoldenAndWellFormed) {
  TraceData data = MakeFixture();
  data.AddDropped(3);
  const std::string text = FormatPrometheus(
      Summarize(data), {{"host", "node7"}, {"rank", "3"}, {"job", "a\\b\"c"}});
  ExpectGolden("metrics.prom", text);
  int samples = 0;
  for (std::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') {
      EXPECT_TRUE(absl::StartsWith(line, "# HELP cuprobe_") || absl::StartsWith(line, "# TYPE cuprobe_"))
          << line;
      continue;
    }
    ++samples;
    EXPECT_TRUE(WellFormedPromSample(line)) << line;
    EXPECT_THAT(std::string(line), HasSubstr("host=\"node7\",rank=\"3\",job=\"a\\\\b\\\"c\""));
  }
  EXPECT_GT(samples, 20);
  EXPECT_THAT(text, HasSubstr("cuprobe_kernel_instances_total{host=\"node7\",rank=\"3\","
                              "job=\"a\\\\b\\\"c\",kernel=\"vec_add(float const*, float const*, "
                              "float*, int)\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("cuprobe_trace_records_dropped_total{host=\"node7\",rank=\"3\","
                              "job=\"a\\\\b\\\"c\"} 3\n"));
}

TEST(FormatTest, CsvGolden) {
  TraceSummary summary = Summarize(MakeFixture());
  ExpectGolden("kernels.csv", FormatKernelSummaryCsv(summary.kernels));
  ExpectGolden("launches.csv", FormatLaunchSummaryCsv(summary.launches));
  ExpectGolden("memcpy.csv", FormatMemOpSummaryCsv(summary.memcpy));
  const std::string csv = FormatKernelSummaryCsv(summary.kernels);
  EXPECT_THAT(csv, HasSubstr(",\"lambda_kernel, \"\"fast\"\" path\"\n"));
}

TEST(FormatTest, SummaryJsonGoldenAndParses) {
  TraceData data = MakeFixture();
  data.AddDropped(3);
  const std::string json = FormatSummaryJson(Summarize(data));
  ExpectGolden("summary.json", json);
  const std::string path = TempPath("summary.json");
  ASSERT_TRUE(WriteFile(path, json).ok());
  const std::string script = std::string(kJsonLoad) + R"PY(
j = json.load(open(sys.argv[1], encoding='utf-8'))
assert set(j) == {"version", "kernels", "launches", "memcpy", "memset", "launch_latency", "totals",
                  "dropped"}, j.keys()
lat = {r["raw_name"]: r for r in j["launch_latency"]}
assert lat["_Z7vec_addPKfS0_Pfi"]["kernels"] == 4
assert lat["_Z7vec_addPKfS0_Pfi"]["median_ns"] == 5250.0
assert lat["_Z7vec_addPKfS0_Pfi"]["p99_ns"] == 9000
k = {r["raw_name"]: r for r in j["kernels"]}
assert k["_Z7vec_addPKfS0_Pfi"]["instances"] == 4
assert k["_Z7vec_addPKfS0_Pfi"]["median_ns"] == 250.0
assert k["lambda_kernel, \"fast\" path"]["name"] == 'lambda_kernel, "fast" path'
assert j["totals"]["kernel_ns"] == 8060
assert j["dropped"]["dropped_records"] == 3
print(len(j["kernels"]))
)PY";
  testing::ProcessResult r = RunPython(script, path);
  CUPROBE_SKIP_WITHOUT_PYTHON(r);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "6\n");
  ::unlink(path.c_str());
}

TEST(FormatTest, ChromeTraceGoldenAndChecks) {
  const std::string trace = FormatChromeTrace(MakeFixture());
  ExpectGolden("chrome_trace.json", trace);
  const std::string path = TempPath("trace.json");
  ASSERT_TRUE(WriteFile(path, trace).ok());
  testing::ProcessResult r = RunPython(kChromeCheck, path);
  CUPROBE_SKIP_WITHOUT_PYTHON(r);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // 13 launches + 12 kernels + 4 memcpys + 2 memsets; one arrow per launch
  // that has a kernel (not the failed one).
  EXPECT_EQ(r.out, "X=31 s=12 f=12 M=16\n");
  ::unlink(path.c_str());
}

TEST(FormatTest, ChromeTraceTimesAreRelativeMicroseconds) {
  const std::string trace = FormatChromeTrace(MakeFixture());
  // The first launch starts the trace; the reduce kernel at +11000 ns lasts 1000 ns.
  EXPECT_THAT(trace, HasSubstr("\"ph\":\"X\",\"ts\":0.000,\"dur\":4.500,\"pid\":4242,\"tid\":4242"));
  EXPECT_THAT(trace, HasSubstr("\"ph\":\"X\",\"ts\":10.000,\"dur\":1.000,\"pid\":1000000000,"
                               "\"tid\":13"));
  EXPECT_THAT(trace, HasSubstr("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1000000000,"
                               "\"tid\":7,\"args\":{\"name\":\"Stream 7\"}}"));
  EXPECT_THAT(trace, HasSubstr("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1000000001,"
                               "\"tid\":0,\"args\":{\"name\":\"GPU 1\"}}"));
  EXPECT_THAT(trace, HasSubstr("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":4242,"
                               "\"tid\":0,\"args\":{\"name\":\"vec_app\"}}"));
}

TEST(FormatTest, OverlappingWorkOnOneStreamGetsOverflowTracks) {
  // Three graph kernels run at once on stream 5; a fourth starts after.
  TraceData data;
  data.AddName(1, "_Z4nodei");
  const uint64_t spans[][2] = {{100, 400}, {150, 300}, {200, 500}, {450, 600}};
  uint64_t correlation = 0;
  for (const auto& span : spans) {
    KernelRecord k{};
    k.correlation_id = 70 + correlation++;
    k.name_id = 1;
    k.start_ns = span[0];
    k.end_ns = span[1];
    k.stream_id = 5;
    k.graph_id = 2;
    data.AddKernel(k);
    LaunchRecord l{};
    l.correlation_id = k.correlation_id;
    l.name_id = 1;
    l.api_start_ns = 10 * correlation;
    l.api_end_ns = 10 * correlation + 5;
    l.pid = 1;
    l.tid = 1;
    data.AddLaunch(l);
  }
  const std::string trace = FormatChromeTrace(data);
  EXPECT_THAT(trace, HasSubstr("\"tid\":5,\"args\":{\"name\":\"Stream 5\"}"));
  EXPECT_THAT(trace, HasSubstr("\"tid\":10000005,\"args\":{\"name\":\"Stream 5 (overlap 1)\"}"));
  EXPECT_THAT(trace, HasSubstr("\"tid\":20000005,\"args\":{\"name\":\"Stream 5 (overlap 2)\"}"));
  EXPECT_THAT(trace, ::testing::Not(HasSubstr("overlap 3")));
  // The arrow to the second kernel ends on the overflow track.
  EXPECT_THAT(trace, HasSubstr("\"ph\":\"f\",\"bp\":\"e\",\"id\":2,\"ts\":0.140,"
                               "\"pid\":1000000000,\"tid\":10000005}"));
  const std::string path = TempPath("overlap_trace.json");
  ASSERT_TRUE(WriteFile(path, trace).ok());
  testing::ProcessResult r = RunPython(kChromeCheck, path);
  CUPROBE_SKIP_WITHOUT_PYTHON(r);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "X=8 s=4 f=4 M=11\n");
  ::unlink(path.c_str());
}

// Two processes wrote into one session (a launcher's children): their
// correlation and name ids are qualified by pid, so equal local ids do not
// collide; the summary adds their kernels up, the timeline gives each
// (process, GPU) its own track group, and every arrow finds its kernel.
TEST(FormatTest, TwoProcessesInOneSessionStayApart) {
  TraceData data;
  const uint32_t pids[] = {4242, 4343};
  for (uint32_t pid : pids) {
    ProcessRecord p{};
    p.pid = pid;
    p.name_id = ProcessQualifiedId(pid, 1);
    data.AddProcess(p);
    data.AddName(ProcessQualifiedId(pid, 1), pid == 4242 ? "trainer" : "server");
    // The same local name id names different kernels in each process.
    data.AddName(ProcessQualifiedId(pid, 2), pid == 4242 ? "_Z4stepv" : "_Z5servev");
    for (uint64_t c = 1; c <= 3; ++c) {  // the same local correlation ids
      LaunchRecord l{};
      l.correlation_id = ProcessQualifiedId(pid, c);
      l.name_id = ProcessQualifiedId(pid, 2);
      l.api_start_ns = 1000 * c + pid;
      l.api_end_ns = l.api_start_ns + 10;
      l.pid = pid;
      l.tid = pid;
      data.AddLaunch(l);
      KernelRecord k{};
      k.correlation_id = l.correlation_id;
      k.name_id = l.name_id;
      k.start_ns = l.api_start_ns + 100;
      k.end_ns = k.start_ns + (pid == 4242 ? 50 : 70);
      k.stream_id = 7;
      data.AddKernel(k);
    }
  }
  TraceSummary summary = Summarize(data);
  ASSERT_EQ(summary.kernels.size(), 2u);
  for (const KernelSummaryRow& row : summary.kernels) EXPECT_EQ(row.time.count, 3u) << row.name;
  EXPECT_EQ(summary.totals.processes, 2u);
  const std::string trace = FormatChromeTrace(data);
  EXPECT_THAT(trace, HasSubstr("{\"name\":\"GPU 0 (trainer, pid 4242)\"}"));
  EXPECT_THAT(trace, HasSubstr("{\"name\":\"GPU 0 (server, pid 4343)\"}"));
  EXPECT_THAT(trace, HasSubstr("\"pid\":1000000001,\"tid\":7,\"args\":{\"correlation id\":1,"));
  // Arrows 1..6; process 4343's first kernel ends arrow 4 on its own group.
  EXPECT_THAT(trace, HasSubstr("\"ph\":\"f\",\"bp\":\"e\",\"id\":4,"));
  EXPECT_THAT(trace, ::testing::Not(HasSubstr("\"id\":7,")));
  EXPECT_THAT(trace, ::testing::Not(HasSubstr("\"name\":\"GPU 0\"}")));
  const std::string path = TempPath("two_processes.json");
  ASSERT_TRUE(WriteFile(path, trace).ok());
  testing::ProcessResult r = RunPython(kChromeCheck, path);
  CUPROBE_SKIP_WITHOUT_PYTHON(r);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("s=6 f=6"));
  ::unlink(path.c_str());
}

TEST(FormatTest, EmptyTraceIsStillValid) {
  TraceData empty;
  TraceSummary summary = Summarize(empty);
  EXPECT_EQ(FormatKernelSummaryTable(summary.kernels),
            " Time (%)  Total Time (ns)  Instances  Avg (ns)  Med (ns)  Min (ns)  Max (ns)  "
            "StdDev (ns)  Name\n"
            " --------  ---------------  ---------  --------  --------  --------  --------  "
            "-----------  ----\n");
  EXPECT_THAT(FormatSummaryText(summary), HasSubstr(" (none)\n"));
  const std::string trace_path = TempPath("empty_trace.json");
  const std::string json_path = TempPath("empty_summary.json");
  ASSERT_TRUE(WriteFile(trace_path, FormatChromeTrace(empty)).ok());
  ASSERT_TRUE(WriteFile(json_path, FormatSummaryJson(summary)).ok());
  testing::ProcessResult r = RunPython(kChromeCheck, trace_path);
  CUPROBE_SKIP_WITHOUT_PYTHON(r);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "X=0 s=0 f=0 M=0\n");
  r = RunPython(kJsonLoad, json_path);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ::unlink(trace_path.c_str());
  ::unlink(json_path.c_str());
}

// ---- escaping and files -----------------------------------------------------

TEST(EscapeTest, JsonStrings) {
  std::string out;
  AppendJsonString(&out, "a\"b\\c\n\t\r\b\f\x01\x1f\x7f");
  EXPECT_EQ(out, R"("a\"b\\c\n\t\r\b\f\u0001\u001f\u007f")");
  out.clear();
  AppendJsonString(&out, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80");  // valid UTF-8 passes
  EXPECT_EQ(out, "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80\"");
  out.clear();
  // Stray continuation, truncated sequence, overlong '/', a surrogate, 0xff.
  AppendJsonString(&out, "\x80|\xe2\x82|\xc0\xaf|\xed\xa0\x80|\xff");
  EXPECT_EQ(out, R"("\ufffd|\ufffd\ufffd|\ufffd\ufffd|\ufffd\ufffd\ufffd|\ufffd")");
  out.clear();
  AppendJsonString(&out, std::string_view("nul\0byte", 8));
  EXPECT_EQ(out, R"("nul\u0000byte")");
}

TEST(EscapeTest, WeirdKernelNameMakesValidJson) {
  TraceData data;
  data.AddName(1, "bad\x01name\xff\"\\");
  KernelRecord k{};
  k.correlation_id = 1;
  k.name_id = 1;
  k.start_ns = 10;
  k.end_ns = 20;
  data.AddKernel(k);
  const std::string trace_path = TempPath("weird_trace.json");
  const std::string json_path = TempPath("weird_summary.json");
  ASSERT_TRUE(WriteFile(trace_path, FormatChromeTrace(data)).ok());
  ASSERT_TRUE(WriteFile(json_path, FormatSummaryJson(Summarize(data))).ok());
  testing::ProcessResult r = RunPython(kChromeCheck, trace_path);
  CUPROBE_SKIP_WITHOUT_PYTHON(r);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "X=1 s=0 f=0 M=4\n");
  r = RunPython(std::string(kJsonLoad) +
                    "\nassert json.load(open(sys.argv[1], encoding='utf-8'))['kernels'][0]['name'] == "
                    "'bad\\x01name\\ufffd\"\\\\'",
                json_path);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ::unlink(trace_path.c_str());
  ::unlink(json_path.c_str());
}

TEST(EscapeTest, CsvFields) {
  auto field = [](std::string_view f) {
    std::string out;
    AppendCsvField(&out, f);
    return out;
  };
  EXPECT_EQ(field("plain name"), "plain name");
  EXPECT_EQ(field("a,b"), "\"a,b\"");
  EXPECT_EQ(field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(field("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(field(""), "");
}

TEST(WriteFileTest, UnwritablePathIsNamed) {
  absl::Status s = WriteFile("/nonexistent-cuprobe-dir/y.json", "{}");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(),
            "cannot write report '/nonexistent-cuprobe-dir/y.json': No such file or directory");
}

TEST(WriteFileTest, WritesAndTruncates) {
  const std::string path = TempPath("write.txt");
  ASSERT_TRUE(WriteFile(path, "a longer first content").ok());
  ASSERT_TRUE(WriteFile(path, "short").ok());
  EXPECT_EQ(testing::ReadWholeFile(path), "short");
  ::unlink(path.c_str());
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
