#include "cupti_hook/testing/fake_seam.h"

#include "absl/strings/str_cat.h"

namespace cuprobe {

void FakeSeam::Record(const std::string& call) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(call);
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
  if (!enable_status.ok()) return enable_status;
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

absl::Status FakeSeam::ActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc,
                                                 CUpti_BuffersCallbackCompleteFunc) {
  Record("ActivityRegisterCallbacks");
  return absl::OkStatus();
}

absl::Status FakeSeam::ActivityEnable(CUpti_ActivityKind kind) {
  Record(absl::StrCat("ActivityEnable(", kind, ")"));
  return absl::OkStatus();
}

absl::Status FakeSeam::ActivityDisable(CUpti_ActivityKind kind) {
  Record(absl::StrCat("ActivityDisable(", kind, ")"));
  return absl::OkStatus();
}

absl::Status FakeSeam::ActivityFlushAll(bool forced) {
  Record(absl::StrCat("ActivityFlushAll(", forced ? 1 : 0, ")"));
  return absl::OkStatus();
}

absl::StatusOr<CUpti_Activity*> FakeSeam::ActivityNextRecord(uint8_t*, size_t, CUpti_Activity*) {
  return absl::NotFoundError("end of activity buffer");
}

absl::StatusOr<size_t> FakeSeam::ActivityDroppedRecords(CUcontext, uint32_t) { return 0; }

absl::Status FakeSeam::Finalize() {
  Record("Finalize");
  return absl::OkStatus();
}

uint64_t FakeSeam::Timestamp() { return now_ns; }

absl::StatusOr<std::string> FakeSeam::FunctionName(CUfunction function) {
  Record("FunctionName");
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

}  // namespace cuprobe
