// File: cupti_hook/probe_runtime.h
//
// What the hook runs when its session carries a probe bundle (`cuprobe run`):
//  - BundleInstrumenter: the ImageInstrumenter of module_patcher.h over the
//    rewriter's image pipeline (ptx_rewriter/image_pipeline.h), which does
//    all the work; it keeps the kernels' ids across reloads and tells the
//    tracer each newly instrumented kernel.
//  - DeviceMaps: the MapTableProvider over maps/map_set.h. The maps are
//    allocated in device memory when the first context is created (or at
//    the first instrumented module load), shared with the other contexts of
//    that device where they can be (UsableInCurrentContext), published into
//    the session's maps region by the watcher, and freed at teardown or when
//    the last context using them is destroyed.
//
//   BundleInstrumenter instrumenter(bundle, HelpersPtx(), cache, TritonCacheFinder(roots),
//                                   [&](std::string_view name, uint32_t id) {...});
//   DeviceMaps maps(bundle.maps, &session.maps());
//   ModulePatcher patcher(seam, instrumenter, maps, dir);
//   ...  // watcher:   maps.Publish(now);
//   ...  // teardown:  maps.Release();
#ifndef CUPROBE_CUPTI_HOOK_PROBE_RUNTIME_H_
#define CUPROBE_CUPTI_HOOK_PROBE_RUNTIME_H_

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cupti_hook/module_patcher.h"
#include "maps/cuda_device_memory.h"
#include "maps/map_set.h"
#include "maps/maps_region.h"
#include "maps/segment.h"
#include "probe/bundle.h"
#include "ptx_rewriter/compile_cache.h"

namespace cuprobe {

class BundleInstrumenter final : public ImageInstrumenter, private KernelIds {
 public:
  // Called once per kernel the first time it is instrumented.
  using KernelListener = std::function<void(std::string_view mangled_name, uint32_t kernel_id)>;

  // `find_ptx`: PTX for cubins that carry none (TritonCacheFinder); may be
  // empty.
  BundleInstrumenter(ProbeBundle bundle, std::string_view helper_ptx, CompileCache cache,
                     PtxSourceFinder find_ptx, KernelListener on_kernel);

  absl::StatusOr<std::optional<InstrumentedImage>> Instrument(const ImageSource& source,
                                                              uint32_t sm) override;

  [[nodiscard]] const ProbeBundle& bundle() const { return bundle_; }

  // The id of kernel `mangled` in this process (the one its instrumented
  // image would carry), told to the listener the first time: for kernels
  // probed another way (the patch backend under --backend auto).
  uint32_t KernelId(const std::string& mangled);

 private:
  uint32_t IdOf(const std::string& mangled) override;
  uint32_t FirstUnnamedId() override;

  const ProbeBundle bundle_;
  const CompileCache cache_;
  const ImagePipeline pipeline_;
  const KernelListener on_kernel_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, uint32_t> ids_ ABSL_GUARDED_BY(mu_);
  uint32_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<uint32_t> reported_ ABSL_GUARDED_BY(mu_);  // ids told to on_kernel_
};

// The seam's driver table, or null where there is none (DeviceMaps then
// says so when the maps are first needed).
[[nodiscard]] const CudaDriver* SeamDriver(CuptiSeam& seam);

class DeviceMaps final : public MapTableProvider {
 public:
  // `session`: the probe session whose maps region the maps publish into
  // (null in standalone mode: no region). The maps are claimed in it at the
  // first module to instrument (Session::ClaimMaps: one process of a session
  // at a time) and then continue from its last snapshot
  // (MapSet::SeedFromRegion).
  // `on_stream`: told the private copy stream, once, so the tracer can keep
  // those copies out of the program's trace.
  // `driver`: the driver table (the seam's, CuptiSeam::Driver, or a test's
  // fake); null where there is no driver: the maps are then never made.
  // `ring_data`: where producers write ring records (maps/map_set.h); with
  // kDeviceMirrored someone must call PumpRings() often (the hook's ring
  // pump, every millisecond), and Publish pumps too.
  DeviceMaps(std::vector<MapSpec> specs, Session* session,
             std::function<void(CUcontext, CUstream)> on_stream,
             const CudaDriver* driver = nullptr, RingData ring_data = RingData::kHost);
  ~DeviceMaps() override;

