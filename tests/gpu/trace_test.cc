// GPU tier: `cuprobe trace` end to end on real CUDA programs, with exact
// kernel and launch counts, a PyTorch script checked against torch.profiler,
// and an exit stress of many short traced runs. Skips without a GPU.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/report/perfetto_trace_reader.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe::testing {
namespace {

using ::testing::HasSubstr;

struct Summary {
  std::map<std::string, int64_t> kernels;   // demangled name -> instances
  std::map<std::string, int64_t> launches;  // demangled name -> API calls
  std::map<std::string, int64_t> memcpy;
  std::map<std::string, int64_t> memset;
  std::map<std::string, std::string> totals;
};

// Reads a summary JSON through tests/gpu/summary_lines.py.
Summary ReadSummary(const std::string& json_path) {
  Summary s;
  ProcessResult r =
      RunProcess({"python3", SourceDir() + "/tests/gpu/summary_lines.py", json_path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits('\t', 2));
    if (f.size() != 3) continue;
    int64_t n = 0;
    if (f[0] == "T") {
      s.totals[f[1]] = f[2];
      continue;
    }
    EXPECT_TRUE(absl::SimpleAtoi(f[1], &n)) << line;
    if (f[0] == "K") s.kernels[f[2]] += n;
    if (f[0] == "L") s.launches[f[2]] += n;
    if (f[0] == "C") s.memcpy[f[2]] += n;
    if (f[0] == "S") s.memset[f[2]] += n;
  }
  return s;
}

std::string Cuprobe() { return BuildDir() + "/bin/cuprobe"; }

class Trace : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine";
    char tmpl[] = "/tmp/cuprobe-trace-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  std::string dir_;
};

