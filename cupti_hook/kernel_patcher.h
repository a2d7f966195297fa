// File: cupti_hook/kernel_patcher.h
//
// The patch backend's runtime: probes on kernels through the Compute
// Sanitizer patching API, which reaches kernels that ship SASS only
// (cuBLAS, cuDNN, PyTorch's own). The bundle's programs are compiled once
// into a patch module (ptx_rewriter/patch_module.h: adapters with the
// Sanitizer's callback signatures that call the lowered probes). Then:
//  - at each module load (the Sanitizer's MODULE_LOADED) whose cubin has a
//    kernel some program selects: the patch module is added to the module's
//    context (once per context), the module's block entries, exits and
//    memory accesses are patched to call the adapters, as the bundle needs;
//  - at the first launch of a selected kernel in a context: the kernel's
//    block (include/cuprobe/abi.h, cuprobe_patch_kernel: the context's map
//    block, the kernel's id and which programs run in it) is written to
//    device memory and set as the kernel's callback data. Kernels nobody
//    selects have no callback data, and the adapters return at once. When
//    every memory program the kernel runs summarizes (PatchSiteCounters),
//    the block also points at site counters registered with the maps, and
//    the adapters count the kernel's accesses instead of calling programs;
//  - when a program reads the kernel's arguments, each launch of a probed
//    kernel gets a block of its own instead, with the arguments of that
//    launch (taken from the launch call's kernelParams at its driver-API
//    ENTER: OnLaunchApi), copied in the launch's stream order into a ring of
//    kArgBlocks blocks of its stream and set as that launch's callback
//    data. A block is reused kArgBlocks launches later in the same stream,
//    so never before the launch that used it ran; past kArgRingStreams
//    streams in a context, the others share one ring, where a launch still
//    waiting in one stream kArgBlocks launches later would read a later
//    launch's arguments.
//
//   KernelPatcher patcher(seam, sanitizer, bundle, maps, build, on_kernel, {});
//   // Sanitizer callbacks (cupti_hook/hook_patch.cc):
//   patcher.OnModuleLoaded(context, module, cubin);
//   patcher.OnLaunchBegin(context, function, name);
//
// Never breaks the application: a module that cannot be patched runs
// unpatched, a kernel whose block cannot be written runs without probes;
// one line says why (once per module, once per failure kind).
//
// Locks: these run in the application's threads inside driver calls. `mu_`
// guards only the kernels' table and is never held across a driver or
// Sanitizer call, so a launch of a kernel already set up takes it briefly
// and nothing else. The slow work (building the patch module, patching,
// allocating and writing blocks) runs under `setup_mu_`, which is taken
// before `mu_` when both are needed, never after.
#ifndef CUPROBE_CUPTI_HOOK_KERNEL_PATCHER_H_
#define CUPROBE_CUPTI_HOOK_KERNEL_PATCHER_H_

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "cuprobe/abi.h"
#include "cupti_hook/module_patcher.h"
#include "cupti_hook/sanitizer_seam.h"
#include "cupti_hook/seam.h"
#include "probe/bundle.h"
#include "ptx_rewriter/patch_module.h"

namespace cuprobe {

struct KernelPatcherStats {
  uint64_t modules_seen = 0;
  uint64_t modules_patched = 0;
  uint64_t modules_failed = 0;
  uint64_t kernels_probed = 0;  // (context, kernel) pairs given a block
  uint64_t modules_rewritten = 0;  // left to the PTX backend (--backend auto)
};

class KernelPatcher {
 public:
  // Builds the patch module for a device SM (BuildPatchModule, with the
  // on-disk cache); called once per SM, at its first module to patch.
  using PatchBuilder = std::function<absl::StatusOr<PatchModule>(uint32_t sm)>;
  // Told each kernel the first time it gets probes, with its id.
  using KernelListener = std::function<void(std::string_view mangled_name, uint32_t kernel_id)>;

