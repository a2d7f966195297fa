// File: loader/trace_command.cc
//
// `cuprobe trace` (and the traced run under `cuprobe run`): a session, the
// program spawned with the hook, the ring drained while it runs, then the
// summary, the warnings the session calls for, and the report files.
#include "loader/trace_command.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loader/child_process.h"
#include "maps/map_print.h"
#include "maps/segment.h"
#include "report/trace_chrome.h"
#include "report/trace_aggregator.h"
#include "report/trace_data.h"
#include "report/trace_perfetto.h"
#include "report/trace_report.h"
#include "support/log.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

namespace fs = std::filesystem;

std::string ExeDir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  return fs::path(buf).parent_path().string();
}

// Fails early (before the program runs) when a report could not be written.
absl::Status CheckWritable(const std::string& path) {
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write report '", path, "': directory '", dir.string(),
                     "' does not exist"));
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write report '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// The labels every Prometheus sample of this run carries: the host, the
// rank of a distributed job (from the launcher's environment, when set) and
// the traced process (when there is exactly one).
std::vector<std::pair<std::string, std::string>> PrometheusLabels(const TraceAggregator& data) {
  std::vector<std::pair<std::string, std::string>> labels;
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) labels.emplace_back("host", host);
  for (const char* var : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') {
      labels.emplace_back("rank", v);
      break;
    }
  }
  if (data.processes().size() == 1) {
    labels.emplace_back("pid", absl::StrCat(data.processes()[0].pid));
  }
  return labels;
}

// Past this, a JSON timeline earns a warning.
constexpr size_t kLargeChromeTimelineBytes = size_t{200} << 20;

std::string ReportPath(const TraceOptions& o, ReportFormat f) {
  switch (f) {
    case ReportFormat::kTable: return o.output + ".txt";
    case ReportFormat::kJson: return o.output + ".json";
    case ReportFormat::kCsv: return o.output + ".csv";
    case ReportFormat::kChrome: return o.output + ".trace.json";
    case ReportFormat::kPerfetto: return o.output + ".pftrace";
    case ReportFormat::kPrometheus: return o.output + ".prom";
  }
  return o.output;
}

// Moves records from the ring into the summary while the program runs,
// into the Perfetto timeline (`timeline`, streamed to its file), into
// every record kept for a Chrome timeline (`records`) and into the caller's
// consumer (`also`, LiveView::records); any may be nullptr when not asked
// for. The summary's and the Perfetto timeline's
// memory is bounded (report/trace_aggregator.h, report/trace_perfetto.h),
// the records' is not.
class Drainer final : public RecordConsumer {
 public:
  Drainer(Session& session, TraceAggregator& summary, PerfettoTimeline* timeline,
          TraceData* records, RecordConsumer* also)
      : session_(session), summary_(summary), timeline_(timeline), records_(records),
        also_(also) {}

  void AddName(uint64_t id, std::string_view name) override {
    summary_.AddName(id, name);
    if (timeline_ != nullptr) timeline_->AddName(id, name);
    if (records_ != nullptr) records_->AddName(id, name);
    if (also_ != nullptr) also_->AddName(id, name);
  }
  void AddCatalogKernel(const CatalogKernelRecord& r) override {
    if (also_ != nullptr) also_->AddCatalogKernel(r);
  }
  void AddProcess(const ProcessRecord& r) override { Tee(r, &RecordConsumer::AddProcess); }
  void AddLaunch(const LaunchRecord& r) override { Tee(r, &RecordConsumer::AddLaunch); }
  void AddKernel(const KernelRecord& r) override { Tee(r, &RecordConsumer::AddKernel); }
  void AddMemcpy(const MemcpyRecord& r) override { Tee(r, &RecordConsumer::AddMemcpy); }
  void AddMemset(const MemsetRecord& r) override { Tee(r, &RecordConsumer::AddMemset); }
  void AddProbeKernel(const ProbeKernelRecord& r) override {
    Tee(r, &RecordConsumer::AddProbeKernel);
  }

  // Drains in batches: after each pass it sleeps unless the ring is over a
  // quarter full. Draining right behind the producers would pull every cache
  // line they just wrote (and the consumer zeroes) back and forth between
  // the program's cores and ours, which costs the program time per launch.
  void Start() {
    thread_ = std::thread([this] {
      const uint64_t busy = session_.ring().capacity() / 4;
      while (!stop_.load()) {
        DrainOnce();
        if (session_.ring().used_bytes() < busy) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    });
  }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    while (DrainOnce() > 0) {
    }
  }

