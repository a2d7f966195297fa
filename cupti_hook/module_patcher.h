// File: cupti_hook/module_patcher.h
//
// Module replacement: at ENTER of every module-load API the driver offers
// (cuLibraryLoadData, cuLibraryLoadFromFile, cuModuleLoadData[Ex],
// cuModuleLoad, cuModuleLoadFatBinary) the patcher asks an ImageInstrumenter
// whether a probe matches a kernel of the image; if so it swaps the image
// parameter for the instrumented cubin (DESIGN.md: the driver then loads our
// code; there is one module, so __device__ globals and cudaMemcpyToSymbol
// stay correct and a launch costs nothing extra). At EXIT it keeps the cubin
// alive for as long as the module lives and fills the module's
// __cuprobe_map_table with the device addresses of the maps.
//
//   ModulePatcher patcher(seam, instrumenter, map_tables);
//   for (CUpti_CallbackId cbid : ModulePatcher::kCallbacks) seam.EnableCallback(...);
//   // in the CUPTI callback, driver domain:
//   if (ModulePatcher::IsModuleCallback(cbid)) patcher.OnModuleApi(cbid, data);
//
// Never breaks the application: when anything fails (the image cannot be
// read, no PTX, the rewrite or ptxas fails, the map table cannot be filled)
// the original image loads untouched and one line says why, once per module.
//
// Hazards:
//  - Runs inside CUPTI callbacks with the hook's reentrancy guard held: the
//    driver calls made here (through the seam) re-enter CUPTI and fall
//    through. No lock is held across a call to the instrumenter or the seam.
//  - With lazy loading (CUDA 12+) the driver may read a library's image long
//    after cuLibraryLoadData returns: the replacement buffer lives until the
//    module is unloaded (or forever, when the program never unloads it).
#ifndef CUPROBE_CUPTI_HOOK_MODULE_PATCHER_H_
#define CUPROBE_CUPTI_HOOK_MODULE_PATCHER_H_

#include <cuda.h>
#include <cupti.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "cupti_hook/seam.h"
#include "probe/bundle.h"
#include "ptx_rewriter/image_pipeline.h"

