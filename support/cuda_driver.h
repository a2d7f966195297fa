// File: support/cuda_driver.h
//
// The CUDA driver as cuprobe reaches it: a table of entry points. The table
// is filled in exactly one place, the GPU seam (cupti_hook/real_seam.cc:
// LoadCudaDriver, which finds libcuda.so.1 with dlopen and never links it,
// so that binaries holding this code start on machines without a driver);
// everything else is handed the table, and CPU tests hand a fake one
// (tests/unit/fake_cuda_driver.h).
//
//   const CudaDriver* driver = ...;                 // from the seam
//   CUcontext current = nullptr;
//   CUPROBE_RETURN_IF_ERROR(driver->Check(driver->CtxGetCurrent(&current), "cuCtxGetCurrent"));
//   {
//     ScopedCurrentContext in(driver, other);        // `other` current until the scope ends
//     if (!in.ok()) ...
//   }
#ifndef CUPROBE_SUPPORT_CUDA_DRIVER_H_
#define CUPROBE_SUPPORT_CUDA_DRIVER_H_

#include <cuda.h>

#include <string_view>

#include "absl/status/status.h"

namespace cuprobe {

struct CudaDriver {
  // CUDA_SUCCESS -> OK; otherwise a status naming `call` and the error.
  [[nodiscard]] absl::Status Check(CUresult result, std::string_view call) const;

  // Whether the entry points that only launch-time redirection (late
  // attach) uses were found: a driver without one of them loses late
  // attach, nothing else.
  absl::Status redirect_status;

  decltype(&::cuInit) Init;
  decltype(&::cuGetErrorString) GetErrorString;
  decltype(&::cuDeviceGet) DeviceGet;
  decltype(&::cuDeviceGetCount) DeviceGetCount;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute;
  decltype(&::cuDevicePrimaryCtxRetain) DevicePrimaryCtxRetain;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent;
  decltype(&::cuCtxGetCurrent) CtxGetCurrent;
  decltype(&::cuCtxSynchronize) CtxSynchronize;
  decltype(&::cuCtxGetDevice) CtxGetDevice;
  decltype(&::cuMemAlloc) MemAlloc;
  decltype(&::cuMemFree) MemFree;
  decltype(&::cuMemcpyHtoD) MemcpyHtoD;
  decltype(&::cuMemcpyDtoH) MemcpyDtoH;
  decltype(&::cuMemcpyHtoDAsync) MemcpyHtoDAsync;
  decltype(&::cuMemcpyDtoHAsync) MemcpyDtoHAsync;
  decltype(&::cuMemsetD8Async) MemsetD8Async;
  decltype(&::cuMemHostRegister) MemHostRegister;
  decltype(&::cuMemHostUnregister) MemHostUnregister;
  decltype(&::cuMemHostGetDevicePointer) MemHostGetDevicePointer;
  decltype(&::cuMemGetAllocationGranularity) MemGetAllocationGranularity;
  decltype(&::cuMemCreate) MemCreate;
  decltype(&::cuMemRelease) MemRelease;
  decltype(&::cuMemAddressReserve) MemAddressReserve;
  decltype(&::cuMemAddressFree) MemAddressFree;
  decltype(&::cuMemMap) MemMap;
  decltype(&::cuMemUnmap) MemUnmap;
  decltype(&::cuMemSetAccess) MemSetAccess;
  decltype(&::cuStreamCreate) StreamCreate;
  decltype(&::cuStreamDestroy) StreamDestroy;
  decltype(&::cuStreamSynchronize) StreamSynchronize;
  decltype(&::cuModuleLoadData) ModuleLoadData;
  decltype(&::cuModuleUnload) ModuleUnload;
  decltype(&::cuModuleGetFunction) ModuleGetFunction;
  decltype(&::cuModuleGetGlobal) ModuleGetGlobal;
  decltype(&::cuLaunchKernel) LaunchKernel;
  decltype(&::cuEventCreate) EventCreate;
  decltype(&::cuEventDestroy) EventDestroy;
  decltype(&::cuEventRecord) EventRecord;
  decltype(&::cuEventSynchronize) EventSynchronize;
  decltype(&::cuEventElapsedTime) EventElapsedTime;
  // Names of launch handles: a launch may pass a CUkernel cast to
  // CUfunction, which cuFuncGetName rejects and cuKernelGetName accepts.
  decltype(&::cuFuncGetName) FuncGetName;
  decltype(&::cuKernelGetName) KernelGetName;
  decltype(&::cuLibraryGetGlobal) LibraryGetGlobal;
  decltype(&::cuThreadExchangeStreamCaptureMode) ThreadExchangeStreamCaptureMode;
  // Launch-time redirection (redirect_status).
  decltype(&::cuFuncGetModule) FuncGetModule;
  decltype(&::cuKernelGetLibrary) KernelGetLibrary;
  decltype(&::cuStreamIsCapturing) StreamIsCapturing;
  decltype(&::cuFuncGetAttribute) FuncGetAttribute;
  decltype(&::cuFuncSetAttribute) FuncSetAttribute;
  decltype(&::cuKernelGetAttribute) KernelGetAttribute;
  decltype(&::cuEventQuery) EventQuery;
  // The patch backend's argument copies (param_info_status: found or not;
  // without it probes read no argument there).
  absl::Status param_info_status;
  decltype(&::cuFuncGetParamInfo) FuncGetParamInfo;
};

// Makes `context` current on the calling thread for a scope, then the
// previous one again. ok() is false when the switch failed (nothing was
// changed then) or there is no driver; a null `context` changes nothing.
class ScopedCurrentContext {
 public:
  ScopedCurrentContext(const CudaDriver* driver, CUcontext context);
  ~ScopedCurrentContext();
  ScopedCurrentContext(const ScopedCurrentContext&) = delete;
  ScopedCurrentContext& operator=(const ScopedCurrentContext&) = delete;

  [[nodiscard]] const absl::Status& status() const { return status_; }
  [[nodiscard]] bool ok() const { return status_.ok(); }

 private:
  const CudaDriver* driver_;
  CUcontext previous_ = nullptr;
  bool switched_ = false;
  absl::Status status_;
};

}  // namespace cuprobe

#endif  // CUPROBE_SUPPORT_CUDA_DRIVER_H_