  size_t DrainOnce() {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = session_.ring().Drain([&](uint16_t type, absl::Span<const uint8_t> body) {
      absl::Status s = DecodeRecord(type, body, *this, counters_);
      if (!s.ok() && !reported_invalid_) {
        reported_invalid_ = true;
        CUPROBE_LOG(kWarning, "skipping an invalid record: %s", s.message());
      }
    });
    if (!session_.ring().consumer_status().ok() && !reported_corrupt_) {
      reported_corrupt_ = true;
      CUPROBE_LOG(kError, "the session's record ring is corrupt: %s",
                  session_.ring().consumer_status().message());
    }
    return n;
  }

 private:
  template <typename Record>
  void Tee(const Record& r, void (RecordConsumer::*add)(const Record&)) {
    (summary_.*add)(r);
    if (timeline_ != nullptr) (timeline_->*add)(r);
    if (records_ != nullptr) (records_->*add)(r);
    if (also_ != nullptr) (also_->*add)(r);
  }

 public:
  // Invalid and unknown records (the summary's own count the good ones).
  const TraceCounters& counters() const { return counters_; }

 private:
  Session& session_;
  TraceAggregator& summary_;
  PerfettoTimeline* timeline_;
  TraceData* records_;
  RecordConsumer* also_;
  TraceCounters counters_;
  std::mutex mu_;
  std::atomic<bool> stop_{false};
  bool reported_invalid_ = false;
  bool reported_corrupt_ = false;
  std::thread thread_;
};

// The environment that loads the hook into the program and points it at
// the session.
std::vector<std::pair<std::string, std::string>> HookEnvironment(const TraceOptions& options,
                                                                 const std::string& hook,
                                                                 const Session& session) {
  return {{"CUDA_INJECTION64_PATH", hook},
          {"CUPROBE_SESSION", session.name()},
          {"CUPROBE_INTERVAL_MS", absl::StrCat(options.interval_ms)},
          {"CUPROBE_TRACE", options.trace_selection},
          {"CUPROBE_CAPTURE_RANGE", options.capture_profiler_api ? "cudaProfilerApi" : "none"},
          // Empty (unset for the hook) without a range.
          {"CUPROBE_CAPTURE_RANGE_END",
           !options.capture_profiler_api     ? ""
           : options.capture_range_end.empty() ? "repeat"
                                               : options.capture_range_end}};
}

// The live view (LiveView): a thread beside the drainer that calls its
// callbacks every interval until Stop (once the program has exited).
class LiveThread {
 public:
  LiveThread(const LiveView& live, Session& session) : live_(live), session_(session) {
    const bool prints = live.interval_ms > 0 && live.on_interval;
    const bool drains = live.drain_interval_ms > 0 && live.on_drain;
    if (prints || drains) thread_ = std::thread([this, prints, drains] { Run(prints, drains); });
  }
  LiveThread(const LiveThread&) = delete;
  LiveThread& operator=(const LiveThread&) = delete;
  ~LiveThread() { Stop(); }

  void Stop() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void Run(bool prints, bool drains) {
    using Clock = std::chrono::steady_clock;
    const auto print_every = std::chrono::milliseconds(prints ? live_.interval_ms : 0);
    const auto tick = std::chrono::milliseconds(
        drains ? (prints ? std::min(live_.drain_interval_ms, live_.interval_ms)
                         : live_.drain_interval_ms)
               : live_.interval_ms);
    auto next_print = Clock::now() + print_every;
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, tick, [&] { return stop_; })) {
      lock.unlock();
      if (drains) live_.on_drain(session_);
      if (prints && Clock::now() >= next_print) {
        live_.on_interval(session_);
        next_print = Clock::now() + print_every;
      }
      lock.lock();
    }
  }

  const LiveView& live_;
  Session& session_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// What the session says about the run: a hook that never started or was
