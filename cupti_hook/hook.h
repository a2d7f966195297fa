// File: cupti_hook/hook.h
//
// The hook: owns the init state machine, the CUPTI subscription, the tracer,
// the watcher thread and the trace output, and tears them down in a fixed
// order. All CUPTI/driver access goes through a CuptiSeam, so the whole class
// is unit-tested against testing/FakeSeam.
//
//   static auto* seam = new RealSeam;          // leaked: callbacks run at exit
//   static auto* hook = new Hook(*seam, HookConfig::FromEnvironment(), MakeOutput);
//   hook->Start();
//   ...
//   hook->Stop();                              // idempotent
//
// Teardown order (Stop): stop accepting work (STOPPING: every callback falls
// through) -> stop and join the watcher -> flush CUPTI activity buffers and
// publish final stats -> disable activity, unsubscribe -> close the tracer's
// gate (no writer left) -> finish and release the output (unmap the segment).
#ifndef CUPROBE_CUPTI_HOOK_HOOK_H_
#define CUPROBE_CUPTI_HOOK_HOOK_H_

#include <cupti.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cupti_hook/capture_range.h"
#include "cupti_hook/init_state.h"
#include "cupti_hook/late_attach.h"
#include "cupti_hook/module_patcher.h"
#include "cupti_hook/probe_runtime.h"
#include "cupti_hook/seam.h"
#include "cupti_hook/trace_output.h"
#include "cupti_hook/tracer.h"
#include "cupti_hook/watcher.h"

namespace cuprobe {

struct HookConfig {
  // CUPROBE_SESSION: the session segment created by `cuprobe` (empty when the
  // injection path was set by hand: standalone mode).
  std::string session;
  // CUPROBE_OUTPUT: where standalone mode writes its trace
  // (default ./cuprobe-<pid>.json).
  std::string output;
  // CUPROBE_INTERVAL_MS: watcher period.
  uint32_t interval_ms = 100;
  uint32_t pid = 0;
  std::string program;  // for the trace: argv[0] of the app
  // CUPROBE_TRACE: what to trace, a comma-separated subset of "launches"
  // (driver launch callbacks: API time, grid, stream), "kernels" (CUPTI
  // concurrent-kernel activity: GPU start/end) and "memory" (memcpy and
  // memset activity). Default: all three. An unknown word is ignored with a
  // warning. Kernel activity is what costs most on launch-bound programs
  // (docs/PERFORMANCE.md); "launches" alone is the cheapest full count.
  bool trace_launches = true;
  bool trace_kernels = true;
  bool trace_memory = true;
  // CUPROBE_LATE_ATTACH=0 turns late attach off: the hook then keeps no
  // module images and never redirects a launch (cupti_hook/late_attach.h).
  bool late_attach = true;
  // CUPROBE_DIAG=serial-kernels (a measuring switch, not a user setting):
  // kernels are timed with CUPTI's serialized kernel activity
  // (CUPTI_ACTIVITY_KIND_KERNEL), which does not instrument kernels but
  // keeps kernels of different streams from overlapping, instead of the
  // concurrent-kernel activity (bench/overhead_breakdown.sh compares them).
  bool serial_kernels = false;
  // Launch API times from CUPTI's API activity for the launch calls alone
  // (cuptiActivityEnableDriverApi for the driver's, cuptiActivityEnableRuntimeApi
  // for the runtime's) instead of launch callbacks, when
  // kernels are traced too: the activity record carries the call's times,
  // thread and result, and the kernel record of the same correlation id its
  // name, grid and block (TraceData joins them). No launch callback runs
  // then, until a late attach asks for one. CUPROBE_LAUNCH_TIMES=activity or
  // callbacks (the default: activity passes the GPU tests but was not
  // measurably cheaper on the H200, docs/PERFORMANCE.md).
  bool launch_api_activity = false;
  // CUPROBE_CAPTURE_RANGE=cudaProfilerApi (`cuprobe trace --capture-range`):
  // only calls between the program's cudaProfilerStart and cudaProfilerStop
  // (or the driver's cuProfilerStart and cuProfilerStop) are traced
  // (cupti_hook/capture_range.h). CUPROBE_CAPTURE_RANGE=none: everything.
  // CUPTI's kernel, memcpy and memset activity is then on only while a
  // range is open (and between ranges back to back: RangeActivity).
  bool capture_profiler_api = false;
  // CUPROBE_CAPTURE_RANGE_END (`--capture-range-end`): how many ranges, and
  // whether a stop call ends one (probe/capture_range_end.h).
  CaptureRangeEnd capture_range_end;
  // CUPROBE_DIAG=capture-activity-on (a measuring switch): with a capture
  // range, CUPTI's activity stays on the whole run; only the records are
  // filtered (what bench/run.sh compares the default with).
  bool capture_activity_on = false;
  // CUPROBE_DIAG=activity-at-context (a measuring switch): without a
  // capture range, the activity kinds are turned off after Start's check and
  // on again when the first context is created, from its callback. On the
  // H200 a range's activity, turned on mid-run, looked cheaper than the
  // same activity on from Start (docs/PERFORMANCE.md); this tells whether
  // turning it on once a context exists is what matters.
  bool activity_at_context = false;
  // CUPROBE_DIAG=no-linger (a measuring switch): every range's stop turns
  // the activity off, back to back or not (what a switch costs).
  bool no_linger = false;
  // CUPROBE_DIAG=no-prewarm (a measuring switch): with a capture range, the
  // activity is off from Start until the first range (as before the
  // pre-warm: Hook::prewarm_pending_), so the first range's first launch
  // pays CUPTI's one-time set-up.
  bool no_prewarm = false;
  // Where PTX is looked for when a module is a cubin without any (Triton's
  // cache: $TRITON_CACHE_DIR, ~/.triton/cache; ptx_rewriter/image_pipeline.h).
  std::vector<std::string> ptx_search_roots;

