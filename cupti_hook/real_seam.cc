// The only file of cuprobe that calls cupti* and cu* functions.
#include "cupti_hook/real_seam.h"

#include <dlfcn.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "support/cuda_status.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

// Driver entry points, resolved once. In an application the driver is loaded
// already (we are called from inside cuInit), so RTLD_NOLOAD finds it.
struct DriverApi {
  absl::Status status;
  CUresult (*func_get_name)(const char**, CUfunction) = nullptr;
  CUresult (*kernel_get_name)(const char**, CUkernel) = nullptr;
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*library_get_global)(CUdeviceptr*, size_t*, CUlibrary, const char*) = nullptr;
  CUresult (*module_get_global)(CUdeviceptr*, size_t*, CUmodule, const char*) = nullptr;
  CUresult (*memcpy_htod)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*exchange_capture_mode)(CUstreamCaptureMode*) = nullptr;
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  // Launch-time redirection: resolved apart, so that a driver without one of
  // them only loses late attach.
  absl::Status redirect_status;
  CUresult (*func_get_module)(CUmodule*, CUfunction) = nullptr;
  CUresult (*kernel_get_library)(CUlibrary*, CUkernel) = nullptr;
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*module_unload)(CUmodule) = nullptr;
  CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
  CUresult (*func_get_attribute)(int*, CUfunction_attribute, CUfunction) = nullptr;
  CUresult (*func_set_attribute)(CUfunction, CUfunction_attribute, int) = nullptr;
  CUresult (*kernel_get_attribute)(int*, CUfunction_attribute, CUkernel, CUdevice) = nullptr;
  CUresult (*event_create)(CUevent*, unsigned int) = nullptr;
  CUresult (*event_record)(CUevent, CUstream) = nullptr;
  CUresult (*event_query)(CUevent) = nullptr;
  CUresult (*event_destroy)(CUevent) = nullptr;
};

template <typename F>
absl::Status Resolve(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(::dlsym(lib, name));
  if (*out == nullptr) {
    return absl::UnavailableError(absl::StrCat("libcuda.so.1 has no symbol ", name));
  }
  return absl::OkStatus();
}

const DriverApi& Driver() {
  // Leaked on purpose: callbacks may run during exit.
  static const DriverApi* api = [] {
    auto* d = new DriverApi;
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) lib = ::dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == nullptr) {
      const char* err = ::dlerror();
      d->status = absl::FailedPreconditionError(
          absl::StrCat("the CUDA driver (libcuda.so.1) cannot be loaded: ", err ? err : "?"));
      return d;
    }
    d->status.Update(Resolve(lib, "cuFuncGetName", &d->func_get_name));
    d->status.Update(Resolve(lib, "cuKernelGetName", &d->kernel_get_name));
    d->status.Update(Resolve(lib, "cuCtxGetDevice", &d->ctx_get_device));
    d->status.Update(Resolve(lib, "cuDeviceGet", &d->device_get));
    d->status.Update(Resolve(lib, "cuDeviceGetAttribute", &d->device_get_attribute));
    d->status.Update(Resolve(lib, "cuLibraryGetGlobal", &d->library_get_global));
    // The _v2 names are the real symbols behind the API macros of cuda.h.
    d->status.Update(Resolve(lib, "cuModuleGetGlobal_v2", &d->module_get_global));
    d->status.Update(Resolve(lib, "cuMemcpyHtoD_v2", &d->memcpy_htod));
    d->status.Update(Resolve(lib, "cuThreadExchangeStreamCaptureMode",
                             &d->exchange_capture_mode));
    d->status.Update(Resolve(lib, "cuCtxGetCurrent", &d->ctx_get_current));
    d->status.Update(Resolve(lib, "cuCtxSetCurrent", &d->ctx_set_current));
    d->redirect_status.Update(Resolve(lib, "cuFuncGetModule", &d->func_get_module));
    d->redirect_status.Update(Resolve(lib, "cuKernelGetLibrary", &d->kernel_get_library));
    d->redirect_status.Update(Resolve(lib, "cuModuleLoadData", &d->module_load_data));
    d->redirect_status.Update(Resolve(lib, "cuModuleGetFunction", &d->module_get_function));
    d->redirect_status.Update(Resolve(lib, "cuModuleUnload", &d->module_unload));
    d->redirect_status.Update(Resolve(lib, "cuStreamIsCapturing", &d->stream_is_capturing));
    d->redirect_status.Update(Resolve(lib, "cuFuncGetAttribute", &d->func_get_attribute));
    d->redirect_status.Update(Resolve(lib, "cuFuncSetAttribute", &d->func_set_attribute));
    d->redirect_status.Update(Resolve(lib, "cuKernelGetAttribute", &d->kernel_get_attribute));
    d->redirect_status.Update(Resolve(lib, "cuEventCreate", &d->event_create));
    d->redirect_status.Update(Resolve(lib, "cuEventRecord", &d->event_record));
    d->redirect_status.Update(Resolve(lib, "cuEventQuery", &d->event_query));
    d->redirect_status.Update(Resolve(lib, "cuEventDestroy_v2", &d->event_destroy));
    return d;
  }();
  return *api;
}

}  // namespace