namespace cuprobe {

// The rewriter seen from the hook (BundleInstrumenter, over
// ptx_rewriter/image_pipeline.h, in cupti_hook/probe_runtime.h; faked in
// tests).
class ImageInstrumenter {
 public:
  virtual ~ImageInstrumenter() = default;
  // nullopt: no probe selects a kernel of this image (load it untouched).
  // An error: a probe selects kernels but they could not be instrumented.
  [[nodiscard]] virtual absl::StatusOr<std::optional<InstrumentedImage>> Instrument(
      const ImageSource& source, uint32_t sm) = 0;
};

// The maps seen from the hook: the device addresses of the map descriptors
// for the current context (allocated on first use).
class MapTableProvider {
 public:
  virtual ~MapTableProvider() = default;
  [[nodiscard]] virtual absl::StatusOr<std::vector<uint64_t>> MapTable() = 0;
  // The table and map i's descriptor at bytes [128 i, 128 i + 128) of the
  // same maps: what a module's constant copy holds (include/cuprobe/abi.h 3.).
  struct TableAndDescriptors {
    std::vector<uint64_t> table;
    std::vector<uint8_t> descriptors;
  };
  [[nodiscard]] virtual absl::StatusOr<TableAndDescriptors> MapTableAndDescriptors() {
    return absl::UnimplementedError("descriptor copies are not supported here");
  }
  // Registers a module's site counters (after MapTable succeeded) and
  // returns the device address of their block (maps/map_set.h).
  [[nodiscard]] virtual absl::StatusOr<uint64_t> AddSiteCounters(std::vector<SiteCounter>) {
    return absl::UnimplementedError("site counters are not supported here");
  }
  // Registers site counters (no thread-range one) whose block the caller
  // allocated and zeroed (MapSet::SiteCounterBytes, at `base`) and keeps.
  // Never waits on the maps' lock: the patch backend calls it inside the
  // driver's launch callback, where waiting on a publish that is itself
  // waiting on the driver would hang the program.
  [[nodiscard]] virtual absl::Status AdoptSiteCounters(std::vector<SiteCounter>, uint64_t) {
    return absl::UnimplementedError("site counters are not supported here");
  }
  // Whether modules loaded in the current context may be given these maps
  // (DeviceMaps: shared by the contexts of one device, unless a map is a
  // ring buffer); checked before instrumenting.
  [[nodiscard]] virtual absl::Status UsableInCurrentContext() { return absl::OkStatus(); }
  // Takes the maps for this process (the processes of one session take
  // turns: DeviceMaps); checked once a module has kernels to instrument,
  // before it is given them. An error leaves the module as it was.
  [[nodiscard]] virtual absl::Status Claim() { return absl::OkStatus(); }
};

struct ModulePatcherStats {
  uint64_t loads_seen = 0;
  uint64_t modules_instrumented = 0;
  uint64_t kernels_instrumented = 0;
  uint64_t modules_failed = 0;  // a probe matched but the original was loaded
};

// The parameters of the module-load APIs (ModulePatcher::kCallbacks):
// where the image pointer or file name is (nullptr for other ids and for
// unloads), the handle a successful load returned, and whether it is a
// CUlibrary.
[[nodiscard]] const void** LiveImageParam(CUpti_CallbackId cbid, void* params);
[[nodiscard]] const char** FileParam(CUpti_CallbackId cbid, void* params);
[[nodiscard]] void* LoadedHandle(CUpti_CallbackId cbid, void* params);
[[nodiscard]] bool IsLibraryLoadApi(CUpti_CallbackId cbid);

// After an instrumented image loaded (as `handle`, a CUlibrary when
// `is_library`): fills its map table, its site counters' block and
// `globals` (symbol -> bytes; skipped when the module lacks the symbol).
// Failures are logged, naming `what`: the kernels then run without maps or
// counters and the program is unaffected.
void FillInstrumentedModule(CuptiSeam& seam, MapTableProvider& maps, bool is_library,
                            void* handle, InstrumentedImage& image,
                            const std::vector<std::pair<std::string, std::vector<uint8_t>>>& globals,
                            const std::string& what);

class ModulePatcher {
 public:
  static constexpr std::array<CUpti_CallbackId, 8> kCallbacks = {
      CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData,
      CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile,
      CUPTI_DRIVER_TRACE_CBID_cuModuleLoad,
      CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData,
      CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx,
      CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary,
      CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload,
      CUPTI_DRIVER_TRACE_CBID_cuModuleUnload,
  };
  [[nodiscard]] static bool IsModuleCallback(CUpti_CallbackId cbid);

  // `file_dir`: where instrumented cubins for file-based loads are written
  // (cuModuleLoad takes a path, so the replacement must be a file too).
  ModulePatcher(CuptiSeam& seam, ImageInstrumenter& instrumenter, MapTableProvider& maps,
                std::string file_dir);
  ~ModulePatcher();
  ModulePatcher(const ModulePatcher&) = delete;
  ModulePatcher& operator=(const ModulePatcher&) = delete;

  void OnModuleApi(CUpti_CallbackId cbid, const CUpti_CallbackData* data);

  // A module global written into every instrumented module after it loads
  // (e.g. the helper library's CUPROBE_PID_TGID_SYMBOL), when the module has
  // it. Call before the first load.
  void AddModuleGlobal(std::string symbol, std::vector<uint8_t> value);