  // Parses a CUPROBE_TRACE value into the three switches above; returns the
  // words it did not understand (empty when all were fine).
  std::vector<std::string> SetTraceSelection(std::string_view list);

  [[nodiscard]] static HookConfig FromEnvironment();
};

// Makes the trace output for a config (the real one opens the segment).
using OutputFactory = std::function<absl::StatusOr<TraceOutput*>(const HookConfig&)>;

class Hook {
 public:
  Hook(CuptiSeam& seam, HookConfig config, OutputFactory make_output);
  Hook(const Hook&) = delete;
  Hook& operator=(const Hook&) = delete;

  // Runs init once (the first caller owns it) and returns the resulting
  // state. Failures leave the hook DISABLED with one stderr line; the
  // application is never affected.
  HookState Start();
  // Teardown; only the first call does anything.
  void Stop();

  [[nodiscard]] const InitStateMachine& lifecycle() const { return lifecycle_; }
  [[nodiscard]] uint64_t callbacks_fell_through() const { return callbacks_fell_through_.load(); }
  [[nodiscard]] Tracer* tracer() const { return tracer_; }
  [[nodiscard]] const Watcher* watcher() const { return watcher_; }
  [[nodiscard]] int contexts_alive() const { return contexts_alive_.load(); }
  // What pthread_atfork's child handler does in a forked child (tests undo
  // it with false).
  void MarkForkedChild(bool forked = true) { forked_child_.store(forked); }
  // Non-null when the session carries probes (`cuprobe run`).
  [[nodiscard]] const ModulePatcher* patcher() const { return patcher_; }
  // Non-null when probes can be attached later (a session without probes of
  // its own; cupti_hook/late_attach.h).
  [[nodiscard]] const LateAttach* late_attach() const { return attach_; }
  [[nodiscard]] const ImageRegistry* images() const { return images_; }
  // Non-null with HookConfig::capture_profiler_api.
  [[nodiscard]] const CaptureRanges* capture_ranges() const { return capture_; }

  // The calls that open and close a capture range.
  static constexpr std::array<CUpti_CallbackId, 2> kProfilerDriverCallbacks = {
      CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop};
  static constexpr std::array<CUpti_CallbackId, 2> kProfilerRuntimeCallbacks = {
      CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000,
      CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000};

