// File: cupti_hook/hook_patch.cc
//
// The hook with the patch backend (HookConfig::backend kPatch) and with
// --backend auto (kAuto, when there are probes): the Compute Sanitizer's
// callbacks stand in for CUPTI's (the two cannot both be subscribed in one
// process). Contexts, module loads and launches come from the Sanitizer's
// resource and launch domains; probes reach kernels through KernelPatcher;
// the tracer records each launch from the launch callback (name, grid,
// block, stream; no GPU kernel times: those are CUPTI's activity). Under
// auto, the PTX backend's ModulePatcher also runs, on the Sanitizer's
// driver-API callbacks for module loads: it swaps in rewritten images for
// modules with PTX (a Sanitizer callback can swap the image at the load's
// ENTER, as a CUPTI one can: tests/gpu/sanitizer_image_swap.cc), and
// KernelPatcher leaves those modules alone.
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cupti_hook/cupti_launch.h"
#include "cupti_hook/hook.h"
#include "cupti_hook/module_patcher.h"
#include "cupti_hook/probe_runtime.h"
#include "maps/gpu/helpers_ptx.h"
#include "ptx_rewriter/compile_cache.h"
#include "ptx_rewriter/elf.h"
#include "ptx_rewriter/settings.h"
#include "support/kept_forever.h"
#include "support/log.h"
#include "support/status_macros.h"

namespace cuprobe {

uint64_t Hook::Now() {
  if (on_sanitizer_) return static_cast<uint64_t>(absl::GetCurrentTimeNanos());
  return seam_.Timestamp();
}

namespace {

// Whether a cubin is an image the PTX backend made: its helper library
// functions are there (the rewriter links them into every module it
// instruments; no other code has names starting so).
bool HasCuprobeFunctions(absl::Span<const uint8_t> cubin) {
  absl::StatusOr<CubinInfo> info = ReadCubin(cubin);
  if (!info.ok()) return false;
  for (const CubinFunction& f : info->functions) {
    if (absl::StartsWith(f.name, "__cuprobe_")) return true;
  }
  return false;
}

// The slot that hands a module load's state from ENTER to EXIT (CUPTI's
// correlationData; the Sanitizer has none). Loads do not nest on a thread:
// the hook's own driver calls fall through its callbacks.
thread_local uint64_t t_module_load = 0;

}  // namespace

absl::Status Hook::SubscribeSanitizer() {
  if (sanitizer_ == nullptr) {
    return absl::UnavailableError("the Compute Sanitizer is not available in this build");
  }
  absl::Status status = sanitizer_->Subscribe(&Hook::SanitizerCallback, this);
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("cannot use the Compute Sanitizer (", status.message(), ")",
                     status.code() == absl::StatusCode::kAlreadyExists
                         ? "; another tool (compute-sanitizer, or one using CUPTI) holds it"
                         : ""));
  }
  sanitizer_subscribed_ = true;
  return absl::OkStatus();
}

HookState Hook::StartPatchBackend() {
  if (absl::Status s = SubscribeSanitizer(); !s.ok()) {
    DisableWith(absl::StrCat("--backend patch: ", s.message()));
    return lifecycle_.state();
  }
  return *StartOnSanitizer(/*mixed=*/false);
}

std::optional<HookState> Hook::StartAutoBackend() {
  if (absl::Status s = SubscribeSanitizer(); !s.ok()) {
    CUPROBE_LOG(kWarning, "--backend auto: %s; probing only kernels with PTX (--backend ptx)",
                s.message());
    return std::nullopt;
  }
  return StartOnSanitizer(/*mixed=*/true);
}

std::optional<HookState> Hook::StartOnSanitizer(bool mixed) {
  on_sanitizer_ = true;
  const char* flag = mixed ? "--backend auto" : "--backend patch";
  if (config_.capture_profiler_api) {
    CUPROBE_LOG(kWarning, "%s: capture ranges need CUPTI; tracing the whole run", flag);
  }
  if (output_->BundleBytes().empty()) {
    // Nothing to patch: only what CUPTI would have timed is lost.
    CUPROBE_LOG(kWarning, "CUPROBE_BACKEND=patch without probes: launches are traced but "
                "kernels and copies are not timed; unset it for a full trace");
  } else if (config_.trace_kernels || config_.trace_memory) {
    CUPROBE_LOG(kInfo, "%s: launches are traced; kernel GPU times and copies are CUPTI's and "
                "are not (CUPTI and the Compute Sanitizer exclude each other)", flag);
  }
  SetRewriterSettings(config_.rewriter);
  tracer_ = KeptForever(new Tracer(seam_, *output_, config_.pid, config_.tracer_diag));
  if (!output_->BundleBytes().empty()) StartPatchProbes(mixed);
  absl::Status status = EnablePatchCallbacks();
  if (!status.ok()) {
    // Leave the Sanitizer to whoever else wants it (or CUPTI).
    if (sanitizer_->Unsubscribe().ok()) sanitizer_subscribed_ = false;
    if (mixed && !sanitizer_subscribed_) {
      // Nothing ran yet (the hook is not READY): auto goes on as ptx. What
      // was built for the Sanitizer is left unused.
      CUPROBE_LOG(kWarning, "--backend auto: cannot enable the Sanitizer's callbacks (%s); "
                  "probing only kernels with PTX (--backend ptx)", status.message());
      on_sanitizer_ = false;
      kernel_patcher_ = nullptr;
      patcher_ = nullptr;
      instrumenter_ = nullptr;
      device_maps_ = nullptr;
      tracer_ = nullptr;
      return std::nullopt;
    }
    DisableWith(absl::StrCat(flag, ": cannot enable the Sanitizer's callbacks (",
                             status.message(), ")"));
    return lifecycle_.state();
  }
  return FinishStart(absl::StrCat("hook ready: ",
                                  mixed ? "auto backend (kernels with PTX rewritten, the others "
                                          "patched; "
                                        : "patch backend (",
                                  "Compute Sanitizer, ", sanitizer_->LibraryPath(),
                                  "), tracing to ", output_->Describe()));
}

