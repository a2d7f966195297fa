// File: cupti_hook/seam.h
//
// The seam between the hook's logic and the CUPTI / CUDA driver calls it makes.
// real_seam.cc is the only file of cuprobe that calls cupti* and loads the
// driver; the driver calls of the maps' device side go through the same
// driver table (Driver()). Tests use testing/fake_seam.h, which records calls
// and fires hand-built callbacks, with a fake driver table where needed.
//
//   RealSeam seam;                       // or FakeSeam in a test
//   Hook hook(seam, config);
//   hook.Start();                        // subscribes through the seam
//
// Every method returns a Status that names the failing call; none throws.
#ifndef CUPROBE_CUPTI_HOOK_SEAM_H_
#define CUPROBE_CUPTI_HOOK_SEAM_H_

#include <cuda.h>
#include <cupti.h>

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "support/cuda_driver.h"

namespace cuprobe {

// A module global in device memory (cuLibraryGetGlobal / cuModuleGetGlobal).
struct DeviceGlobal {
  CUdeviceptr address = 0;
  size_t bytes = 0;
};

// Where a launch handle's code was loaded from (late attach,
// cupti_hook/late_attach.h).
struct FunctionOwner {
  void* handle = nullptr;  // the CUlibrary or CUmodule
  bool is_library = false;
  std::string name;        // the kernel's mangled name
};

class CuptiSeam {
 public:
  virtual ~CuptiSeam() = default;

  // cuptiSubscribe_v2 as `subscriber_name`. When another tool already owns
  // CUPTI the status is ALREADY_EXISTS and `*other_tool` names it (if CUPTI
  // told us).
  [[nodiscard]] virtual absl::Status Subscribe(CUpti_CallbackFunc callback, void* userdata,
                                               const char* subscriber_name,
                                               std::string* other_tool) = 0;
  [[nodiscard]] virtual absl::Status Unsubscribe() = 0;
  [[nodiscard]] virtual absl::Status EnableCallback(bool enable, CUpti_CallbackDomain domain,
                                                    CUpti_CallbackId cbid) = 0;
  [[nodiscard]] virtual absl::Status EnableDomain(bool enable, CUpti_CallbackDomain domain) = 0;

  // Activity API (kernel / memcpy / memset timing).
  [[nodiscard]] virtual absl::Status ActivityRegisterCallbacks(
      CUpti_BuffersCallbackRequestFunc request, CUpti_BuffersCallbackCompleteFunc complete) = 0;
  [[nodiscard]] virtual absl::Status ActivityEnable(CUpti_ActivityKind kind) = 0;
  [[nodiscard]] virtual absl::Status ActivityDisable(CUpti_ActivityKind kind) = 0;
  // Activity records (CUPTI_ACTIVITY_KIND_DRIVER) of one driver API alone.
  [[nodiscard]] virtual absl::Status ActivityEnableDriverApi(CUpti_CallbackId cbid,
                                                             bool enable) = 0;
  // Activity records (CUPTI_ACTIVITY_KIND_RUNTIME) of one runtime API alone.
  [[nodiscard]] virtual absl::Status ActivityEnableRuntimeApi(CUpti_CallbackId cbid,
                                                              bool enable) = 0;
  // Thread ids in activity records from gettid() rather than CUPTI's default,
  // pthread_self(); set before any activity is enabled.
  [[nodiscard]] virtual absl::Status ActivityUseSystemThreadIds() = 0;
  [[nodiscard]] virtual absl::Status ActivityFlushAll(bool forced) = 0;
  // Next record after `previous` (nullptr: the first) in a completed buffer;
  // NOT_FOUND at the end of the buffer.
  [[nodiscard]] virtual absl::StatusOr<CUpti_Activity*> ActivityNextRecord(
      uint8_t* buffer, size_t valid_size, CUpti_Activity* previous) = 0;
  [[nodiscard]] virtual absl::StatusOr<size_t> ActivityDroppedRecords(CUcontext context,
                                                                      uint32_t stream_id) = 0;
  [[nodiscard]] virtual absl::Status Finalize() = 0;
  // The driver's entry points (support/cuda_driver.h), for the code that
  // manages device memory through them (maps/cuda_device_memory.h).
  [[nodiscard]] virtual absl::StatusOr<const CudaDriver*> Driver() = 0;
  // CUPTI's timestamp (ns), the clock of activity records.
  [[nodiscard]] virtual uint64_t Timestamp() = 0;