  struct Options {
    // Patch cp.async copies too (HookConfig::patch_async_copies); otherwise
    // the patch module's async-copy adapter is left unused.
    bool async_copies = false;
    // Count the memory accesses of kernels whose memory programs summarize
    // (PatchSiteCounters) instead of calling them (RewriterSettings).
    bool site_counters = true;
    // --backend auto, where the PTX backend rewrites what it can: whether a
    // loaded image is one it rewrote (such modules are left alone, their
    // kernels get no block), and the kernel ids it gives (shared, and told
    // to its own listener; on_kernel is then not called). Unset: every
    // module is patched and ids are this patcher's.
    std::function<bool(absl::Span<const uint8_t> cubin)> rewritten;
    std::function<uint32_t(const std::string& mangled)> kernel_id;
  };
  KernelPatcher(CuptiSeam& seam, SanitizerSeam& sanitizer, const ProbeBundle& bundle,
                MapTableProvider& maps, PatchBuilder build, KernelListener on_kernel,
                Options options);
  KernelPatcher(const KernelPatcher&) = delete;
  KernelPatcher& operator=(const KernelPatcher&) = delete;

  // A module finished loading in `context` (current on this thread).
  // `cubin`: its image as the Sanitizer gives it (may be empty: then every
  // module is patched and the kernels are chosen at launch).
  void OnModuleLoaded(CUcontext context, CUmodule module, absl::Span<const uint8_t> cubin);
  // Whether OnLaunchApi is needed (a program reads arguments).
  [[nodiscard]] bool wants_arguments() const { return wants_args_; }
  // A launch call's ENTER on this thread: its kernelParams (null when the
  // arguments come through `extra`), for the LAUNCH_BEGIN that follows on
  // the same thread inside the call.
  static void OnLaunchApi(void* const* kernel_params);
  // A launch is about to run `function` (named `name`, mangled) in
  // `context`, from its module `module`; `launch` and `stream` are the
  // Sanitizer's handles of it.
  struct Launch {
    CUcontext context = nullptr;
    CUmodule module = nullptr;
    CUfunction function = nullptr;
    const char* name = nullptr;
    sanitizer::LaunchHandle launch = nullptr;
    sanitizer::StreamHandle stream = nullptr;
  };
  void OnLaunchBegin(const Launch& launch);
  static constexpr uint32_t kArgBlocks = 4096;
  static constexpr uint32_t kArgRingStreams = 32;
  // The context is about to be destroyed: what was written there dies with
  // it; forget it.
  void OnContextDestroying(CUcontext context);
  // A module is about to be unloaded: a later module at its address, and
  // its functions at theirs, are new.
  void OnModuleUnloading(CUmodule module);

  [[nodiscard]] KernelPatcherStats stats() const;

