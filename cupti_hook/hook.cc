// File: cupti_hook/hook.cc
#include "cupti_hook/hook.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cuprobe/abi.h"
#include "maps/gpu/helpers_ptx.h"
#include "ptx_rewriter/compile_cache.h"
#include "ptx_rewriter/image_pipeline.h"
#include "ptx_rewriter/settings.h"
#include "support/kept_forever.h"
#include "support/log.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

// CUPTI's activity callbacks carry no user data; they find the tracer here.
std::atomic<Tracer*> g_activity_tracer{nullptr};
// pthread_atfork's handlers carry none either.
std::atomic<Hook*> g_fork_hook{nullptr};

// A switchboard handler that calls `Method` of the owner with the callback
// data as `Data`.
template <typename Owner, typename Data, void (Owner::*Method)(CUpti_CallbackId, const Data*)>
void Call(void* owner, CUpti_CallbackId cbid, const void* cbdata) {
  (static_cast<Owner*>(owner)->*Method)(cbid, static_cast<const Data*>(cbdata));
}

// The tracer's launch handler the measuring switches ask for, chosen once.
Switchboard::Handler TracerLaunchHandler(const TracerDiag& diag) {
  if (diag.no_launch_records) return &Call<Tracer, CUpti_CallbackData, &Tracer::OnLaunchApiCountOnly>;
  if (diag.no_timestamps) return &Call<Tracer, CUpti_CallbackData, &Tracer::OnLaunchApiUntimed>;
  return &Call<Tracer, CUpti_CallbackData, &Tracer::OnLaunchApi>;
}

bool IsProfilerCall(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  const auto& ids = domain == CUPTI_CB_DOMAIN_DRIVER_API ? Hook::kProfilerDriverCallbacks
                                                         : Hook::kProfilerRuntimeCallbacks;
  return (domain == CUPTI_CB_DOMAIN_DRIVER_API || domain == CUPTI_CB_DOMAIN_RUNTIME_API) &&
         std::find(ids.begin(), ids.end(), cbid) != ids.end();
}

}  // namespace

Hook::Hook(CuptiSeam& seam, HookConfig config, OutputFactory make_output,
           SanitizerSeam* sanitizer)
    : seam_(seam),
      config_(std::move(config)),
      make_output_(std::move(make_output)),
      sanitizer_(sanitizer) {}

void Hook::DisableWith(const std::string& reason) {
  if (!lifecycle_.Disable(reason)) return;
  CUPROBE_LOG(kWarning, "%s; not instrumenting, the application runs unchanged", reason);
  if (output_ != nullptr && tracer_ != nullptr) {
    tracer_->WhileSinkOpen([&] { output_->PublishStatus(HookState::kDisabled, reason); });
  } else if (output_ != nullptr) {
    output_->PublishStatus(HookState::kDisabled, reason);
  }
}

void Hook::OnForkChild() {
  if (Hook* hook = g_fork_hook.load(std::memory_order_acquire)) hook->MarkForkedChild();
}