  // The CUPTI callback; userdata is the Hook.
  static void CUPTIAPI Callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const void* cbdata);
  // CUPTI's activity-buffer callbacks (global in CUPTI: they reach the hook
  // through a process-wide pointer set by Start).
  static void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records);
  static void CUPTIAPI BufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                       size_t size, size_t valid_size);

  static constexpr size_t kActivityBufferBytes = 4u << 20;

 private:
  void OnCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata);
  void DisableWith(const std::string& reason);
  absl::Status EnableCallbacks();
  void Tick();
  // The ring pump's tick (every millisecond while probes have device-memory
  // rings): DeviceMaps::PumpRings.
  void PumpTick();
  // Sets up module replacement from the session's bundle; a bad bundle only
  // turns probes off (with one message), tracing goes on.
  void StartProbes();
  // The activity kinds the config asks for (a subset of Tracer::kActivityKinds).
  [[nodiscard]] std::vector<CUpti_ActivityKind> ActivityKinds() const;
  // Whether launch records come from the API activity of the launch calls
  // (HookConfig::launch_api_activity, with launches and kernels traced).
  [[nodiscard]] bool WantsLaunchApiActivity() const;
  // Turns the per-call activity of the driver's and the runtime's launch
  // calls on (the first refusal is returned) or off (refusals ignored).
  absl::Status SetLaunchApiActivity(bool enable);
  // Enables the launch callbacks (tracing, or late attach's redirection);
  // any thread, once.
  absl::Status EnableLaunchCallbacks();
  // A profiler start or stop call (either API): opens or closes a range,
  // turning CUPTI's activity on before a range opens and off once it closes.
  void OnProfilerCall(bool start, const CUpti_CallbackData* data);
  // The watcher's part of it (its wake, and each tick): turns off the
  // activity that ranges back to back left on, once no range opened 1 ms
  // after the last close (RangeActivity); asks to be woken again while it
  // is not yet due.
  void EndLingeringActivity();
  // A launch returned while the pre-warm was pending (prewarm_pending_):
  // the activity off, unless a range opened meanwhile. Skipped when the
  // lock is busy (the next launch tries again).
  void EndPrewarm() ABSL_LOCKS_EXCLUDED(activity_mu_);
  // Turns the activity kinds (ActivityKinds(), and with `launch_apis` the
  // launch calls' API activity when launch records come from it) on or off;
  // returns the first refusal. A capture range switches the kinds alone:
  // on the H200, switching the API activity off lost the record of the
  // last launch before it (the launch records are filtered by range anyway).
  absl::Status SetActivity(bool on, bool launch_apis) ABSL_EXCLUSIVE_LOCKS_REQUIRED(activity_mu_);

  CuptiSeam& seam_;
  HookConfig config_;
  OutputFactory make_output_;
  InitStateMachine lifecycle_;
  bool subscribed_ = false;
  bool activity_enabled_ = false;  // by Start: buffers may hold records
  // Whether the activity kinds are on now. With a capture range they are on
  // only while a range is open, or lingering after ranges back to back
  // (range_activity_): outside one CUPTI times no kernel, which is most of
  // what a trace costs on a launch-bound program. The mutex orders the
  // profiler calls' switching with each other, with the watcher's (which
  // ends a linger) and with teardown, which turns it off for good
  // (activity_final_).
  absl::Mutex activity_mu_;
  bool activity_on_ ABSL_GUARDED_BY(activity_mu_) = false;
  bool activity_final_ ABSL_GUARDED_BY(activity_mu_) = false;
  bool activity_warned_ ABSL_GUARDED_BY(activity_mu_) = false;
  // Ranges back to back share one switch (capture_range.h).
  RangeActivity range_activity_ ABSL_GUARDED_BY(activity_mu_);
  // CUPTI refused to turn the activity on for the open range.
  bool range_refused_ ABSL_GUARDED_BY(activity_mu_) = false;
  // With a capture range and the launch callbacks on, the activity is left
  // on from Start until the program's first launch returns or the first
  // range opens, whichever comes first: CUPTI sets itself up at the first
  // launch after its activity is first turned on (1.5-3.5 ms on the H100s,
  // docs/PERFORMANCE.md: measured on a program of one kernel, so whether a
  // part of it is per module is not known), which would otherwise stall
  // the first range's first launch. What CUPTI records meanwhile (that
  // launch; copies and sets before it, all of them in a program that never
  // launches) is outside every range and filtered like any other. Read at
  // every launch's EXIT (relaxed); written under activity_mu_.
  std::atomic<bool> prewarm_pending_{false};
  // How often SetActivity turned the kinds on and off, and how long that
  // took the calling thread (logged at teardown with CUPROBE_LOG=debug).
  struct SwitchTimes {
    int count = 0;
    int64_t ns = 0;
  };
  SwitchTimes switched_on_ ABSL_GUARDED_BY(activity_mu_);
  SwitchTimes switched_off_ ABSL_GUARDED_BY(activity_mu_);
  // Launch records come from API activity (not the callbacks).
  std::atomic<bool> launch_activity_{false};
  std::atomic<bool> launch_callbacks_on_{false};
  // Leaked on purpose (never deleted): CUPTI may call back after teardown.
  TraceOutput* output_ = nullptr;
  Tracer* tracer_ = nullptr;
  Watcher* watcher_ = nullptr;
  Watcher* ring_pump_ = nullptr;
  BundleInstrumenter* instrumenter_ = nullptr;
  DeviceMaps* device_maps_ = nullptr;
  ModulePatcher* patcher_ = nullptr;
  ImageRegistry* images_ = nullptr;
  LateAttach* attach_ = nullptr;
  CaptureRanges* capture_ = nullptr;
  // Callbacks that fell through (not READY, re-entered, forked child). No
  // counter of every callback: its locked add, twice per launch, cost about
  // 5-10 of the hook's 90-105 ns per launch (bench/hook_bench).
  std::atomic<uint64_t> callbacks_fell_through_{0};
  std::atomic<int> contexts_alive_{0};
  // Set in a child of fork(): the parent's hook (threads, CUPTI, segment)
  // is not the child's; everything falls through and teardown does nothing.
  std::atomic<bool> forked_child_{false};
  static void OnForkChild();
  bool maps_publish_warned_ = false;  // watcher thread only
  bool ring_pump_warned_ = false;     // ring pump thread only
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_HOOK_H_