// disabled, records the ring or CUPTI dropped (counted into `data`).
void WarnAboutSession(Session& session, SessionState state, TraceAggregator& data) {
  if (state == SessionState::kCreated) {
    CUPROBE_LOG(kWarning,
                "the program never initialized CUDA with the hook loaded: no kernels traced");
  } else if (state == SessionState::kHookDisabled) {
    CUPROBE_LOG(kWarning, "the hook was disabled: %s", session.HookReason());
  }
  uint64_t ring_dropped = session.ring().dropped();
  if (ring_dropped > 0) {
    data.AddDropped(ring_dropped);
    CUPROBE_LOG(kWarning, "%d records were dropped: the record ring was full (try --buffer-mb)",
                ring_dropped);
  }
  uint64_t cupti_dropped = session.header().activity_records_dropped.load();
  if (cupti_dropped > 0) {
    CUPROBE_LOG(kWarning, "CUPTI dropped %d activity records", cupti_dropped);
  }
}

// With --capture-range cudaProfilerApi: whether the program's profiler
// ranges were seen, and whether they held anything.
void WarnAboutCaptureRange(const TraceOptions& options, const Session& session,
                           SessionState state, const TraceSummary& summary) {
  if (!options.capture_profiler_api ||
      (state != SessionState::kHookReady && state != SessionState::kHookStopped)) {
    return;
  }
  const uint64_t ranges = session.header().capture_ranges.load();
  const bool nothing = summary.kernels.empty() && summary.launches.empty() &&
                       summary.memcpy.empty() && summary.memset.empty();
  if (ranges == 0 && nothing) {
    CUPROBE_LOG(kWarning,
                "--capture-range cudaProfilerApi: the program never called cudaProfilerStart or "
                "cuProfilerStart; nothing was traced");
  } else if (ranges == 0) {
    // The hook could not watch the profiler calls and said so (or is of
    // an earlier build): it traced everything.
    CUPROBE_LOG(kWarning, "--capture-range cudaProfilerApi: the whole run was traced");
  } else if (nothing) {
    CUPROBE_LOG(kWarning,
                "--capture-range cudaProfilerApi: the program's %d profiler range(s) held no "
                "launch, kernel, copy or set",
                ranges);
  } else {
    CUPROBE_LOG(kInfo, "traced %d profiler range(s) (--capture-range cudaProfilerApi%s)", ranges,
                options.capture_range_end.empty()
                    ? std::string()
                    : absl::StrCat(" --capture-range-end ", options.capture_range_end));
  }
}

// The contents of the report file of format `f` (the table is also printed).
std::string FormatReport(ReportFormat f, const TraceSummary& summary,
                         const TraceAggregator& data, const TraceData* records) {
  switch (f) {
    case ReportFormat::kTable: {
      std::string text = FormatSummaryText(summary);
      if (!summary.latency_log2.empty()) {
        absl::StrAppend(&text, "\nCUDA launch latency histogram (ns, every kernel):\n",
                        FormatLog2Histogram(summary.latency_log2));
      }
      std::fputs(text.c_str(), stderr);
      return text;
    }
    case ReportFormat::kJson: return FormatSummaryJson(summary);
    case ReportFormat::kCsv: return FormatKernelSummaryCsv(summary.kernels);
    case ReportFormat::kChrome: return records != nullptr ? FormatChromeTrace(*records) : "";
    case ReportFormat::kPerfetto: return "";  // streamed (PerfettoTimelineFile)
    case ReportFormat::kPrometheus: return FormatPrometheus(summary, PrometheusLabels(data));
  }
  return std::string();
}

// Writes every report file asked for, logging each; returns the failures.
absl::Status WriteReports(const TraceOptions& options, const TraceSummary& summary,
                          const TraceAggregator& data, const TraceData* records) {
  absl::Status write_status;
  for (ReportFormat f : options.formats) {
    if (f == ReportFormat::kPerfetto) continue;
    std::string path = ReportPath(options, f);
    const std::string content = FormatReport(f, summary, data, records);
    if (f == ReportFormat::kChrome && content.size() > kLargeChromeTimelineBytes) {
      CUPROBE_LOG(kWarning,
                  "the Chrome timeline %s is %d MB: Perfetto's UI is slow to load JSON this "
                  "large, and keeping it costs memory per launch; for long runs use "
                  "--format perfetto (a tenth of the size, in bounded memory)",
                  path, content.size() >> 20);
    }
    absl::Status s = WriteFile(path, content);
    if (s.ok()) {
      CUPROBE_LOG(kInfo, "wrote %s", path);
    } else {
      CUPROBE_LOG(kError, "%s", s.message());
      write_status.Update(s);
    }
  }
  return write_status;
}

}  // namespace