  absl::StatusOr<std::vector<uint64_t>> MapTable() override;
  absl::StatusOr<TableAndDescriptors> MapTableAndDescriptors() override;
  absl::StatusOr<uint64_t> AddSiteCounters(std::vector<SiteCounter> counters) override;
  // Queued under a lock of its own and registered at the next publish.
  absl::Status AdoptSiteCounters(std::vector<SiteCounter> counters, uint64_t base) override;
  // OK when the maps do not exist yet, live in the current context, or can
  // be shared with it: their memory belongs to no context
  // (CudaDeviceMemory::context_independent), no map is a ring buffer in
  // host memory (RingData::kHost: registered in the maps' context, which
  // dies with it; mirrored rings live in device memory like the rest), and
  // the context is on the maps' device. A context given the maps this
  // way is remembered as one of their users. FAILED_PRECONDITION, saying
  // which of these fails, otherwise.
  absl::Status UsableInCurrentContext() override;
  // Claims the maps in the session (ClaimLocked); MapTable seeds them.
  absl::Status Claim() override;
  // CUPTI's context-destroy-starting (cudaDeviceReset, cuCtxDestroy).
  // A user context: forgotten. The maps' own context, while another user
  // lives: the maps (which outlive it) move there; a snapshot is published
  // first and the copy stream is made again in the new context, so counting
  // goes on with no gap. The maps' context with no other user: publishes the
  // last snapshot while the context still exists, frees the maps and gives
  // the claim back; the next module load (in the context that replaces it)
  // makes them again, seeded from that snapshot: counting goes on across a
  // cudaDeviceReset.
  void OnContextDestroying(CUcontext context);
  // At context creation: remembers `context` as live (a context can share
  // the maps only then), and creates the maps in it ahead of the first
  // module load if they do not exist. Failures are kept and reported by
  // MapTable().
  void Prepare(CUcontext context);
  // Snapshots into the region (watcher thread). No-op before the first load.
  absl::Status Publish(uint64_t now_ns);
  // Mirrored rings: records committed on the device into the segment, and
  // the space the consumer freed back to the producers (MapSet::PumpRings).
  // No-op before the first load and for kHost.
  absl::Status PumpRings();
  // Whether the bundle has ring buffers kept in device memory (then
  // PumpRings has work to do).
  [[nodiscard]] bool mirrors_rings() const;
  // Final snapshot, then frees the device memory. Idempotent.
  absl::Status Release(uint64_t now_ns);

 private:
  // Makes the maps in the current context (`expected`, unless null).
  // `*no_context`: the failure is that no such context is current, which is
  // not remembered as a failure (another context may make them later).
  absl::Status CreateLocked(CUcontext expected, bool* no_context)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The maps are made (allocated) at context creation in every process, but
  // used, published and seeded only once claimed in the session: at the
  // first module to instrument. Claiming fails for good when another live
  // process of the session holds them.
  absl::Status ClaimLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<uint64_t>> MapTableLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes the copy stream again in context_ if moving it there failed.
  absl::Status EnsureStreamLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Seeds freshly made, claimed maps from the region's last snapshot, once.
  absl::Status SeedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Final snapshot (if claimed and seeded), free, and give the claim back
  // when `give_back` (maps_ must exist).
  absl::Status PublishAndFreeLocked(uint64_t now_ns, bool give_back)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registers the adopted site counters queued so far with maps_ (dropped
  // when the maps are gone: their kernels' context is too).
  void TakeAdoptedCountersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<MapSpec> specs_;
  Session* const session_;
  MapsRegion* const region_;
  const std::function<void(CUcontext, CUstream)> on_stream_;
  const CudaDriver* const given_driver_;
  const RingData ring_data_;
  // The given driver, or why there is none.
  [[nodiscard]] absl::StatusOr<const CudaDriver*> Driver() const;
  absl::Mutex mu_;
  const CudaDriver* driver_ ABSL_GUARDED_BY(mu_) = nullptr;
  CUcontext context_ ABSL_GUARDED_BY(mu_) = nullptr;  // the maps' context
  // Other contexts whose modules were given the maps (UsableInCurrentContext).
  std::vector<CUcontext> users_ ABSL_GUARDED_BY(mu_);
  // Contexts created (Prepare) and not yet being destroyed: only these can
  // become users, so a context destroyed on another thread is never taken.
  absl::flat_hash_set<CUcontext> live_contexts_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<CudaDeviceMemory> memory_ ABSL_GUARDED_BY(mu_);
  std::optional<MapSet> maps_ ABSL_GUARDED_BY(mu_);
  absl::Status failed_ ABSL_GUARDED_BY(mu_);  // a failed creation is not retried
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  bool claimed_ ABSL_GUARDED_BY(mu_) = false;
  bool seeded_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status claim_failed_ ABSL_GUARDED_BY(mu_);
  // AdoptSiteCounters' queue. Its lock is taken last and held across no
  // call, so a caller inside a driver callback never waits on a publish.
  struct Adopted {
    std::vector<SiteCounter> counters;
    uint64_t base = 0;
  };
  absl::Mutex adopted_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::vector<Adopted> adopted_ ABSL_GUARDED_BY(adopted_mu_);
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_PROBE_RUNTIME_H_
