// File: cupti_hook/real_seam.cc
//
// The only file of cuprobe that calls cupti* functions and loads the CUDA
// driver (LoadCudaDriver): every driver call of the product goes through the
// table it fills (support/cuda_driver.h).
#include "cupti_hook/real_seam.h"

#include <dlfcn.h>


#include "absl/strings/str_cat.h"
#include "support/cuda_status.h"
#include "support/status_macros.h"

namespace cuprobe {
// The symbol a cuda.h name resolves to ("cuMemAlloc" -> "cuMemAlloc_v2"):
// the argument is macro-expanded before it is stringified.
#define CUPROBE_SYMBOL_NAME_(x) #x
#define CUPROBE_SYMBOL_NAME(x) CUPROBE_SYMBOL_NAME_(x)

namespace {

// Resolves `fn` as `name`; a missing symbol sets `*missing` (once).
template <typename F>
void Resolve(void* lib, const char* name, F* fn, absl::Status* missing) {
  void* sym = ::dlsym(lib, name);
  if (sym == nullptr && missing->ok()) {
    *missing = absl::UnavailableError(
        absl::StrCat("the CUDA driver has no ", name, " (driver too old?)"));
  }
  *fn = reinterpret_cast<F>(sym);
}

absl::StatusOr<CudaDriver> ResolveDriver() {
  // RTLD_NOLOAD first: inside an application (we are called from inside
  // cuInit) the driver is loaded already.
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == nullptr) lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    return absl::UnavailableError(absl::StrCat(
        "cannot load the CUDA driver (libcuda.so.1): ", why != nullptr ? why : "not found",
        "; hint: this needs an NVIDIA GPU and driver"));
  }
  CudaDriver d{};
  absl::Status missing;
#define CUPROBE_GET(field, fn) Resolve(lib, CUPROBE_SYMBOL_NAME(fn), &d.field, &missing)
  CUPROBE_GET(Init, cuInit);
  CUPROBE_GET(GetErrorString, cuGetErrorString);
  CUPROBE_GET(DeviceGet, cuDeviceGet);
  CUPROBE_GET(DeviceGetCount, cuDeviceGetCount);
  CUPROBE_GET(DeviceGetAttribute, cuDeviceGetAttribute);
  CUPROBE_GET(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
  CUPROBE_GET(CtxSetCurrent, cuCtxSetCurrent);
  CUPROBE_GET(CtxGetCurrent, cuCtxGetCurrent);
  CUPROBE_GET(CtxSynchronize, cuCtxSynchronize);
  CUPROBE_GET(CtxGetDevice, cuCtxGetDevice);
  CUPROBE_GET(MemAlloc, cuMemAlloc);
  CUPROBE_GET(MemFree, cuMemFree);
  CUPROBE_GET(MemcpyHtoD, cuMemcpyHtoD);
  CUPROBE_GET(MemcpyDtoH, cuMemcpyDtoH);
  CUPROBE_GET(MemcpyHtoDAsync, cuMemcpyHtoDAsync);
  CUPROBE_GET(MemcpyDtoHAsync, cuMemcpyDtoHAsync);
  CUPROBE_GET(MemsetD8Async, cuMemsetD8Async);
  CUPROBE_GET(MemHostRegister, cuMemHostRegister);
  CUPROBE_GET(MemHostUnregister, cuMemHostUnregister);
  CUPROBE_GET(MemHostGetDevicePointer, cuMemHostGetDevicePointer);
  CUPROBE_GET(MemGetAllocationGranularity, cuMemGetAllocationGranularity);
  CUPROBE_GET(MemCreate, cuMemCreate);
  CUPROBE_GET(MemRelease, cuMemRelease);
  CUPROBE_GET(MemAddressReserve, cuMemAddressReserve);
  CUPROBE_GET(MemAddressFree, cuMemAddressFree);
  CUPROBE_GET(MemMap, cuMemMap);
  CUPROBE_GET(MemUnmap, cuMemUnmap);
  CUPROBE_GET(MemSetAccess, cuMemSetAccess);
  CUPROBE_GET(StreamCreate, cuStreamCreate);
  CUPROBE_GET(StreamDestroy, cuStreamDestroy);
  CUPROBE_GET(StreamSynchronize, cuStreamSynchronize);
  CUPROBE_GET(ModuleLoadData, cuModuleLoadData);
  CUPROBE_GET(ModuleUnload, cuModuleUnload);
  CUPROBE_GET(ModuleGetFunction, cuModuleGetFunction);
  CUPROBE_GET(ModuleGetGlobal, cuModuleGetGlobal);
  CUPROBE_GET(LaunchKernel, cuLaunchKernel);
  CUPROBE_GET(EventCreate, cuEventCreate);
  CUPROBE_GET(EventDestroy, cuEventDestroy);
  CUPROBE_GET(EventRecord, cuEventRecord);
  CUPROBE_GET(EventSynchronize, cuEventSynchronize);
  CUPROBE_GET(EventElapsedTime, cuEventElapsedTime);
  CUPROBE_GET(FuncGetName, cuFuncGetName);
  CUPROBE_GET(KernelGetName, cuKernelGetName);
  CUPROBE_GET(LibraryGetGlobal, cuLibraryGetGlobal);
  CUPROBE_GET(ThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode);
  if (!missing.ok()) return missing;
  // Launch-time redirection only: a driver without one of these loses late
  // attach, nothing else.
  absl::Status& redirect = d.redirect_status;
#undef CUPROBE_GET
#define CUPROBE_GET(field, fn) Resolve(lib, CUPROBE_SYMBOL_NAME(fn), &d.field, &redirect)
  CUPROBE_GET(FuncGetModule, cuFuncGetModule);
  CUPROBE_GET(KernelGetLibrary, cuKernelGetLibrary);
  CUPROBE_GET(StreamIsCapturing, cuStreamIsCapturing);
  CUPROBE_GET(FuncGetAttribute, cuFuncGetAttribute);
  CUPROBE_GET(FuncSetAttribute, cuFuncSetAttribute);
  CUPROBE_GET(KernelGetAttribute, cuKernelGetAttribute);
  CUPROBE_GET(EventQuery, cuEventQuery);
#undef CUPROBE_GET
  Resolve(lib, CUPROBE_SYMBOL_NAME(cuFuncGetParamInfo), &d.FuncGetParamInfo, &d.param_info_status);
  return d;
}

}  // namespace