// --- Start -------------------------------------------------------------------

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
  if (config_.backend == Backend::kPatch) return StartPatchBackend();
  if (config_.backend == Backend::kAuto && !output_->BundleBytes().empty()) {
    if (std::optional<HookState> state = StartAutoBackend(); state.has_value()) return *state;
  }

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

  SetRewriterSettings(config_.rewriter);
  tracer_ = KeptForever(new Tracer(seam_, *output_, config_.pid, config_.tracer_diag));
  if (config_.capture_profiler_api) {
    capture_ = KeptForever(new CaptureRanges(config_.capture_range_end.max_ranges));
    tracer_->SetCaptureRanges(capture_);
  }
  activity_ = KeptForever(new ActivityController(seam_, config_, capture_));
  if (!output_->BundleBytes().empty()) {
    StartProbes();
  } else if (config_.late_attach && output_->AttachSession() != nullptr) {
    images_ = KeptForever(new ImageRegistry);
    attach_ = KeptForever(new LateAttach(seam_, *images_, *output_->AttachSession(), *tracer_,
                                         config_.pid,
                                         TritonCacheFinder(config_.ptx_search_roots)));
    if (config_.list_kernels) ListKernelsAtLoad();
  }
  status = AddHandlers(/*tracer_launches=*/!activity_->WantsLaunchApiActivity());
  if (status.ok()) status = EnableCallbacks();
  if (status.ok()) {
    g_activity_tracer.store(tracer_, std::memory_order_release);
    status = seam_.ActivityRegisterCallbacks(&Hook::BufferRequested, &Hook::BufferCompleted);
  }
  if (status.ok()) status = ChooseLaunchRecords();
  if (!status.ok()) {
    DisableWith(absl::StrCat("cannot enable tracing (", status.message(), ")"));
    return lifecycle_.state();
  }
  activity_->Arm(launch_callbacks_on_.load());
  return FinishStart(absl::StrCat("hook ready: subscribed to CUPTI as 'cuprobe', tracing to ",
                                  output_->Describe()));
}

HookState Hook::FinishStart(const std::string& ready_line) {
  tracer_->Begin(config_.program, Now());
  watcher_ = KeptForever(new Watcher(std::chrono::milliseconds(config_.interval_ms),
                                     [this] { Tick(); },
                                     [this] {
                                       if (lifecycle_.IsReady() && activity_ != nullptr) {
                                         activity_->EndLingering();
                                       }
                                     }));
  if (activity_ != nullptr) {
    activity_->SetWaker([this](std::chrono::nanoseconds delay) {
      watcher_->WakeAt(Watcher::Clock::now() + delay);
    });
  }
  watcher_->Start();
  if (device_maps_ != nullptr && device_maps_->mirrors_rings()) {
    // Ring records wait in device memory until pumped into the segment:
    // every millisecond, the pace at which `cuprobe run` consumes them.
    ring_pump_ = KeptForever(new Watcher(std::chrono::milliseconds(1), [this] { PumpTick(); }));
    ring_pump_->Start();
  }

  if (!lifecycle_.FinishInit()) return lifecycle_.state();
  output_->PublishStatus(HookState::kReady, "");
  CUPROBE_LOG(kInfo, "%s", ready_line);
  return lifecycle_.state();
}

absl::Status Hook::ChooseLaunchRecords() {
  if (!activity_->WantsLaunchApiActivity()) return activity_->EnableKinds();
  // CUPTI's thread ids first, the kinds, then the launch calls' activity;
  // where CUPTI cannot, the launch callbacks record launches instead.
  bool from_activity = activity_->UseSystemThreadIds();
  CUPROBE_RETURN_IF_ERROR(activity_->EnableKinds());
  from_activity = from_activity && activity_->EnableLaunchApiActivity();
  if (from_activity) return absl::OkStatus();
  CUPROBE_RETURN_IF_ERROR(AddTracerLaunchHandler());
  return EnableLaunchCallbacks();
}

std::optional<ProbeBundle> Hook::SessionBundle() {
  // Copy out of shared memory first: ReadBundle then validates what it owns.
  absl::Span<const uint8_t> shared = output_->BundleBytes();
  std::vector<uint8_t> bytes(shared.begin(), shared.end());
  absl::StatusOr<ProbeBundle> bundle = ReadBundle(bytes);
  if (!bundle.ok()) {
    CUPROBE_LOG(kWarning, "the session's probe bundle is not usable (%s); tracing without probes",
                bundle.status().message());
    return std::nullopt;
  }
  return *std::move(bundle);
}

