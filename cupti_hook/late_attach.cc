#include "cupti_hook/late_attach.h"

#include <dlfcn.h>
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuprobe/abi.h"
#include "cupti_hook/init_state.h"
#include "cupti_hook/probe_runtime.h"
#include "cupti_hook/tracer.h"
#include "maps/gpu/helpers_ptx.h"
#include "ptx_rewriter/bundle.h"
#include "ptx_rewriter/compile_cache.h"
#include "ptx_rewriter/image.h"
#include "support/log.h"

namespace cuprobe {

// ---- ImageRegistry ----------------------------------------------------------

struct ImageRegistry::Kept {
  ImageSource source;          // points into `copy` when the image was copied
  std::vector<uint8_t> copy;
  uint64_t counted = 0;        // bytes counted in copied_bytes_
};

namespace {

// True when `p` lies in a loaded ELF object (the executable or a shared
// library): the CUDA runtime's fatbins live there for as long as their
// modules are loaded, so a pointer is enough.
bool InLoadedObject(const void* p) {
  Dl_info info = {};
  return ::dladdr(p, &info) != 0 && info.dli_fname != nullptr;
}

}  // namespace

void ImageRegistry::OnModuleApi(CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  if (data == nullptr || data->functionParams == nullptr) return;
  void* params = const_cast<void*>(data->functionParams);
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload ||
      cbid == CUPTI_DRIVER_TRACE_CBID_cuModuleUnload) {
    if (data->callbackSite != CUPTI_API_EXIT) return;
    const void* handle =
        cbid == CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload
            ? static_cast<const void*>(static_cast<cuLibraryUnload_params*>(params)->library)
            : static_cast<const void*>(static_cast<cuModuleUnload_params*>(params)->hmod);
    std::shared_ptr<Kept> gone;  // freed after the lock
    absl::MutexLock lock(&mu_);
    auto it = by_handle_.find(handle);
    if (it != by_handle_.end()) {
      gone = std::move(it->second);
      by_handle_.erase(it);
      copied_bytes_.fetch_sub(gone->counted, std::memory_order_relaxed);
    }
    return;
  }
  if (data->callbackSite == CUPTI_API_ENTER) {
    if (data->correlationData == nullptr) return;
    *data->correlationData = 0;
    const void** live = LiveImageParam(cbid, params);
    const char** file = FileParam(cbid, params);
    auto kept = std::make_unique<Kept>();
    if (file != nullptr && *file != nullptr) {
      kept->source.path = *file;
    } else if (live != nullptr && *live != nullptr) {
      if (InLoadedObject(*live)) {
        kept->source.live = *live;
      } else {
        // A buffer of the program's (Triton's cubins, NVRTC's PTX): it may be
        // freed once the load returns, so keep a copy of what the driver reads.
        absl::StatusOr<Image> image = ReadImageAt(*live);
        if (!image.ok()) return;  // nothing we could instrument later either
        const uint64_t n = image->bytes.size();
        if (copied_bytes_.load(std::memory_order_relaxed) + n > kMaxCopiedBytes) return;
        kept->copy.assign(image->bytes.begin(), image->bytes.end());
        if (image->format == ImageFormat::kPtx) kept->copy.push_back(0);
        kept->source.live = kept->copy.data();
        kept->counted = n;
        copied_bytes_.fetch_add(n, std::memory_order_relaxed);
      }
    } else {
      return;
    }
    *data->correlationData = reinterpret_cast<uint64_t>(kept.release());
    return;
  }
  if (data->correlationData == nullptr || *data->correlationData == 0) return;
  std::shared_ptr<Kept> kept(reinterpret_cast<Kept*>(*data->correlationData));
  *data->correlationData = 0;
  const bool ok = data->functionReturnValue != nullptr &&
                  *static_cast<const CUresult*>(data->functionReturnValue) == CUDA_SUCCESS;
  void* handle = LoadedHandle(cbid, params);
  if (!ok || handle == nullptr) {
    copied_bytes_.fetch_sub(kept->counted, std::memory_order_relaxed);
    return;
  }
  absl::MutexLock lock(&mu_);
  by_handle_[handle] = std::move(kept);
}

