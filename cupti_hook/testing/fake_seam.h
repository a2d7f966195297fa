// File: cupti_hook/testing/fake_seam.h
//
// A CuptiSeam for unit tests: records every call by name, lets the test choose
// each call's result, and fires callbacks that the test builds by hand.
//
//   FakeSeam seam;
//   seam.subscribe_status = absl::AlreadyExistsError("...");
//   seam.other_tool = "Nsight Systems";
//   Hook hook(seam, {});
//   EXPECT_EQ(hook.Start(), HookState::kDisabled);
//
//   CUpti_CallbackData data = {}; data.callbackSite = CUPTI_API_ENTER;
//   seam.Fire(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data);
#ifndef CUPROBE_CUPTI_HOOK_TESTING_FAKE_SEAM_H_
#define CUPROBE_CUPTI_HOOK_TESTING_FAKE_SEAM_H_

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cupti_hook/seam.h"
#include "cupti_hook/testing/event_log.h"

namespace cuprobe {

class FakeSeam : public CuptiSeam {
 public:
  // Results the test chooses.
  absl::Status subscribe_status;
  std::string other_tool;
  absl::Status enable_status;
  // EnableCallback(true, ...) of this domain alone fails with enable_status
  // (every domain when unset).
  std::optional<CUpti_CallbackDomain> enable_status_domain;
  absl::Status driver_api_activity_status;   // ActivityEnableDriverApi(..., true)
  absl::Status runtime_api_activity_status;  // ActivityEnableRuntimeApi(..., true)
  absl::Status system_thread_ids_status;     // ActivityUseSystemThreadIds()
  absl::Status activity_enable_status;       // ActivityEnable()
  std::map<const void*, std::string> names;  // handle -> kernel name
  // Handles that are CUkernels: cuFuncGetName fails on them, as on a driver.
  std::set<const void*> kernel_handles;
  std::atomic<uint64_t> now_ns{1000};  // Timestamp(); the watcher thread reads it too
  // Module replacement.
  absl::StatusOr<uint32_t> device_sm = 90u;
  // Module globals by (handle, name); MemcpyHtoD writes into `device_memory`
  // at the global's address (an offset into it).
  std::map<std::pair<const void*, std::string>, DeviceGlobal> globals;
  std::vector<uint8_t> device_memory = std::vector<uint8_t>(4096);
  absl::Status memcpy_status;
  uint32_t stream_id = 77;
  int capture_mode = 0;  // CU_STREAM_CAPTURE_MODE_GLOBAL
  // The thread's current context, and every context InContext made current.
  // An error in `in_context_status` makes InContext fail (running nothing),
  // as cuCtxSetCurrent would.
  CUcontext current_context = nullptr;
  std::vector<CUcontext> contexts_entered;
  absl::Status in_context_status;
  // What Driver() returns: a test's fake table (tests/unit/fake_cuda_driver.h).
  absl::StatusOr<const CudaDriver*> driver =
      absl::UnavailableError("the fake seam has no CUDA driver");
  // Launch-time redirection: launch handle -> owner; each LoadModuleData
  // returns the next handle from kFirstLoadedModule on and keeps the image
  // pointer; ModuleFunction returns module + 1 + the index of the name in
  // `module_functions` (NOT_FOUND for a name not there).
  std::map<const void*, FunctionOwner> owners;
  absl::Status load_module_status;
  // The first 4 bytes of each image loaded (the driver copies an image: the
  // caller may free it once the load returns).
  std::vector<std::string> loaded_images;
  std::vector<std::string> module_functions;
  static constexpr uintptr_t kFirstLoadedModule = 0x100000;
  // Attributes by (handle, attribute); a missing one reads as 0, except
  // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK (1024) and
  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (48 KiB).
  std::map<std::pair<const void*, int>, int> attributes;
  std::set<const void*> capturing_streams;
  // Events: recorded on which stream (index = handle - 1); EventDone says
  // `events_done`.
  std::vector<CUstream> recorded_events;
  bool events_done = true;
  int events_destroyed = 0;
  std::vector<CUmodule> unloaded_modules;

  // Called (when set) inside each seam call, e.g. to re-enter the hook.
  std::function<void(const std::string& call)> on_call;
  // When set, every call is also appended here (shared with FakeOutput to
  // check the order of teardown steps).
  std::vector<std::string>* events = nullptr;

  // Activity records for the next ActivityFlushAll: laid out back to back in
  // one buffer, as CUPTI does (CUpti_ActivityKernel10, CUpti_ActivityMemcpy6,
  // CUpti_ActivityMemset4). Flushing hands them to the registered
  // buffer-completed callback. A kernel, memcpy or memset record is dropped
  // while its kind is off (ActivityEnable/ActivityDisable), as CUPTI would
  // not write it.
  void QueueActivity(const void* record, size_t size);
  [[nodiscard]] static size_t ActivityRecordSize(CUpti_ActivityKind kind);

  // What happened.
  [[nodiscard]] std::vector<std::string> calls() const;
  [[nodiscard]] bool subscribed() const;
  [[nodiscard]] std::set<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> enabled() const;
  // The activity on now: "kind N" for each activity kind, "driver N" and
  // "runtime N" for each call whose API activity is on.
  [[nodiscard]] std::set<std::string> activity_on() const;

  // Invokes the subscribed callback as CUPTI would (no-op if unsubscribed).
  void Fire(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata);

  absl::Status Subscribe(CUpti_CallbackFunc callback, void* userdata, const char* subscriber_name,
                         std::string* other_tool_out) override;
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
  absl::StatusOr<const CudaDriver*> Driver() override { return driver; }
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
  void Record(const std::string& call);
  void SetActivityOn(const std::string& what, bool on);

  mutable std::mutex mu_;
  std::vector<std::string> calls_;
  CUpti_CallbackFunc callback_ = nullptr;
  void* userdata_ = nullptr;
  std::set<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> enabled_;
  CUpti_BuffersCallbackRequestFunc request_ = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete_ = nullptr;
  std::vector<uint8_t> pending_;
  std::set<std::string> activity_on_;
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_TESTING_FAKE_SEAM_H_
