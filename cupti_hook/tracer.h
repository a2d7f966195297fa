// File: cupti_hook/tracer.h
//
// Launch tracing: turns CUPTI launch callbacks and activity records into trace
// records (probe/trace_records.h) written to a RecordSink.
//
//   Tracer tracer(seam, sink);
//   for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) seam.EnableCallback(...);
//   tracer.OnLaunchApi(cbid, data);            // from the driver-API callback
//   tracer.OnActivityBuffer(buffer, valid);    // from CUPTI's buffer-completed callback:
//                                              // kernels, copies, sets, and launch calls
//                                              // from API activity (with
//                                              // CUPROBE_LAUNCH_TIMES=activity)
//   tracer.CloseSink();                        // teardown: no write after it returns true
//
// Hot path (every launch): one timestamp at ENTER; at EXIT the name cache
// (the thread's last handle, else a hash lookup under a mutex that is never
// held while calling out) and one ring write. Names are interned once per
// handle and once per string. The counters a launch adds to, and its entry
// in the record gate (which keeps teardown from releasing the sink under a
// writer), are the thread's own (for a program's first 256 threads): no
// cache line shared with CUPTI's activity thread or the app's other
// launching threads; what is shared is the ring's reservation.
#ifndef CUPROBE_CUPTI_HOOK_TRACER_H_
#define CUPROBE_CUPTI_HOOK_TRACER_H_

#include <cupti.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "cupti_hook/capture_range.h"
#include "cupti_hook/record_sink.h"
#include "cupti_hook/seam.h"
#include "probe/trace_records.h"

namespace cuprobe {

struct TracerStats {
  uint64_t launches = 0;
  uint64_t records_written = 0;
  uint64_t records_dropped = 0;
  uint64_t activity_buffers = 0;
  uint64_t activity_records = 0;
  uint64_t activity_dropped = 0;  // records CUPTI itself dropped
  uint64_t name_failures = 0;
  uint64_t capture_ranges = 0;  // profiler ranges opened (--capture-range)
};

// The tracer's measuring switches (CUPROBE_DIAG words, read by
// HookConfig; not user settings): what bench/overhead_breakdown.sh takes
// away, one part at a time.
struct TracerDiag {
  bool no_launch_records = false;  // launches counted, no launch record
  bool no_kernel_records = false;  // kernel activity records dropped
  bool no_timestamps = false;      // no API start time taken at ENTER
};

class Tracer {
 public:
  // The driver-API callbacks that launch kernels (and CUDA graphs).
  static constexpr std::array<CUpti_CallbackId, 8> kLaunchCallbacks = {
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
      CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
  };
  // The runtime calls that launch kernels (and graphs), for launch records
  // from API activity. CUPTI's activity records the call the app made: a
  // published trace of its activity sample shows runtime records and no
  // driver record for the cuLaunchKernel inside cudaLaunchKernel
  // (bench/experiments/launch_activity.cu checks this on the GPU). Should
  // both come, TraceData merges them by correlation id.
  static constexpr std::array<CUpti_CallbackId, 10> kRuntimeLaunchApis = {
      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
      CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
      CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
      CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,  // <<<>>> in CUDA 13
      CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000,
  };
  static constexpr std::array<CUpti_ActivityKind, 3> kActivityKinds = {
      CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
      CUPTI_ACTIVITY_KIND_MEMCPY,
      CUPTI_ACTIVITY_KIND_MEMSET,
  };
  [[nodiscard]] static bool IsLaunchCallback(CUpti_CallbackId cbid);