  // A context was created (and is current): the instrumented libraries
  // loaded so far get their kernels into it without another load call
  // (a CUlibrary spans contexts; after cudaDeviceReset the runtime's
  // libraries come back this way), with zeroed globals: fill their map
  // tables, site counters and globals there.
  // `context` is remembered as live (FillLibraryInOtherContexts).
  void OnContextCreated(CUcontext context);
  // CUPTI's context-destroy-starting: the context is forgotten.
  void OnContextDestroying(CUcontext context);

  // A library loaded while no context was current (the CUDA 13 runtime
  // loads a program's code that way when its first CUDA call is a launch;
  // a driver-API program may load a library before it makes a context) is
  // filled in each context as soon as it can be: at the context's creation,
  // in the live contexts at load, and, should one of those find no way into
  // the context, at the first launch in it. `pending_fill()` says whether a
  // library still lacks its fill in a context seen so far; then the hook
  // calls OnLaunch at ENTER of every launch, with the launch's context.
  [[nodiscard]] bool pending_fill() const {
    return pending_fill_.load(std::memory_order_relaxed);
  }
  void OnLaunch(CUcontext context);

  [[nodiscard]] ModulePatcherStats stats() const;

  // --backend auto: the patch backend probes the modules this patcher does
  // not rewrite, so their SASS-only kernels are not reported as unprobed.
  // Call before the first load.
  void SetPatchBackendPresent() { patch_backend_ = true; }

  // Whether `image` is one this patcher swapped in for a load (an
  // instrumented cubin, compared by content): the patch backend leaves
  // those modules alone under --backend auto.
  [[nodiscard]] bool Produced(absl::Span<const uint8_t> image) const;

 private:
  struct Pending;
  void OnEnter(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  void OnExit(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  // A library just loaded and filled in the current context: its copies in
  // the other live contexts get their tables too, where the maps can be
  // shared with them. Reading its globals there loads the library in each
  // of those contexts now rather than at its first launch there.
  void FillLibraryInOtherContextsLocked(void* handle, Pending& pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills a library in `context`, which the caller made current, unless it
  // was filled there already or the maps cannot be given to that context
  // (asked unless `usable_checked`). Remembers the context as filled
  // whether or not the fill succeeded: failures are logged, not retried at
  // every launch.
  // Unless `last_chance` (the context's first launch), a library whose
  // module is not in the context yet is left unfilled for that launch.
  void FillLibraryHereLocked(void* handle, Pending& pending, CUcontext context,
                             bool usable_checked = false, bool last_chance = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every library not yet filled in `context` (null: whichever is current),
  // when it is the current context.
  void FillLibrariesHereLocked(CUcontext context, bool last_chance = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // pending_fill_: whether a library lacks its fill in a live context, or
  // in every context.
  void UpdatePendingFillLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CuptiSeam& seam_;
  ImageInstrumenter& instrumenter_;
  MapTableProvider& maps_;
  const std::string file_dir_;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> module_globals_;
  bool patch_backend_ = false;

  absl::Mutex mu_;
  // Loaded instrumented modules (CUlibrary or CUmodule) -> their replacement,
  // kept alive until unload.
  absl::flat_hash_map<void*, std::unique_ptr<Pending>> live_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> loads_seen_{0};
  std::atomic<uint64_t> modules_instrumented_{0};
  std::atomic<uint64_t> kernels_instrumented_{0};
  std::atomic<uint64_t> modules_failed_{0};
  std::atomic<uint64_t> file_serial_{0};
  std::atomic<bool> context_warned_{false};
  // Live contexts (OnContextCreated .. OnContextDestroying): a library loaded
  // in one is filled in the others too (FillLibraryInOtherContextsLocked).
  std::vector<CUcontext> contexts_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> claim_warned_{false};
  std::atomic<bool> pending_fill_{false};
  // Hashes of the images swapped in (Produced), never forgotten: a few
  // words per instrumented module.
  mutable absl::Mutex produced_mu_;
  absl::flat_hash_set<uint64_t> produced_ ABSL_GUARDED_BY(produced_mu_);
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_MODULE_PATCHER_H_