absl::Status RealSeam::Subscribe(CUpti_CallbackFunc callback, void* userdata,
                                 const char* subscriber_name, std::string* other_tool) {
  char old_name[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN > 128 ? CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN : 128] =
      {};
  CUpti_SubscriberParams params = {};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = subscriber_name;
  params.oldSubscriberName = old_name;
  params.oldSubscriberSize = sizeof(old_name);
  absl::Status status = CUPROBE_CUPTI_CALL(
      cuptiSubscribe_v2(&subscriber_, callback, userdata, &params));
  if (!status.ok()) {
    subscriber_ = nullptr;
    if (other_tool != nullptr) *other_tool = old_name;
  }
  return status;
}

absl::Status RealSeam::Unsubscribe() {
  if (subscriber_ == nullptr) return absl::OkStatus();
  absl::Status status = CUPROBE_CUPTI_CALL(cuptiUnsubscribe(subscriber_));
  subscriber_ = nullptr;
  return status;
}

absl::Status RealSeam::EnableCallback(bool enable, CUpti_CallbackDomain domain,
                                      CUpti_CallbackId cbid) {
  return CUPROBE_CUPTI_CALL(cuptiEnableCallback(enable ? 1 : 0, subscriber_, domain, cbid));
}

absl::Status RealSeam::EnableDomain(bool enable, CUpti_CallbackDomain domain) {
  return CUPROBE_CUPTI_CALL(cuptiEnableDomain(enable ? 1 : 0, subscriber_, domain));
}

absl::Status RealSeam::ActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                 CUpti_BuffersCallbackCompleteFunc complete) {
  return CUPROBE_CUPTI_CALL(cuptiActivityRegisterCallbacks(request, complete));
}

absl::Status RealSeam::ActivityEnable(CUpti_ActivityKind kind) {
  return CUPROBE_CUPTI_CALL(cuptiActivityEnable(kind));
}

absl::Status RealSeam::ActivityEnableDriverApi(CUpti_CallbackId cbid, bool enable) {
  return CUPROBE_CUPTI_CALL(cuptiActivityEnableDriverApi(cbid, enable ? 1 : 0));
}

absl::Status RealSeam::ActivityEnableRuntimeApi(CUpti_CallbackId cbid, bool enable) {
  return CUPROBE_CUPTI_CALL(cuptiActivityEnableRuntimeApi(cbid, enable ? 1 : 0));
}

absl::Status RealSeam::ActivityUseSystemThreadIds() {
  return CUPROBE_CUPTI_CALL(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM));
}

absl::Status RealSeam::ActivityDisable(CUpti_ActivityKind kind) {
  return CUPROBE_CUPTI_CALL(cuptiActivityDisable(kind));
}

absl::Status RealSeam::ActivityFlushAll(bool forced) {
  return CUPROBE_CUPTI_CALL(cuptiActivityFlushAll(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0));
}

absl::StatusOr<CUpti_Activity*> RealSeam::ActivityNextRecord(uint8_t* buffer, size_t valid_size,
                                                             CUpti_Activity* previous) {
  CUpti_Activity* record = previous;
  CUptiResult r = cuptiActivityGetNextRecord(buffer, valid_size, &record);
  if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) return absl::NotFoundError("end of activity buffer");
  CUPROBE_RETURN_IF_ERROR(CuptiResultToStatus(r, "cuptiActivityGetNextRecord"));
  return record;
}

absl::StatusOr<size_t> RealSeam::ActivityDroppedRecords(CUcontext context, uint32_t stream_id) {
  size_t dropped = 0;
  CUPROBE_RETURN_IF_ERROR(
      CUPROBE_CUPTI_CALL(cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped)));
  return dropped;
}

absl::Status RealSeam::Finalize() { return CUPROBE_CUPTI_CALL(cuptiFinalize()); }

uint64_t RealSeam::Timestamp() {
  uint64_t ts = 0;
  if (cuptiGetTimestamp(&ts) != CUPTI_SUCCESS) return 0;
  return ts;
}

absl::StatusOr<std::string> RealSeam::FunctionName(CUfunction function) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  const char* name = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.func_get_name(&name, function)));
  return std::string(name != nullptr ? name : "");
}

absl::StatusOr<std::string> RealSeam::KernelName(CUkernel kernel) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  const char* name = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.kernel_get_name(&name, kernel)));
  return std::string(name != nullptr ? name : "");
}

absl::StatusOr<uint32_t> RealSeam::CurrentDeviceSm() {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  CUdevice device = 0;
  if (d.ctx_get_device(&device) != CUDA_SUCCESS) {
    CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.device_get(&device, 0)));
  }
  int major = 0, minor = 0;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(
      d.device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)));
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(
      d.device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)));
  return static_cast<uint32_t>(major * 10 + minor);
}

