#include "cupti_hook/testing/fake_seam.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace cuprobe {

void FakeSeam::Record(const std::string& call) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(call);
    AppendEvent(events, call);
  }
  if (on_call) on_call(call);
}

std::vector<std::string> FakeSeam::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

bool FakeSeam::subscribed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return callback_ != nullptr;
}

std::set<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> FakeSeam::enabled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return enabled_;
}

void FakeSeam::Fire(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata) {
  CUpti_CallbackFunc cb;
  void* ud;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cb = callback_;
    ud = userdata_;
  }
  if (cb != nullptr) cb(ud, domain, cbid, cbdata);
}

absl::Status FakeSeam::Subscribe(CUpti_CallbackFunc callback, void* userdata,
                                 const char* subscriber_name, std::string* other_tool_out) {
  Record("Subscribe");
  if (!subscribe_status.ok()) {
    if (other_tool_out != nullptr) *other_tool_out = other_tool;
    return subscribe_status;
  }
  std::lock_guard<std::mutex> lock(mu_);
  callback_ = callback;
  userdata_ = userdata;
  return absl::OkStatus();
}

absl::Status FakeSeam::Unsubscribe() {
  Record("Unsubscribe");
  std::lock_guard<std::mutex> lock(mu_);
  callback_ = nullptr;
  userdata_ = nullptr;
  enabled_.clear();
  return absl::OkStatus();
}

absl::Status FakeSeam::EnableCallback(bool enable, CUpti_CallbackDomain domain,
                                      CUpti_CallbackId cbid) {
  Record(absl::StrCat("EnableCallback(", enable ? 1 : 0, ",", domain, ",", cbid, ")"));
  if (!enable_status.ok() && (!enable_status_domain.has_value() || *enable_status_domain == domain)) {
    return enable_status;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (enable) {
    enabled_.insert({domain, cbid});
  } else {
    enabled_.erase({domain, cbid});
  }
  return absl::OkStatus();
}

absl::Status FakeSeam::EnableDomain(bool enable, CUpti_CallbackDomain domain) {
  Record(absl::StrCat("EnableDomain(", enable ? 1 : 0, ",", domain, ")"));
  return enable_status;
}

absl::Status FakeSeam::ActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                 CUpti_BuffersCallbackCompleteFunc complete) {
  Record("ActivityRegisterCallbacks");
  std::lock_guard<std::mutex> lock(mu_);
  request_ = request;
  complete_ = complete;
  return absl::OkStatus();
}

size_t FakeSeam::ActivityRecordSize(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_RUNTIME:
      return sizeof(CUpti_ActivityAPI);
    default:
      return 0;
  }
}

void FakeSeam::QueueActivity(const void* record, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  CUpti_ActivityKind kind = CUPTI_ACTIVITY_KIND_INVALID;
  std::memcpy(&kind, record, sizeof(kind));
  // As CUPTI: a kernel, copy or set happens unrecorded while its kind is off.
  if ((kind == CUPTI_ACTIVITY_KIND_KERNEL || kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
       kind == CUPTI_ACTIVITY_KIND_MEMCPY || kind == CUPTI_ACTIVITY_KIND_MEMSET) &&
      activity_on_.count(absl::StrCat("kind ", kind)) == 0) {
    return;
  }
  const auto* p = static_cast<const uint8_t*>(record);
  pending_.insert(pending_.end(), p, p + size);
}

absl::Status FakeSeam::ActivityEnable(CUpti_ActivityKind kind) {
  Record(absl::StrCat("ActivityEnable(", kind, ")"));
  if (!activity_enable_status.ok()) return activity_enable_status;
  SetActivityOn(absl::StrCat("kind ", kind), true);
  return absl::OkStatus();
}

absl::Status FakeSeam::ActivityEnableDriverApi(CUpti_CallbackId cbid, bool enable) {
  Record(absl::StrCat("ActivityEnableDriverApi(", cbid, ",", enable ? 1 : 0, ")"));
  if (enable && !driver_api_activity_status.ok()) return driver_api_activity_status;
  SetActivityOn(absl::StrCat("driver ", cbid), enable);
  return absl::OkStatus();
}

absl::Status FakeSeam::ActivityEnableRuntimeApi(CUpti_CallbackId cbid, bool enable) {
  Record(absl::StrCat("ActivityEnableRuntimeApi(", cbid, ",", enable ? 1 : 0, ")"));
  if (enable && !runtime_api_activity_status.ok()) return runtime_api_activity_status;
  SetActivityOn(absl::StrCat("runtime ", cbid), enable);
  return absl::OkStatus();
}