std::shared_ptr<const ImageSource> ImageRegistry::Find(const void* handle) const {
  absl::MutexLock lock(&mu_);
  auto it = by_handle_.find(handle);
  if (it == by_handle_.end()) return nullptr;
  // Aliasing constructor: the source lives as long as its Kept.
  return std::shared_ptr<const ImageSource>(it->second, &it->second->source);
}

size_t ImageRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return by_handle_.size();
}

// ---- LaunchRedirector -------------------------------------------------------

namespace {

// Where a launch API keeps its function; nullptr for graph launches.
CUfunction* LaunchFunctionParam(CUpti_CallbackId cbid, void* params) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
      return &static_cast<cuLaunchKernel_params*>(params)->f;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
      return &static_cast<cuLaunchKernel_ptsz_params*>(params)->f;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
      return &static_cast<cuLaunchKernelEx_params*>(params)->f;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
      return &static_cast<cuLaunchKernelEx_ptsz_params*>(params)->f;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
      return &static_cast<cuLaunchCooperativeKernel_params*>(params)->f;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      return &static_cast<cuLaunchCooperativeKernel_ptsz_params*>(params)->f;
    default:
      return nullptr;
  }
}

}  // namespace

LaunchRedirector::LaunchRedirector(CuptiSeam& seam, const ImageRegistry& images,
                                   ImageInstrumenter& instrumenter, MapTableProvider& maps,
                                   ModuleGlobals globals)
    : seam_(seam),
      images_(images),
      instrumenter_(instrumenter),
      maps_(maps),
      globals_(std::move(globals)) {}