  Tracer(CuptiSeam& seam, RecordSink& sink, uint32_t pid, TracerDiag diag = {});
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Only launches, kernels and copies of calls inside these ranges are
  // traced (--capture-range); every call is without it. Set before Begin.
  void SetCaptureRanges(const CaptureRanges* ranges) { capture_ = ranges; }
  // Writes the ProcessRecord (and the program's name), started at `now_ns`
  // on the trace's clock (0: CUPTI's timestamp now).
  void Begin(std::string_view program, uint64_t now_ns = 0);
  // A launch callback (ENTER and EXIT). `data` is CUPTI's CUpti_CallbackData.
  void OnLaunchApi(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  // The same under the measuring switches: launches counted, no record
  // (no_launch_records); no time taken at ENTER (no_timestamps).
  void OnLaunchApiCountOnly(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  void OnLaunchApiUntimed(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  // Whoever dispatches the launch callbacks chooses one of the three once
  // (hook.cc): no flag is tested per launch.
  // A launch another provider saw (the Compute Sanitizer's launch callback,
  // patch backend): a launch record whose API start and end are `time_ns`
  // and whose correlation id is `serial`; no kernel record joins it.
  struct SeenLaunch {
    const void* function = nullptr;  // the launch handle: names are cached by it
    const char* name = nullptr;      // mangled
    uint64_t time_ns = 0;
    uint64_t serial = 0;
    uint64_t stream = 0;
    uint32_t grid[3] = {0, 0, 0};
    uint32_t block[3] = {0, 0, 0};
  };
  void OnLaunchSeen(const SeenLaunch& launch);
  // A completed activity buffer: converts every record it holds.
  void OnActivityBuffer(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t valid_size);
  // After this returns no thread writes to the sink any more; later calls are
  // dropped silently. False if a writer did not leave in time (leak the sink).
  bool CloseSink();

  // Runs f() only while the sink is open (for status writes from callbacks).
  template <typename F>
  bool WhileSinkOpen(F&& f) {
    GateScope scope(gate_);
    if (!scope.entered()) return false;
    f();
    return true;
  }

  // A kernel the hook instrumented: publishes its name and probe kernel id.
  void OnKernelInstrumented(std::string_view name, uint32_t kernel_id);
  // A kernel of a loaded module and its backend (kCatalogBackend*), for
  // `cuprobe list -- cmd`: publishes its name and a CatalogKernelRecord.
  void OnKernelCataloged(std::string_view name, uint16_t backend);
  // Activity on this CUPTI stream id is cuprobe's own (the maps' copies):
  // it is not part of the program's trace. Up to kMaxIgnoredStreams.
  void IgnoreStream(uint32_t stream_id);
  static constexpr int kMaxIgnoredStreams = 8;

  [[nodiscard]] TracerStats stats() const;
  [[nodiscard]] uint64_t InternName(std::string_view name);

 private:
  bool Emit(RecordType type, const void* body, uint32_t size, const void* extra = nullptr,
            uint32_t extra_size = 0);
  void HandleActivity(const CUpti_Activity* record);
  // A launch callback's EXIT: the launch record.
  void RecordLaunch(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  [[nodiscard]] bool Ignored(uint32_t stream_id) const;
  [[nodiscard]] bool Captured(uint32_t correlation_id) const {
    return capture_ == nullptr || capture_->Contains(correlation_id);
  }

  // What one thread keeps for this tracer: counters that only it adds to
  // (plain relaxed load and store; stats() sums every thread's) and the last
  // handle it named. Made on a thread's first call, on its own cache line,
  // linked into threads_ (never unlinked: a thread that exits leaves its
  // counts, and a later thread with its id takes the slot over) and freed
  // with the tracer. Past kMaxThreadSlots threads (a program that starts a
  // thread per request), the rest share overflow_: locked adds, no handle
  // cache, and the list stays short for the first-call search and stats().
  struct alignas(64) ThreadState {
    std::atomic<uint64_t> launches{0};
    std::atomic<uint64_t> written{0};
    const void* last_handle = nullptr;
    uint64_t last_name_id = 0;
    uint64_t tid = 0;
    bool shared = false;  // overflow_: many threads add to it
    ThreadState* next = nullptr;
    // Non-zero while this thread writes to the sink (not for overflow_,
    // whose threads count themselves in gate_): see EnterSink and CloseSink.
    std::atomic<uint32_t> inside{0};
  };
  static constexpr int kMaxThreadSlots = 256;
  ThreadState& ThisThread();
  ThreadState& AttachThread();
  static void Add(const ThreadState& state, std::atomic<uint64_t>& counter) {
    if (state.shared) {
      counter.fetch_add(1, std::memory_order_relaxed);
    } else {
      counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
  }
  uint64_t SumOverThreads(std::atomic<uint64_t> ThreadState::*counter) const;
  // The record gate, per thread: a thread's own count and a fence instead
  // of a locked add and sub on a word every writer shares (the app's launching
  // threads and CUPTI's activity thread all write records).
  [[nodiscard]] bool EnterSink(ThreadState& me);
  void ExitSink(ThreadState& me);
  // Emit for the calling thread's `me`, which the launch path has looked up
  // already; the handle's name id, through `me`'s last-handle cache.
  bool EmitAs(ThreadState& me, RecordType type, const void* body, uint32_t size,
              const void* extra = nullptr, uint32_t extra_size = 0);
  // The name id of a launch handle, cached per handle (and per thread, the
  // last one); a miss names it `known`, or asks the driver when empty.
  uint64_t NameForHandle(ThreadState& me, const void* handle, std::string_view known = {});

  CuptiSeam& seam_;
  RecordSink& sink_;
  const uint32_t pid_;
  const TracerDiag diag_;
  const uint64_t serial_;  // process-unique: keys each thread's ThreadState cache
  const CaptureRanges* capture_ = nullptr;
  ActiveGate gate_;
  std::atomic<ThreadState*> threads_{nullptr};
  std::atomic<int> thread_slots_{0};
  ThreadState overflow_;

  absl::Mutex names_mu_;
  absl::flat_hash_map<std::string, uint64_t> ids_by_name_ ABSL_GUARDED_BY(names_mu_);
  absl::flat_hash_map<const void*, uint64_t> ids_by_handle_ ABSL_GUARDED_BY(names_mu_);
  uint64_t next_name_id_ ABSL_GUARDED_BY(names_mu_) = 1;

  std::array<std::atomic<uint32_t>, kMaxIgnoredStreams> ignored_streams_{};  // 0: empty
  std::atomic<int> ignored_count_{0};
  std::atomic<uint64_t> dropped_{0};  // rare: shared
  std::atomic<uint64_t> activity_buffers_{0};
  std::atomic<uint64_t> activity_records_{0};
  std::atomic<uint64_t> activity_dropped_{0};
  std::atomic<uint64_t> name_failures_{0};
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_TRACER_H_