absl::StatusOr<const CudaDriver*> LoadCudaDriver() {
  // Leaked on purpose: callbacks may use it during exit.
  static const absl::StatusOr<CudaDriver>* loaded =
      new absl::StatusOr<CudaDriver>(ResolveDriver());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

absl::StatusOr<const CudaDriver*> RealSeam::Driver() { return LoadCudaDriver(); }

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
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  const char* name = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.FuncGetName(&name, function)));
  return std::string(name != nullptr ? name : "");
}

absl::StatusOr<std::string> RealSeam::KernelName(CUkernel kernel) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  const char* name = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.KernelGetName(&name, kernel)));
  return std::string(name != nullptr ? name : "");
}

absl::StatusOr<uint32_t> RealSeam::CurrentDeviceSm() {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  CUdevice device = 0;
  if (d.CtxGetDevice(&device) != CUDA_SUCCESS) {
    CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.DeviceGet(&device, 0)));
  }
  int major = 0, minor = 0;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(
      d.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)));
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(
      d.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)));
  return static_cast<uint32_t>(major * 10 + minor);
}

absl::StatusOr<DeviceGlobal> RealSeam::LibraryGlobal(CUlibrary library, const char* name) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  DeviceGlobal g;
  CUPROBE_RETURN_IF_ERROR(
      CUPROBE_CU_CALL(d.LibraryGetGlobal(&g.address, &g.bytes, library, name)));
  return g;
}

absl::StatusOr<DeviceGlobal> RealSeam::ModuleGlobal(CUmodule module, const char* name) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  DeviceGlobal g;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.ModuleGetGlobal(&g.address, &g.bytes, module, name)));
  return g;
}

absl::Status RealSeam::MemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  return CUPROBE_CU_CALL(d.MemcpyHtoD(dst, src, bytes));
}