  // Driver. Names of launch handles: a launch may pass a CUkernel cast to
  // CUfunction, which cuFuncGetName rejects and cuKernelGetName accepts.
  [[nodiscard]] virtual absl::StatusOr<std::string> FunctionName(CUfunction function) = 0;
  [[nodiscard]] virtual absl::StatusOr<std::string> KernelName(CUkernel kernel) = 0;

  // Driver, for module replacement (cupti_hook/module_patcher.h).
  // Compute capability of the current context's device as 10*major + minor
  // (90 for an H100/H200); device 0 when no context is current.
  [[nodiscard]] virtual absl::StatusOr<uint32_t> CurrentDeviceSm() = 0;
  [[nodiscard]] virtual absl::StatusOr<DeviceGlobal> LibraryGlobal(CUlibrary library,
                                                                   const char* name) = 0;
  [[nodiscard]] virtual absl::StatusOr<DeviceGlobal> ModuleGlobal(CUmodule module,
                                                                  const char* name) = 0;
  [[nodiscard]] virtual absl::Status MemcpyHtoD(CUdeviceptr dst, const void* src,
                                                size_t bytes) = 0;
  // cuThreadExchangeStreamCaptureMode: sets this thread's stream-capture
  // interaction mode (CUstreamCaptureMode) and returns the previous one. The
  // hook's own allocations and copies run RELAXED, so that a module loaded
  // while the application captures a CUDA graph does not invalidate the
  // capture.
  [[nodiscard]] virtual absl::StatusOr<int> ExchangeCaptureMode(int mode) = 0;
  // The context current on the calling thread (null when none).
  [[nodiscard]] virtual absl::StatusOr<CUcontext> CurrentContext() = 0;
  // Runs `fn` with `context` current on the calling thread, then makes the
  // previous one current again. An error (the context cannot be made
  // current) runs nothing.
  [[nodiscard]] virtual absl::Status InContext(CUcontext context,
                                               absl::FunctionRef<void()> fn) = 0;
  // CUPTI's id of a stream (the streamId of its activity records).
  [[nodiscard]] virtual absl::StatusOr<uint32_t> StreamId(CUcontext context, CUstream stream) = 0;

  // Driver, for launch-time redirection (cupti_hook/late_attach.h).
  // The library or module a launch handle belongs to, and its name: a
  // CUfunction (cuFuncGetName succeeds) through cuFuncGetModule, a CUkernel
  // through cuKernelGetName and cuKernelGetLibrary.
  [[nodiscard]] virtual absl::StatusOr<FunctionOwner> LaunchOwner(CUfunction function) = 0;
  // cuModuleLoadData into the current context.
  [[nodiscard]] virtual absl::StatusOr<CUmodule> LoadModuleData(const void* image) = 0;
  [[nodiscard]] virtual absl::StatusOr<CUfunction> ModuleFunction(CUmodule module,
                                                                   const char* name) = 0;
  [[nodiscard]] virtual absl::Status UnloadModule(CUmodule module) = 0;
  // cuStreamIsCapturing: whether work launched on `stream` now would be
  // captured into a graph instead of running.
  [[nodiscard]] virtual absl::StatusOr<bool> StreamCapturing(CUstream stream) = 0;
  // A function attribute of a launch handle (a CUfunction, or a CUkernel
  // through cuKernelGetAttribute on the current context's device), and
  // setting one on a CUfunction.
  [[nodiscard]] virtual absl::StatusOr<int> FunctionAttribute(CUfunction function,
                                                              CUfunction_attribute attribute) = 0;
  [[nodiscard]] virtual absl::Status SetFunctionAttribute(CUfunction function,
                                                          CUfunction_attribute attribute,
                                                          int value) = 0;
  // Events marking the end of redirected launches: created (without timing)
  // and recorded on `stream` in the current context; done or not yet;
  // destroyed.
  [[nodiscard]] virtual absl::StatusOr<CUevent> RecordEvent(CUstream stream) = 0;
  [[nodiscard]] virtual absl::StatusOr<bool> EventDone(CUevent event) = 0;
  virtual void DestroyEvent(CUevent event) = 0;
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_SEAM_H_