void FakeSeam::SetActivityOn(const std::string& what, bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  if (on) {
    activity_on_.insert(what);
  } else {
    activity_on_.erase(what);
  }
}

std::set<std::string> FakeSeam::activity_on() const {
  std::lock_guard<std::mutex> lock(mu_);
  return activity_on_;
}

absl::Status FakeSeam::ActivityUseSystemThreadIds() {
  Record("ActivityUseSystemThreadIds()");
  return system_thread_ids_status;
}

absl::Status FakeSeam::ActivityDisable(CUpti_ActivityKind kind) {
  Record(absl::StrCat("ActivityDisable(", kind, ")"));
  SetActivityOn(absl::StrCat("kind ", kind), false);
  return absl::OkStatus();
}

absl::Status FakeSeam::ActivityFlushAll(bool forced) {
  Record(absl::StrCat("ActivityFlushAll(", forced ? 1 : 0, ")"));
  std::vector<uint8_t> records;
  CUpti_BuffersCallbackRequestFunc request;
  CUpti_BuffersCallbackCompleteFunc complete;
  {
    std::lock_guard<std::mutex> lock(mu_);
    records.swap(pending_);
    request = request_;
    complete = complete_;
  }
  if (records.empty() || request == nullptr || complete == nullptr) return absl::OkStatus();
  uint8_t* buffer = nullptr;
  size_t size = 0;
  size_t max_records = 0;
  request(&buffer, &size, &max_records);
  if (buffer == nullptr || size < records.size()) return absl::ResourceExhaustedError("buffer");
  std::memcpy(buffer, records.data(), records.size());
  complete(nullptr, 0, buffer, size, records.size());  // frees the buffer
  return absl::OkStatus();
}

absl::StatusOr<CUpti_Activity*> FakeSeam::ActivityNextRecord(uint8_t* buffer, size_t valid_size,
                                                             CUpti_Activity* previous) {
  uint8_t* next = buffer;
  if (previous != nullptr) {
    size_t size = ActivityRecordSize(previous->kind);
    if (size == 0) return absl::InvalidArgumentError("unknown activity kind");
    next = reinterpret_cast<uint8_t*>(previous) + size;
  }
  if (next >= buffer + valid_size) return absl::NotFoundError("end of activity buffer");
  return reinterpret_cast<CUpti_Activity*>(next);
}

absl::StatusOr<size_t> FakeSeam::ActivityDroppedRecords(CUcontext, uint32_t) { return 0; }

absl::Status FakeSeam::Finalize() {
  Record("Finalize");
  return absl::OkStatus();
}

uint64_t FakeSeam::Timestamp() { return now_ns; }

absl::StatusOr<std::string> FakeSeam::FunctionName(CUfunction function) {
  Record("FunctionName");
  if (kernel_handles.count(function) != 0) {
    return absl::InvalidArgumentError("cuFuncGetName: CUDA_ERROR_INVALID_HANDLE");
  }
  auto it = names.find(function);
  if (it == names.end()) return absl::InvalidArgumentError("cuFuncGetName: unknown handle");
  return it->second;
}

absl::StatusOr<std::string> FakeSeam::KernelName(CUkernel kernel) {
  Record("KernelName");
  auto it = names.find(kernel);
  if (it == names.end()) return absl::InvalidArgumentError("cuKernelGetName: unknown handle");
  return it->second;
}

absl::StatusOr<uint32_t> FakeSeam::CurrentDeviceSm() {
  Record("CurrentDeviceSm");
  return device_sm;
}

absl::StatusOr<DeviceGlobal> FakeSeam::LibraryGlobal(CUlibrary library, const char* name) {
  Record(absl::StrCat("LibraryGlobal(", name, ")"));
  auto it = globals.find({library, name});
  if (it == globals.end()) return absl::NotFoundError("cuLibraryGetGlobal: no such global");
  return it->second;
}

absl::StatusOr<DeviceGlobal> FakeSeam::ModuleGlobal(CUmodule module, const char* name) {
  Record(absl::StrCat("ModuleGlobal(", name, ")"));
  auto it = globals.find({module, name});
  if (it == globals.end()) return absl::NotFoundError("cuModuleGetGlobal: no such global");
  return it->second;
}