TEST_F(Trace, VecAddExactCounts) {
  ProcessResult native = RunProcess({SamplePath("vec_add"), "1048576", "100"});
  ASSERT_EQ(native.exit_code, 0) << native.err;
  std::string prefix = dir_ + "/vec_add";
  ProcessResult r = RunProcess({Cuprobe(), "trace", "-o", prefix, "--format",
                                "table,json,csv,chrome", "--", SamplePath("vec_add"), "1048576",
                                "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, native.out) << "the app's stdout is unchanged under cuprobe trace";
  EXPECT_THAT(r.err, HasSubstr("cuda_gpu_kern_sum"));
  Summary s = ReadSummary(prefix + ".json");
  EXPECT_EQ(s.kernels["vec_add(float const*, float const*, float*, int)"], 100);
  EXPECT_EQ(s.kernels["scale(float*, float, int)"], 1);
  EXPECT_EQ(s.kernels.size(), 2u);
  EXPECT_EQ(s.launches["vec_add(float const*, float const*, float*, int)"], 100);
  EXPECT_EQ(s.launches["scale(float*, float, int)"], 1);
  EXPECT_EQ(s.memcpy["[CUDA memcpy Host-to-Device]"], 2);
  EXPECT_EQ(s.memcpy["[CUDA memcpy Device-to-Host]"], 1);
  EXPECT_EQ(s.totals["dropped_records"], "0");
  // The timeline is valid JSON with flows that pair up.
  ProcessResult check = RunProcess(
      {"python3", "-c",
       "import json,sys\n"
       "t=json.load(open(sys.argv[1]))['traceEvents']\n"
       "s={e['id'] for e in t if e['ph']=='s'}\n"
       "f={e['id'] for e in t if e['ph']=='f'}\n"
       "k=[e for e in t if e['ph']=='X' and e.get('cat')=='kernel']\n"
       "assert s==f and len(f)>=101, (len(s),len(f))\n"
       "assert len(k)==101, len(k)\n"
       "print('ok', len(k))\n",
       prefix + ".trace.json"});
  EXPECT_EQ(check.exit_code, 0) << check.err << check.out;
}

// The Perfetto timeline of vec_add, read back as trace processor reads it:
// every launch and kernel a slice with its demangled name, each kernel on
// its stream's track under the process, a flow from every launch to its
// kernel, the copies on the GPU's tracks.
TEST_F(Trace, PerfettoTimelineHasEveryLaunchKernelAndFlow) {
  std::string prefix = dir_ + "/pf";
  ProcessResult r = RunProcess({Cuprobe(), "trace", "-o", prefix, "--format", "json,perfetto",
                                "--", SamplePath("vec_add"), "1048576", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  absl::StatusOr<PerfettoTrace> t = ReadPerfettoTrace(ReadWholeFile(prefix + ".pftrace"));
  ASSERT_TRUE(t.ok()) << t.status();
  std::map<std::string, int> slices;
  std::set<uint64_t> flows_out, flows_in;
  std::set<std::string> kernel_tracks;
  for (const PerfettoSlice& s : t->slices) {
    ++slices[s.name];
    flows_out.insert(s.flows_out.begin(), s.flows_out.end());
    flows_in.insert(s.flows_in.begin(), s.flows_in.end());
    EXPECT_LE(s.start_ns, s.end_ns) << s.name;
    if (s.name == "vec_add(float const*, float const*, float*, int)") {
      const PerfettoTrack& track = t->tracks.at(s.track);
      kernel_tracks.insert(track.name);
      ASSERT_TRUE(t->tracks.contains(track.parent_uuid));
      EXPECT_TRUE(t->tracks.at(track.parent_uuid).is_process);
      EXPECT_THAT(t->tracks.at(track.parent_uuid).name, ::testing::EndsWith("vec_add"));
    }
  }
  EXPECT_EQ(slices["vec_add(float const*, float const*, float*, int)"], 100);
  EXPECT_EQ(slices["scale(float*, float, int)"], 1);
  // Launch calls are named by their API (cuLaunchKernel, cuLaunchKernelEx,
  // ...: whichever driver call <<<>>> reaches).
  int launch_calls = 0;
  for (const auto& [name, n] : slices) {
    if (name.starts_with("cu") && name.find("Launch") != std::string::npos) launch_calls += n;
  }
  EXPECT_EQ(launch_calls, 101);
  EXPECT_EQ(slices["[CUDA memcpy Host-to-Device]"], 2);
  EXPECT_EQ(slices["[CUDA memcpy Device-to-Host]"], 1);
  EXPECT_EQ(flows_out.size(), 101u);
  EXPECT_EQ(flows_in, flows_out);
  EXPECT_EQ(kernel_tracks.size(), 1u);
  EXPECT_THAT(*kernel_tracks.begin(), ::testing::StartsWith("GPU 0, stream "));
}

// 20M launches of bench/launch_loop (CUPROBE_SCALE_LAUNCHES to change):
// exact counts in the summary, cuprobe's own peak memory bounded (<= 256
// MB; it does not grow with the launches), the streamed timeline under
// 80 bytes per kernel with its launch, complete and in order.
TEST_F(Trace, TwentyMillionLaunchesInBoundedMemory) {
  uint64_t launches = 20'000'000;
  if (const char* n = std::getenv("CUPROBE_SCALE_LAUNCHES"); n != nullptr) {
    ASSERT_TRUE(absl::SimpleAtoi(n, &launches)) << n;
  }
  const std::string prefix = dir_ + "/scale";
  const std::string hwm_file = dir_ + "/hwm";
  ProcessResult r = RunProcess({"sh", SourceDir() + "/tests/gpu/peak_rss.sh", hwm_file, Cuprobe(),
                                "trace", "-o", prefix, "--format", "json,perfetto", "--",
                                BuildDir() + "/bench/launch_loop", absl::StrCat(launches)},
                               {}, /*timeout_s=*/590);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("launch_loop: launches=", launches, " ")));
  Summary s = ReadSummary(prefix + ".json");
  // The loop's launches and the one before it that loads the module.
  EXPECT_EQ(s.totals["launches"], absl::StrCat(launches + 1));
  EXPECT_EQ(s.totals["kernels"], absl::StrCat(launches + 1));
  EXPECT_EQ(s.totals["dropped_records"], "0");
  uint64_t hwm_kb = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadWholeFile(hwm_file)), &hwm_kb));
  EXPECT_LE(hwm_kb, 256u * 1024) << "cuprobe's peak RSS";
  const uint64_t bytes = std::filesystem::file_size(prefix + ".pftrace");
  EXPECT_LE(bytes, launches * 80) << static_cast<double>(bytes) / launches << " bytes per kernel";
  std::printf("scale: launches=%llu cuprobe_peak_rss_mb=%llu pftrace_bytes_per_kernel=%.1f\n",
              static_cast<unsigned long long>(launches),
              static_cast<unsigned long long>(hwm_kb >> 10),
              static_cast<double>(bytes) / launches);
}

