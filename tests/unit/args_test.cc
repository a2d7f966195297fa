#include "loader/args.h"

#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuprobe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<CliArgs> Parse(std::vector<std::string> argv) {
  argv.insert(argv.begin(), "cuprobe");
  return ParseArgs(argv);
}

TEST(Args, NoArgumentsIsGeneralHelp) {
  absl::StatusOr<CliArgs> a = Parse({});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->command, Command::kHelp);
  EXPECT_EQ(a->help_topic, "");
}

TEST(Args, HelpAndVersion) {
  EXPECT_EQ(Parse({"--help"})->command, Command::kHelp);
  EXPECT_EQ(Parse({"help", "trace"})->help_topic, "trace");
  EXPECT_EQ(Parse({"trace", "--help"})->help_topic, "trace");
  EXPECT_EQ(Parse({"inspect", "-h"})->help_topic, "inspect");
  EXPECT_EQ(Parse({"--version"})->command, Command::kVersion);
  EXPECT_FALSE(Parse({"help", "nosuch"}).ok());
}

TEST(Args, TraceDefaults) {
  absl::StatusOr<CliArgs> a = Parse({"trace", "--", "./app", "-x", "--flag"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->command, Command::kTrace);
  EXPECT_THAT(a->trace.command, ElementsAre("./app", "-x", "--flag"));
  EXPECT_EQ(a->trace.output, "cuprobe-report");
  EXPECT_THAT(a->trace.formats, ElementsAre(ReportFormat::kTable, ReportFormat::kPerfetto));
  EXPECT_EQ(a->trace.ring_bytes, 64ull << 20);
  EXPECT_EQ(a->trace.interval_ms, 100u);
  EXPECT_EQ(a->trace.trace_selection, "launches,kernels,memory");
  EXPECT_FALSE(a->trace.keep_session);
  EXPECT_FALSE(a->trace.capture_profiler_api);
}

TEST(Args, CaptureRange) {
  absl::StatusOr<CliArgs> a = Parse({"trace", "-c", "cudaProfilerApi", "--", "./app"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->trace.capture_profiler_api);
  a = Parse({"trace", "--capture-range=cudaProfilerApi", "--capture-range", "none", "./app"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->trace.capture_profiler_api) << "the last one wins";
  a = Parse({"run", "-p", "x.cpb", "--capture-range=cudaProfilerApi", "--", "./app"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->run.trace.capture_profiler_api);
  absl::StatusOr<CliArgs> bad = Parse({"trace", "-c", "nvtx", "--", "./app"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("unknown --capture-range 'nvtx' (expected cudaProfilerApi or none)"));
  bad = Parse({"trace", "--capture-range"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("--capture-range needs a value"));
}

TEST(Args, CaptureRangeEnd) {
  absl::StatusOr<CliArgs> a =
      Parse({"trace", "-c", "cudaProfilerApi", "--capture-range-end", "stop", "--", "./app"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->trace.capture_range_end, "stop");
  a = Parse({"run", "-p", "x.cpb", "-c", "cudaProfilerApi", "--capture-range-end=repeat:12",
             "./app"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->run.trace.capture_range_end, "repeat:12");
  a = Parse({"trace", "-c", "cudaProfilerApi", "./app"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->trace.capture_range_end, "") << "the hook's default (repeat)";
  struct Bad {
    std::vector<std::string> argv;
    std::string message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {{"trace", "--capture-range-end", "stop", "./app"},
            "--capture-range-end needs --capture-range cudaProfilerApi"},
           {{"trace", "-c", "none", "--capture-range-end", "stop", "./app"},
            "--capture-range-end needs --capture-range cudaProfilerApi"},
           {{"trace", "-c", "cudaProfilerApi", "--capture-range-end", "stop-shutdown", "./app"},
            "--capture-range-end: 'stop-shutdown' ends the program, which cuprobe never does; "
            "use 'stop'"},
           {{"trace", "-c", "cudaProfilerApi", "--capture-range-end", "repeat:4097", "./app"},
            "--capture-range-end: 'repeat:4097': the number of ranges must be 1 to 4096"},
           {{"trace", "-c", "cudaProfilerApi", "--capture-range-end", "sometimes", "./app"},
            "unknown value 'sometimes' (expected repeat, repeat:N, stop or none)"},
       }) {
    absl::StatusOr<CliArgs> r = Parse(bad.argv);
    ASSERT_FALSE(r.ok()) << absl::StrJoin(bad.argv, " ");
    EXPECT_THAT(r.status().message(), HasSubstr(bad.message));
  }
}

TEST(Args, TraceSelection) {
  absl::StatusOr<CliArgs> a = Parse({"trace", "--trace", "memory,launches", "--", "./app"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->trace.trace_selection, "launches,memory");
  a = Parse({"trace", "-t", "all", "./app"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->trace.trace_selection, "launches,kernels,memory");
  absl::StatusOr<CliArgs> bad = Parse({"trace", "--trace=kernel", "--", "./app"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown --trace item 'kernel'"));
  EXPECT_FALSE(Parse({"trace", "--trace=,", "--", "./app"}).ok());
}

TEST(Args, TraceOptions) {
  absl::StatusOr<CliArgs> a =
      Parse({"trace", "-o", "out/run1", "--format=json,csv,chrome,perfetto", "--buffer-mb", "8",
             "--interval=250", "--keep", "python3", "train.py", "--lr", "3"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->trace.output, "out/run1");
  EXPECT_THAT(a->trace.formats,
              ElementsAre(ReportFormat::kJson, ReportFormat::kCsv, ReportFormat::kChrome,
                          ReportFormat::kPerfetto));
  EXPECT_EQ(a->trace.ring_bytes, 8ull << 20);
  EXPECT_EQ(a->trace.interval_ms, 250u);
  EXPECT_TRUE(a->trace.keep_session);
  // Everything from the first non-option on belongs to the program.
  EXPECT_THAT(a->trace.command, ElementsAre("python3", "train.py", "--lr", "3"));
}

TEST(Args, TraceErrorsAreClear) {
  absl::StatusOr<CliArgs> a = Parse({"trace"});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("trace needs a program to run"));
  EXPECT_THAT(a.status().message(), HasSubstr("cuprobe trace --help"));

  a = Parse({"trace", "--format", "xml", "--", "./app"});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("unknown report format 'xml'"));

  a = Parse({"trace", "--buffer-mb", "0", "--", "./app"});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("--buffer-mb expects a number from 1 to 4096"));

  a = Parse({"trace", "-o"});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("option -o needs a value"));

  a = Parse({"trace", "--bogus", "--", "./app"});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("unknown option '--bogus'"));
}

TEST(Args, Inspect) {
  absl::StatusOr<CliArgs> a = Parse({"inspect", "--sm", "80", "--extract-ptx", "-", "app"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->command, Command::kInspect);
  EXPECT_EQ(a->inspect.path, "app");
  EXPECT_EQ(a->inspect.sm, 80u);
  EXPECT_EQ(a->inspect.extract_ptx, "-");
  EXPECT_FALSE(Parse({"inspect"}).ok());
  EXPECT_THAT(Parse({"inspect", "a", "b"}).status().message(), HasSubstr("one file"));
}

TEST(Args, RunBackend) {
  absl::StatusOr<CliArgs> a = Parse({"run", "-p", "x.cpb", "--", "./app"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->run.backend, ProbeBackend::kPtx);  // the default: kernels timed
  a = Parse({"run", "--backend", "auto", "-p", "x.cpb", "--", "./app"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->run.backend, ProbeBackend::kAuto);
  a = Parse({"run", "-p", "x.cpb", "--backend=patch", "--", "./app"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->run.backend, ProbeBackend::kPatch);
  a = Parse({"run", "--backend", "patch", "--backend", "auto", "-p", "x.cpb", "./app"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->run.backend, ProbeBackend::kAuto);  // the last one counts
  // After "--" it is the program's.
  a = Parse({"run", "-p", "x.cpb", "--", "./app", "--backend", "sass"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->run.backend, ProbeBackend::kPtx);
  EXPECT_THAT(a->run.trace.command, ElementsAre("./app", "--backend", "sass"));

  EXPECT_EQ(ProbeBackendName(ProbeBackend::kAuto), "auto");
  EXPECT_EQ(ProbeBackendName(ProbeBackend::kPtx), "ptx");
  EXPECT_EQ(ProbeBackendName(ProbeBackend::kPatch), "patch");
}

TEST(Args, RunBackendErrorsAreClear) {
  absl::StatusOr<CliArgs> a = Parse({"run", "--backend", "sass", "-p", "x.cpb", "--", "./app"});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(),
              HasSubstr("unknown --backend 'sass' (expected auto, ptx or patch)"));
  EXPECT_THAT(a.status().message(), HasSubstr("Try 'cuprobe run --help'."));
  a = Parse({"run", "--backend=PTX", "-p", "x.cpb", "--", "./app"});  // values are lower case
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("unknown --backend 'PTX'"));
  a = Parse({"run", "--backend=", "-p", "x.cpb", "--", "./app"});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("unknown --backend ''"));
  a = Parse({"run", "-p", "x.cpb", "--backend"});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("option --backend needs a value"));
  // Probes only: trace and attach do not take it.
  a = Parse({"trace", "--backend", "patch", "--", "./app"});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("unknown option '--backend'"));
  a = Parse({"attach", "42", "-p", "x.cpb", "--backend", "patch"});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("unknown option '--backend'"));
}

TEST(Args, Attach) {
  absl::StatusOr<CliArgs> a = Parse({"attach", "4242", "-p", "t.cpb", "-p", "u.bpf.c", "-k",
                                     "gemm*", "-d", "10", "--interval", "250", "-e", "json",
                                     "--quiet", "-o", "out"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->command, Command::kAttach);
  EXPECT_EQ(a->attach.target, "4242");
  EXPECT_THAT(a->attach.run.probes, ::testing::ElementsAre("t.cpb", "u.bpf.c"));
  EXPECT_EQ(a->attach.run.kernels, "gemm*");
  EXPECT_EQ(a->attach.duration_s, 10u);
  EXPECT_EQ(a->attach.run.trace.interval_ms, 250u);
  EXPECT_TRUE(a->attach.run.events_json);
  EXPECT_TRUE(a->attach.run.quiet);
  EXPECT_EQ(a->attach.run.trace.output, "out");
  absl::StatusOr<CliArgs> d = Parse({"attach", "cuprobe-1-2-ab", "-p", "t.cpb"});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->attach.duration_s, 0u) << "until Ctrl-C or the program's exit";
  EXPECT_EQ(d->attach.run.trace.output, "cuprobe-attach");
  EXPECT_THAT(Parse({"attach", "-p", "t.cpb"}).status().message(), HasSubstr("needs a target"));
  EXPECT_THAT(Parse({"attach", "42"}).status().message(), HasSubstr("needs a probe"));
  EXPECT_THAT(Parse({"attach", "42", "43", "-p", "t"}).status().message(),
              HasSubstr("one target"));
  EXPECT_THAT(Parse({"attach", "42", "-p", "t", "-d", "0"}).status().message(),
              HasSubstr("--duration"));
  absl::StatusOr<CliArgs> h = Parse({"attach", "--help"});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->help_topic, "attach");
}

TEST(Args, ReportPrefixPlaceholders) {
  auto env = [](const char* name) -> const char* {
    return std::string_view(name) == "RANK" ? "3" : nullptr;
  };
  auto expand = [&](std::string_view p) { return ExpandReportPrefix(p, 4242, "node7", env); };
  EXPECT_EQ(*expand("job/rank%q{RANK}"), "job/rank3");
  EXPECT_EQ(*expand("%h-%p"), "node7-4242");
  EXPECT_EQ(*expand("r%q{UNSET}x"), "rx");
  EXPECT_EQ(*expand("100%%"), "100%");
  EXPECT_EQ(*expand("plain"), "plain");
  EXPECT_THAT(expand("a%").status().message(), HasSubstr("lone '%'"));
  EXPECT_THAT(expand("a%x").status().message(), HasSubstr("unknown placeholder '%x' at offset 1"));
  EXPECT_THAT(expand("%q{RANK").status().message(), HasSubstr("no closing }"));
  EXPECT_THAT(expand("%q{}").status().message(), HasSubstr("names no environment variable"));
  // Through the command line: expanded at parse time, errors name the command.
  absl::StatusOr<CliArgs> a = ParseArgs({"cuprobe", "trace", "-o", "x%p", "--", "./app"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->trace.output, absl::StrCat("x", ::getpid()));
  absl::StatusOr<CliArgs> bad = ParseArgs({"cuprobe", "run", "-p", "p.o", "-o", "%z", "--", "a"});
  EXPECT_THAT(bad.status().message(), HasSubstr("Try 'cuprobe run --help'"));
}

TEST(Args, UnknownCommand) {
  absl::StatusOr<CliArgs> a = Parse({"frobnicate"});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("unknown command 'frobnicate'"));
}

TEST(Args, UsageHasExamples) {
  for (std::string_view topic : {"", "trace", "inspect", "run", "attach"}) {
    std::string text = UsageText(topic);
    EXPECT_THAT(text, HasSubstr("EXAMPLES")) << topic;
    EXPECT_THAT(text, HasSubstr("cuprobe ")) << topic;
  }
}

}  // namespace
}  // namespace cuprobe