absl::Status FakeSeam::MemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) {
  Record(absl::StrCat("MemcpyHtoD(", dst, ",", bytes, ")"));
  if (!memcpy_status.ok()) return memcpy_status;
  if (dst > device_memory.size() || bytes > device_memory.size() - dst) {
    return absl::OutOfRangeError("cuMemcpyHtoD: outside the fake device memory");
  }
  std::memcpy(device_memory.data() + dst, src, bytes);
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> FakeSeam::StreamId(CUcontext context, CUstream stream) {
  Record("StreamId");
  return stream_id;
}

absl::StatusOr<int> FakeSeam::ExchangeCaptureMode(int mode) {
  Record(absl::StrCat("ExchangeCaptureMode(", mode, ")"));
  int previous = capture_mode;
  capture_mode = mode;
  return previous;
}

absl::StatusOr<CUcontext> FakeSeam::CurrentContext() { return current_context; }

absl::Status FakeSeam::InContext(CUcontext context, absl::FunctionRef<void()> fn) {
  Record("InContext");
  if (!in_context_status.ok()) return in_context_status;
  contexts_entered.push_back(context);
  CUcontext previous = current_context;
  current_context = context;
  fn();
  current_context = previous;
  return absl::OkStatus();
}

absl::StatusOr<FunctionOwner> FakeSeam::LaunchOwner(CUfunction function) {
  Record("LaunchOwner");
  auto it = owners.find(function);
  if (it == owners.end()) return absl::InvalidArgumentError("cuFuncGetModule: unknown handle");
  return it->second;
}

absl::StatusOr<CUmodule> FakeSeam::LoadModuleData(const void* image) {
  Record("LoadModuleData");
  if (!load_module_status.ok()) return load_module_status;
  std::lock_guard<std::mutex> lock(mu_);
  loaded_images.emplace_back(static_cast<const char*>(image), 4);
  // Handles 0x1000 apart, so that ModuleFunction's can follow each.
  return reinterpret_cast<CUmodule>(kFirstLoadedModule + 0x1000 * (loaded_images.size() - 1));
}

absl::StatusOr<CUfunction> FakeSeam::ModuleFunction(CUmodule module, const char* name) {
  Record(absl::StrCat("ModuleFunction(", name, ")"));
  for (size_t i = 0; i < module_functions.size(); ++i) {
    if (module_functions[i] == name) {
      return reinterpret_cast<CUfunction>(reinterpret_cast<uintptr_t>(module) + 1 + i);
    }
  }
  return absl::NotFoundError("cuModuleGetFunction: CUDA_ERROR_NOT_FOUND");
}

absl::Status FakeSeam::UnloadModule(CUmodule module) {
  Record("UnloadModule");
  std::lock_guard<std::mutex> lock(mu_);
  unloaded_modules.push_back(module);
  return absl::OkStatus();
}

absl::StatusOr<bool> FakeSeam::StreamCapturing(CUstream stream) {
  Record("StreamCapturing");
  return capturing_streams.count(stream) != 0;
}

absl::StatusOr<int> FakeSeam::FunctionAttribute(CUfunction function,
                                                CUfunction_attribute attribute) {
  Record(absl::StrCat("FunctionAttribute(", static_cast<int>(attribute), ")"));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = attributes.find({function, static_cast<int>(attribute)});
  if (it != attributes.end()) return it->second;
  if (attribute == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) return 1024;
  if (attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) return 48 << 10;
  return 0;
}

absl::Status FakeSeam::SetFunctionAttribute(CUfunction function, CUfunction_attribute attribute,
                                            int value) {
  Record(absl::StrCat("SetFunctionAttribute(", static_cast<int>(attribute), ",", value, ")"));
  std::lock_guard<std::mutex> lock(mu_);
  attributes[{function, static_cast<int>(attribute)}] = value;
  return absl::OkStatus();
}

absl::StatusOr<CUevent> FakeSeam::RecordEvent(CUstream stream) {
  Record("RecordEvent");
  std::lock_guard<std::mutex> lock(mu_);
  recorded_events.push_back(stream);
  return reinterpret_cast<CUevent>(recorded_events.size());
}

absl::StatusOr<bool> FakeSeam::EventDone(CUevent event) {
  Record("EventDone");
  return events_done;
}

void FakeSeam::DestroyEvent(CUevent event) {
  Record("DestroyEvent");
  std::lock_guard<std::mutex> lock(mu_);
  ++events_destroyed;
}

}  // namespace cuprobe