void Hook::ListKernelsAtLoad() {
  Tracer* tracer = tracer_;
  CuptiSeam* seam = &seam_;
  images_->SetLoadObserver([tracer, seam, find_ptx = TritonCacheFinder(config_.ptx_search_roots)](
                               const ImageSource& source) {
    ReentrancyGuard guard;  // the driver calls below are ours, not the program's
    absl::StatusOr<uint32_t> sm = seam->CurrentDeviceSm();
    absl::StatusOr<std::vector<CatalogKernel>> kernels =
        CatalogImage(source, sm.ok() ? *sm : 0, find_ptx);
    if (!kernels.ok()) {
      CUPROBE_LOG(kDebug, "list: %s: %s", source.Describe(), kernels.status().message());
      return;
    }
    for (const CatalogKernel& k : *kernels) {
      tracer->OnKernelCataloged(k.name, CatalogBackendCode(k.backend));
    }
  });
}

void Hook::StartProbes() {
  std::optional<ProbeBundle> bundle = SessionBundle();
  if (!bundle.has_value()) return;
  size_t programs = bundle->programs.size();
  Tracer* tracer = tracer_;
  CuptiSeam* seam = &seam_;
  // Ring records go to device memory and are pumped into the segment
  // (maps/map_set.h), by producers that reserve first and pad what does not
  // fit (RingData::kDeviceSpeculative, the default: HookConfig::ring_data).
  device_maps_ = KeptForever(new DeviceMaps(
      bundle->maps, output_->AttachSession(),
      [seam, tracer](CUcontext context, CUstream stream) {
        absl::StatusOr<uint32_t> id = seam->StreamId(context, stream);
        if (id.ok()) tracer->IgnoreStream(*id);
      },
      SeamDriver(seam_), config_.ring_data));
  StartModulePatcher(*std::move(bundle));
  CUPROBE_LOG(kInfo, "probes: %d program(s) from the session's bundle, %d map(s)", programs,
              instrumenter_->bundle().maps.size());
}

void Hook::StartModulePatcher(ProbeBundle bundle) {
  Tracer* tracer = tracer_;
  instrumenter_ = KeptForever(new BundleInstrumenter(
      std::move(bundle), HelpersPtx(), CompileCache(CurrentRewriterSettings().cache_dir),
      TritonCacheFinder(config_.ptx_search_roots),
      [tracer](std::string_view name, uint32_t id) { tracer->OnKernelInstrumented(name, id); }));
  patcher_ = KeptForever(new ModulePatcher(seam_, *instrumenter_, *device_maps_, config_.tmp_dir));
  uint64_t pid_tgid = (uint64_t{config_.pid} << 32) | config_.pid;
  std::vector<uint8_t> value(sizeof(pid_tgid));
  std::memcpy(value.data(), &pid_tgid, sizeof(pid_tgid));
  patcher_->AddModuleGlobal(CUPROBE_PID_TGID_SYMBOL, std::move(value));
}

// --- The switchboard -----------------------------------------------------------