absl::StatusOr<uint32_t> RealSeam::StreamId(CUcontext context, CUstream stream) {
  uint32_t id = 0;
  CUPROBE_RETURN_IF_ERROR(
      CUPROBE_CUPTI_CALL(cuptiGetStreamIdEx(context, stream, /*perThreadStream=*/0, &id)));
  return id;
}

absl::StatusOr<int> RealSeam::ExchangeCaptureMode(int mode) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  auto m = static_cast<CUstreamCaptureMode>(mode);
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.ThreadExchangeStreamCaptureMode(&m)));
  return static_cast<int>(m);
}

absl::StatusOr<CUcontext> RealSeam::CurrentContext() {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  CUcontext context = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.CtxGetCurrent(&context)));
  return context;
}

absl::Status RealSeam::InContext(CUcontext context, absl::FunctionRef<void()> fn) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  ScopedCurrentContext in(driver, context);
  CUPROBE_RETURN_IF_ERROR(in.status());
  fn();
  return absl::OkStatus();
}

absl::StatusOr<FunctionOwner> RealSeam::LaunchOwner(CUfunction function) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  FunctionOwner owner;
  const char* name = nullptr;
  // cuFuncGetName rejects a CUkernel (DESIGN.md): it tells the two apart.
  if (d.FuncGetName(&name, function) == CUDA_SUCCESS) {
    CUmodule module = nullptr;
    CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.FuncGetModule(&module, function)));
    owner.handle = module;
  } else {
    auto kernel = reinterpret_cast<CUkernel>(function);
    CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.KernelGetName(&name, kernel)));
    CUlibrary library = nullptr;
    CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.KernelGetLibrary(&library, kernel)));
    owner.handle = library;
    owner.is_library = true;
  }
  owner.name = name != nullptr ? name : "";
  return owner;
}

absl::StatusOr<CUmodule> RealSeam::LoadModuleData(const void* image) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  CUmodule module = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.ModuleLoadData(&module, image)));
  return module;
}

absl::StatusOr<CUfunction> RealSeam::ModuleFunction(CUmodule module, const char* name) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  CUfunction function = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.ModuleGetFunction(&function, module, name)));
  return function;
}

absl::Status RealSeam::UnloadModule(CUmodule module) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  return CUPROBE_CU_CALL(d.ModuleUnload(module));
}

absl::StatusOr<bool> RealSeam::StreamCapturing(CUstream stream) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.StreamIsCapturing(stream, &status)));
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

absl::StatusOr<int> RealSeam::FunctionAttribute(CUfunction function,
                                                CUfunction_attribute attribute) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  int value = 0;
  const char* name = nullptr;
  // As in LaunchOwner: cuFuncGetName tells a CUfunction from a CUkernel.
  if (d.FuncGetName(&name, function) == CUDA_SUCCESS) {
    CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.FuncGetAttribute(&value, attribute, function)));
    return value;
  }
  CUdevice device = 0;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.CtxGetDevice(&device)));
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(
      d.KernelGetAttribute(&value, attribute, reinterpret_cast<CUkernel>(function), device)));
  return value;
}

absl::Status RealSeam::SetFunctionAttribute(CUfunction function, CUfunction_attribute attribute,
                                            int value) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  return CUPROBE_CU_CALL(d.FuncSetAttribute(function, attribute, value));
}

absl::StatusOr<CUevent> RealSeam::RecordEvent(CUstream stream) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  CUevent event = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_CU_CALL(d.EventCreate(&event, CU_EVENT_DISABLE_TIMING)));
  absl::Status s = CUPROBE_CU_CALL(d.EventRecord(event, stream));
  if (!s.ok()) {
    (void)d.EventDestroy(event);
    return s;
  }
  return event;
}

absl::StatusOr<bool> RealSeam::EventDone(CUevent event) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, Driver());
  const CudaDriver& d = *driver;
  CUPROBE_RETURN_IF_ERROR(d.redirect_status);
  CUresult r = d.EventQuery(event);
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  return CUPROBE_CU_CALL(r);
}

void RealSeam::DestroyEvent(CUevent event) {
  absl::StatusOr<const CudaDriver*> d = Driver();
  if (d.ok() && (*d)->redirect_status.ok()) (void)(*d)->EventDestroy(event);
}

}  // namespace cuprobe
