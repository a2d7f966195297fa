#include "cupti_hook/late_attach.h"

#include <signal.h>

#include <algorithm>
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
#include "probe/bundle.h"
#include "probe/trace_records.h"
#include "ptx_rewriter/compile_cache.h"
#include "ptx_rewriter/settings.h"
#include "ptx_rewriter/image.h"
#include "ptx_rewriter/image_pipeline.h"
#include "support/kept_forever.h"
#include "support/log.h"

namespace cuprobe {

// ---- ImageRegistry ----------------------------------------------------------

struct ImageRegistry::Kept {
  ImageSource source;          // points into `copy` when the image was copied
  std::vector<uint8_t> copy;
  uint64_t counted = 0;        // bytes counted in copied_bytes_
};

namespace {

// The CUDA runtime hands cuLibraryLoadData the fatbin wrapper it registered
// (__cudaRegisterFatBinary): both live in the program's executable or
// shared library (.nvFatBinSegment, .nv_fatbin) for as long as the module
// is loaded, so the fatbin the wrapper points to is kept by pointer.
// Anything else (Triton's cubins, NVRTC's PTX, cuModuleLoadData of a
// buffer) may be freed once the load returns and is copied. No loader call
// (dladdr) is made here: it would take glibc's loader lock inside a CUDA
// callback.
const void* StaticFatbin(const void* image) {
  // The magic byte by byte first: the image may be a short PTX string, and
  // none of the magic's bytes is the NUL that ends one.
  const auto* bytes = static_cast<const uint8_t*>(image);
  for (int i = 0; i < 4; ++i) {
    if (bytes[i] != static_cast<uint8_t>(kFatbinWrapperMagic >> (8 * i))) return nullptr;
  }
  FatbinWrapper w;
  std::memcpy(&w, image, sizeof(w));
  return w.data;
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
      if (const void* fatbin = StaticFatbin(*live); fatbin != nullptr) {
        kept->source.live = fatbin;
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
  std::shared_ptr<Kept> kept;
  if (data->correlationData != nullptr && *data->correlationData != 0) {
    kept.reset(reinterpret_cast<Kept*>(*data->correlationData));
    *data->correlationData = 0;
  }
  const bool ok = data->functionReturnValue != nullptr &&
                  *static_cast<const CUresult*>(data->functionReturnValue) == CUDA_SUCCESS;
  void* handle = ok ? LoadedHandle(cbid, params) : nullptr;
  if (handle == nullptr) {
    if (kept != nullptr) copied_bytes_.fetch_sub(kept->counted, std::memory_order_relaxed);
    return;
  }
  std::shared_ptr<Kept> stale;  // a handle the driver reused: freed after the lock
  {
    absl::MutexLock lock(&mu_);
    auto it = by_handle_.find(handle);
    if (it != by_handle_.end()) {
      stale = std::move(it->second);
      copied_bytes_.fetch_sub(stale->counted, std::memory_order_relaxed);
      by_handle_.erase(it);
    }
    // An image that was not kept leaves no entry: the handle's old image
    // (a module unloaded without our seeing it) must not stand in for it.
    if (kept != nullptr) by_handle_[handle] = kept;
  }
  if (kept != nullptr && observer_) observer_(kept->source);
}

std::shared_ptr<const ImageSource> ImageRegistry::Find(const void* handle) const {
  absl::MutexLock lock(&mu_);
  auto it = by_handle_.find(handle);
  if (it == by_handle_.end()) return nullptr;
  // Aliasing constructor: the source lives as long as its Kept.
  return std::shared_ptr<const ImageSource>(it->second, &it->second->source);
}

std::vector<std::shared_ptr<const ImageSource>> ImageRegistry::Sources() const {
  std::vector<std::shared_ptr<const ImageSource>> out;
  absl::MutexLock lock(&mu_);
  out.reserve(by_handle_.size());
  for (const auto& [handle, kept] : by_handle_) {
    out.emplace_back(kept, &kept->source);
  }
  return out;
}

size_t ImageRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return by_handle_.size();
}

// ---- LaunchRedirector -------------------------------------------------------

LaunchRedirector::LaunchRedirector(CuptiSeam& seam, const ImageRegistry& images,
                                   ImageInstrumenter& instrumenter, MapTableProvider& maps,
                                   ModuleGlobals globals)
    : seam_(seam),
      images_(images),
      instrumenter_(instrumenter),
      maps_(maps),
      globals_(std::move(globals)) {}

namespace {

template <typename P>
void ClassicShape(P* p, CUfunction** f, CUstream* stream, uint64_t* threads, uint64_t* shared) {
  *f = &p->f;
  *stream = p->hStream;
  *threads = uint64_t{p->blockDimX} * p->blockDimY * p->blockDimZ;
  *shared = p->sharedMemBytes;
}

template <typename P>
void ExShape(P* p, CUfunction** f, CUstream* stream, uint64_t* threads, uint64_t* shared) {
  *f = &p->f;
  if (p->config == nullptr) return;
  *stream = p->config->hStream;
  *threads = uint64_t{p->config->blockDimX} * p->config->blockDimY * p->config->blockDimZ;
  *shared = p->config->sharedMemBytes;
}

}  // namespace

bool LaunchRedirector::ReadShape(CUpti_CallbackId cbid, const void* params, Shape* s) {
  // As for module loads (module_patcher.cc): the parameters are the driver's
  // own copy, and the driver launches what `f` holds after ENTER (DESIGN.md).
  void* p = const_cast<void*>(params);
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
      ClassicShape(static_cast<cuLaunchKernel_params*>(p), &s->function, &s->stream, &s->threads,
                   &s->dynamic_shared);
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
      ClassicShape(static_cast<cuLaunchKernel_ptsz_params*>(p), &s->function, &s->stream,
                   &s->threads, &s->dynamic_shared);
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
      ClassicShape(static_cast<cuLaunchCooperativeKernel_params*>(p), &s->function, &s->stream,
                   &s->threads, &s->dynamic_shared);
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      ClassicShape(static_cast<cuLaunchCooperativeKernel_ptsz_params*>(p), &s->function,
                   &s->stream, &s->threads, &s->dynamic_shared);
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
      ExShape(static_cast<cuLaunchKernelEx_params*>(p), &s->function, &s->stream, &s->threads,
              &s->dynamic_shared);
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
      ExShape(static_cast<cuLaunchKernelEx_ptsz_params*>(p), &s->function, &s->stream,
              &s->threads, &s->dynamic_shared);
      return true;
    default:
      return false;
  }
}

bool LaunchRedirector::Redirect(CUpti_CallbackId cbid, const CUpti_CallbackData* data,
                                CUstream* stream) {
  if (data == nullptr || data->functionParams == nullptr) return false;
  Shape shape;
  if (!ReadShape(cbid, data->functionParams, &shape) || shape.function == nullptr ||
      *shape.function == nullptr) {
    return false;
  }
  std::optional<Target> target = Resolve(data->context, *shape.function);
  if (!target.has_value() || target->twin == nullptr) return false;
  if (shape.threads > static_cast<uint64_t>(target->max_threads) ||
      shape.dynamic_shared > static_cast<uint64_t>(target->max_dynamic_shared)) {
    return false;  // the twin cannot take this launch (more registers, less shared memory)
  }
  // A launch into a capture would put the twin into the program's graph,
  // which outlives a detach: leave captures alone.
  absl::StatusOr<bool> capturing = seam_.StreamCapturing(shape.stream);
  if (!capturing.ok() || *capturing) return false;
  *shape.function = target->twin;
  if (stream != nullptr) *stream = shape.stream;
  launches_redirected_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::optional<LaunchRedirector::Target> LaunchRedirector::Resolve(CUcontext context,
                                                                  CUfunction function) {
  {
    absl::MutexLock lock(&mu_);
    auto known = targets_.find({context, function});
    if (known != targets_.end()) return known->second;
  }
  absl::StatusOr<FunctionOwner> owner = seam_.LaunchOwner(function);
  if (!owner.ok()) {
    absl::MutexLock lock(&mu_);
    ++kernels_left_alone_;
    targets_[{context, function}] = Target{};
    return Target{};
  }
  const std::pair<CUcontext, const void*> key(context, owner->handle);
  bool build = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = twins_.find(key);
    if (it == twins_.end()) {
      twins_.emplace(key, Twin{});  // building
      build = true;
    } else if (it->second.building) {
      return std::nullopt;  // another thread makes it; this launch runs the original
    }
  }
  if (build) {
    Twin made = MakeTwin(*owner);  // compile, load, fill: no lock held
    made.building = false;
    absl::MutexLock lock(&mu_);
    auto it = twins_.find(key);
    if (it == twins_.end()) {
      // Forgotten meanwhile (the owner was unloaded or its context destroyed).
      if (made.module != nullptr) forgotten_modules_.push_back(made.module);
      return std::nullopt;
    }
    it->second = std::move(made);
  }
  Twin twin;
  {
    absl::MutexLock lock(&mu_);
    auto it = twins_.find(key);
    if (it == twins_.end() || it->second.building) return std::nullopt;
    twin.status = it->second.status;
    twin.module = it->second.module;
    twin.building = false;
    if (it->second.kernels.count(owner->name) != 0) twin.kernels.insert(owner->name);
  }
  Target target = MakeTarget(twin, *owner, function);  // driver calls, no lock
  absl::MutexLock lock(&mu_);
  if (twins_.find(key) == twins_.end()) return std::nullopt;
  auto [it, inserted] = targets_.emplace(std::make_pair(context, function), target);
  if (inserted) ++(target.twin != nullptr ? kernels_redirected_ : kernels_left_alone_);
  return it->second;
}

LaunchRedirector::Target LaunchRedirector::MakeTarget(const Twin& twin,
                                                      const FunctionOwner& owner,
                                                      CUfunction original) {
  Target target;
  target.owner = owner.handle;
  if (!twin.status.ok() || twin.module == nullptr || twin.kernels.count(owner.name) == 0) {
    return target;
  }
  absl::StatusOr<CUfunction> fn = seam_.ModuleFunction(twin.module, owner.name.c_str());
  if (!fn.ok()) {
    ReportOnce(absl::StrCat("function ", owner.name),
               absl::StrCat("late attach: ", owner.name, " stays uninstrumented: ",
                            fn.status().message()));
    return target;
  }
  // What the program set on its function (cuFuncSetAttribute: more dynamic
  // shared memory, a carveout) holds for the twin too.
  for (CUfunction_attribute attribute : kCopiedAttributes) {
    absl::StatusOr<int> value = seam_.FunctionAttribute(original, attribute);
    if (value.ok()) (void)seam_.SetFunctionAttribute(*fn, attribute, *value);
  }
  absl::StatusOr<int> threads = seam_.FunctionAttribute(*fn, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  absl::StatusOr<int> shared =
      seam_.FunctionAttribute(*fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  if (!threads.ok() || !shared.ok()) return target;
  target.twin = *fn;
  target.max_threads = *threads;
  target.max_dynamic_shared = *shared;
  return target;
}

void LaunchRedirector::ReportOnce(const std::string& key, const std::string& message) {
  {
    absl::MutexLock lock(&mu_);
    if (!reported_.insert(key).second) return;
  }
  CUPROBE_LOG(kWarning, "%s", message);
}

LaunchRedirector::Twin LaunchRedirector::MakeTwin(const FunctionOwner& owner) {
  Twin twin;
  twin.building = false;
  std::shared_ptr<const ImageSource> source = images_.Find(owner.handle);
  if (source == nullptr) {
    twin.status = absl::NotFoundError("its module's image was not kept");
    // One message per reason, naming the first kernel it hits.
    ReportOnce("no image",
               absl::StrCat("late attach: ", owner.name,
                            " cannot be instrumented: its module was loaded before cuprobe kept "
                            "images, or its image was too large to copy; later messages of this "
                            "kind are not shown"));
    return twin;
  }
  absl::StatusOr<uint32_t> sm = seam_.CurrentDeviceSm();
  if (!sm.ok()) {
    twin.status = sm.status();
    return twin;
  }
  if (absl::Status usable = maps_.UsableInCurrentContext(); !usable.ok()) {
    twin.status = usable;
    ReportOnce("context", absl::StrCat("late attach: ", owner.name, " stays uninstrumented: ",
                                       usable.message()));
    return twin;
  }
  if (absl::Status claimed = maps_.Claim(); !claimed.ok()) {
    twin.status = claimed;
    ReportOnce("claim", absl::StrCat("late attach: ", owner.name, " stays uninstrumented: ",
                                     claimed.message()));
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

void LaunchRedirector::AfterRedirectedLaunch(CUcontext context, CUstream stream) {
  absl::StatusOr<CUevent> event = seam_.RecordEvent(stream);
  CUevent old = nullptr;
  {
    absl::MutexLock lock(&mu_);
    CUevent& slot = last_launch_[{context, stream}];
    old = slot;
    // A failed record leaves a null slot: the drain then cannot vouch for
    // this stream and keeps the maps.
    slot = event.ok() ? *event : nullptr;
  }
  if (old != nullptr) seam_.DestroyEvent(old);
}

void LaunchRedirector::ForgetOwner(const void* owner) {
  absl::MutexLock lock(&mu_);
  for (auto it = twins_.begin(); it != twins_.end();) {
    if (it->first.second == owner) {
      if (it->second.module != nullptr) forgotten_modules_.push_back(it->second.module);
      twins_.erase(it++);
    } else {
      ++it;
    }
  }
  for (auto it = targets_.begin(); it != targets_.end();) {
    if (it->second.owner == owner) {
      targets_.erase(it++);
    } else {
      ++it;
    }
  }
}

void LaunchRedirector::ForgetContext(CUcontext context) {
  absl::MutexLock lock(&mu_);
  // Modules and events of a destroyed context go with it.
  for (auto it = twins_.begin(); it != twins_.end();) {
    if (it->first.first == context) {
      twins_.erase(it++);
    } else {
      ++it;
    }
  }
  for (auto it = targets_.begin(); it != targets_.end();) {
    if (it->first.first == context) {
      targets_.erase(it++);
    } else {
      ++it;
    }
  }
  for (auto it = last_launch_.begin(); it != last_launch_.end();) {
    if (it->first.first == context) {
      last_launch_.erase(it++);
    } else {
      ++it;
    }
  }
}

bool LaunchRedirector::Drain(std::chrono::milliseconds timeout) {
  std::vector<CUevent> events;
  bool complete = true;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [where, event] : last_launch_) {
      if (event == nullptr) {
        complete = false;
      } else {
        events.push_back(event);
      }
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (CUevent event : events) {
    while (true) {
      absl::StatusOr<bool> done = seam_.EventDone(event);
      if (!done.ok()) {
        complete = false;
        break;
      }
      if (*done) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        complete = false;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (complete) {
    absl::MutexLock lock(&mu_);
    for (auto& [where, event] : last_launch_) {
      if (event != nullptr) seam_.DestroyEvent(event);
    }
    last_launch_.clear();
  }
  return complete;
}

void LaunchRedirector::UnloadTwins() {
  std::vector<CUmodule> modules;
  {
    absl::MutexLock lock(&mu_);
    modules = std::move(forgotten_modules_);
    forgotten_modules_.clear();
    for (auto& [key, twin] : twins_) {
      if (twin.module != nullptr) modules.push_back(twin.module);
    }
    twins_.clear();
    targets_.clear();
  }
  for (CUmodule m : modules) (void)seam_.UnloadModule(m);
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
  std::atomic<uint32_t> next_name{0};  // name ids in the attacher's ring
};

namespace {

// This launch's ENTER redirected it (counted in flight until its EXIT), and
// the stream it went to.
thread_local bool tls_redirected = false;
thread_local CUstream tls_stream = nullptr;

bool ProcessAlive(uint32_t pid) {
  return pid != 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

LateAttach::LateAttach(CuptiSeam& seam, const ImageRegistry& images, Session& session,
                       Tracer& tracer, uint32_t pid, PtxSourceFinder find_ptx)
    : seam_(seam),
      images_(images),
      session_(session),
      tracer_(tracer),
      pid_(pid),
      find_ptx_(std::move(find_ptx)) {
  // Requests made before the program started are acted on too: the first
  // poll sees any serial above 0.
}

LateAttach::~LateAttach() = default;

template <typename F>
void LateAttach::WithAttached(F&& f) {
  if (current_.load(std::memory_order_acquire) == nullptr) return;  // nothing attached
  in_flight_.fetch_add(1, std::memory_order_seq_cst);
  if (Attached* attached = current_.load(std::memory_order_seq_cst)) f(*attached);
  in_flight_.fetch_sub(1, std::memory_order_seq_cst);
}

void LateAttach::OnLaunch(CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  if (data == nullptr) return;
  if (data->callbackSite == CUPTI_API_EXIT) {
    if (tls_redirected) {
      tls_redirected = false;
      // Still counted in flight, so the redirector is alive. The launch is
      // in its stream now: mark it, for the drain at detach.
      Attached* attached = current_.load(std::memory_order_seq_cst);
      if (attached != nullptr) {
        ReentrancyGuard guard;
        attached->redirector->AfterRedirectedLaunch(data->context, tls_stream);
      }
      in_flight_.fetch_sub(1, std::memory_order_seq_cst);
    }
    return;
  }
  if (current_.load(std::memory_order_acquire) == nullptr) return;  // nothing attached
  in_flight_.fetch_add(1, std::memory_order_seq_cst);
  Attached* attached = current_.load(std::memory_order_seq_cst);
  if (attached != nullptr && attached->redirector->Redirect(cbid, data, &tls_stream)) {
    tls_redirected = true;  // counted until EXIT: the kernel is enqueued by then
    return;
  }
  in_flight_.fetch_sub(1, std::memory_order_seq_cst);
}

void LateAttach::OnModuleUnloaded(const void* handle) {
  WithAttached([handle](Attached& a) { a.redirector->ForgetOwner(handle); });
}

void LateAttach::OnContextDestroying(CUcontext context) {
  WithAttached([context](Attached& a) {
    // The maps' last snapshot while the context exists, and nothing of it
    // is touched afterwards (its memory may be the program's again).
    a.maps->OnContextDestroying(context);
    a.redirector->ForgetContext(context);
  });
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
  if (request->name == session_.name()) {
    CUPROBE_LOG(kWarning, "late attach: ignoring a request to attach the program's own session");
    return;
  }
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
  if (shared.empty()) {
    AnswerList(*session);
    return;
  }
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
  Attached* to = attached.get();
  const uint32_t pid = pid_;
  attached->instrumenter = std::make_unique<BundleInstrumenter>(
      *std::move(bundle), HelpersPtx(), CompileCache(CurrentRewriterSettings().cache_dir), find_ptx_,
      [tracer, to, pid](std::string_view kernel, uint32_t id) {
        tracer->OnKernelInstrumented(kernel, id);
        // The attacher names the kernels of its maps from these.
        NameRecord name = {};
        name.name_id = ProcessQualifiedId(pid, to->next_name.fetch_add(1) + 1);
        name.length = static_cast<uint32_t>(std::min<size_t>(kernel.size(), 1u << 16));
        ProbeKernelRecord rec = {};
        rec.kernel_id = id;
        rec.pid = pid;
        rec.name_id = name.name_id;
        if (to->session.ring().Write(static_cast<uint16_t>(RecordType::kName), &name,
                                     sizeof(name), kernel.data(), name.length)) {
          (void)to->session.ring().Write(static_cast<uint16_t>(RecordType::kProbeKernel), &rec,
                                         sizeof(rec));
        }
      });
  CuptiSeam* seam = &seam_;
  attached->maps = std::make_unique<DeviceMaps>(
      std::move(specs), &attached->session, [seam, tracer](CUcontext c, CUstream s) {
        absl::StatusOr<uint32_t> id = seam->StreamId(c, s);
        if (id.ok()) tracer->IgnoreStream(*id);
      },
      SeamDriver(seam_));
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

namespace {

// A record for a reader that drains while we write (`cuprobe list`): a full
// ring is waited on, up to about a second per record, then counted lost.
bool WriteWaiting(RecordRing& ring, RecordType type, const void* body, uint32_t size,
                  const void* extra = nullptr, uint32_t extra_size = 0) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    if (ring.Write(static_cast<uint16_t>(type), body, size, extra, extra_size)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace

// `cuprobe list PID`: an attacher whose session carries no bundle asks for
// the kernels of the modules loaded so far, not to attach probes. Each goes
// into its ring as a name and a CatalogKernelRecord; kHookStopped says the
// list is complete.
void LateAttach::AnswerList(Session& lister) {
  lister.header().hook_pid.store(pid_, std::memory_order_release);
  absl::StatusOr<uint32_t> sm = seam_.CurrentDeviceSm();
  uint64_t next_name = 1, listed = 0, lost = 0;
  for (const std::shared_ptr<const ImageSource>& source : images_.Sources()) {
    absl::StatusOr<std::vector<CatalogKernel>> kernels =
        CatalogImage(*source, sm.ok() ? *sm : 0, find_ptx_);
    if (!kernels.ok()) {
      CUPROBE_LOG(kDebug, "list: %s: %s", source->Describe(), kernels.status().message());
      continue;
    }
    for (const CatalogKernel& k : *kernels) {
      NameRecord name = {};
      name.name_id = ProcessQualifiedId(pid_, next_name++);
      name.length = static_cast<uint32_t>(std::min<size_t>(k.name.size(), 1u << 16));
      CatalogKernelRecord rec = {};
      rec.name_id = name.name_id;
      rec.pid = pid_;
      rec.backend = CatalogBackendCode(k.backend);
      const bool ok =
          WriteWaiting(lister.ring(), RecordType::kName, &name, sizeof(name), k.name.data(),
                       name.length) &&
          WriteWaiting(lister.ring(), RecordType::kCatalogKernel, &rec, sizeof(rec));
      ok ? ++listed : ++lost;
    }
  }
  CUPROBE_LOG(kDebug, "list: %d kernel(s) of %d image(s) listed, %d lost", listed,
              images_.size(), lost);
  (void)lister.SetHookStatus(static_cast<uint32_t>(HookState::kStopped),
                             SessionState::kHookStopped, "");
}

void LateAttach::Detach(const char* why, uint64_t now_ns) {
  if (attached_ == nullptr) return;
  current_.store(nullptr, std::memory_order_seq_cst);
  // Launches that saw the probes are either still in their ENTER (they may
  // redirect) or between ENTER and EXIT: wait until they have all been
  // submitted, then until their kernels finished (the event each stream got
  // after its last redirected launch), before freeing the maps those
  // kernels write. Both waits are bounded: a persistent kernel keeps the
  // maps alive rather than hang the program's exit.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kDrainTimeoutMs);
  while (in_flight_.load(std::memory_order_seq_cst) > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const bool submitted = in_flight_.load(std::memory_order_seq_cst) <= 0;
  const bool finished =
      submitted && attached_->redirector->Drain(std::chrono::milliseconds(kKernelTimeoutMs));
  const RedirectStats stats = attached_->redirector->stats();
  if (finished) {
    absl::Status s = attached_->maps->Release(now_ns);
    if (!s.ok()) CUPROBE_LOG(kWarning, "late attach: releasing the maps: %s", s.message());
    attached_->redirector->UnloadTwins();
  } else {
    // A kernel may still write them: publish, and keep the memory.
    (void)attached_->maps->Publish(now_ns);
    CUPROBE_LOG(kWarning, "late attach: instrumented kernels did not finish in time; keeping "
                "their maps and modules");
  }
  (void)attached_->session.SetHookStatus(static_cast<uint32_t>(HookState::kStopped),
                                         SessionState::kHookStopped, "");
  CUPROBE_LOG(kInfo, "late attach: detached (%s): %d launch(es) of %d kernel(s) ran instrumented",
              why, stats.launches_redirected, stats.kernels_redirected);
  if (finished) {
    attached_.reset();  // unmaps the attacher's session
  } else {
    // Leaked: its rings (host memory the GPU may still write) stay mapped.
    KeptForever(attached_.release());
  }
}

void LateAttach::Stop(uint64_t now_ns) { Detach("the program is exiting", now_ns); }

std::optional<RedirectStats> LateAttach::stats() const {
  if (attached_ == nullptr) return std::nullopt;
  return attached_->redirector->stats();
}

}  // namespace cuprobe