absl::Status Hook::AddHandlers(bool tracer_launches) {
  // The provider-neutral events the hook itself acts on: contexts always,
  // module unloads for late attach (below).
  CUPROBE_RETURN_IF_ERROR(AddCuptiEventSource(board_, *this, {.contexts = true}));
  // Launches. A library that waits for a context's first launch
  // (ModulePatcher::pending_fill) is filled first: from CUPTI's data
  // directly, so that a launch costs one relaxed load while nothing waits
  // (the neutral event would decode every launch's parameters). Then late
  // attach redirects, so that the tracer records what really launches.
  for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
    if (patcher_ != nullptr) {
      CUPROBE_RETURN_IF_ERROR(board_.Add(CUPTI_CB_DOMAIN_DRIVER_API, cbid,
                                         &Call<Hook, CUpti_CallbackData, &Hook::OnLaunchFill>,
                                         this));
    }
  }
  for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
    if (attach_ != nullptr) {
      CUPROBE_RETURN_IF_ERROR(board_.Add(CUPTI_CB_DOMAIN_DRIVER_API, cbid,
                                         &Call<Hook, CUpti_CallbackData, &Hook::OnLaunchRedirect>,
                                         this));
    }
  }
  if (tracer_launches) CUPROBE_RETURN_IF_ERROR(AddTracerLaunchHandler());
  // With a capture range the pre-warm ends when the program's first launch
  // returns (ActivityController::OnLaunchReturned), whoever turned the
  // launch callbacks on.
  if (capture_ != nullptr && !config_.capture_activity_on && !config_.no_prewarm) {
    for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
      CUPROBE_RETURN_IF_ERROR(board_.Add(CUPTI_CB_DOMAIN_DRIVER_API, cbid,
                                         &Call<Hook, CUpti_CallbackData, &Hook::OnLaunchPrewarm>,
                                         this));
    }
  }
  if (capture_ != nullptr) {
    for (CUpti_CallbackId cbid : kProfilerDriverCallbacks) {
      CUPROBE_RETURN_IF_ERROR(board_.Add(CUPTI_CB_DOMAIN_DRIVER_API, cbid,
                                         &Call<Hook, CUpti_CallbackData, &Hook::OnProfilerCall>,
                                         this));
    }
    for (CUpti_CallbackId cbid : kProfilerRuntimeCallbacks) {
      CUPROBE_RETURN_IF_ERROR(board_.Add(CUPTI_CB_DOMAIN_RUNTIME_API, cbid,
                                         &Call<Hook, CUpti_CallbackData, &Hook::OnProfilerCall>,
                                         this));
    }
  }
  if (patcher_ != nullptr || images_ != nullptr) {
    Switchboard::Handler module = patcher_ != nullptr
                                      ? &Call<Hook, CUpti_CallbackData, &Hook::OnModulePatch>
                                      : &Call<Hook, CUpti_CallbackData, &Hook::OnModuleRecord>;
    for (CUpti_CallbackId cbid : ModulePatcher::kCallbacks) {
      CUPROBE_RETURN_IF_ERROR(board_.Add(CUPTI_CB_DOMAIN_DRIVER_API, cbid, module, this));
    }
    if (attach_ != nullptr) {
      CUPROBE_RETURN_IF_ERROR(AddCuptiEventSource(board_, *this, {.modules = true}));
    }
  }
  return board_.Add(CUPTI_CB_DOMAIN_STATE, CUPTI_CBID_STATE_FATAL_ERROR,
                    &Call<Hook, CUpti_StateData, &Hook::OnFatalError>, this);
}

absl::Status Hook::AddTracerLaunchHandler() {
  if (!config_.trace_launches) return absl::OkStatus();
  for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
    CUPROBE_RETURN_IF_ERROR(board_.Add(CUPTI_CB_DOMAIN_DRIVER_API, cbid,
                                       TracerLaunchHandler(config_.tracer_diag), tracer_));
  }
  return absl::OkStatus();
}

absl::Status Hook::EnableCallbacks() {
  // Only the callback ids with a handler: enabling the whole driver domain
  // costs about 5 us per launch (DESIGN.md).
  bool profiler = false;
  for (const auto& [domain, cbid] : board_.Keys()) {
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API && Tracer::IsLaunchCallback(cbid)) continue;
    if (IsProfilerCall(domain, cbid)) {
      profiler = true;
      continue;
    }
    absl::Status s = seam_.EnableCallback(true, domain, cbid);
    // Best effort: older CUPTI builds may not have the state domain.
    if (!s.ok() && domain != CUPTI_CB_DOMAIN_STATE) return s;
  }
  // Launch records from API activity need no launch callback; late attach
  // then enables them when an attach request arrives (Tick).
  if ((config_.trace_launches || attach_ != nullptr) && !activity_->WantsLaunchApiActivity()) {
    CUPROBE_RETURN_IF_ERROR(EnableLaunchCallbacks());
  }
  if (!profiler) return absl::OkStatus();
  // Both APIs' profiler calls: the runtime's may reach the driver's without
  // a callback of its own, and a program may call either. When both fire
  // (one inside the other), the second is a no-op (CaptureRanges). Without
  // them the whole run is traced, rather than none of it.
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
    activity_->DropCaptureRanges();
    capture_ = nullptr;
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