void Hook::StartPatchProbes(bool mixed) {
  std::optional<ProbeBundle> bundle = SessionBundle();
  if (!bundle.has_value()) return;
  const ProbeBundle* kept = KeptForever(new ProbeBundle(*std::move(bundle)));
  // The maps' private copy stream is CUPTI's business only (its activity
  // is kept out of the trace); here there is no CUPTI.
  device_maps_ = KeptForever(new DeviceMaps(kept->maps, output_->AttachSession(),
                                            [](CUcontext, CUstream) {}, SeamDriver(seam_),
                                            config_.ring_data));
  CompileCache cache(CurrentRewriterSettings().cache_dir);
  Tracer* tracer = tracer_;
  KernelPatcher::Options options{.async_copies = config_.patch_async_copies,
                                 .site_counters = CurrentRewriterSettings().site_counters};
  if (mixed) {
    // The PTX backend's pipeline, as in Hook::StartProbes, on the same maps.
    StartModulePatcher(*kept);
    patcher_->SetPatchBackendPresent();
    ModulePatcher* patcher = patcher_;
    BundleInstrumenter* instrumenter = instrumenter_;
    options.rewritten = [patcher](absl::Span<const uint8_t> cubin) {
      return patcher->Produced(cubin) || HasCuprobeFunctions(cubin);
    };
    options.kernel_id = [instrumenter](const std::string& mangled) {
      return instrumenter->KernelId(mangled);
    };
  }
  kernel_patcher_ = KeptForever(new KernelPatcher(
      seam_, *sanitizer_, *kept, *device_maps_,
      [kept, cache](uint32_t sm) { return BuildPatchModule(*kept, HelpersPtx(), sm, cache); },
      [tracer](std::string_view name, uint32_t id) { tracer->OnKernelInstrumented(name, id); },
      std::move(options)));
  CUPROBE_LOG(kInfo, "probes: %d program(s) from the session's bundle, %d map(s), %s backend",
              kept->programs.size(), kept->maps.size(), mixed ? "auto" : "patch");
}

absl::Status Hook::EnablePatchCallbacks() {
  using namespace sanitizer;  // NOLINT: the ids below
  CUPROBE_RETURN_IF_ERROR(
      sanitizer_->EnableCallback(true, kDomainResource, kResourceContextCreationFinished));
  CUPROBE_RETURN_IF_ERROR(
      sanitizer_->EnableCallback(true, kDomainResource, kResourceContextDestroyStarting));
  if (kernel_patcher_ != nullptr) {
    CUPROBE_RETURN_IF_ERROR(
        sanitizer_->EnableCallback(true, kDomainResource, kResourceModuleLoaded));
    CUPROBE_RETURN_IF_ERROR(
        sanitizer_->EnableCallback(true, kDomainResource, kResourceModuleUnloadStarting));
  }
  if (kernel_patcher_ != nullptr || config_.trace_launches) {
    CUPROBE_RETURN_IF_ERROR(sanitizer_->EnableCallback(true, kDomainLaunch, kLaunchBegin));
  }
  if (patcher_ != nullptr) {
    // The PTX backend's module loads and unloads (the Sanitizer's driver
    // callback ids are CUPTI's).
    for (CUpti_CallbackId cbid : ModulePatcher::kCallbacks) {
      CUPROBE_RETURN_IF_ERROR(sanitizer_->EnableCallback(true, kDomainDriverApi, cbid));
    }
  }
  if ((kernel_patcher_ != nullptr && kernel_patcher_->wants_arguments()) || patcher_ != nullptr) {
    // The launch calls' ENTER: their kernelParams, and the libraries that
    // wait for a context's first launch (ModulePatcher::pending_fill).
    for (CUpti_CallbackId cbid :
         {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
          CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
          CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
          CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz}) {
      CUPROBE_RETURN_IF_ERROR(sanitizer_->EnableCallback(true, kDomainDriverApi, cbid));
    }
    if (patcher_ != nullptr) {
      // A graph's first launch in a context fills its libraries there too
      // (no kernelParams: KernelParams gives null for these ids).
      for (CUpti_CallbackId cbid :
           {CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz}) {
        CUPROBE_RETURN_IF_ERROR(sanitizer_->EnableCallback(true, kDomainDriverApi, cbid));
      }
    }
  }
  return absl::OkStatus();
}

