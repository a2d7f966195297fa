#include "cupti_hook/hook.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cuprobe/abi.h"
#include "maps/gpu/helpers_ptx.h"
#include "ptx_rewriter/compile_cache.h"
#include "support/kept_forever.h"
#include "support/log.h"

namespace cuprobe {
namespace {

// CUPTI's activity callbacks carry no user data; they find the tracer here.
std::atomic<Tracer*> g_activity_tracer{nullptr};
// pthread_atfork's handlers carry none either.
std::atomic<Hook*> g_fork_hook{nullptr};

std::string ProgramName() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string first;
  std::getline(in, first, '\0');
  return first.empty() ? "<unknown>" : first;
}

// A setting with two values: true for `on`; false for `off` (the default),
// when unset, or for anything else (with a warning).
bool EnvChoice(const char* name, const char* on, const char* off) {
  const char* s = std::getenv(name);
  if (s == nullptr || *s == '\0' || std::strcmp(s, off) == 0) return false;
  if (std::strcmp(s, on) == 0) return true;
  CUPROBE_LOG(kWarning, "%s: ignoring unknown value '%s' (expected %s or %s); using %s", name, s,
              on, off, off);
  return false;
}

}  // namespace

HookConfig HookConfig::FromEnvironment() {
  HookConfig config;
  config.pid = static_cast<uint32_t>(::getpid());
  if (const char* s = std::getenv("CUPROBE_SESSION"); s != nullptr) config.session = s;
  if (const char* s = std::getenv("CUPROBE_OUTPUT"); s != nullptr && *s != '\0') {
    config.output = s;
  } else {
    config.output = absl::StrCat("cuprobe-", config.pid, ".json");
  }
  if (const char* s = std::getenv("CUPROBE_INTERVAL_MS"); s != nullptr) {
    uint32_t ms = 0;
    if (absl::SimpleAtoi(s, &ms) && ms >= 1 && ms <= 60000) config.interval_ms = ms;
  }
  if (const char* s = std::getenv("CUPROBE_LATE_ATTACH"); s != nullptr && std::strcmp(s, "0") == 0) {
    config.late_attach = false;
  }
  if (const char* s = std::getenv("CUPROBE_TRACE"); s != nullptr && *s != '\0') {
    for (const std::string& word : config.SetTraceSelection(s)) {
      CUPROBE_LOG(kWarning, "CUPROBE_TRACE: ignoring unknown item '%s' (expected launches, "
                  "kernels, memory)", word);
    }
  }
  config.serial_kernels = Tracer::DiagWord("serial-kernels");
  // Launch records from API activity: opt-in. The GPU tests pass with
  // them, but on the H200 they were not measurably cheaper than the launch
  // callbacks (docs/PERFORMANCE.md, 2026-12-05), which also give the stream.
  config.launch_api_activity = EnvChoice("CUPROBE_LAUNCH_TIMES", "activity", "callbacks");
  config.capture_profiler_api = EnvChoice("CUPROBE_CAPTURE_RANGE", "cudaProfilerApi", "none");
  if (const char* s = std::getenv("CUPROBE_CAPTURE_RANGE_END"); s != nullptr && *s != '\0') {
    absl::StatusOr<CaptureRangeEnd> end = ParseCaptureRangeEnd(s);
    if (!config.capture_profiler_api) {
      CUPROBE_LOG(kWarning,
                  "CUPROBE_CAPTURE_RANGE_END has no effect without "
                  "CUPROBE_CAPTURE_RANGE=cudaProfilerApi; tracing the whole run");
    } else if (end.ok()) {
      config.capture_range_end = *end;
    } else {
      CUPROBE_LOG(kWarning, "CUPROBE_CAPTURE_RANGE_END: %s; using repeat", end.status().message());
    }
  }
  config.capture_activity_on = Tracer::DiagWord("capture-activity-on");
  config.activity_at_context = Tracer::DiagWord("activity-at-context");
  config.no_linger = Tracer::DiagWord("no-linger");
  config.no_prewarm = Tracer::DiagWord("no-prewarm");
  config.program = ProgramName();
  if (const char* d = std::getenv("TRITON_CACHE_DIR"); d != nullptr && *d != '\0') {
    config.ptx_search_roots.emplace_back(d);
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    config.ptx_search_roots.push_back(absl::StrCat(h, "/.triton/cache"));
  }
  return config;
}

std::vector<std::string> HookConfig::SetTraceSelection(std::string_view list) {
  std::vector<std::string> unknown;
  trace_launches = trace_kernels = trace_memory = false;
  for (std::string_view word : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    word = absl::StripAsciiWhitespace(word);
    if (word == "launches") {
      trace_launches = true;
    } else if (word == "kernels") {
      trace_kernels = true;
    } else if (word == "memory") {
      trace_memory = true;
    } else if (word == "all") {
      trace_launches = trace_kernels = trace_memory = true;
    } else {
      unknown.emplace_back(word);
    }
  }
  return unknown;
}