bool LaunchRedirector::Redirect(CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  if (data == nullptr || data->functionParams == nullptr) return false;
  // As for module loads (module_patcher.cc): the parameters are the driver's
  // own copy, and the driver launches what `f` holds after ENTER (DESIGN.md).
  CUfunction* f = LaunchFunctionParam(cbid, const_cast<void*>(data->functionParams));
  if (f == nullptr || *f == nullptr) return false;
  CUfunction twin = nullptr;
  {
    absl::MutexLock lock(&mu_);
    twin = Resolve(data->context, *f);
    if (twin != nullptr) contexts_.insert(data->context);
  }
  if (twin == nullptr) return false;
  *f = twin;
  launches_redirected_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

CUfunction LaunchRedirector::Resolve(CUcontext context, CUfunction function) {
  auto known = targets_.find({context, function});
  if (known != targets_.end()) return known->second;
  CUfunction& target = targets_[{context, function}];
  target = nullptr;

  absl::StatusOr<FunctionOwner> owner = seam_.LaunchOwner(function);
  if (!owner.ok()) {
    ++kernels_left_alone_;
    CUPROBE_LOG(kDebug, "late attach: a launch handle cannot be named (%s)",
                owner.status().message());
    return nullptr;
  }
  auto twin_it = twins_.find({context, owner->handle});
  if (twin_it == twins_.end()) {
    twin_it = twins_.emplace(std::make_pair(context, static_cast<const void*>(owner->handle)),
                             MakeTwin(*owner))
                  .first;
  }
  Twin& twin = twin_it->second;
  if (!twin.status.ok() || twin.kernels.count(owner->name) == 0) {
    ++kernels_left_alone_;
    return nullptr;
  }
  absl::StatusOr<CUfunction> fn = seam_.ModuleFunction(twin.module, owner->name.c_str());
  if (!fn.ok()) {
    ++kernels_left_alone_;
    CUPROBE_LOG(kWarning, "late attach: %s stays uninstrumented: %s", owner->name,
                fn.status().message());
    return nullptr;
  }
  ++kernels_redirected_;
  target = *fn;
  return target;
}

LaunchRedirector::Twin LaunchRedirector::MakeTwin(const FunctionOwner& owner) {
  Twin twin;
  std::shared_ptr<const ImageSource> source = images_.Find(owner.handle);
  if (source == nullptr) {
    twin.status = absl::NotFoundError("its module's image was not kept");
    // One message per reason, naming the first kernel it hits.
    if (reported_.insert("no image").second) {
      CUPROBE_LOG(kWarning, "late attach: %s cannot be instrumented: its module was loaded "
                  "before cuprobe kept images, or its image was too large to copy; later "
                  "messages of this kind are not shown", owner.name);
    }
    return twin;
  }
  absl::StatusOr<uint32_t> sm = seam_.CurrentDeviceSm();
  if (!sm.ok()) {
    twin.status = sm.status();
    return twin;
  }
  if (absl::Status usable = maps_.UsableInCurrentContext(); !usable.ok()) {
    twin.status = usable;
    if (reported_.insert("context").second) {
      CUPROBE_LOG(kWarning, "late attach: %s stays uninstrumented: %s", owner.name,
                  usable.message());
    }
    return twin;
  }
  absl::StatusOr<std::optional<InstrumentedImage>> image = instrumenter_.Instrument(*source, *sm);
  if (!image.ok()) {
    twin.status = image.status();
    CUPROBE_LOG(kWarning, "late attach: %s not instrumented: %s", source->Describe(),
                image.status().message());
    return twin;
  }
  if (!image->has_value() || (*image)->kernels.empty() || (*image)->cubin.empty()) {
    twin.status = absl::NotFoundError("no probe selects its kernels");
    if (image->has_value() && !(*image)->not_instrumented.empty()) {
      CUPROBE_LOG(kWarning, "late attach: %s: %d kernel(s) selected by probes have no PTX and "
                  "are left alone: %s", source->Describe(), (*image)->not_instrumented.size(),
                  absl::StrJoin((*image)->not_instrumented, ", "));
    }
    return twin;
  }
  // The twin must not become part of a graph the program is capturing.
  absl::StatusOr<int> previous_mode =
      seam_.ExchangeCaptureMode(static_cast<int>(CU_STREAM_CAPTURE_MODE_RELAXED));
  absl::StatusOr<CUmodule> module = seam_.LoadModuleData((*image)->cubin.data());
  if (module.ok()) {
    FillInstrumentedModule(seam_, maps_, /*is_library=*/false, *module, **image, globals_,
                           absl::StrCat("the instrumented twin of ", source->Describe()));
  }
  if (previous_mode.ok()) (void)seam_.ExchangeCaptureMode(*previous_mode);
  if (!module.ok()) {
    twin.status = module.status();
    CUPROBE_LOG(kWarning, "late attach: the driver did not load the instrumented %s: %s",
                source->Describe(), module.status().message());
    return twin;
  }
  twin.module = *module;
  std::vector<std::string> names;
  for (const auto& [name, id] : (*image)->kernels) {
    twin.kernels.insert(name);
    names.push_back(name);
  }
  CUPROBE_LOG(kInfo, "late attach: launches of %d kernel(s) of %s now run instrumented: %s",
              names.size(), source->Describe(), absl::StrJoin(names, ", "));
  return twin;
}

std::vector<CUcontext> LaunchRedirector::contexts() const {
  absl::MutexLock lock(&mu_);
  return std::vector<CUcontext>(contexts_.begin(), contexts_.end());
}

RedirectStats LaunchRedirector::stats() const {
  RedirectStats s;
  s.launches_redirected = launches_redirected_.load(std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  s.kernels_redirected = kernels_redirected_;
  s.kernels_left_alone = kernels_left_alone_;
  return s;
}

// ---- LateAttach -------------------------------------------------------------

struct LateAttach::Attached {
  explicit Attached(Session s) : session(std::move(s)) {}
  Session session;  // the attacher's own session: bundle, maps, our status
  std::unique_ptr<BundleInstrumenter> instrumenter;
  std::unique_ptr<DeviceMaps> maps;
  std::unique_ptr<LaunchRedirector> redirector;
  uint32_t attacher_pid = 0;
};

namespace {

thread_local bool tls_redirected = false;  // this launch's ENTER redirected it

bool ProcessAlive(uint32_t pid) {
  return pid != 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

LateAttach::LateAttach(CuptiSeam& seam, const ImageRegistry& images, Session& session,
                       Tracer& tracer, uint32_t pid)
    : seam_(seam), images_(images), session_(session), tracer_(tracer), pid_(pid) {
  // Requests made before the program started are acted on too: the first
  // poll sees any serial above 0.
}

LateAttach::~LateAttach() = default;

void LateAttach::OnLaunch(CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  if (data == nullptr) return;
  if (data->callbackSite == CUPTI_API_EXIT) {
    if (tls_redirected) {
      tls_redirected = false;
      in_flight_.fetch_sub(1, std::memory_order_seq_cst);
    }
    return;
  }
  if (current_.load(std::memory_order_acquire) == nullptr) return;  // nothing attached
  in_flight_.fetch_add(1, std::memory_order_seq_cst);
  Attached* attached = current_.load(std::memory_order_seq_cst);
  if (attached != nullptr && attached->redirector->Redirect(cbid, data)) {
    tls_redirected = true;  // counted until EXIT: the kernel is enqueued by then
    return;
  }
  in_flight_.fetch_sub(1, std::memory_order_seq_cst);
}

void LateAttach::Poll(uint64_t now_ns) {
  if (attached_ != nullptr) {
    absl::Status s = attached_->maps->Publish(now_ns);
    if (!s.ok()) CUPROBE_LOG(kDebug, "late attach: publishing maps: %s", s.message());
    if (!ProcessAlive(attached_->attacher_pid)) {
      Detach("the attaching cuprobe exited", now_ns);
    }
  }
  absl::StatusOr<Session::AttachRequest> request = session_.ReadAttachRequest();
  if (!request.ok()) {
    const uint64_t serial = session_.header().attach_request.load(std::memory_order_acquire);
    if (serial != last_request_) {
      last_request_ = serial;
      CUPROBE_LOG(kWarning, "late attach: ignoring a bad attach request: %s",
                  request.status().message());
    }
    return;
  }
  if (request->serial == last_request_) return;
  last_request_ = request->serial;
  if (attached_ != nullptr) Detach("the attacher asked", now_ns);
  if (!request->name.empty()) Attach(request->name, now_ns);
}

void LateAttach::Attach(const std::string& name, uint64_t now_ns) {
  absl::StatusOr<Session> session = Session::Open(name, /*writable=*/true);
  if (!session.ok()) {
    CUPROBE_LOG(kWarning, "late attach: cannot open the attaching session: %s",
                session.status().message());
    return;
  }
  auto refuse = [&](const std::string& why) {
    CUPROBE_LOG(kWarning, "late attach refused: %s", why);
    (void)session->SetHookStatus(static_cast<uint32_t>(HookState::kDisabled),
                                 SessionState::kHookDisabled, why);
  };
  absl::Span<const uint8_t> shared = session->bundle_bytes();
  std::vector<uint8_t> bytes(shared.begin(), shared.end());
  absl::StatusOr<ProbeBundle> bundle = ReadBundle(bytes);
  if (!bundle.ok()) {
    refuse(absl::StrCat("its probe bundle is not usable (", bundle.status().message(), ")"));
    return;
  }
  const uint32_t attacher_pid = session->header().creator_pid;
  auto attached = std::make_unique<Attached>(*std::move(session));
  attached->attacher_pid = attacher_pid;
  std::vector<MapSpec> specs = bundle->maps;
  Tracer* tracer = &tracer_;
  attached->instrumenter = std::make_unique<BundleInstrumenter>(
      *std::move(bundle), HelpersPtx(), CompileCache::FromEnvironment(),
      [tracer](std::string_view kernel, uint32_t id) { tracer->OnKernelInstrumented(kernel, id); });
  CuptiSeam* seam = &seam_;
  attached->maps = std::make_unique<DeviceMaps>(
      std::move(specs), &attached->session.maps(), [seam, tracer](CUcontext c, CUstream s) {
        absl::StatusOr<uint32_t> id = seam->StreamId(c, s);
        if (id.ok()) tracer->IgnoreStream(*id);
      });
  uint64_t pid_tgid = (uint64_t{pid_} << 32) | pid_;
  std::vector<uint8_t> value(sizeof(pid_tgid));
  std::memcpy(value.data(), &pid_tgid, sizeof(pid_tgid));
  ModuleGlobals globals;
  globals.emplace_back(CUPROBE_PID_TGID_SYMBOL, std::move(value));
  attached->redirector = std::make_unique<LaunchRedirector>(
      seam_, images_, *attached->instrumenter, *attached->maps, std::move(globals));
  (void)attached->session.SetHookStatus(static_cast<uint32_t>(HookState::kReady),
                                        SessionState::kHookReady, "");
  attached->session.header().hook_pid.store(pid_, std::memory_order_release);
  attached->session.header().heartbeat_ns.store(now_ns, std::memory_order_release);
  CUPROBE_LOG(kInfo, "late attach: probes of session %s attached (%d program(s), %d map(s)); "
              "kernels are instrumented at their next launch",
              attached->session.name(), attached->instrumenter->bundle().programs.size(),
              attached->instrumenter->bundle().maps.size());
  attached_ = std::move(attached);
  current_.store(attached_.get(), std::memory_order_seq_cst);
}

void LateAttach::Detach(const char* why, uint64_t now_ns) {
  if (attached_ == nullptr) return;
  current_.store(nullptr, std::memory_order_seq_cst);
  // Launches that saw the probes are either still in their ENTER (they may
  // redirect) or between ENTER and EXIT: wait until they have all been
  // submitted, then until their kernels finished, before freeing the maps
  // those kernels write.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kDrainTimeoutMs);
  while (in_flight_.load(std::memory_order_seq_cst) > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const bool drained = in_flight_.load(std::memory_order_seq_cst) <= 0;
  bool finished = drained;
  for (CUcontext context : attached_->redirector->contexts()) {
    absl::Status s = seam_.ContextSynchronize(context);
    if (!s.ok()) {
      finished = false;
      CUPROBE_LOG(kWarning, "late attach: waiting for the instrumented kernels: %s", s.message());
    }
  }
  const RedirectStats stats = attached_->redirector->stats();
  if (finished) {
    absl::Status s = attached_->maps->Release(now_ns);
    if (!s.ok()) CUPROBE_LOG(kWarning, "late attach: releasing the maps: %s", s.message());
  } else {
    // A kernel may still write them: publish, and keep the memory.
    (void)attached_->maps->Publish(now_ns);
    CUPROBE_LOG(kWarning, "late attach: instrumented launches did not drain; keeping their maps");
  }
  (void)attached_->session.SetHookStatus(static_cast<uint32_t>(HookState::kStopped),
                                         SessionState::kHookStopped, "");
  CUPROBE_LOG(kInfo, "late attach: detached (%s): %d launch(es) of %d kernel(s) ran instrumented",
              why, stats.launches_redirected, stats.kernels_redirected);
  if (finished) {
    attached_.reset();  // unmaps the attacher's session
  } else {
    // Leaked: its rings (host memory the GPU may still write) stay mapped.
    (void)attached_.release();
  }
}

void LateAttach::Stop(uint64_t now_ns) { Detach("the program is exiting", now_ns); }

std::optional<RedirectStats> LateAttach::stats() const {
  if (attached_ == nullptr) return std::nullopt;
  return attached_->redirector->stats();
}

}  // namespace cuprobe