 private:
  // Per-launch blocks (wants_args_): a device ring and its host sources.
  struct ArgRing {
    CUdeviceptr device = 0;
    std::vector<cuprobe_patch_kernel> host;
    uint32_t next = 0;
  };
  struct ContextState {
    bool patches_added = false;
    CUdeviceptr map_block = 0;
    // A ring per stream: a block is reused only by a launch ordered after
    // the one that used it. Streams past kArgRingStreams share `shared`.
    absl::flat_hash_map<sanitizer::StreamHandle, ArgRing> rings;
    ArgRing shared;
  };
  // The ring for a launch in `stream`, allocated at its first use.
  absl::StatusOr<ArgRing*> RingLocked(ContextState& state, sanitizer::StreamHandle stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(setup_mu_);
  // What a (context, function) got at its first launch.
  struct KernelState {
    CUmodule module = nullptr;
    uint32_t programs = 0;  // 0: not probed
    uint32_t id = 0;
    std::vector<uint32_t> param_sizes;  // bytes of each parameter (wants_args_)
    // Whether its first launch finished setting it up (a later launch that
    // gets setup_mu_ first finds its parameter sizes itself).
    bool set_up = false;
    // Its site counters (abi.h, 10.), set up at its first launch.
    CUdeviceptr site_counters = 0;
    std::array<uint8_t, CUPROBE_PATCH_ACCESS_CLASSES> counter_of{};
  };
  // The block of `kernel` (its arguments not filled).
  static cuprobe_patch_kernel BlockOf(CUdeviceptr map_block, const KernelState& kernel);
  // Registers the kernel's site counters with the maps when its memory
  // programs summarize (PatchSiteCounters); otherwise leaves them unset.
  void SetUpCountersLocked(KernelState& kernel, std::string_view name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(setup_mu_);
  // The patch module for the SM of the current context's device, built at
  // its first use; an error is kept. `unbuildable` is set when there is
  // none (every module of that device would fail the same way).
  absl::StatusOr<const PatchModule*> PatchesLocked(bool* unbuildable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(setup_mu_);
  // The context's map block (the maps' descriptors and table), written at
  // the first kernel probed there.
  absl::StatusOr<CUdeviceptr> MapBlockLocked(ContextState& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(setup_mu_);
  // Device memory holding `bytes`, in the current context (the caller makes
  // the launch's or module's context current), in relaxed stream-capture
  // mode: a program capturing a graph on another thread keeps its capture.
  absl::StatusOr<CUdeviceptr> UploadLocked(absl::Span<const uint8_t> bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(setup_mu_);
  absl::Status PatchModuleLocked(CUcontext context, CUmodule module, bool* unbuildable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(setup_mu_);
  absl::Status GiveBlockLocked(CUcontext context, CUfunction function, const KernelState& kernel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(setup_mu_);
  // This launch's own block, with its arguments.
  absl::Status GiveLaunchBlockLocked(const Launch& launch, const KernelState& kernel,
                                     void* const* params)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(setup_mu_);
  // The kernel's parameter sizes (cuFuncGetParamInfo), up to CUPROBE_MAX_ARGS.
  std::vector<uint32_t> ParamSizes(CUfunction function);
  // The kernel's id (ctx->kernel_id), assigned at its first probed launch.
  uint32_t IdOfLocked(const std::string& mangled) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t MaskOf(std::string_view mangled) const;
  // The seam's driver table, or null (ScopedCurrentContext then changes
  // nothing for a null context and fails for another).
  const CudaDriver* DriverOrNull();
  void WarnOnce(std::atomic<bool>& flag, const std::string& what, const absl::Status& why);

  CuptiSeam& seam_;
  SanitizerSeam& sanitizer_;
  const ProbeBundle& bundle_;
  MapTableProvider& maps_;
  const PatchBuilder build_;
  const KernelListener on_kernel_;
  const bool wants_args_;
  const Options options_;

  absl::Mutex setup_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // By SM: one per kind of device the program's contexts are on.
  std::map<uint32_t, absl::StatusOr<PatchModule>> patches_ ABSL_GUARDED_BY(setup_mu_);
  absl::flat_hash_map<CUcontext, ContextState> contexts_ ABSL_GUARDED_BY(setup_mu_);
  absl::flat_hash_set<CUmodule> patched_modules_ ABSL_GUARDED_BY(setup_mu_);
  // Modules the PTX backend rewrote (Options::rewritten).
  absl::flat_hash_set<CUmodule> rewritten_modules_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::pair<CUcontext, CUfunction>, KernelState> launched_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> ids_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> modules_seen_{0};
  std::atomic<uint64_t> modules_patched_{0};
  std::atomic<uint64_t> modules_failed_{0};
  std::atomic<uint64_t> kernels_probed_{0};
  std::atomic<uint64_t> modules_rewritten_{0};
  std::atomic<bool> block_warned_{false};
  std::atomic<bool> args_warned_{false};
  std::atomic<bool> build_warned_{false};
  std::atomic<bool> counters_warned_{false};
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_KERNEL_PATCHER_H_