TEST_F(Trace, FourThreadsFourStreamsExactCounts) {
  std::string prefix = dir_ + "/ms";
  ProcessResult r = RunProcess({Cuprobe(), "trace", "-o", prefix, "--format", "json", "--",
                                SamplePath("multistream"), "4", "50"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("multistream: OK threads=4 launches=50 work=200 tail=4"));
  Summary s = ReadSummary(prefix + ".json");
  EXPECT_EQ(s.kernels["work(unsigned long long*, int)"], 200);
  EXPECT_EQ(s.kernels["tail(unsigned long long*, unsigned long long*)"], 4);
  EXPECT_EQ(s.launches["work(unsigned long long*, int)"], 200);
  EXPECT_EQ(s.memset["[CUDA memset]"], 4);
}

// Launch records from CUPTI's API activity (CUPROBE_LAUNCH_TIMES=activity)
// count exactly what the callbacks count, with each launch's name, grid and
// block joined from its kernel, on the launching thread's id: the main
// thread of vec_add (its tid is the pid), and four threads of multistream.
// No launch callback runs in these processes. <<<>>> is a runtime call, so
// each launch is one cudaLaunchKernel (a driver record of the cuLaunchKernel
// inside it, should CUPTI write one, is merged into it).
TEST_F(Trace, LaunchRecordsFromActivityCountAndNameEveryLaunch) {
  const std::vector<std::pair<std::string, std::string>> activity = {
      {"CUPROBE_LAUNCH_TIMES", "activity"}};
  std::string prefix = dir_ + "/va";
  ProcessResult r = RunProcess({Cuprobe(), "trace", "-o", prefix, "--format", "json,chrome", "--",
                                SamplePath("vec_add"), "1048576", "100"},
                               activity);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Summary s = ReadSummary(prefix + ".json");
  EXPECT_EQ(s.launches["vec_add(float const*, float const*, float*, int)"], 100);
  EXPECT_EQ(s.launches["scale(float*, float, int)"], 1);
  EXPECT_EQ(s.launches.size(), 2u) << "no launch without its kernel's name";
  EXPECT_EQ(s.kernels["vec_add(float const*, float const*, float*, int)"], 100);
  const char* kCheck =
      "import json,sys\n"
      "t=json.load(open(sys.argv[1]))['traceEvents']\n"
      "a=[e for e in t if e.get('cat')=='cuda_api']\n"
      "assert all(e['args']['grid'][0]>0 and e['args']['block'][0]>0 for e in a), 'shape'\n"
      "assert all(e['args']['stream']=='unknown' for e in a), 'stream'\n"
      "assert {e['name'] for e in a}=={'cudaLaunchKernel'}, {e['name'] for e in a}\n"
      "f={e['id'] for e in t if e['ph']=='f'}\n"
      "print(len(a), len({e['tid'] for e in a}), sorted({e['tid']==e['pid'] for e in a}), len(f))\n";
  ProcessResult check = RunProcess({"python3", "-c", kCheck, prefix + ".trace.json"});
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_EQ(check.out, "101 1 [True] 101\n") << "launches, threads, tid == pid, arrows";

  prefix = dir_ + "/ms";
  r = RunProcess({Cuprobe(), "trace", "-o", prefix, "--format", "json,chrome", "--",
                  SamplePath("multistream"), "4", "50"},
                 activity);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  s = ReadSummary(prefix + ".json");
  EXPECT_EQ(s.launches["work(unsigned long long*, int)"], 200);
  EXPECT_EQ(s.launches["tail(unsigned long long*, unsigned long long*)"], 4);
  check = RunProcess(
      {"python3", "-c",
       "import json,sys\n"
       "t=json.load(open(sys.argv[1]))['traceEvents']\n"
       "a=[e for e in t if e.get('cat')=='cuda_api' and e['args']['kernel'].startswith('work')]\n"
       "print(len(a), len({e['tid'] for e in a}))\n",
       prefix + ".trace.json"});
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_EQ(check.out, "200 4\n") << "work launches and the threads that made them";
}

// A CUDA graph: its kernels counted per launch of the graph in both ways of
// recording launches. Launch callbacks count the three launches captured
// into the graph under their kernels' names and each cuGraphLaunch as
// "[cuGraphLaunch]"; API activity records the runtime's cudaGraphLaunch as
// "[cudaGraphLaunch]", and the captured launches, which run no kernel of
// their own correlation id, as launches without a kernel record.
TEST_F(Trace, GraphLaunchesCountedInBothWaysOfRecordingLaunches) {
  const std::string scale_add = "scale_add(float*, float, int)", bump = "bump(int*, int)";
  for (const char* mode : {"callbacks", "activity"}) {
    SCOPED_TRACE(mode);
    const std::string prefix = dir_ + "/graph_" + mode;
    ProcessResult r = RunProcess({Cuprobe(), "trace", "-o", prefix, "--format", "json", "--",
                                  SamplePath("cudagraph"), "65536", "20"},
                                 {{"CUPROBE_LAUNCH_TIMES", mode}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("cudagraph: OK"));
    Summary s = ReadSummary(prefix + ".json");
    EXPECT_EQ(s.kernels[scale_add], 40);
    EXPECT_EQ(s.kernels[bump], 20);
    if (std::string(mode) == "callbacks") {
      EXPECT_EQ(s.launches["[cuGraphLaunch]"], 20);
      EXPECT_EQ(s.launches[scale_add], 2);
      EXPECT_EQ(s.launches[bump], 1);
      EXPECT_EQ(s.launches.size(), 3u);
    } else {
      EXPECT_EQ(s.launches["[cudaGraphLaunch]"], 20);
      EXPECT_EQ(s.launches["[launch without a kernel record]"], 3);
      EXPECT_EQ(s.launches.size(), 2u);
    }
  }
}

// --capture-range cudaProfilerApi on a program with known launches inside
// and outside its cudaProfilerStart/Stop ranges (samples/profiler_range):
// three ranges opened with the runtime's call, a last one with the driver's
// that is still open at exit, and a kernel (`late`) launched inside each
// range but queued behind a 2 ms one, so that it starts after the range's
// stop, in both ways of recording launches. Without the option the same
// program shows its other kernels; each --capture-range-end keeps what it
// says; and on a program that never calls cudaProfilerStart, the run says so.
TEST_F(Trace, CaptureRangeTracesOnlyBetweenProfilerStartAndStop) {
  const std::string step = "step(int*)", spin = "spin(long long)", tail = "tail(int*)",
                    late = "late(int*)";
  for (const char* mode : {"callbacks", "activity"}) {
    SCOPED_TRACE(mode);
    const std::string prefix = dir_ + "/range_" + mode;
    ProcessResult r = RunProcess({Cuprobe(), "trace", "-c", "cudaProfilerApi", "-o", prefix,
                                  "--format", "json", "--", SamplePath("profiler_range"), "3"},
                                 {{"CUPROBE_LAUNCH_TIMES", mode}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("profiler_range: OK steps=3"));
    EXPECT_THAT(r.err, HasSubstr("traced 4 profiler range(s) (--capture-range cudaProfilerApi)"));
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("never called")));
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("held no")));
    Summary s = ReadSummary(prefix + ".json");
    EXPECT_EQ(s.kernels[step], 15);
    EXPECT_EQ(s.kernels[spin], 3);
    EXPECT_EQ(s.kernels[late], 3) << "launched inside a range, started after its stop";
    EXPECT_EQ(s.kernels[tail], 1) << "the driver's cuProfilerStart, open at exit";
    EXPECT_EQ(s.kernels.size(), 4u) << "no warmup or between";
    EXPECT_EQ(s.launches[step], 15);
    EXPECT_EQ(s.launches[spin], 3);
    EXPECT_EQ(s.launches[late], 3);
    EXPECT_EQ(s.launches[tail], 1);
    EXPECT_EQ(s.launches.size(), 4u);
    EXPECT_EQ(s.memset["[CUDA memset]"], 3);
    EXPECT_EQ(s.memcpy["[CUDA memcpy Device-to-Host]"], 4);
    EXPECT_EQ(s.memcpy.count("[CUDA memcpy Host-to-Device]"), 0u);
  }
  const std::string whole = dir_ + "/range_whole";
  ProcessResult r = RunProcess({Cuprobe(), "trace", "-o", whole, "--format", "json", "--",
                                SamplePath("profiler_range"), "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Summary s = ReadSummary(whole + ".json");
  EXPECT_EQ(s.kernels["warmup(int*)"], 10);
  EXPECT_EQ(s.kernels["between(int*)"], 6);
  EXPECT_EQ(s.kernels[step], 15);
  EXPECT_EQ(s.memcpy["[CUDA memcpy Host-to-Device]"], 1);

  // --capture-range-end: the first range (stop), the first two (repeat:2),
  // or from the first start to the exit, the stop calls ignored (none: the
  // `between` launches after the first range are in, `warmup` is not).
  struct End {
    const char* end;
    int64_t step, spin, late, between, tail, memsets, d2h, ranges;
  };
  for (const char* mode : {"callbacks", "activity"}) {
    for (const End& e : {End{"stop", 5, 1, 1, 0, 0, 1, 1, 1},
                         End{"repeat:2", 10, 2, 2, 0, 0, 2, 2, 2},
                         End{"none", 15, 3, 3, 6, 1, 3, 4, 1}}) {
      SCOPED_TRACE(absl::StrCat(e.end, " ", mode));
      const std::string prefix = absl::StrCat(dir_, "/end_", e.end, "_", mode);
      r = RunProcess({Cuprobe(), "trace", "-c", "cudaProfilerApi", "--capture-range-end", e.end,
                      "-o", prefix, "--format", "json", "--", SamplePath("profiler_range"), "3"},
                     {{"CUPROBE_LAUNCH_TIMES", mode}});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_THAT(r.out, HasSubstr("profiler_range: OK steps=3"));
      EXPECT_THAT(r.err, HasSubstr(absl::StrCat("traced ", e.ranges,
                                                " profiler range(s) (--capture-range "
                                                "cudaProfilerApi --capture-range-end ",
                                                e.end, ")")));
      Summary end = ReadSummary(prefix + ".json");
      EXPECT_EQ(end.kernels[step], e.step);
      EXPECT_EQ(end.kernels[spin], e.spin);
      EXPECT_EQ(end.kernels[late], e.late);
      EXPECT_EQ(end.kernels["between(int*)"], e.between);
      EXPECT_EQ(end.kernels[tail], e.tail);
      EXPECT_EQ(end.kernels["warmup(int*)"], 0);
      EXPECT_EQ(end.launches[step], e.step);
      EXPECT_EQ(end.launches["between(int*)"], e.between);
      EXPECT_EQ(end.memset["[CUDA memset]"], e.memsets);
      EXPECT_EQ(end.memcpy["[CUDA memcpy Device-to-Host]"], e.d2h);
      EXPECT_EQ(end.memcpy["[CUDA memcpy Host-to-Device]"], 0);
    }
  }

  r = RunProcess({Cuprobe(), "trace", "-c", "cudaProfilerApi", "-o", dir_ + "/none", "--format",
                  "json", "--", SamplePath("vec_add"), "1024", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--capture-range cudaProfilerApi: the program never called "
                               "cudaProfilerStart or cuProfilerStart; nothing was traced"));
  EXPECT_EQ(r.err.find("never called"), r.err.rfind("never called")) << "said once: " << r.err;
}

TEST_F(Trace, ExitCodeAndSignalPassThrough) {
  ProcessResult bad = RunProcess({Cuprobe(), "trace", "-o", dir_ + "/bad", "--",
                                  SamplePath("vec_add"), "0"});
  EXPECT_EQ(bad.exit_code, 64);
  ProcessResult killed = RunProcess({Cuprobe(), "trace", "-o", dir_ + "/k", "--", "/bin/sh",
                                     "-c", "kill -TERM $$"});
  EXPECT_EQ(killed.term_signal, SIGTERM) << killed.err;
}

TEST_F(Trace, StandaloneModeStreamsItsOwnPerfettoTimeline) {
  std::string out = dir_ + "/standalone.pftrace";
  ProcessResult r = RunProcess({SamplePath("vec_add"), "4096", "7"},
                               {{"CUDA_INJECTION64_PATH", HookPath()}, {"CUPROBE_OUTPUT", out}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  absl::StatusOr<PerfettoTrace> t = ReadPerfettoTrace(ReadWholeFile(out));
  ASSERT_TRUE(t.ok()) << t.status();
  std::map<std::string, int> slices;
  size_t flows_in = 0;
  for (const PerfettoSlice& s : t->slices) {
    ++slices[s.name];
    flows_in += s.flows_in.size();
  }
  EXPECT_EQ(slices["vec_add(float const*, float const*, float*, int)"], 7);
  EXPECT_EQ(slices["scale(float*, float, int)"], 1);
  EXPECT_EQ(flows_in, 8u) << "each kernel is joined to its launch";
}

TEST_F(Trace, StandaloneModeWritesChromeJsonForAJsonPath) {
  std::string out = dir_ + "/standalone.json";
  ProcessResult r = RunProcess({SamplePath("vec_add"), "4096", "7"},
                               {{"CUDA_INJECTION64_PATH", HookPath()}, {"CUPROBE_OUTPUT", out}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ProcessResult check = RunProcess(
      {"python3", "-c",
       "import json,sys\n"
       "t=json.load(open(sys.argv[1]))['traceEvents']\n"
       "k=[e for e in t if e['ph']=='X' and e.get('cat')=='kernel']\n"
       "print(len(k))\n",
       out});
  EXPECT_EQ(check.out, "8\n") << check.err;
}

// Runs samples/torch_mlp/train_step.py under torch.profiler (the reference)
// and under `cuprobe trace` with `trace_args`, both with `script_args`, and
// expects the same kernels, each launched as many times. `trace_err` gets
// cuprobe's stderr.
void ExpectTorchProfilerKernels(const std::string& dir, const std::vector<std::string>& trace_args,
                                const std::vector<std::string>& script_args,
                                std::string* trace_err = nullptr) {
  std::string script = SourceDir() + "/samples/torch_mlp/train_step.py";
  std::string reference = dir + "/torch_profiler.json";
  std::vector<std::string> ref_cmd = {"python3", script, "--profile", reference};
  ref_cmd.insert(ref_cmd.end(), script_args.begin(), script_args.end());
  ProcessResult ref = RunProcess(ref_cmd, {}, 300);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  std::string prefix = dir + "/torch";
  std::vector<std::string> cmd = {Cuprobe(), "trace", "-o", prefix, "--format", "json"};
  cmd.insert(cmd.end(), trace_args.begin(), trace_args.end());
  cmd.insert(cmd.end(), {"--", "python3", script});
  cmd.insert(cmd.end(), script_args.begin(), script_args.end());
  ProcessResult r = RunProcess(cmd, {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("train_step: OK"));
  if (trace_err != nullptr) *trace_err = r.err;
  Summary s = ReadSummary(prefix + ".json");
  ProcessResult lines = RunProcess(
      {"python3", "-c",
       "import json,sys\n"
       "for k,v in json.load(open(sys.argv[1])).items(): print('%d\\t%s' % (v,k))\n",
       reference});
  int profiler_kernels = 0;
  for (absl::string_view line : absl::StrSplit(lines.out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits('\t', 1));
    ASSERT_EQ(f.size(), 2u);
    int64_t n = 0;
    ASSERT_TRUE(absl::SimpleAtoi(f[0], &n));
    profiler_kernels += static_cast<int>(n);
    EXPECT_EQ(s.kernels[f[1]], n) << "kernel " << f[1];
  }
  EXPECT_GT(profiler_kernels, 5);
  int64_t ours = 0;
  for (const auto& [name, n] : s.kernels) ours += n;
  EXPECT_EQ(ours, profiler_kernels) << "cuprobe saw kernels torch.profiler did not";
}

bool HaveTorch() { return RunProcess({"python3", "-c", "import torch"}).exit_code == 0; }

TEST_F(Trace, PyTorchMatchesTorchProfiler) {
  if (!HaveTorch()) GTEST_SKIP() << "no PyTorch here";
  ExpectTorchProfilerKernels(dir_, {}, {});
}

// torch.cuda.profiler.start()/stop() around one run of the workload, with the
// same workload and a sort before and after it: `-c cudaProfilerApi` sees
// what torch.profiler sees of that one run, no more (the run outside would
// double every count and add the sort's kernels).
TEST_F(Trace, PyTorchCaptureRangeMatchesTorchProfiler) {
  if (!HaveTorch()) GTEST_SKIP() << "no PyTorch here";
  std::string err;
  ExpectTorchProfilerKernels(dir_, {"-c", "cudaProfilerApi"}, {"--range"}, &err);
  EXPECT_THAT(err, HasSubstr("traced 1 profiler range(s)"));
}

TEST_F(Trace, ExitStress) {
  int runs = 200;
  if (const char* env = std::getenv("CUPROBE_STRESS_RUNS")) (void)absl::SimpleAtoi(env, &runs);
  int failures = 0;
  for (int i = 0; i < runs; ++i) {
    std::string prefix = dir_ + "/stress";
    ProcessResult r = RunProcess({Cuprobe(), "trace", "-o", prefix, "--format", "json", "--",
                                  SamplePath("multistream"), "4", "10"},
                                 {}, 60);
    bool ok = !r.timed_out && r.exit_code == 0 &&
              r.out.find("work=40 tail=4") != std::string::npos;
    if (ok) {
      Summary s = ReadSummary(prefix + ".json");
      ok = s.kernels["work(unsigned long long*, int)"] == 40 &&
           s.kernels["tail(unsigned long long*, unsigned long long*)"] == 4;
    }
    if (!ok) {
      ++failures;
      ADD_FAILURE() << "run " << i << ": rc=" << r.exit_code << " signal=" << r.term_signal
                    << " timed_out=" << r.timed_out << "\n" << r.err;
      if (failures > 3) break;
    }
  }
  EXPECT_EQ(failures, 0) << "of " << runs << " runs";
  RecordProperty("runs", runs);
}

}  // namespace
}  // namespace cuprobe::testing
