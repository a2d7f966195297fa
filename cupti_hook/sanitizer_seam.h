// File: cupti_hook/sanitizer_seam.h
//
// The Compute Sanitizer side of the GPU seam: the calls the patch backend
// makes (subscribe, enable callbacks, load the patch module, patch modules,
// hand a kernel its callback data). real_sanitizer_seam.cc is the only file
// that loads libsanitizer-public.so (dlopen; the build machines have no
// Sanitizer, so nothing links it); tests use testing/fake_sanitizer_seam.h.
//
//   std::unique_ptr<SanitizerSeam> san = MakeRealSanitizerSeam(config.sanitizer_paths);
//   CUPROBE_RETURN_IF_ERROR(san->Subscribe(&Hook::SanitizerCallback, hook));
//   CUPROBE_RETURN_IF_ERROR(san->EnableDomain(true, sanitizer::kDomainLaunch));
//
// CUPTI and the Sanitizer exclude each other in one process: a hook uses
// one or the other (docs/ARCHITECTURE.md).
#ifndef CUPROBE_CUPTI_HOOK_SANITIZER_SEAM_H_
#define CUPROBE_CUPTI_HOOK_SANITIZER_SEAM_H_

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cupti_hook/sanitizer_api.h"

namespace cuprobe {

class SanitizerSeam {
 public:
  virtual ~SanitizerSeam() = default;
  // Loads the library (first call) and subscribes. UNAVAILABLE: no library
  // (the message lists where it was looked for); ALREADY_EXISTS: another
  // tool holds the Sanitizer (or CUPTI: they exclude each other).
  [[nodiscard]] virtual absl::Status Subscribe(sanitizer::CallbackFunc callback,
                                               void* userdata) = 0;
  [[nodiscard]] virtual absl::Status Unsubscribe() = 0;
  [[nodiscard]] virtual absl::Status EnableDomain(bool enable, sanitizer::Domain domain) = 0;
  [[nodiscard]] virtual absl::Status EnableCallback(bool enable, sanitizer::Domain domain,
                                                    uint32_t cbid) = 0;
  // Loads the patch module (a cubin) into `context`.
  [[nodiscard]] virtual absl::Status AddPatches(const void* image, CUcontext context) = 0;
  [[nodiscard]] virtual absl::Status PatchInstructions(sanitizer::Instruction instruction,
                                                       CUmodule module,
                                                       const char* callback) = 0;
  [[nodiscard]] virtual absl::Status PatchModule(CUmodule module) = 0;
  // The device pointer every patch call of `kernel`'s later launches gets.
  [[nodiscard]] virtual absl::Status SetCallbackData(CUfunction kernel, const void* userdata) = 0;
  // The same for one launch (at its LAUNCH_BEGIN), which then wins over
  // the kernel's.
  [[nodiscard]] virtual absl::Status SetLaunchCallbackData(sanitizer::LaunchHandle launch,
                                                           CUfunction kernel,
                                                           sanitizer::StreamHandle stream,
                                                           const void* userdata) = 0;
  // Copies `bytes` from host memory to device memory in `stream`'s order.
  [[nodiscard]] virtual absl::Status CopyToDeviceAsync(void* dst, const void* src, size_t bytes,
                                                       sanitizer::StreamHandle stream) = 0;
  // Where the library was loaded from (empty before Subscribe).
  [[nodiscard]] virtual std::string LibraryPath() const = 0;
};

// The real seam over libsanitizer-public.so, tried at each of `paths` in
// order (HookConfig::sanitizer_paths: $CUDA_HOME/compute-sanitizer, the
// toolkit's default place, then the loader's search path).
[[nodiscard]] std::unique_ptr<SanitizerSeam> MakeRealSanitizerSeam(
    std::vector<std::string> paths);

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_SANITIZER_SEAM_H_
