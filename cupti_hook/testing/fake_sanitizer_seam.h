// File: cupti_hook/testing/fake_sanitizer_seam.h
//
// A SanitizerSeam for unit tests: records every call, lets the test choose
// each call's result, and fires callbacks the test builds by hand.
//
//   FakeSanitizerSeam san;
//   Hook hook(seam, config, make_output, &san);
//   sanitizer::LaunchData launch = {...};
//   san.Fire(sanitizer::kDomainLaunch, sanitizer::kLaunchBegin, &launch);
#ifndef CUPROBE_CUPTI_HOOK_TESTING_FAKE_SANITIZER_SEAM_H_
#define CUPROBE_CUPTI_HOOK_TESTING_FAKE_SANITIZER_SEAM_H_

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cupti_hook/sanitizer_seam.h"

namespace cuprobe {

class FakeSanitizerSeam final : public SanitizerSeam {
 public:
  // Results the test chooses.
  absl::Status subscribe_status;
  absl::Status enable_status;
  absl::Status add_patches_status;
  absl::Status patch_status;  // PatchInstructions and PatchModule
  absl::Status callback_data_status;  // SetCallbackData and SetLaunchCallbackData
  absl::Status copy_status;

  // What happened.
  std::vector<std::string> calls;
  std::set<std::pair<int, uint32_t>> enabled;
  std::vector<CUcontext> patches_added;  // AddPatches, by context
  std::vector<std::pair<CUmodule, std::string>> patched;  // PatchInstructions
  std::vector<CUmodule> modules_patched;                   // PatchModule
  std::map<CUfunction, const void*> callback_data;         // SetCallbackData
  std::map<sanitizer::LaunchHandle, const void*> launch_data;  // SetLaunchCallbackData
  std::vector<std::pair<uintptr_t, std::vector<uint8_t>>> copies;  // CopyToDeviceAsync

  [[nodiscard]] bool subscribed() const { return callback_ != nullptr; }
  void Fire(sanitizer::Domain domain, uint32_t cbid, const void* cbdata) {
    if (callback_ != nullptr) callback_(userdata_, domain, cbid, cbdata);
  }

  absl::Status Subscribe(sanitizer::CallbackFunc callback, void* userdata) override {
    calls.push_back("Subscribe");
    if (!subscribe_status.ok()) return subscribe_status;
    callback_ = callback;
    userdata_ = userdata;
    return absl::OkStatus();
  }
  absl::Status Unsubscribe() override {
    calls.push_back("Unsubscribe");
    callback_ = nullptr;
    return absl::OkStatus();
  }
  absl::Status EnableDomain(bool enable, sanitizer::Domain domain) override {
    calls.push_back(absl::StrCat("EnableDomain(", domain, ")"));
    return enable_status;
  }
  absl::Status EnableCallback(bool enable, sanitizer::Domain domain, uint32_t cbid) override {
    calls.push_back(absl::StrCat("EnableCallback(", domain, ",", cbid, ")"));
    if (!enable_status.ok()) return enable_status;
    if (enable) enabled.insert({domain, cbid});
    return absl::OkStatus();
  }
  absl::Status AddPatches(const void* image, CUcontext context) override {
    calls.push_back("AddPatches");
    if (!add_patches_status.ok()) return add_patches_status;
    patches_added.push_back(context);
    return absl::OkStatus();
  }
  absl::Status PatchInstructions(sanitizer::Instruction instruction, CUmodule module,
                                 const char* callback) override {
    calls.push_back(absl::StrCat("PatchInstructions(", instruction, ",", callback, ")"));
    if (!patch_status.ok()) return patch_status;
    patched.emplace_back(module, callback);
    return absl::OkStatus();
  }
  absl::Status PatchModule(CUmodule module) override {
    calls.push_back("PatchModule");
    if (!patch_status.ok()) return patch_status;
    modules_patched.push_back(module);
    return absl::OkStatus();
  }
  absl::Status SetCallbackData(CUfunction kernel, const void* userdata) override {
    calls.push_back("SetCallbackData");
    if (!callback_data_status.ok()) return callback_data_status;
    callback_data[kernel] = userdata;
    return absl::OkStatus();
  }
  absl::Status SetLaunchCallbackData(sanitizer::LaunchHandle launch, CUfunction kernel,
                                     sanitizer::StreamHandle stream,
                                     const void* userdata) override {
    calls.push_back("SetLaunchCallbackData");
    if (!callback_data_status.ok()) return callback_data_status;
    launch_data[launch] = userdata;
    return absl::OkStatus();
  }
  absl::Status CopyToDeviceAsync(void* dst, const void* src, size_t bytes,
                                 sanitizer::StreamHandle stream) override {
    calls.push_back("CopyToDeviceAsync");
    if (!copy_status.ok()) return copy_status;
    copies.emplace_back(reinterpret_cast<uintptr_t>(dst),
                        std::vector<uint8_t>(static_cast<const uint8_t*>(src),
                                             static_cast<const uint8_t*>(src) + bytes));
    return absl::OkStatus();
  }
  std::string LibraryPath() const override { return "fake-libsanitizer-public.so"; }

 private:
  sanitizer::CallbackFunc callback_ = nullptr;
  void* userdata_ = nullptr;
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_TESTING_FAKE_SANITIZER_SEAM_H_
