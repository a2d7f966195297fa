// File: cupti_hook/real_seam.h
//
// The real CuptiSeam: CUPTI is linked; the driver is loaded here and only
// here (LoadCudaDriver: libcuda.so.1 through dlopen; in an app the driver
// has already loaded it; on a machine without a driver every driver call
// fails cleanly instead of the library failing to load).
#ifndef CUPROBE_CUPTI_HOOK_REAL_SEAM_H_
#define CUPROBE_CUPTI_HOOK_REAL_SEAM_H_

#include "cupti_hook/seam.h"

namespace cuprobe {

// The process's driver table (support/cuda_driver.h), loaded on first use
// and kept for the life of the process; UNAVAILABLE where there is no
// driver. Does not call cuInit. GPU tests and benchmarks that drive the GPU
// without the hook take their table from here too.
[[nodiscard]] absl::StatusOr<const CudaDriver*> LoadCudaDriver();

class RealSeam final : public CuptiSeam {
 public:
  RealSeam() = default;
  RealSeam(const RealSeam&) = delete;
  RealSeam& operator=(const RealSeam&) = delete;

  absl::Status Subscribe(CUpti_CallbackFunc callback, void* userdata, const char* subscriber_name,
                         std::string* other_tool) override;
  absl::Status Unsubscribe() override;
  absl::Status EnableCallback(bool enable, CUpti_CallbackDomain domain,
                              CUpti_CallbackId cbid) override;
  absl::Status EnableDomain(bool enable, CUpti_CallbackDomain domain) override;
  absl::Status ActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                         CUpti_BuffersCallbackCompleteFunc complete) override;
  absl::Status ActivityEnable(CUpti_ActivityKind kind) override;
  absl::Status ActivityDisable(CUpti_ActivityKind kind) override;
  absl::Status ActivityEnableDriverApi(CUpti_CallbackId cbid, bool enable) override;
  absl::Status ActivityEnableRuntimeApi(CUpti_CallbackId cbid, bool enable) override;
  absl::Status ActivityUseSystemThreadIds() override;
  absl::Status ActivityFlushAll(bool forced) override;
  absl::StatusOr<CUpti_Activity*> ActivityNextRecord(uint8_t* buffer, size_t valid_size,
                                                     CUpti_Activity* previous) override;
  absl::StatusOr<size_t> ActivityDroppedRecords(CUcontext context, uint32_t stream_id) override;
  absl::Status Finalize() override;
  absl::StatusOr<const CudaDriver*> Driver() override;
  uint64_t Timestamp() override;
  absl::StatusOr<std::string> FunctionName(CUfunction function) override;
  absl::StatusOr<std::string> KernelName(CUkernel kernel) override;
  absl::StatusOr<uint32_t> CurrentDeviceSm() override;
  absl::StatusOr<DeviceGlobal> LibraryGlobal(CUlibrary library, const char* name) override;
  absl::StatusOr<DeviceGlobal> ModuleGlobal(CUmodule module, const char* name) override;
  absl::Status MemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) override;
  absl::StatusOr<uint32_t> StreamId(CUcontext context, CUstream stream) override;
  absl::StatusOr<int> ExchangeCaptureMode(int mode) override;
  absl::StatusOr<CUcontext> CurrentContext() override;
  absl::Status InContext(CUcontext context, absl::FunctionRef<void()> fn) override;
  absl::StatusOr<FunctionOwner> LaunchOwner(CUfunction function) override;
  absl::StatusOr<CUmodule> LoadModuleData(const void* image) override;
  absl::StatusOr<CUfunction> ModuleFunction(CUmodule module, const char* name) override;
  absl::Status UnloadModule(CUmodule module) override;
  absl::StatusOr<bool> StreamCapturing(CUstream stream) override;
  absl::StatusOr<int> FunctionAttribute(CUfunction function,
                                        CUfunction_attribute attribute) override;
  absl::Status SetFunctionAttribute(CUfunction function, CUfunction_attribute attribute,
                                    int value) override;
  absl::StatusOr<CUevent> RecordEvent(CUstream stream) override;
  absl::StatusOr<bool> EventDone(CUevent event) override;
  void DestroyEvent(CUevent event) override;

 private:
  CUpti_SubscriberHandle subscriber_ = nullptr;
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_REAL_SEAM_H_