void CUPTIAPI Hook::Callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                             const void* cbdata) {
  static_cast<Hook*>(userdata)->OnCallback(domain, cbid, cbdata);
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
  board_.Dispatch(domain, cbid, cbdata);
}

// --- Handlers --------------------------------------------------------------------

void Hook::OnLaunchFill(CUpti_CallbackId, const CUpti_CallbackData* data) {
  if (data != nullptr && data->callbackSite == CUPTI_API_ENTER && patcher_->pending_fill()) {
    OnLaunch(LaunchEvent{.site = CallSite::kBegin, .context = data->context});
  }
}

void Hook::OnLaunchRedirect(CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  // EXIT: counted in OnCallback, whatever the state.
  if (data != nullptr && data->callbackSite == CUPTI_API_ENTER) attach_->OnLaunch(cbid, data);
}

void Hook::OnLaunchPrewarm(CUpti_CallbackId, const CUpti_CallbackData* data) {
  if (data != nullptr && data->callbackSite == CUPTI_API_EXIT && activity_->prewarm_pending()) {
    activity_->OnLaunchReturned();
  }
}

void Hook::OnProfilerCall(CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  // At ENTER: a start's range holds the calls after it; a stop's ends
  // before it. Both sites carry the same correlation id.
  if (data == nullptr || data->callbackSite != CUPTI_API_ENTER) return;
  const bool start = cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStart ||
                     cbid == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000;
  activity_->OnProfilerCall(start, data->correlationId,
                            data->functionName != nullptr ? data->functionName : "?");
}

void Hook::OnModulePatch(CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  patcher_->OnModuleApi(cbid, data);
}

void Hook::OnModuleRecord(CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  images_->OnModuleApi(cbid, data);
}

void Hook::OnFatalError(CUpti_CallbackId, const CUpti_StateData* state) {
  const char* message = state != nullptr ? state->notification.message : nullptr;
  DisableWith(absl::StrCat("CUPTI reported a fatal error",
                           message != nullptr ? absl::StrCat(": ", message) : ""));
}

void Hook::OnContextCreated(CUcontext context) {
  contexts_alive_.fetch_add(1, std::memory_order_relaxed);
  if (activity_ != nullptr) activity_->OnContextCreated();
  // Allocate the probes' maps now, before the application can be in the
  // middle of a stream capture when its first module loads.
  if (device_maps_ != nullptr) device_maps_->Prepare(context);
  if (patcher_ != nullptr) {
    // With the new context current; should it not become current, the
    // patcher remembers it and fills it at its first launch.
    auto created = [this, context] { patcher_->OnContextCreated(context); };
    if (!seam_.InContext(context, created).ok()) created();
  }
}

void Hook::OnContextDestroying(CUcontext context) {
  contexts_alive_.fetch_sub(1, std::memory_order_relaxed);
  // The context is forgotten first (no library is filled in it any more);
  // then the probes' maps move to another context that uses them, or, when
  // it was the last, their last snapshot is taken and their memory freed
  // while the context still exists.
  if (patcher_ != nullptr) patcher_->OnContextDestroying(context);
  if (kernel_patcher_ != nullptr) kernel_patcher_->OnContextDestroying(context);
  if (device_maps_ != nullptr) device_maps_->OnContextDestroying(context);
  if (attach_ != nullptr) attach_->OnContextDestroying(context);
  // Publish what the context produced while it still exists.
  if (watcher_ != nullptr) watcher_->Poke();
}

void Hook::OnModuleUnloaded(const ModuleEvent& module) {
  if (attach_ != nullptr) attach_->OnModuleUnloaded(module.handle);
}

void Hook::OnLaunch(const LaunchEvent& launch) {
  // A library loaded with no context current whose fill could not reach
  // this context yet: before the kernel runs.
  if (launch.site == CallSite::kBegin && patcher_->pending_fill()) {
    patcher_->OnLaunch(launch.context);
  }
}