absl::StatusOr<DeviceGlobal> RealSeam::LibraryGlobal(CUlibrary library, const char* name) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  DeviceGlobal g;
  CUPROBE_RETURN_IF_ERROR(
      CUPROBE_CU_CALL(d.library_get_global(&g.address, &g.bytes, library, name)));
  return g;
}

absl::StatusOr<DeviceGlobal> RealSeam::ModuleGlobal(CUmodule module, const char* name) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  DeviceGlobal g;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.module_get_global(&g.address, &g.bytes, module, name)));
  return g;
}

absl::Status RealSeam::MemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  return CUPROBE_CU_CALL(d.memcpy_htod(dst, src, bytes));
}

absl::StatusOr<uint32_t> RealSeam::StreamId(CUcontext context, CUstream stream) {
  uint32_t id = 0;
  CUPROBE_RETURN_IF_ERROR(
      CUPROBE_CUPTI_CALL(cuptiGetStreamIdEx(context, stream, /*perThreadStream=*/0, &id)));
  return id;
}

absl::StatusOr<int> RealSeam::ExchangeCaptureMode(int mode) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  auto m = static_cast<CUstreamCaptureMode>(mode);
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.exchange_capture_mode(&m)));
  return static_cast<int>(m);
}

absl::StatusOr<CUcontext> RealSeam::CurrentContext() {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  CUcontext context = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.ctx_get_current(&context)));
  return context;
}

absl::Status RealSeam::InContext(CUcontext context, absl::FunctionRef<void()> fn) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  CUcontext previous = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.ctx_get_current(&previous)));
  if (previous != context) CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.ctx_set_current(context)));
  fn();
  if (previous != context) (void)d.ctx_set_current(previous);
  return absl::OkStatus();
}

absl::StatusOr<FunctionOwner> RealSeam::LaunchOwner(CUfunction function) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  FunctionOwner owner;
  const char* name = nullptr;
  // cuFuncGetName rejects a CUkernel (DESIGN.md): it tells the two apart.
  if (d.func_get_name(&name, function) == CUDA_SUCCESS) {
    CUmodule module = nullptr;
    CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.func_get_module(&module, function)));
    owner.handle = module;
  } else {
    auto kernel = reinterpret_cast<CUkernel>(function);
    CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.kernel_get_name(&name, kernel)));
    CUlibrary library = nullptr;
    CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.kernel_get_library(&library, kernel)));
    owner.handle = library;
    owner.is_library = true;
  }
  owner.name = name != nullptr ? name : "";
  return owner;
}

absl::StatusOr<CUmodule> RealSeam::LoadModuleData(const void* image) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  CUmodule module = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.module_load_data(&module, image)));
  return module;
}

absl::StatusOr<CUfunction> RealSeam::ModuleFunction(CUmodule module, const char* name) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  CUfunction function = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.module_get_function(&function, module, name)));
  return function;
}

absl::Status RealSeam::UnloadModule(CUmodule module) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  return CUPROBE_CU_CALL(d.module_unload(module));
}

absl::StatusOr<bool> RealSeam::StreamCapturing(CUstream stream) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.stream_is_capturing(stream, &status)));
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

absl::StatusOr<int> RealSeam::FunctionAttribute(CUfunction function,
                                                CUfunction_attribute attribute) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  int value = 0;
  const char* name = nullptr;
  // As in LaunchOwner: cuFuncGetName tells a CUfunction from a CUkernel.
  if (d.func_get_name(&name, function) == CUDA_SUCCESS) {
    CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.func_get_attribute(&value, attribute, function)));
    return value;
  }
  CUdevice device = 0;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.ctx_get_device(&device)));
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(
      d.kernel_get_attribute(&value, attribute, reinterpret_cast<CUkernel>(function), device)));
  return value;
}

absl::Status RealSeam::SetFunctionAttribute(CUfunction function, CUfunction_attribute attribute,
                                            int value) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  return CUPROBE_CU_CALL(d.func_set_attribute(function, attribute, value));
}

absl::StatusOr<CUevent> RealSeam::RecordEvent(CUstream stream) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  CUevent event = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.event_create(&event, CU_EVENT_DISABLE_TIMING)));
  absl::Status s = CUPROBE_CU_CALL(d.event_record(event, stream));
  if (!s.ok()) {
    (void)d.event_destroy(event);
    return s;
  }
  return event;
}

absl::StatusOr<bool> RealSeam::EventDone(CUevent event) {
  const DriverApi& d = Driver();
  CUPROBE_RETURN_IF_ERROR(d.status);
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  CUresult r = d.event_query(event);
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  return CUPROBE_CU_CALL(r);
}

void RealSeam::DestroyEvent(CUevent event) {
  const DriverApi& d = Driver();
  if (d.status.ok() && d.redirect_status.ok()) (void)d.event_destroy(event);
}

}  // namespace cuprobe
