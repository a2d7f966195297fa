// File: cupti_hook/gpu_events.h
//
// The events of a CUDA process that cuprobe acts on, whichever API reports
// them: contexts made and destroyed, modules loaded and unloaded, launches,
// synchronizations. A provider decodes its own callbacks into these and
// hands them to a GpuEventSink (the hook). Two providers: CUPTI's callback
// API (AddCuptiEventSource, below: the hook's switchboard feeds it) and,
// with the patch backend, the Compute Sanitizer's resource domain
// (hook_patch.cc: contexts made and destroyed); CUPTI and the Sanitizer API
// cannot both be subscribed in one process (docs/ARCHITECTURE.md).
//
// What only one API can do stays with that API's code: replacing a module's
// image while it loads, and redirecting a launch, need CUPTI's parameters
// (module_patcher.h, late_attach.h); API times and correlation ids of launch
// records are CUPTI's (tracer.h); patching a loaded module and giving a
// kernel its callback data are the Sanitizer's (kernel_patcher.h).
//
//   class Hook : public GpuEventSink { ... };
//   CUPROBE_RETURN_IF_ERROR(AddCuptiEventSource(board, hook, {.contexts = true}));
#ifndef CUPROBE_CUPTI_HOOK_GPU_EVENTS_H_
#define CUPROBE_CUPTI_HOOK_GPU_EVENTS_H_

#include <cuda.h>

#include <cstdint>

#include "absl/status/status.h"
#include "cupti_hook/switchboard.h"

namespace cuprobe {

enum class CallSite : uint8_t {
  kBegin,  // before the call does its work (a launch: the kernel has not run)
  kEnd,    // after it returned
};

struct LaunchEvent {
  CallSite site = CallSite::kBegin;
  CUcontext context = nullptr;
  // The launch handle: a CUfunction, or a CUkernel cast to one; null for a
  // graph launch.
  CUfunction function = nullptr;
  CUstream stream = nullptr;
};

struct ModuleEvent {
  const void* handle = nullptr;  // the CUmodule or CUlibrary
  bool is_library = false;
};

class GpuEventSink {
 public:
  virtual ~GpuEventSink() = default;
  // A context exists (its creator's thread may not have it current).
  virtual void OnContextCreated(CUcontext context) = 0;
  // A context is about to be destroyed: it is still valid.
  virtual void OnContextDestroying(CUcontext context) = 0;
  // A module or library finished loading, or was unloaded.
  virtual void OnModuleLoaded(const ModuleEvent& module) = 0;
  virtual void OnModuleUnloaded(const ModuleEvent& module) = 0;
  virtual void OnLaunch(const LaunchEvent& launch) = 0;
  virtual void OnSynchronize(CUcontext context, CUstream stream) = 0;
};

// Which events a sink wants: a provider reports (and asks its API for) only
// those.
struct GpuEventSelection {
  bool contexts = false;
  bool modules = false;
  bool launches = false;
  bool synchronize = false;
};

// The CUPTI provider: adds to `board` the handlers that decode CUPTI's
// callbacks into `sink`'s events: the resource domain's context created and
// destroy-starting; the EXIT of every module load and unload API
// (successful ones); ENTER and EXIT of the launch callbacks
// (Tracer::kLaunchCallbacks); the synchronize domain.
[[nodiscard]] absl::Status AddCuptiEventSource(Switchboard& board, GpuEventSink& sink,
                                               const GpuEventSelection& wanted);

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_GPU_EVENTS_H_
