// File: cupti_hook/late_attach.h
//
// Late attach: `cuprobe attach <session> -p probe` adds probes to a program
// that is already running under `cuprobe trace`. Its modules loaded long
// ago, uninstrumented, so module replacement (module_patcher.h) cannot help;
// instead each launch of a selected kernel is redirected to an instrumented
// twin of the kernel, loaded as a separate module from the original image.
//
//   ImageRegistry      every module load's original image (kept by pointer
//                      when it lives in a loaded ELF object, which is where
//                      the CUDA runtime's fatbins are; copied otherwise, up
//                      to kMaxCopiedBytes), by library/module handle.
//   LaunchRedirector   at launch ENTER: (context, function) -> the twin, made
//                      on the first launch (instrument the owner's image,
//                      cuModuleLoadData, fill the map table, look the kernel
//                      up); the launch's function parameter is swapped.
//   LateAttach         the watcher's side: reads the session's attach request
//                      (segment_layout.h), opens the attacher's own session
//                      (bundle + maps), starts a redirector, and at detach
//                      stops it, waits for redirected launches to be
//                      submitted and for their contexts to finish, publishes
//                      the last snapshot and frees the maps.
//
//   // Hook::Start, for sessions without probes of their own:
//   ImageRegistry images;     LateAttach attach(seam, images, session, ...);
//   // module-load callbacks:  images.OnModuleApi(cbid, data);
//   // launch callbacks:       attach.OnLaunch(cbid, data);   (before the tracer)
//   // watcher tick:           attach.Poll();
//   // teardown:               attach.Stop();
//
// Caveats (docs/CLI.md "Late attach"):
//  - The twin is another module: its `__device__` globals are its own copies,
//    initialized from the image, not the program's current values. Kernels
//    that communicate through module globals see different memory.
//  - Launches inside CUDA graphs are not redirected (graph nodes hold the
//    function); neither are kernels whose image the registry did not keep.
//  - The first redirected launch of each kernel waits for its compile (the
//    on-disk compile cache makes later runs fast).
#ifndef CUPROBE_CUPTI_HOOK_LATE_ATTACH_H_
#define CUPROBE_CUPTI_HOOK_LATE_ATTACH_H_

#include <cuda.h>
#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cupti_hook/module_patcher.h"
#include "cupti_hook/seam.h"
#include "maps/segment.h"

namespace cuprobe {

class Tracer;

class ImageRegistry {
 public:
  static constexpr uint64_t kMaxCopiedBytes = uint64_t{256} << 20;

  // Module-load callbacks (ModulePatcher::kCallbacks), ENTER and EXIT.
  void OnModuleApi(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  // The original image of a loaded library or module; nullptr when it was
  // not seen or not kept.
  [[nodiscard]] std::shared_ptr<const ImageSource> Find(const void* handle) const;
  [[nodiscard]] size_t size() const;
  [[nodiscard]] uint64_t copied_bytes() const { return copied_bytes_.load(); }

 private:
  struct Kept;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<const void*, std::shared_ptr<Kept>> by_handle_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> copied_bytes_{0};
};

struct RedirectStats {
  uint64_t launches_redirected = 0;
  uint64_t kernels_redirected = 0;  // twins made
  uint64_t kernels_left_alone = 0;  // launch handles that are not redirected
};

// Module globals written into every twin (e.g. CUPROBE_PID_TGID_SYMBOL).
using ModuleGlobals = std::vector<std::pair<std::string, std::vector<uint8_t>>>;

class LaunchRedirector {
 public:
  LaunchRedirector(CuptiSeam& seam, const ImageRegistry& images, ImageInstrumenter& instrumenter,
                   MapTableProvider& maps, ModuleGlobals globals);

  // A launch callback at ENTER (cuLaunchKernel[Ex][_ptsz],
  // cuLaunchCooperativeKernel[_ptsz]): swaps the function parameter for its
  // twin. True when it did.
  bool Redirect(CUpti_CallbackId cbid, const CUpti_CallbackData* data);

  // The contexts that received redirected launches.
  [[nodiscard]] std::vector<CUcontext> contexts() const;
  [[nodiscard]] RedirectStats stats() const;

 private:
  // One owner (library or module) in one context: its loaded twin module.
  struct Twin {
    absl::Status status;  // why there is no twin
    CUmodule module = nullptr;
    absl::flat_hash_set<std::string> kernels;  // instrumented mangled names
  };
  // The twin function of `function`, nullptr to leave it alone.
  CUfunction Resolve(CUcontext context, CUfunction function) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Twin MakeTwin(const FunctionOwner& owner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CuptiSeam& seam_;
  const ImageRegistry& images_;
  ImageInstrumenter& instrumenter_;
  MapTableProvider& maps_;
  const ModuleGlobals globals_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::pair<CUcontext, CUfunction>, CUfunction> targets_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<CUcontext, const void*>, Twin> twins_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<CUcontext> contexts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> reported_ ABSL_GUARDED_BY(mu_);  // one message per reason
  std::atomic<uint64_t> launches_redirected_{0};
  uint64_t kernels_redirected_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t kernels_left_alone_ ABSL_GUARDED_BY(mu_) = 0;
};

class BundleInstrumenter;
class DeviceMaps;

class LateAttach {
 public:
  // `session`: the program's own session (where requests arrive); `tracer`
  // hears of instrumented kernels; `pid`: for the probes' pid global.
  LateAttach(CuptiSeam& seam, const ImageRegistry& images, Session& session, Tracer& tracer,
             uint32_t pid);
  ~LateAttach();
  LateAttach(const LateAttach&) = delete;
  LateAttach& operator=(const LateAttach&) = delete;

  // Launch callbacks, ENTER and EXIT (cheap while nothing is attached).
  void OnLaunch(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  // Watcher thread: acts on a new attach request, publishes the attached
  // probes' maps, detaches when the attacher died.
  void Poll(uint64_t now_ns);
  // Teardown (watcher already joined): detaches whatever is attached.
  void Stop(uint64_t now_ns);

  [[nodiscard]] bool attached() const { return current_.load() != nullptr; }
  // Watcher thread (or after it was joined).
  [[nodiscard]] std::optional<RedirectStats> stats() const;

  // How long a detach waits for launches that were redirected at ENTER to
  // reach EXIT (after which their kernels are in the stream and a context
  // synchronize covers them).
  static constexpr int kDrainTimeoutMs = 5000;

 private:
  struct Attached;
  void Attach(const std::string& name, uint64_t now_ns);
  void Detach(const char* why, uint64_t now_ns);

  CuptiSeam& seam_;
  const ImageRegistry& images_;
  Session& session_;
  Tracer& tracer_;
  const uint32_t pid_;
  uint64_t last_request_ = 0;  // watcher thread only
  std::unique_ptr<Attached> attached_;  // watcher thread only
  std::atomic<Attached*> current_{nullptr};
  // Launch callbacks between their ENTER check of current_ and their EXIT
  // (redirected) or the end of ENTER (not redirected).
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_LATE_ATTACH_H_