// --- The watcher -------------------------------------------------------------------

void Hook::Tick() {
  // Runs on the watcher thread, which Stop() joins before releasing anything.
  output_->PublishStats(tracer_->stats(), Now());
  if (!lifecycle_.IsReady()) return;
  if (device_maps_ != nullptr) {
    absl::Status s = device_maps_->Publish(absl::GetCurrentTimeNanos());
    if (!s.ok() && !maps_publish_warned_) {
      maps_publish_warned_ = true;
      CUPROBE_LOG(kWarning, "cannot publish the probes' maps: %s", s.message());
    }
  }
  if (patcher_ != nullptr && patcher_->pending_fill() && !launch_callbacks_on_.load() &&
      !on_sanitizer_) {
    // A library waits for a context's first launch to get its maps there
    // (ModulePatcher::OnLaunch): the launch callbacks must be on. (On the
    // Sanitizer, --backend auto, its launch-call callbacks are on from the
    // start.)
    absl::Status s = EnableLaunchCallbacks();
    if (!s.ok()) CUPROBE_LOG(kWarning, "cannot enable launch callbacks: %s", s.message());
  }
  if (attach_ != nullptr) {
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
  if (activity_ != nullptr && activity_->enabled()) {
    activity_->EndLingering();  // in case a wake was missed
    // Hands completed buffers to BufferCompleted so readers see kernels while
    // the program runs.
    activity_->Flush(/*forced=*/false);
  }
}

void Hook::PumpTick() {
  if (!lifecycle_.IsReady()) return;
  absl::Status s = device_maps_->PumpRings();
  if (!s.ok() && !ring_pump_warned_) {
    ring_pump_warned_ = true;
    CUPROBE_LOG(kWarning, "cannot move ring buffer records to the session: %s", s.message());
  }
}

// --- Stop -----------------------------------------------------------------------------

void Hook::Stop() {
  // In a child of fork() the hook belongs to the parent (Start).
  if (forked_child_.load(std::memory_order_acquire)) return;
  if (!lifecycle_.TryBeginStop()) return;
  // From here on every callback falls through (state STOPPING).
  ReentrancyGuard guard;
  StopWork();
  if (subscribed_) {
    absl::Status s = seam_.Unsubscribe();
    if (!s.ok()) CUPROBE_LOG(kDebug, "teardown: %s", s.ToString());
    subscribed_ = false;
  }
  if (sanitizer_subscribed_) {
    absl::Status s = sanitizer_->Unsubscribe();
    if (!s.ok()) CUPROBE_LOG(kDebug, "teardown: %s", s.ToString());
    sanitizer_subscribed_ = false;
  }
  ReleaseOutput();
  lifecycle_.FinishStop();
}

void Hook::StopWork() {
  if (watcher_ != nullptr) watcher_->Stop();  // joined: no tick runs any more
  // Joined too; the maps' last publish (Release, below) pumps what is left.
  if (ring_pump_ != nullptr) ring_pump_->Stop();
  if (activity_ != nullptr) activity_->Flush(/*forced=*/true);
  if (output_ != nullptr && tracer_ != nullptr) {
    output_->PublishStats(tracer_->stats(), Now());
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
  if (activity_ != nullptr && activity_->enabled()) {
    // Off for good, and what completed since the first flush (the kernels
    // late attach waited for above, launches still on their way) reaches
    // the sink while it is open.
    activity_->Finish();
    if (output_ != nullptr && tracer_ != nullptr) {
      output_->PublishStats(tracer_->stats(), seam_.Timestamp());
    }
  }
}

void Hook::ReleaseOutput() {
  // No tracer thread may be inside the output once the gate is closed. If one
  // is stuck there, leak the output rather than unmap under it.
  bool quiet = tracer_ == nullptr || tracer_->CloseSink();
  if (output_ == nullptr) return;
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

// --- CUPTI's activity buffers -------------------------------------------------------

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

}  // namespace cuprobe