std::vector<CUpti_ActivityKind> Hook::ActivityKinds() const {
  std::vector<CUpti_ActivityKind> kinds;
  for (CUpti_ActivityKind kind : Tracer::kActivityKinds) {
    bool is_kernel = kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    if (!(is_kernel ? config_.trace_kernels : config_.trace_memory)) continue;
    kinds.push_back(is_kernel && config_.serial_kernels ? CUPTI_ACTIVITY_KIND_KERNEL : kind);
  }
  return kinds;
}

bool Hook::WantsLaunchApiActivity() const {
  return config_.launch_api_activity && config_.trace_launches && config_.trace_kernels;
}

absl::Status Hook::SetLaunchApiActivity(bool enable) {
  for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
    absl::Status s = seam_.ActivityEnableDriverApi(cbid, enable);
    if (!s.ok() && enable) return s;
  }
  for (CUpti_CallbackId cbid : Tracer::kRuntimeLaunchApis) {
    absl::Status s = seam_.ActivityEnableRuntimeApi(cbid, enable);
    if (!s.ok() && enable) return s;
  }
  return absl::OkStatus();
}

absl::Status Hook::EnableLaunchCallbacks() {
  if (launch_callbacks_on_.exchange(true)) return absl::OkStatus();
  for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
    absl::Status s = seam_.EnableCallback(true, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

Hook::Hook(CuptiSeam& seam, HookConfig config, OutputFactory make_output)
    : seam_(seam), config_(std::move(config)), make_output_(std::move(make_output)) {}

void Hook::DisableWith(const std::string& reason) {
  if (!lifecycle_.Disable(reason)) return;
  CUPROBE_LOG(kWarning, "%s; not instrumenting, the application runs unchanged", reason);
  if (output_ != nullptr && tracer_ != nullptr) {
    tracer_->WhileSinkOpen([&] { output_->PublishStatus(HookState::kDisabled, reason); });
  } else if (output_ != nullptr) {
    output_->PublishStatus(HookState::kDisabled, reason);
  }
}

absl::Status Hook::EnableCallbacks() {
  // Only the callback ids we need: enabling the whole driver domain costs
  // about 5 us per launch (DESIGN.md).
  // Launch records from API activity need no launch callback; late
  // attach then enables them when an attach request arrives (Tick).
  if ((config_.trace_launches || attach_ != nullptr) && !WantsLaunchApiActivity()) {
    absl::Status s = EnableLaunchCallbacks();
    if (!s.ok()) return s;
  }
  for (CUpti_CallbackId cbid :
       {CUPTI_CBID_RESOURCE_CONTEXT_CREATED, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING}) {
    absl::Status s = seam_.EnableCallback(true, CUPTI_CB_DOMAIN_RESOURCE, cbid);
    if (!s.ok()) return s;
  }
  for (CUpti_CallbackId cbid : ModulePatcher::kCallbacks) {
    if (patcher_ == nullptr && images_ == nullptr) break;
    absl::Status s = seam_.EnableCallback(true, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
    if (!s.ok()) return s;
  }
  // Both APIs' profiler calls: the runtime's may reach the driver's without
  // a callback of its own, and a program may call either. When both fire
  // (one inside the other), the second is a no-op (CaptureRanges). Without
  // them the whole run is traced, rather than none of it.
  if (capture_ != nullptr) {
    absl::Status s;
    for (CUpti_CallbackId cbid : kProfilerDriverCallbacks) {
      if (s.ok()) s = seam_.EnableCallback(true, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
    }
    for (CUpti_CallbackId cbid : kProfilerRuntimeCallbacks) {
      if (s.ok()) s = seam_.EnableCallback(true, CUPTI_CB_DOMAIN_RUNTIME_API, cbid);
    }
    if (!s.ok()) {
      CUPROBE_LOG(kWarning,
                  "CUPROBE_CAPTURE_RANGE=cudaProfilerApi: cannot watch the profiler start and "
                  "stop calls (%s); tracing the whole run",
                  s.message());
      tracer_->SetCaptureRanges(nullptr);  // not READY yet: no callback reads it
      capture_ = nullptr;
    }
  }
  // Best effort: older CUPTI builds may not have the state domain.
  (void)seam_.EnableCallback(true, CUPTI_CB_DOMAIN_STATE, CUPTI_CBID_STATE_FATAL_ERROR);
  return absl::OkStatus();
}

void Hook::OnForkChild() {
  if (Hook* hook = g_fork_hook.load(std::memory_order_acquire)) hook->MarkForkedChild();
}

HookState Hook::Start() {
  if (!lifecycle_.TryBeginInit()) return lifecycle_.state();
  // A child of fork() inherits this object, its atexit handler and the
  // segment mapping, but not the watcher thread or CUDA: it must not tear
  // any of it down (joining a thread that does not exist there hangs).
  static const bool fork_handler_registered = [] {
    return ::pthread_atfork(nullptr, nullptr, &Hook::OnForkChild) == 0;
  }();
  (void)fork_handler_registered;
  g_fork_hook.store(this, std::memory_order_release);
  // Everything the hook calls from here on must fall through our own callback.
  ReentrancyGuard guard;

  absl::StatusOr<TraceOutput*> output = make_output_(config_);
  if (!output.ok()) {
    DisableWith(std::string(output.status().message()));
    return lifecycle_.state();
  }
  output_ = KeptForever(*output);

  std::string other_tool;
  absl::Status status = seam_.Subscribe(&Hook::Callback, this, "cuprobe", &other_tool);
  if (!status.ok()) {
    if (status.code() == absl::StatusCode::kAlreadyExists) {
      DisableWith(absl::StrCat("CUPTI is already in use by ",
                               other_tool.empty() ? std::string("another tool")
                                                  : absl::StrCat("'", other_tool, "'")));
    } else {
      DisableWith(absl::StrCat("cannot subscribe to CUPTI (", status.message(), ")",
                               status.code() == absl::StatusCode::kUnavailable
                                   ? "; is the NVIDIA driver installed?"
                                   : ""));
    }
    return lifecycle_.state();
  }
  subscribed_ = true;

  tracer_ = KeptForever(new Tracer(seam_, *output_, config_.pid));
  if (config_.capture_profiler_api) {
    capture_ = KeptForever(new CaptureRanges(config_.capture_range_end.max_ranges));
    tracer_->SetCaptureRanges(capture_);
  }
  if (!output_->BundleBytes().empty()) {
    StartProbes();
  } else if (config_.late_attach && output_->AttachSession() != nullptr) {
    images_ = KeptForever(new ImageRegistry);
    attach_ = KeptForever(
        new LateAttach(seam_, *images_, *output_->AttachSession(), *tracer_, config_.pid,
                       TritonCacheFinder(config_.ptx_search_roots)));
  }
  status = EnableCallbacks();
  if (status.ok()) {
    g_activity_tracer.store(tracer_, std::memory_order_release);
    status = seam_.ActivityRegisterCallbacks(&Hook::BufferRequested, &Hook::BufferCompleted);
  }
  bool launch_apis = WantsLaunchApiActivity();
  if (status.ok() && launch_apis) {
    // Launch records carry the launching thread's OS id, as the callbacks
    // write it; CUPTI's default is pthread_self(). Set before any activity.
    absl::Status s = seam_.ActivityUseSystemThreadIds();
    if (!s.ok()) {
      CUPROBE_LOG(kWarning,
                  "CUPROBE_LAUNCH_TIMES=activity: CUPTI cannot give OS thread ids (%s); "
                  "recording launches with callbacks",
                  s.message());
      launch_apis = false;
      status = EnableLaunchCallbacks();
    }
  }
  for (CUpti_ActivityKind kind : ActivityKinds()) {
    if (!status.ok()) break;
    status = seam_.ActivityEnable(kind);
    activity_enabled_ = activity_enabled_ || status.ok();
  }
  if (status.ok() && launch_apis) {
    absl::Status s = SetLaunchApiActivity(true);
    if (s.ok()) {
      launch_activity_.store(true);
    } else {
      // This CUPTI cannot: the launch callbacks record launches instead.
      CUPROBE_LOG(kWarning,
                  "CUPROBE_LAUNCH_TIMES=activity: CUPTI cannot record the launch calls' API "
                  "activity (%s); recording launches with callbacks",
                  s.message());
      (void)SetLaunchApiActivity(false);
      status = EnableLaunchCallbacks();
    }
  }
  if (!status.ok()) {
    DisableWith(absl::StrCat("cannot enable tracing (", status.message(), ")"));
    return lifecycle_.state();
  }
  {
    absl::MutexLock lock(&activity_mu_);
    activity_on_ = activity_enabled_;
    // With a capture range: off until the first start call, once the
    // program's first launch has returned (prewarm_pending_: the launch
    // callbacks end it; without them it is off from here); with
    // CUPROBE_DIAG=activity-at-context, off until the first context.
    // (Enabled above all the same, so that a CUPTI that refuses it says so
    // now.)
    if (capture_ != nullptr && !config_.capture_activity_on && activity_on_ &&
        !config_.no_prewarm && launch_callbacks_on_.load()) {
      prewarm_pending_.store(true, std::memory_order_relaxed);
    } else if ((capture_ != nullptr && !config_.capture_activity_on) ||
               (capture_ == nullptr && config_.activity_at_context)) {
      (void)SetActivity(false, /*launch_apis=*/false);
      switched_off_ = {};  // counted from the first range on
    }
  }
  tracer_->Begin(config_.program);
  watcher_ = KeptForever(new Watcher(std::chrono::milliseconds(config_.interval_ms),
                                     [this] { Tick(); }, [this] { EndLingeringActivity(); }));
  watcher_->Start();
  if (device_maps_ != nullptr && device_maps_->mirrors_rings()) {
    // Ring records wait in device memory until pumped into the segment:
    // every millisecond, the pace at which `cuprobe run` consumes them.
    ring_pump_ = KeptForever(new Watcher(std::chrono::milliseconds(1), [this] { PumpTick(); }));
    ring_pump_->Start();
  }

  if (!lifecycle_.FinishInit()) return lifecycle_.state();
  output_->PublishStatus(HookState::kReady, "");
  CUPROBE_LOG(kInfo, "hook ready: subscribed to CUPTI as 'cuprobe', tracing to %s",
              output_->Describe());
  return lifecycle_.state();
}

void Hook::StartProbes() {
  // Copy out of shared memory first: ReadBundle then validates what it owns.
  absl::Span<const uint8_t> shared = output_->BundleBytes();
  std::vector<uint8_t> bytes(shared.begin(), shared.end());
  absl::StatusOr<ProbeBundle> bundle = ReadBundle(bytes);
  if (!bundle.ok()) {
    CUPROBE_LOG(kWarning, "the session's probe bundle is not usable (%s); tracing without probes",
                bundle.status().message());
    return;
  }
  size_t programs = bundle->programs.size();
  std::vector<MapSpec> specs = bundle->maps;
  Tracer* tracer = tracer_;
  instrumenter_ = KeptForever(new BundleInstrumenter(
      *std::move(bundle), HelpersPtx(), CompileCache::FromEnvironment(),
      TritonCacheFinder(config_.ptx_search_roots), [tracer](std::string_view name, uint32_t id) { tracer->OnKernelInstrumented(name, id); }));
  CuptiSeam* seam = &seam_;
  // Ring records go to device memory and are pumped into the segment
  // (maps/map_set.h), by producers that reserve first and pad what does not
  // fit (RingData::kDeviceSpeculative: kernel_trace on vec_add 1.13x native
  // against 1.21x checking the head first, docs/PERFORMANCE.md).
  // CUPROBE_RING_DATA=device keeps the check-first device ring and
  // CUPROBE_RING_DATA=host has the GPU write records into the segment itself,
  // over the bus; both are for comparisons.
  const char* ring_value = std::getenv("CUPROBE_RING_DATA");
  const std::string_view ring_env = ring_value == nullptr ? "" : ring_value;
  const RingData ring_data = ring_env == "host"     ? RingData::kHost
                             : ring_env == "device" ? RingData::kDeviceMirrored
                                                    : RingData::kDeviceSpeculative;
  if (!ring_env.empty() && ring_env != "host" && ring_env != "speculative" &&
      ring_env != "device") {
    CUPROBE_LOG(kWarning,
                "CUPROBE_RING_DATA: ignoring unknown value '%s' (expected speculative, device or "
                "host)",
                ring_env);
  }
  device_maps_ = KeptForever(new DeviceMaps(
      std::move(specs), output_->AttachSession(),
      [seam, tracer](CUcontext context, CUstream stream) {
        absl::StatusOr<uint32_t> id = seam->StreamId(context, stream);
        if (id.ok()) tracer->IgnoreStream(*id);
      },
      SeamDriver(seam_), ring_data));
  const char* tmp = std::getenv("TMPDIR");
  patcher_ = KeptForever(new ModulePatcher(seam_, *instrumenter_, *device_maps_,
                                           tmp != nullptr && *tmp != '\0' ? tmp : "/tmp"));
  uint64_t pid_tgid = (uint64_t{config_.pid} << 32) | config_.pid;
  std::vector<uint8_t> value(sizeof(pid_tgid));
  std::memcpy(value.data(), &pid_tgid, sizeof(pid_tgid));
  patcher_->AddModuleGlobal(CUPROBE_PID_TGID_SYMBOL, std::move(value));
  CUPROBE_LOG(kInfo, "probes: %d program(s) from the session's bundle, %d map(s)", programs,
              instrumenter_->bundle().maps.size());
}

void Hook::Tick() {
  // Runs on the watcher thread, which Stop() joins before releasing anything.
  output_->PublishStats(tracer_->stats(), seam_.Timestamp());
  if (device_maps_ != nullptr && lifecycle_.IsReady()) {
    absl::Status s = device_maps_->Publish(absl::GetCurrentTimeNanos());
    if (!s.ok() && !maps_publish_warned_) {
      maps_publish_warned_ = true;
      CUPROBE_LOG(kWarning, "cannot publish the probes' maps: %s", s.message());
    }
  }
  if (patcher_ != nullptr && patcher_->pending_fill() && !launch_callbacks_on_.load() &&
      lifecycle_.IsReady()) {
    // A library waits for a context's first launch to get its maps there
    // (ModulePatcher::OnLaunch): the launch callbacks must be on.
    absl::Status s = EnableLaunchCallbacks();
    if (!s.ok()) CUPROBE_LOG(kWarning, "cannot enable launch callbacks: %s", s.message());
  }
  if (attach_ != nullptr && lifecycle_.IsReady()) {
    // Redirection needs the launch callbacks, which launch records from
    // activity left off: on when the first request arrives, before it is
    // acted on (a launch already past ENTER is simply not redirected).
    if (!launch_callbacks_on_.load() &&
        output_->AttachSession()->header().attach_request.load(std::memory_order_acquire) != 0) {
      absl::Status s = EnableLaunchCallbacks();
      if (!s.ok()) CUPROBE_LOG(kWarning, "late attach: cannot enable launch callbacks: %s", s.message());
    }
    attach_->Poll(absl::GetCurrentTimeNanos());
  }
  if (lifecycle_.IsReady() && activity_enabled_) {
    EndLingeringActivity();  // in case a wake was missed
    // Hands completed buffers to BufferCompleted so readers see kernels while
    // the program runs.
    (void)seam_.ActivityFlushAll(false);
  }
}

void Hook::EndLingeringActivity() {
  if (capture_ == nullptr || !lifecycle_.IsReady() || !activity_enabled_) return;
  // A program thread switching it now (a start or stop call) holds the
  // lock: then look again shortly.
  uint64_t wait_ns = 200'000;
  if (activity_mu_.TryLock()) {
    const uint64_t now = seam_.Timestamp();
    if (activity_on_ && !activity_final_ && range_activity_.Tick(now)) {
      (void)SetActivity(false, /*launch_apis=*/false);
    }
    // Still lingering (woken before CUPTI's clock says it is due): again
    // when it is. Not lingering: nothing to ask for.
    wait_ns = range_activity_.lingering() && !activity_final_ ? range_activity_.WaitNs(now) : 0;
    activity_mu_.Unlock();
    if (wait_ns == 0) return;
  }
  watcher_->WakeAt(Watcher::Clock::now() + std::chrono::nanoseconds(wait_ns + 50'000));
}

void Hook::PumpTick() {
  if (!lifecycle_.IsReady()) return;
  absl::Status s = device_maps_->PumpRings();
  if (!s.ok() && !ring_pump_warned_) {
    ring_pump_warned_ = true;
    CUPROBE_LOG(kWarning, "cannot move ring buffer records to the session: %s", s.message());
  }
}

void Hook::Stop() {
  // In a child of fork() the hook belongs to the parent (Start).
  if (forked_child_.load(std::memory_order_acquire)) return;
  if (!lifecycle_.TryBeginStop()) return;
  // From here on every callback falls through (state STOPPING).
  ReentrancyGuard guard;
  if (watcher_ != nullptr) watcher_->Stop();  // joined: no tick runs any more
  // Joined too; the maps' last publish (Release, below) pumps what is left.
  if (ring_pump_ != nullptr) ring_pump_->Stop();
  if (activity_enabled_) {
    absl::Status s = seam_.ActivityFlushAll(true);
    if (!s.ok()) CUPROBE_LOG(kDebug, "teardown: %s", s.ToString());
  }
  if (output_ != nullptr && tracer_ != nullptr) {
    output_->PublishStats(tracer_->stats(), seam_.Timestamp());
  }
  // Standalone mode says so here; under `cuprobe trace` the CLI does, from
  // the count the stats above published.
  if (capture_ != nullptr && capture_->count() == 0 && config_.session.empty()) {
    CUPROBE_LOG(kWarning,
                "CUPROBE_CAPTURE_RANGE=cudaProfilerApi: the program never called "
                "cudaProfilerStart or cuProfilerStart; nothing was traced");
  }
  // The maps live in device memory and (rings) in the segment: final
  // snapshot and free them now, while the context is valid and before the
  // segment is unmapped below.
  if (device_maps_ != nullptr) {
    absl::Status s = device_maps_->Release(absl::GetCurrentTimeNanos());
    if (!s.ok()) CUPROBE_LOG(kWarning, "releasing the probes' maps: %s", s.message());
  }
  // Probes attached late: detached (their kernels waited for, their maps
  // published and freed) before anything is unmapped.
  if (attach_ != nullptr) attach_->Stop(absl::GetCurrentTimeNanos());
  if (activity_enabled_) {
    // Off for good: a profiler call still on its way turns nothing on. A
    // program thread may hold the lock inside a CUPTI call; teardown does
    // not wait on it past 2 s (the activity is then left as it is).
    const absl::Time deadline = absl::Now() + absl::Seconds(2);
    bool locked = false;
    while (!(locked = activity_mu_.TryLock()) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    if (locked) {
      const SwitchTimes on = switched_on_, off = switched_off_;
      (void)SetActivity(false, /*launch_apis=*/true);
      activity_final_ = true;
      activity_enabled_ = false;
      activity_mu_.Unlock();
      // What the capture ranges' switching cost the threads that did it
      // (teardown's own switch left out).
      if (capture_ != nullptr && on.count + off.count > 0) {
        CUPROBE_LOG(kDebug,
                    "capture ranges: CUPTI's activity turned on %d time(s), %.1f us each; "
                    "off %d time(s), %.1f us each",
                    on.count, on.count > 0 ? on.ns / 1e3 / on.count : 0.0, off.count,
                    off.count > 0 ? off.ns / 1e3 / off.count : 0.0);
      }
    } else {
      CUPROBE_LOG(kWarning, "teardown: a thread is still switching CUPTI's activity; left on");
    }
    // Again, now that nothing adds records: what completed since the first
    // flush (the kernels late attach waited for above, launches still on
    // their way) reaches the sink while it is open.
    absl::Status s = seam_.ActivityFlushAll(true);
    if (!s.ok()) CUPROBE_LOG(kDebug, "teardown: %s", s.ToString());
    if (output_ != nullptr && tracer_ != nullptr) {
      output_->PublishStats(tracer_->stats(), seam_.Timestamp());
    }
  }
  if (subscribed_) {
    absl::Status s = seam_.Unsubscribe();
    if (!s.ok()) CUPROBE_LOG(kDebug, "teardown: %s", s.ToString());
    subscribed_ = false;
  }
  // No tracer thread may be inside the output once the gate is closed. If one
  // is stuck there, leak the output rather than unmap under it.
  bool quiet = tracer_ == nullptr || tracer_->CloseSink();
  if (output_ != nullptr) {
    std::string reason = lifecycle_.reason();
    output_->PublishStatus(HookState::kStopped, reason);
    absl::Status s = output_->Finish();
    if (!s.ok()) CUPROBE_LOG(kWarning, "%s", s.message());
    if (quiet) {
      output_->Release();
    } else {
      CUPROBE_LOG(kWarning, "a tracer thread did not leave in time; keeping %s mapped",
                  output_->Describe());
    }
  }
  lifecycle_.FinishStop();
}

void CUPTIAPI Hook::Callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                             const void* cbdata) {
  static_cast<Hook*>(userdata)->OnCallback(domain, cbid, cbdata);
}

void CUPTIAPI Hook::BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kActivityBufferBytes));
  *size = *buffer != nullptr ? kActivityBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI Hook::BufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                    size_t size, size_t valid_size) {
  ReentrancyGuard guard;
  Tracer* tracer = g_activity_tracer.load(std::memory_order_acquire);
  // After teardown the tracer's gate is closed and this only frees the buffer.
  if (tracer != nullptr && buffer != nullptr && valid_size > 0) {
    tracer->OnActivityBuffer(context, stream_id, buffer, valid_size);
  }
  std::free(buffer);
}

void Hook::OnCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata) {
  // The end of a launch that late attach redirected is counted whatever the
  // state: a detach at teardown waits for it.
  if (attach_ != nullptr && domain == CUPTI_CB_DOMAIN_DRIVER_API &&
      Tracer::IsLaunchCallback(cbid) && cbdata != nullptr &&
      static_cast<const CUpti_CallbackData*>(cbdata)->callbackSite == CUPTI_API_EXIT) {
    attach_->OnLaunch(cbid, static_cast<const CUpti_CallbackData*>(cbdata));
  }
  // Not READY (still initializing, disabled, stopping), a call the hook made
  // itself, or a child of fork(): fall through untouched.
  if (!lifecycle_.IsReady() || ReentrancyGuard::Active() ||
      forked_child_.load(std::memory_order_relaxed)) {
    callbacks_fell_through_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ReentrancyGuard guard;
  switch (domain) {
    case CUPTI_CB_DOMAIN_DRIVER_API:
      if (Tracer::IsLaunchCallback(cbid)) {
        auto* data = static_cast<const CUpti_CallbackData*>(cbdata);
        // A library loaded with no context current whose fill could not
        // reach this context yet: before the kernel runs.
        if (patcher_ != nullptr && data != nullptr && data->callbackSite == CUPTI_API_ENTER &&
            patcher_->pending_fill()) {
          patcher_->OnLaunch(data->context);
        }
        // Redirect first, so that the tracer records what really launches.
        if (attach_ != nullptr && data != nullptr && data->callbackSite == CUPTI_API_ENTER) {
          attach_->OnLaunch(cbid, data);
        }
        if (config_.trace_launches && !launch_activity_.load(std::memory_order_relaxed)) {
          tracer_->OnLaunchApi(cbid, data);
        }
        if (data != nullptr && data->callbackSite == CUPTI_API_EXIT &&
            prewarm_pending_.load(std::memory_order_relaxed)) {
          EndPrewarm();
        }
      } else if (capture_ != nullptr && (cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStart ||
                                         cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStop)) {
        OnProfilerCall(cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStart,
                       static_cast<const CUpti_CallbackData*>(cbdata));
      } else if (ModulePatcher::IsModuleCallback(cbid)) {
        auto* data = static_cast<const CUpti_CallbackData*>(cbdata);
        if (patcher_ != nullptr) {
          patcher_->OnModuleApi(cbid, data);
        } else if (images_ != nullptr) {
          images_->OnModuleApi(cbid, data);
          if (attach_ != nullptr && data != nullptr && data->callbackSite == CUPTI_API_EXIT &&
              data->functionParams != nullptr) {
            if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload) {
              attach_->OnModuleUnloaded(
                  static_cast<const cuLibraryUnload_params*>(data->functionParams)->library);
            } else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuModuleUnload) {
              attach_->OnModuleUnloaded(
                  static_cast<const cuModuleUnload_params*>(data->functionParams)->hmod);
            }
          }
        }
      }
      break;
    case CUPTI_CB_DOMAIN_RUNTIME_API:
      if (capture_ != nullptr && (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000 ||
                                  cbid == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000)) {
        OnProfilerCall(cbid == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000,
                       static_cast<const CUpti_CallbackData*>(cbdata));
      }
      break;
    case CUPTI_CB_DOMAIN_RESOURCE:
      if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
        contexts_alive_.fetch_add(1, std::memory_order_relaxed);
        if (capture_ == nullptr && config_.activity_at_context) {
          absl::MutexLock lock(&activity_mu_);
          if (activity_enabled_ && !activity_on_ && !activity_final_) {
            (void)SetActivity(true, /*launch_apis=*/false);
          }
        }
        // Allocate the probes' maps now, before the application can be in
        // the middle of a stream capture when its first module loads.
        auto* r = static_cast<const CUpti_ResourceData*>(cbdata);
        if (device_maps_ != nullptr && r != nullptr) device_maps_->Prepare(r->context);
        if (patcher_ != nullptr && r != nullptr) {
          // With the new context current; should it not become current,
          // the patcher remembers it and fills it at its first launch.
          auto created = [this, r] { patcher_->OnContextCreated(r->context); };
          if (!seam_.InContext(r->context, created).ok()) created();
        }
      } else if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
        contexts_alive_.fetch_sub(1, std::memory_order_relaxed);
        // The context is forgotten first (no library is filled in it any
        // more); then the probes' maps move to another context that uses
        // them, or, when it was the last, their last snapshot is taken and
        // their memory freed while the context still exists.
        auto* r = static_cast<const CUpti_ResourceData*>(cbdata);
        if (patcher_ != nullptr && r != nullptr) patcher_->OnContextDestroying(r->context);
        if (device_maps_ != nullptr && r != nullptr) device_maps_->OnContextDestroying(r->context);
        if (attach_ != nullptr && r != nullptr) attach_->OnContextDestroying(r->context);
        // Publish what the context produced while it still exists.
        if (watcher_ != nullptr) watcher_->Poke();
      }
      break;
    case CUPTI_CB_DOMAIN_STATE:
      if (cbid == CUPTI_CBID_STATE_FATAL_ERROR) {
        auto* state = static_cast<const CUpti_StateData*>(cbdata);
        const char* message = state != nullptr ? state->notification.message : nullptr;
        DisableWith(absl::StrCat("CUPTI reported a fatal error",
                                 message != nullptr ? absl::StrCat(": ", message) : ""));
      }
      break;
    default:
      break;
  }
}

