// File: tests/report/trace_report_format_test.cc
//
// Every output format of the trace report against golden files in
// tests/report/golden/: the kernel table, the summary text, Prometheus
// metrics, CSV, the summary JSON and the Chrome trace (both also checked by
// python3: JSON that parses, slices that nest, flows bound to their
// kernels), with overlapping work, two processes and an empty trace; JSON
// and CSV escaping, and writing files.
//
// After an intended change of the output:
//   CUPROBE_UPDATE_GOLDEN=1 build/tests/trace_report_test
// rewrites the golden files; review the diff before committing.
//
// Part of trace_report_test (tests/report/CMakeLists.txt); the fixture trace is in
// trace_report_test_util.h.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "probe/trace_records.h"
#include "report/trace_chrome.h"
#include "report/trace_data.h"
#include "report/trace_report.h"
#include "tests/report/trace_report_test_util.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;
using ::cuprobe::testing::MakeFixture;

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

}  // namespace
}  // namespace cuprobe
