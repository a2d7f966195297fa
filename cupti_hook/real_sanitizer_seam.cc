// File: cupti_hook/real_sanitizer_seam.cc
#include <dlfcn.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cupti_hook/sanitizer_seam.h"

namespace cuprobe {
namespace {

using sanitizer::Api;
using sanitizer::Result;

// SANITIZER_ERROR_* values that mean "someone else holds it".
constexpr Result kErrorMultipleSubscribers = 10;  // SANITIZER_ERROR_MAX_LIMIT_REACHED
constexpr Result kErrorNotCompatible = 12;        // SANITIZER_ERROR_NOT_COMPATIBLE

template <typename F>
bool Resolve(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(::dlsym(lib, name));
  return *fn != nullptr;
}

class RealSanitizerSeam final : public SanitizerSeam {
 public:
  explicit RealSanitizerSeam(std::vector<std::string> paths) : paths_(std::move(paths)) {}

  absl::Status Subscribe(sanitizer::CallbackFunc callback, void* userdata) override {
    absl::Status loaded = Load();
    if (!loaded.ok()) return loaded;
    Result r = api_.Subscribe(&subscriber_, callback, userdata);
    if (r == kErrorMultipleSubscribers || r == kErrorNotCompatible) {
      return absl::AlreadyExistsError(Describe("sanitizerSubscribe", r));
    }
    return Check(r, "sanitizerSubscribe");
  }
  absl::Status Unsubscribe() override {
    if (subscriber_ == nullptr) return absl::OkStatus();
    absl::Status s = Check(api_.Unsubscribe(subscriber_), "sanitizerUnsubscribe");
    subscriber_ = nullptr;
    return s;
  }
  absl::Status EnableDomain(bool enable, sanitizer::Domain domain) override {
    return Check(api_.EnableDomain(enable ? 1 : 0, subscriber_, domain), "sanitizerEnableDomain");
  }
  absl::Status EnableCallback(bool enable, sanitizer::Domain domain, uint32_t cbid) override {
    return Check(api_.EnableCallback(enable ? 1 : 0, subscriber_, domain, cbid),
                 "sanitizerEnableCallback");
  }
  absl::Status AddPatches(const void* image, CUcontext context) override {
    return Check(api_.AddPatches(image, context), "sanitizerAddPatches");
  }
  absl::Status PatchInstructions(sanitizer::Instruction instruction, CUmodule module,
                                 const char* callback) override {
    return Check(api_.PatchInstructions(instruction, module, callback),
                 absl::StrCat("sanitizerPatchInstructions(", callback, ")"));
  }
  absl::Status PatchModule(CUmodule module) override {
    return Check(api_.PatchModule(module), "sanitizerPatchModule");
  }
  absl::Status SetCallbackData(CUfunction kernel, const void* userdata) override {
    return Check(api_.SetCallbackData(kernel, userdata), "sanitizerSetCallbackData");
  }
  absl::Status SetLaunchCallbackData(sanitizer::LaunchHandle launch, CUfunction kernel,
                                     sanitizer::StreamHandle stream,
                                     const void* userdata) override {
    return Check(api_.SetLaunchCallbackData(launch, kernel, stream, userdata),
                 "sanitizerSetLaunchCallbackData");
  }
  absl::Status CopyToDeviceAsync(void* dst, const void* src, size_t bytes,
                                 sanitizer::StreamHandle stream) override {
    return Check(api_.MemcpyHostToDeviceAsync(dst, const_cast<void*>(src), bytes, stream),
                 "sanitizerMemcpyHostToDeviceAsync");
  }
  std::string LibraryPath() const override { return path_; }

 private:
  absl::Status Load() {
    if (lib_ != nullptr) return absl::OkStatus();
    for (const std::string& path : paths_) {
      lib_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib_ != nullptr) {
        path_ = path;
        break;
      }
    }
    if (lib_ == nullptr) {
      return absl::UnavailableError(absl::StrCat("libsanitizer-public.so not found (looked at ",
                                                 absl::StrJoin(paths_, ", "), ")"));
    }
    bool ok = Resolve(lib_, "sanitizerSubscribe", &api_.Subscribe) &&
              Resolve(lib_, "sanitizerUnsubscribe", &api_.Unsubscribe) &&
              Resolve(lib_, "sanitizerEnableCallback", &api_.EnableCallback) &&
              Resolve(lib_, "sanitizerEnableDomain", &api_.EnableDomain) &&
              Resolve(lib_, "sanitizerGetResultString", &api_.GetResultString) &&
              Resolve(lib_, "sanitizerAddPatches", &api_.AddPatches) &&
              Resolve(lib_, "sanitizerPatchInstructions", &api_.PatchInstructions) &&
              Resolve(lib_, "sanitizerPatchModule", &api_.PatchModule) &&
              Resolve(lib_, "sanitizerSetCallbackData", &api_.SetCallbackData) &&
              Resolve(lib_, "sanitizerSetLaunchCallbackData", &api_.SetLaunchCallbackData) &&
              Resolve(lib_, "sanitizerMemcpyHostToDeviceAsync", &api_.MemcpyHostToDeviceAsync);
    if (!ok) {
      ::dlclose(lib_);
      lib_ = nullptr;
      return absl::UnavailableError(
          absl::StrCat(path_, " lacks a Compute Sanitizer entry point cuprobe needs"));
    }
    return absl::OkStatus();
  }

  std::string Describe(const std::string& call, Result r) const {
    const char* text = nullptr;
    if (api_.GetResultString != nullptr) api_.GetResultString(r, &text);
    return absl::StrCat(call, " failed: ", text != nullptr ? text : "error", " (", r, ")");
  }
  absl::Status Check(Result r, const std::string& call) const {
    if (r == sanitizer::kSuccess) return absl::OkStatus();
    return absl::InternalError(Describe(call, r));
  }

  const std::vector<std::string> paths_;
  void* lib_ = nullptr;
  std::string path_;
  Api api_ = {};
  sanitizer::SubscriberHandle subscriber_ = nullptr;
};

}  // namespace

std::unique_ptr<SanitizerSeam> MakeRealSanitizerSeam(std::vector<std::string> paths) {
  return std::make_unique<RealSanitizerSeam>(std::move(paths));
}

}  // namespace cuprobe