void Hook::EndPrewarm() {
  // Never waits on the lock from a launch: another thread holding it is
  // inside a CUPTI call (a start or stop call's switch, or teardown). The
  // flag stays set, and the next launch to return tries again.
  if (!activity_mu_.TryLock()) return;
  // Not another thread's launch, or a range, first.
  if (prewarm_pending_.load(std::memory_order_relaxed)) {
    prewarm_pending_.store(false, std::memory_order_relaxed);
    if (activity_on_ && !activity_final_) {
      (void)SetActivity(false, /*launch_apis=*/false);
      switched_off_ = {};  // counted from the first range on
    }
  }
  activity_mu_.Unlock();
}

absl::Status Hook::SetActivity(bool on, bool launch_apis) {
  const int64_t t0 = absl::GetCurrentTimeNanos();
  absl::Status first;
  for (CUpti_ActivityKind kind : ActivityKinds()) {
    absl::Status s = on ? seam_.ActivityEnable(kind) : seam_.ActivityDisable(kind);
    if (first.ok()) first = s;
  }
  if (launch_apis && launch_activity_.load()) {
    absl::Status s = SetLaunchApiActivity(on);
    if (first.ok()) first = s;
  }
  activity_on_ = on;
  SwitchTimes& times = on ? switched_on_ : switched_off_;
  ++times.count;
  times.ns += absl::GetCurrentTimeNanos() - t0;
  return first;
}