absl::StatusOr<std::string> FindHookLibrary() {
  if (const char* env = std::getenv("CUPROBE_HOOK"); env != nullptr && *env != '\0') {
    if (::access(env, R_OK) != 0) {
      return absl::NotFoundError(absl::StrCat("CUPROBE_HOOK='", env, "': ", std::strerror(errno)));
    }
    return fs::absolute(env).string();
  }
  std::string dir = ExeDir();
  for (const std::string& candidate :
       {dir + "/../lib/libcuprobe_hook.so", dir + "/libcuprobe_hook.so"}) {
    if (::access(candidate.c_str(), R_OK) == 0) return fs::weakly_canonical(candidate).string();
  }
  return absl::NotFoundError(absl::StrCat("cannot find libcuprobe_hook.so next to ", dir,
                                          " (set CUPROBE_HOOK to its path)"));
}

absl::StatusOr<int> RunTrace(const TraceOptions& options) {
  return RunTracedProgram(options, SessionOptions(), LiveView());
}

absl::StatusOr<int> RunTracedProgram(const TraceOptions& options, SessionOptions session_options,
                                     const LiveView& live, const ExtraEnvironment& extra_env) {
  CUPROBE_ASSIGN_OR_RETURN(std::string hook, FindHookLibrary());
  for (ReportFormat f : options.formats) {
    if (f == ReportFormat::kTable) continue;  // printed, and written next to the others
    CUPROBE_RETURN_IF_ERROR(CheckWritable(ReportPath(options, f)));
  }

  auto wants = [&](ReportFormat f) {
    return std::find(options.formats.begin(), options.formats.end(), f) != options.formats.end();
  };
  std::unique_ptr<PerfettoTimelineFile> timeline;
  if (wants(ReportFormat::kPerfetto)) {
    CUPROBE_ASSIGN_OR_RETURN(timeline,
                             PerfettoTimelineFile::Open(ReportPath(options, ReportFormat::kPerfetto)));
  }
  session_options.ring_capacity = options.ring_bytes;
  CUPROBE_ASSIGN_OR_RETURN(Session session, Session::Create(session_options));

  TraceAggregator data;
  // Every record is kept only for a Chrome timeline.
  const bool chrome = wants(ReportFormat::kChrome);
  TraceData records;
  Drainer drainer(session, data, timeline ? &timeline->timeline() : nullptr,
                  chrome ? &records : nullptr, live.records);
  drainer.Start();
  std::vector<std::pair<std::string, std::string>> env = HookEnvironment(options, hook, session);
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(options.command, env);
  if (!child.ok()) {
    drainer.Stop();
    if (!options.keep_session) (void)session.Remove();
    return child.status();
  }
  LiveThread live_thread(live, session);
  ChildExit exit = child->Wait();
  live_thread.Stop();
  // The hook's teardown (atexit, before the process ended) flushed its last
  // records into the ring: drain them all.
  drainer.Stop();
  if (live.on_exit) live.on_exit(session, data);

  const auto state = static_cast<SessionState>(session.session_state());
  WarnAboutSession(session, state, data);
  TraceSummary summary = data.Summary();
  summary.counters.invalid += drainer.counters().invalid;
  summary.counters.unknown_type += drainer.counters().unknown_type;
  WarnAboutCaptureRange(options, session, state, summary);
  if (summary.counters.join_evicted > 0) {
    CUPROBE_LOG(kWarning,
                "%d launch or kernel records came too far from their partner to be joined "
                "(counted, but left out of launch latency)",
                summary.counters.join_evicted);
  }
  // A report that could not be written was logged; the exit code stays the
  // program's.
  (void)WriteReports(options, summary, data, chrome ? &records : nullptr);
  if (timeline) {
    if (absl::Status s = timeline->Close(); s.ok()) {
      CUPROBE_LOG(kInfo, "wrote %s", timeline->path());
    } else {
      CUPROBE_LOG(kError, "%s", s.message());
    }
  }
  if (options.keep_session) {
    CUPROBE_LOG(kInfo, "kept session %s", Session::ShmPath(session.name()));
  } else {
    (void)session.Remove();
  }
  if (exit.signal != 0) {
    CUPROBE_LOG(kWarning, "the program was %s", exit.Describe());
    RaiseDefault(exit.signal);
  }
  return exit.exit_code;
}

}  // namespace cuprobe
