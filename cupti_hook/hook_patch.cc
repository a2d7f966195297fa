// File: cupti_hook/hook_patch.cc
//
// The hook with the patch backend (HookConfig::backend kPatch): the
// Compute Sanitizer's callbacks stand in for CUPTI's (the two cannot both
// be subscribed in one process). Contexts, module loads and launches come
// from the Sanitizer's resource and launch domains; probes reach kernels
// through KernelPatcher; the tracer records each launch from the launch
// callback (name, grid, block, stream; no GPU kernel times: those are
// CUPTI's activity).
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cupti_hook/cupti_launch.h"
#include "cupti_hook/hook.h"
#include "maps/gpu/helpers_ptx.h"
#include "ptx_rewriter/compile_cache.h"
#include "ptx_rewriter/settings.h"
#include "support/kept_forever.h"
#include "support/log.h"
#include "support/status_macros.h"

namespace cuprobe {

uint64_t Hook::Now() {
  if (config_.backend == Backend::kPatch) return static_cast<uint64_t>(absl::GetCurrentTimeNanos());
  return seam_.Timestamp();
}

HookState Hook::StartPatchBackend() {
  if (sanitizer_ == nullptr) {
    DisableWith("--backend patch: the Compute Sanitizer is not available in this build");
    return lifecycle_.state();
  }
  absl::Status status = sanitizer_->Subscribe(&Hook::SanitizerCallback, this);
  if (!status.ok()) {
    DisableWith(absl::StrCat(
        "--backend patch: cannot use the Compute Sanitizer (", status.message(), ")",
        status.code() == absl::StatusCode::kAlreadyExists
            ? "; another tool (compute-sanitizer, or one using CUPTI) holds it"
            : ""));
    return lifecycle_.state();
  }
  sanitizer_subscribed_ = true;
  if (config_.capture_profiler_api) {
    CUPROBE_LOG(kWarning, "--backend patch: capture ranges need CUPTI; tracing the whole run");
  }
  if (output_->BundleBytes().empty()) {
    // Nothing to patch: only what CUPTI would have timed is lost.
    CUPROBE_LOG(kWarning, "CUPROBE_BACKEND=patch without probes: launches are traced but "
                "kernels and copies are not timed; unset it for a full trace");
  } else if (config_.trace_kernels || config_.trace_memory) {
    CUPROBE_LOG(kInfo, "--backend patch: launches are traced; kernel GPU times and copies are "
                "CUPTI's and are not (CUPTI and the Compute Sanitizer exclude each other)");
  }
  SetRewriterSettings(config_.rewriter);
  tracer_ = KeptForever(new Tracer(seam_, *output_, config_.pid, config_.tracer_diag));
  if (!output_->BundleBytes().empty()) StartPatchProbes();
  status = EnablePatchCallbacks();
  if (!status.ok()) {
    DisableWith(absl::StrCat("--backend patch: cannot enable the Sanitizer's callbacks (",
                             status.message(), ")"));
    // Leave the Sanitizer to whoever else wants it (or CUPTI).
    if (sanitizer_->Unsubscribe().ok()) sanitizer_subscribed_ = false;
    return lifecycle_.state();
  }
  return FinishStart(absl::StrCat("hook ready: patch backend (Compute Sanitizer, ",
                                  sanitizer_->LibraryPath(), "), tracing to ",
                                  output_->Describe()));
}

void Hook::StartPatchProbes() {
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
  kernel_patcher_ = KeptForever(new KernelPatcher(
      seam_, *sanitizer_, *kept, *device_maps_,
      [kept, cache](uint32_t sm) { return BuildPatchModule(*kept, HelpersPtx(), sm, cache); },
      [tracer](std::string_view name, uint32_t id) { tracer->OnKernelInstrumented(name, id); },
      KernelPatcher::Options{.async_copies = config_.patch_async_copies,
                             .site_counters = CurrentRewriterSettings().site_counters}));
  CUPROBE_LOG(kInfo, "probes: %d program(s) from the session's bundle, %d map(s), patch backend",
              kept->programs.size(), kept->maps.size());
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
  if (kernel_patcher_ != nullptr && kernel_patcher_->wants_arguments()) {
    // The launch calls' ENTER, for their kernelParams (the Sanitizer's
    // driver callback ids are CUPTI's).
    for (CUpti_CallbackId cbid :
         {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
          CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
          CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
          CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz}) {
      CUPROBE_RETURN_IF_ERROR(sanitizer_->EnableCallback(true, kDomainDriverApi, cbid));
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
    const auto* call = static_cast<const CallbackData*>(cbdata);
    // ENTER: the arguments for the LAUNCH_BEGIN inside the call; EXIT:
    // forgotten, so that a launch that failed before LAUNCH_BEGIN leaves
    // none behind for a later launch with no ENTER (a graph's node).
    KernelPatcher::OnLaunchApi(call->callbackSite == kApiEnter
                                   ? KernelParams(cbid, call->functionParams)
                                   : nullptr);
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
