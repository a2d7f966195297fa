// File: cupti_hook/cupti_events.cc
//
// AddCuptiEventSource (gpu_events.h): CUPTI's callbacks decoded into
// provider-neutral events.
#include <cupti.h>

#include "cupti_hook/cupti_launch.h"
#include "cupti_hook/gpu_events.h"
#include "cupti_hook/module_patcher.h"
#include "cupti_hook/tracer.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

GpuEventSink& SinkOf(void* owner) { return *static_cast<GpuEventSink*>(owner); }

void OnResource(void* owner, CUpti_CallbackId cbid, const void* cbdata) {
  auto* r = static_cast<const CUpti_ResourceData*>(cbdata);
  if (r == nullptr) return;
  if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
    SinkOf(owner).OnContextCreated(r->context);
  } else if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
    SinkOf(owner).OnContextDestroying(r->context);
  }
}

void OnModuleApi(void* owner, CUpti_CallbackId cbid, const void* cbdata) {
  auto* data = static_cast<const CUpti_CallbackData*>(cbdata);
  if (data == nullptr || data->callbackSite != CUPTI_API_EXIT || data->functionParams == nullptr) {
    return;
  }
  const CUresult result = data->functionReturnValue != nullptr
                              ? *static_cast<const CUresult*>(data->functionReturnValue)
                              : CUDA_ERROR_UNKNOWN;
  if (result != CUDA_SUCCESS) return;
  ModuleEvent module;
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload) {
    module.handle = static_cast<const cuLibraryUnload_params*>(data->functionParams)->library;
    module.is_library = true;
    SinkOf(owner).OnModuleUnloaded(module);
  } else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuModuleUnload) {
    module.handle = static_cast<const cuModuleUnload_params*>(data->functionParams)->hmod;
    SinkOf(owner).OnModuleUnloaded(module);
  } else {
    module.handle = LoadedHandle(cbid, const_cast<void*>(data->functionParams));
    module.is_library = IsLibraryLoadApi(cbid);
    if (module.handle != nullptr) SinkOf(owner).OnModuleLoaded(module);
  }
}

void OnLaunchApi(void* owner, CUpti_CallbackId cbid, const void* cbdata) {
  auto* data = static_cast<const CUpti_CallbackData*>(cbdata);
  if (data == nullptr) return;
  LaunchShape shape;
  if (!ReadShape(cbid, data->functionParams, &shape)) return;
  LaunchEvent launch;
  launch.site = data->callbackSite == CUPTI_API_ENTER ? CallSite::kBegin : CallSite::kEnd;
  launch.context = data->context;
  launch.function = static_cast<CUfunction>(const_cast<void*>(shape.handle));
  launch.stream = reinterpret_cast<CUstream>(shape.stream);
  SinkOf(owner).OnLaunch(launch);
}

void OnSynchronize(void* owner, CUpti_CallbackId, const void* cbdata) {
  auto* s = static_cast<const CUpti_SynchronizeData*>(cbdata);
  if (s != nullptr) SinkOf(owner).OnSynchronize(s->context, s->stream);
}

}  // namespace

absl::Status AddCuptiEventSource(Switchboard& board, GpuEventSink& sink,
                                 const GpuEventSelection& wanted) {
  if (wanted.contexts) {
    for (CUpti_CallbackId cbid :
         {CUPTI_CBID_RESOURCE_CONTEXT_CREATED, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING}) {
      CUPROBE_RETURN_IF_ERROR(board.Add(CUPTI_CB_DOMAIN_RESOURCE, cbid, &OnResource, &sink));
    }
  }
  if (wanted.modules) {
    for (CUpti_CallbackId cbid : ModulePatcher::kCallbacks) {
      CUPROBE_RETURN_IF_ERROR(board.Add(CUPTI_CB_DOMAIN_DRIVER_API, cbid, &OnModuleApi, &sink));
    }
  }
  if (wanted.launches) {
    for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
      CUPROBE_RETURN_IF_ERROR(board.Add(CUPTI_CB_DOMAIN_DRIVER_API, cbid, &OnLaunchApi, &sink));
    }
  }
  if (wanted.synchronize) {
    for (CUpti_CallbackId cbid :
         {CUPTI_CBID_SYNCHRONIZE_STREAM_SYNCHRONIZED, CUPTI_CBID_SYNCHRONIZE_CONTEXT_SYNCHRONIZED}) {
      CUPROBE_RETURN_IF_ERROR(board.Add(CUPTI_CB_DOMAIN_SYNCHRONIZE, cbid, &OnSynchronize, &sink));
    }
  }
  return absl::OkStatus();
}

}  // namespace cuprobe