void Hook::OnProfilerCall(bool start, const CUpti_CallbackData* data) {
  // At ENTER: a start's range holds the calls after it; a stop's ends
  // before it. Both sites carry the same correlation id.
  if (data == nullptr || data->callbackSite != CUPTI_API_ENTER) return;
  // --capture-range-end none: the range runs to the end of the program.
  if (!start && config_.capture_range_end.ignore_stop) return;
  const char* call = data->functionName != nullptr ? data->functionName : "?";
  int number = 0;
  CaptureRanges::Change change = CaptureRanges::Change::kUnchanged;
  absl::Status refused;
  bool warn_refused = false;
  bool lingers = false;
  {
    absl::MutexLock lock(&activity_mu_);
    const bool switching = activity_enabled_ && !config_.capture_activity_on && !activity_final_;
    // On before the range opens, so that every call of the range (this
    // thread's next ones first) finds CUPTI recording; already on when the
    // range before lingers. (Past the last range nothing opens: no
    // switching then.)
    bool turned_on = false;
    if (start && switching && !activity_on_ && capture_->count() < capture_->limit()) {
      refused = SetActivity(true, /*launch_apis=*/false);
      turned_on = true;
      warn_refused = !refused.ok() && !activity_warned_;
      activity_warned_ = activity_warned_ || warn_refused;
    }
    change = start ? capture_->Open(data->correlationId, &number)
                   : capture_->Close(data->correlationId, &number);
    // The first range came before the program's first launch returned: the
    // activity the pre-warm left on is the range's now.
    if (change == CaptureRanges::Change::kOpened) {
      prewarm_pending_.store(false, std::memory_order_relaxed);
    }
    // Off once the range has closed, unless it came right after the one
    // before (RangeActivity: then the watcher turns it off once no range
    // follows): CUPTI still hands over the records of kernels launched
    // while it was on, also of those that run after this call. And off
    // again if this start opened nothing.
    if (switching) {
      if (change == CaptureRanges::Change::kOpened) {
        range_activity_.Opened(seam_.Timestamp());
        range_refused_ = turned_on && !refused.ok();
      } else if (change == CaptureRanges::Change::kClosed) {
        const bool may_linger =
            !range_refused_ && capture_->count() < capture_->limit() && !config_.no_linger;
        if (range_activity_.Closed(seam_.Timestamp(), may_linger)) {
          if (activity_on_) (void)SetActivity(false, /*launch_apis=*/false);
        } else {
          lingers = true;
        }
      } else if (turned_on && activity_on_) {
        (void)SetActivity(false, /*launch_apis=*/false);
      }
    }
  }
  // The watcher turns a lingering activity off once no range follows
  // (outside the lock: the watcher takes it).
  if (lingers && watcher_ != nullptr) {
    watcher_->WakeAt(Watcher::Clock::now() +
                     std::chrono::nanoseconds(RangeActivity::kBackToBackNs + 50'000));
  }
  if (warn_refused) {
    CUPROBE_LOG(kWarning,
                "CUPROBE_CAPTURE_RANGE=cudaProfilerApi: cannot turn CUPTI's activity on at %s "
                "(%s); kernels, copies and sets of the range may be missing",
                call, refused.message());
  }
  switch (change) {
    case CaptureRanges::Change::kOpened:
      CUPROBE_LOG(kInfo, "capture range %d: %s, tracing", number, call);
      break;
    case CaptureRanges::Change::kClosed:
      CUPROBE_LOG(kInfo, "capture range %d: %s, not tracing", number, call);
      break;
    case CaptureRanges::Change::kFull:
      if (capture_->limit() < CaptureRanges::kMaxRanges) {
        CUPROBE_LOG(kInfo,
                    "capture range: %d range(s) traced, as --capture-range-end "
                    "(CUPROBE_CAPTURE_RANGE_END) asks; later ranges are not",
                    capture_->limit());
      } else {
        CUPROBE_LOG(kWarning,
                    "CUPROBE_CAPTURE_RANGE=cudaProfilerApi: %d ranges traced; later ranges are "
                    "not",
                    CaptureRanges::kMaxRanges);
      }
      break;
    case CaptureRanges::Change::kUnchanged:
      break;
  }
}

}  // namespace cuprobe
