// File: cupti_hook/late_attach.h
//
// Late attach: `cuprobe attach <session> -p probe` adds probes to a program
// that is already running under `cuprobe trace`. Its modules loaded long
// ago, uninstrumented, so module replacement (module_patcher.h) cannot help;
// instead each launch of a selected kernel is redirected to an instrumented
// twin of the kernel, loaded as a separate module from the original image.
//
//   ImageRegistry      every module load's original image (the CUDA
//                      runtime's registered fatbins by pointer: they live in
//                      the program's ELF objects; anything else copied, up
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
//  - A module's launches run the original while its twin compiles (the
//    on-disk compile cache makes later runs fast).
#ifndef CUPROBE_CUPTI_HOOK_LATE_ATTACH_H_
#define CUPROBE_CUPTI_HOOK_LATE_ATTACH_H_

#include <cuda.h>
#include <cupti.h>

#include <atomic>
#include <chrono>
#include <functional>
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
  // Every kept image, for `cuprobe list PID`.
  [[nodiscard]] std::vector<std::shared_ptr<const ImageSource>> Sources() const;
  // Called after each load whose image was kept, outside the registry's
  // lock, on the loading thread (`cuprobe list -- cmd`). Set it before the
  // callbacks start.
  void SetLoadObserver(std::function<void(const ImageSource&)> observer) {
    observer_ = std::move(observer);
  }
  [[nodiscard]] uint64_t copied_bytes() const { return copied_bytes_.load(); }

 private:
  struct Kept;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<const void*, std::shared_ptr<Kept>> by_handle_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> copied_bytes_{0};
  std::function<void(const ImageSource&)> observer_;
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
  // twin. True when it did. Never redirects a launch into a stream that is
  // being captured (the graph would keep the twin after a detach), nor one
  // whose block or dynamic shared memory the twin cannot take. The twin is
  // made on the first launch, outside the lock: launches of the same module
  // meanwhile run the original. `stream` (optional) gets the launch's stream
  // when it was redirected.
  bool Redirect(CUpti_CallbackId cbid, const CUpti_CallbackData* data,
                CUstream* stream = nullptr);
  // The EXIT of a launch that Redirect swapped: records this stream's "last
  // redirected launch" event (the drain at detach waits for these).
  void AfterRedirectedLaunch(CUcontext context, CUstream stream);
  // The program unloaded a library or module: its twins and targets go
  // (a later load may reuse the handle).
  void ForgetOwner(const void* owner);
  // A context is being destroyed: everything made in it goes.
  void ForgetContext(CUcontext context);

  // Detach: waits (up to `timeout`) for the last redirected launch of every
  // stream to finish. False when one did not (or its event failed).
  bool Drain(std::chrono::milliseconds timeout);
  // After a drain that succeeded: unloads the twins.
  void UnloadTwins();

  [[nodiscard]] RedirectStats stats() const;

  // Twin limits a launch must fit (CU_FUNC_ATTRIBUTE_*), and the attributes
  // copied from the original function before they are read.
  static constexpr CUfunction_attribute kCopiedAttributes[] = {
      CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
      CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
  };

 private:
  // One owner (library or module) in one context: its loaded twin module.
  struct Twin {
    bool building = true;  // a thread is making it
    absl::Status status;   // why there is no twin
    CUmodule module = nullptr;
    absl::flat_hash_set<std::string> kernels;  // instrumented mangled names
  };
  // A launch handle in a context: its twin function (nullptr: leave it).
  struct Target {
    CUfunction twin = nullptr;
    const void* owner = nullptr;
    int max_threads = 0;
    int max_dynamic_shared = 0;
  };
  struct Shape {
    CUfunction* function = nullptr;
    CUstream stream = nullptr;
    uint64_t threads = 0;
    uint64_t dynamic_shared = 0;
  };
  // The function parameter, stream, block size and dynamic shared memory of
  // a launch; false for graph launches.
  static bool ReadShape(CUpti_CallbackId cbid, const void* params, Shape* shape);
  // Resolves and caches the target of (context, function); driver calls
  // outside the lock. nullopt: not decided yet (the twin is being made).
  std::optional<Target> Resolve(CUcontext context, CUfunction function);
  Twin MakeTwin(const FunctionOwner& owner);
  Target MakeTarget(const Twin& twin, const FunctionOwner& owner, CUfunction original);
  void ReportOnce(const std::string& key, const std::string& message);

  CuptiSeam& seam_;
  const ImageRegistry& images_;
  ImageInstrumenter& instrumenter_;
  MapTableProvider& maps_;
  const ModuleGlobals globals_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::pair<CUcontext, CUfunction>, Target> targets_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<CUcontext, const void*>, Twin> twins_ ABSL_GUARDED_BY(mu_);
  // (context, stream) -> the event recorded after its last redirected launch.
  absl::flat_hash_map<std::pair<CUcontext, CUstream>, CUevent> last_launch_ ABSL_GUARDED_BY(mu_);
  std::vector<CUmodule> forgotten_modules_ ABSL_GUARDED_BY(mu_);  // to unload after a drain
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
  // hears of instrumented kernels; `pid`: for the probes' pid global;
  // `find_ptx`: PTX for cubins that carry none (ptx_rewriter/image_pipeline.h).
  LateAttach(CuptiSeam& seam, const ImageRegistry& images, Session& session, Tracer& tracer,
             uint32_t pid, PtxSourceFinder find_ptx = {});
  ~LateAttach();
  LateAttach(const LateAttach&) = delete;
  LateAttach& operator=(const LateAttach&) = delete;

  // Launch callbacks, ENTER and EXIT (cheap while nothing is attached).
  void OnLaunch(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  // Module unloads (EXIT) and context destruction (from the hook's
  // callbacks, any thread).
  void OnModuleUnloaded(const void* handle);
  void OnContextDestroying(CUcontext context);
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
  // How long a detach waits for the redirected launches' kernels to finish
  // (a persistent kernel would never): then the maps are kept, not freed.
  static constexpr int kKernelTimeoutMs = 10000;

 private:
  struct Attached;
  // Runs f(attached) if probes are attached, counted as in flight so that a
  // detach waits for it.
  template <typename F>
  void WithAttached(F&& f);
  void Attach(const std::string& name, uint64_t now_ns);
  void AnswerList(Session& lister);
  void Detach(const char* why, uint64_t now_ns);

  CuptiSeam& seam_;
  const ImageRegistry& images_;
  Session& session_;
  Tracer& tracer_;
  const uint32_t pid_;
  const PtxSourceFinder find_ptx_;
  uint64_t last_request_ = 0;  // watcher thread only
  std::unique_ptr<Attached> attached_;  // watcher thread only
  std::atomic<Attached*> current_{nullptr};
  // Launch callbacks between their ENTER check of current_ and their EXIT
  // (redirected) or the end of ENTER (not redirected).
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_LATE_ATTACH_H_
