// File: maps/cuda_device_memory.h
//
// DeviceMemory (maps/device_memory.h) over the CUDA driver, and the small
// table of driver entry points it uses. The driver is found with
// dlopen("libcuda.so.1") and dlsym, never linked: binaries that contain this
// code start on machines without a driver (CI) and fail here with a status.
//
//   CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, CudaDriver::Load());
//   // ... a context is current on this thread (the application's, in the hook) ...
//   CUPROBE_ASSIGN_OR_RETURN(auto memory, CudaDeviceMemory::Create(driver));
//   CUPROBE_ASSIGN_OR_RETURN(MapSet maps, MapSet::Create(specs, memory.get(), &region));
//
// Hazards:
//  - Every call uses the context current on the calling thread; the hook's
//    watcher must make the application's context current before Publish.
//  - Copies go through a private non-blocking stream: a synchronous
//    cuMemcpy on the legacy default stream would wait for the application's
//    kernels on blocking streams (and make the watcher stall the program).
//    The copy still sees device memory that running kernels are updating:
//    see docs/MAPS.md for what a snapshot means then.
//  - Destroy the CudaDeviceMemory (which destroys its stream) while its
//    context is alive.
#ifndef CUPROBE_MAPS_CUDA_DEVICE_MEMORY_H_
#define CUPROBE_MAPS_CUDA_DEVICE_MEMORY_H_

#include <cuda.h>

#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "maps/device_memory.h"

namespace cuprobe {

// The driver entry points cuprobe's maps and GPU tests use.
struct CudaDriver {
  // Loads libcuda.so.1 once per process (later calls return the same table)
  // and resolves every entry point. Does not call cuInit.
  [[nodiscard]] static absl::StatusOr<const CudaDriver*> Load();

  // CUDA_SUCCESS -> OK; otherwise a status naming `call` and the error.
  [[nodiscard]] absl::Status Check(CUresult result, std::string_view call) const;

  decltype(&::cuInit) Init;
  decltype(&::cuGetErrorString) GetErrorString;
  decltype(&::cuDeviceGet) DeviceGet;
  decltype(&::cuDeviceGetCount) DeviceGetCount;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute;
  decltype(&::cuDevicePrimaryCtxRetain) DevicePrimaryCtxRetain;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent;
  decltype(&::cuCtxGetCurrent) CtxGetCurrent;
  decltype(&::cuCtxSynchronize) CtxSynchronize;
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
};

class CudaDeviceMemory final : public DeviceMemory {
 public:
  // Needs a current context (FAILED_PRECONDITION otherwise).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> Create(
      const CudaDriver* driver);
  ~CudaDeviceMemory() override;

  absl::StatusOr<uint64_t> Allocate(uint64_t bytes) override;
  absl::Status Free(uint64_t address) override;
  absl::Status CopyToDevice(uint64_t dst, const void* src, uint64_t bytes) override;
  absl::Status CopyFromDevice(void* dst, uint64_t src, uint64_t bytes) override;
  absl::Status Zero(uint64_t dst, uint64_t bytes) override;
  absl::StatusOr<uint64_t> MapHost(void* host, uint64_t bytes) override;
  absl::Status UnmapHost(void* host) override;

  // The private stream every copy goes through (the hook keeps its copies
  // out of the program's trace by this stream's CUPTI id).
  [[nodiscard]] CUstream stream() const { return stream_; }

 private:
  CudaDeviceMemory(const CudaDriver* driver, CUstream stream) : driver_(driver), stream_(stream) {}
  const CudaDriver* driver_;
  CUstream stream_;
};

}  // namespace cuprobe

#endif  // CUPROBE_MAPS_CUDA_DEVICE_MEMORY_H_
