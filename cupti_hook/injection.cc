// InitializeInjection: the one symbol libcuprobe_hook.so exports. The CUDA
// driver calls it inside the first cuInit when CUDA_INJECTION64_PATH names
// this library. It reads the configuration, builds the real seam, starts the
// hook, and returns 1 (the driver ignores the value).
#include <unistd.h>

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cupti_hook/hook.h"
#include "cupti_hook/outputs.h"
#include "cupti_hook/real_seam.h"
#include "cupti_hook/sanitizer_seam.h"
#include "support/log.h"

namespace {

// Leaked on purpose: CUPTI may call back, and the atexit handler runs, after
// static destructors would have run.
cuprobe::Hook* g_hook = nullptr;

void StopAtExit() {
  if (g_hook != nullptr) g_hook->Stop();
}

// Last resort, if the library is unloaded or atexit handlers did not run.
__attribute__((destructor)) void StopAtUnload() { StopAtExit(); }

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  cuprobe::SetLogPrefix(absl::StrCat("cuprobe[", ::getpid(), "]"));
  static cuprobe::Hook* hook = [] {
    auto* seam = new cuprobe::RealSeam;
    cuprobe::HookConfig config = cuprobe::HookConfig::FromEnvironment();
    // Loaded (dlopen) only if the patch backend subscribes.
    cuprobe::SanitizerSeam* sanitizer = cuprobe::MakeRealSanitizerSeam(config.sanitizer_paths).release();
    auto* h = new cuprobe::Hook(*seam, std::move(config), &cuprobe::MakeTraceOutput, sanitizer);
    g_hook = h;
    // Runs before the CUDA runtime's own atexit teardown (registered later).
    std::atexit(StopAtExit);
    return h;
  }();
  hook->Start();
  return 1;
}