void Hook::SanitizerCallback(void* userdata, sanitizer::Domain domain, uint32_t cbid,
                             const void* cbdata) {
  static_cast<Hook*>(userdata)->OnSanitizerCallback(domain, cbid, cbdata);
}

void Hook::OnSanitizerCallback(sanitizer::Domain domain, uint32_t cbid, const void* cbdata) {
  if (!lifecycle_.IsReady() || ReentrancyGuard::Active() ||
      forked_child_.load(std::memory_order_relaxed) || cbdata == nullptr) {
    callbacks_fell_through_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ReentrancyGuard guard;
  using namespace sanitizer;  // NOLINT: the ids below
  if (domain == kDomainLaunch) {
    if (cbid == kLaunchBegin) OnPatchLaunch(cbdata);
    return;
  }
  if (domain == kDomainDriverApi) {
    OnSanitizerDriverCall(cbid, cbdata);
    return;
  }
  if (domain != kDomainResource) return;
  switch (cbid) {
    case kResourceContextCreationFinished:
      OnContextCreated(static_cast<const ResourceContextData*>(cbdata)->context);
      break;
    case kResourceContextDestroyStarting:
      OnContextDestroying(static_cast<const ResourceContextData*>(cbdata)->context);
      break;
    case kResourceModuleLoaded: {
      const auto* m = static_cast<const ResourceModuleData*>(cbdata);
      if (kernel_patcher_ == nullptr) break;
      absl::Span<const uint8_t> cubin;
      if (m->pCubin != nullptr) {
        cubin = {reinterpret_cast<const uint8_t*>(m->pCubin), m->cubinSize};
      }
      kernel_patcher_->OnModuleLoaded(m->context, m->module, cubin);
      break;
    }
    case kResourceModuleUnloadStarting:
      if (kernel_patcher_ != nullptr) {
        kernel_patcher_->OnModuleUnloading(static_cast<const ResourceModuleData*>(cbdata)->module);
      }
      break;
    default:
      break;
  }
}

void Hook::OnSanitizerDriverCall(uint32_t cbid, const void* cbdata) {
  using namespace sanitizer;  // NOLINT: the ids below
  const auto* call = static_cast<const CallbackData*>(cbdata);
  if (patcher_ != nullptr && ModulePatcher::IsModuleCallback(cbid)) {
    // The module patcher reads CUPTI's callback data; the Sanitizer's has
    // the same fields but the per-call slot, which a thread_local stands in
    // for.
    CUpti_CallbackData data = {};
    data.callbackSite = call->callbackSite == kApiEnter ? CUPTI_API_ENTER : CUPTI_API_EXIT;
    data.functionName = call->functionName;
    data.functionParams = call->functionParams;
    data.functionReturnValue = const_cast<void*>(call->functionReturnValue);
    data.symbolName = call->symbolName;
    data.context = call->context;
    data.correlationData = &t_module_load;
    patcher_->OnModuleApi(cbid, &data);
    return;
  }
  if (patcher_ != nullptr && call->callbackSite == kApiEnter && patcher_->pending_fill()) {
    patcher_->OnLaunch(call->context);
  }
  // ENTER: the arguments for the LAUNCH_BEGIN inside the call; EXIT:
  // forgotten, so that a launch that failed before LAUNCH_BEGIN leaves
  // none behind for a later launch with no ENTER (a graph's node).
  KernelPatcher::OnLaunchApi(call->callbackSite == kApiEnter
                                 ? KernelParams(cbid, call->functionParams)
                                 : nullptr);
}

void Hook::OnPatchLaunch(const void* cbdata) {
  const auto* l = static_cast<const sanitizer::LaunchData*>(cbdata);
  if (kernel_patcher_ != nullptr) {
    kernel_patcher_->OnLaunchBegin({.context = l->context,
                                    .module = l->module,
                                    .function = l->function,
                                    .name = l->functionName,
                                    .launch = l->hLaunch,
                                    .stream = l->hStream});
  }
  if (!config_.trace_launches) return;
  Tracer::SeenLaunch seen;
  seen.function = l->function;
  seen.name = l->functionName;
  seen.time_ns = Now();
  seen.serial = launch_serial_.fetch_add(1, std::memory_order_relaxed) + 1;
  seen.stream = reinterpret_cast<uint64_t>(l->stream);
  seen.grid[0] = l->gridDim_x;
  seen.grid[1] = l->gridDim_y;
  seen.grid[2] = l->gridDim_z;
  seen.block[0] = l->blockDim_x;
  seen.block[1] = l->blockDim_y;
  seen.block[2] = l->blockDim_z;
  tracer_->OnLaunchSeen(seen);
}

}  // namespace cuprobe
