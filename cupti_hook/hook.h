// File: cupti_hook/hook.h
//
// The hook: the lifecycle. It owns the init state machine, the CUPTI
// subscription and its switchboard (switchboard.h: which part handles which
// callback), the tracer, the activity controller (activity_controller.h),
// the probes' runtime, the watcher thread and the trace output, and tears
// them down in a fixed order. All CUPTI/driver access goes through a
// CuptiSeam, so the whole class is unit-tested against testing/FakeSeam.
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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cupti_hook/activity_controller.h"
#include "cupti_hook/capture_range.h"
#include "cupti_hook/gpu_events.h"
#include "cupti_hook/hook_config.h"
#include "cupti_hook/init_state.h"
#include "cupti_hook/kernel_patcher.h"
#include "cupti_hook/late_attach.h"
#include "cupti_hook/module_patcher.h"
#include "cupti_hook/probe_runtime.h"
#include "cupti_hook/sanitizer_seam.h"
#include "cupti_hook/seam.h"
#include "cupti_hook/switchboard.h"
#include "cupti_hook/trace_output.h"
#include "cupti_hook/tracer.h"
#include "cupti_hook/watcher.h"

namespace cuprobe {

// Makes the trace output for a config (the real one opens the segment).
using OutputFactory = std::function<absl::StatusOr<TraceOutput*>(const HookConfig&)>;

class Hook final : public GpuEventSink {
 public:
  // `sanitizer`: the Compute Sanitizer seam, used instead of CUPTI with
  // HookConfig::backend kPatch (null: that backend is unavailable).
  Hook(CuptiSeam& seam, HookConfig config, OutputFactory make_output,
       SanitizerSeam* sanitizer = nullptr);
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
  // Non-null when the patch backend carries probes.
  [[nodiscard]] const KernelPatcher* kernel_patcher() const { return kernel_patcher_; }
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
  // The Compute Sanitizer's callback (patch backend); userdata is the Hook.
  static void SanitizerCallback(void* userdata, sanitizer::Domain domain, uint32_t cbid,
                                const void* cbdata);
  // CUPTI's activity-buffer callbacks (global in CUPTI: they reach the hook
  // through a process-wide pointer set by Start).
  static void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records);
  static void CUPTIAPI BufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                                       size_t size, size_t valid_size);

  static constexpr size_t kActivityBufferBytes = 4u << 20;

 private:
  // The CUPTI callback after the state checks: the switchboard's handlers.
  void OnCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata);
  void DisableWith(const std::string& reason);
  // Start with the patch backend (hook_patch.cc): the Compute Sanitizer's
  // callbacks instead of CUPTI's, probes through KernelPatcher, launches
  // traced from the launch callbacks. After the output exists.
  HookState StartPatchBackend();
  // --backend auto with probes: the same, with the PTX backend's module
  // patcher driven by the Sanitizer's driver-API callbacks, so kernels with
  // PTX are rewritten and only the others patched. nullopt when the
  // Sanitizer cannot be had: the caller goes on with CUPTI (--backend ptx).
  std::optional<HookState> StartAutoBackend();
  absl::Status SubscribeSanitizer();
  // The PTX backend on `bundle`: instrumenter_ and patcher_ (which fills
  // the helper library's CUPROBE_PID_TGID_SYMBOL), on device_maps_.
  void StartModulePatcher(ProbeBundle bundle);
  // nullopt only when `mixed` and the Sanitizer's callbacks cannot be
  // enabled (auto then goes on as ptx).
  std::optional<HookState> StartOnSanitizer(bool mixed);
  void StartPatchProbes(bool mixed);
  absl::Status EnablePatchCallbacks();
  void OnSanitizerCallback(sanitizer::Domain domain, uint32_t cbid, const void* cbdata);
  void OnSanitizerDriverCall(uint32_t cbid, const void* cbdata);
  void OnPatchLaunch(const void* cbdata);
  // Starts the watcher (and the ring pump) and finishes init.
  HookState FinishStart(const std::string& ready_line);
  // The trace's clock: CUPTI's, or the wall clock with the patch backend
  // (which must not touch CUPTI).
  uint64_t Now();
  // Fills the switchboard from the config (before READY: until then every
  // callback falls through before it reaches the board). `tracer_launches`:
  // the tracer records launches from the launch callbacks.
  absl::Status AddHandlers(bool tracer_launches);
  absl::Status AddTracerLaunchHandler();
  // Enables every callback the board has a handler for, but the launch
  // callbacks (EnableLaunchCallbacks) and the profiler calls (which only
  // narrow what is traced: without them the whole run is).
  absl::Status EnableCallbacks();
  // Enables the launch callbacks (tracing, late attach's redirection, a
  // library waiting for a context's first launch); any thread, once.
  absl::Status EnableLaunchCallbacks();
  // Enables the activity kinds, with launch records from API activity where
  // the config asks for them; where CUPTI cannot, from the launch
  // callbacks. An error: tracing cannot be enabled.
  absl::Status ChooseLaunchRecords();
  void Tick();
  // The ring pump's tick (every millisecond while probes have device-memory
  // rings): DeviceMaps::PumpRings.
  void PumpTick();
  // Sets up module replacement from the session's bundle; a bad bundle only
  // turns probes off (with one message), tracing goes on.
  void StartProbes();
  // `cuprobe list -- cmd` (HookConfig::list_kernels): each kept module
  // image's kernels go into the trace as CatalogKernelRecords.
  void ListKernelsAtLoad();
  // The session's bundle, or nullopt (said once) when it is not usable.
  std::optional<ProbeBundle> SessionBundle();
  // Stop's steps, in order (the file comment of hook.h).
  void StopWork();
  void ReleaseOutput();

  // Switchboard handlers (hook.cc adds them): one concern each.
  void OnLaunchFill(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  void OnLaunchRedirect(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  void OnLaunchPrewarm(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  void OnProfilerCall(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  void OnModulePatch(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  void OnModuleRecord(CUpti_CallbackId cbid, const CUpti_CallbackData* data);
  void OnFatalError(CUpti_CallbackId cbid, const CUpti_StateData* data);
  // GpuEventSink: the provider-neutral events (gpu_events.h).
  void OnContextCreated(CUcontext context) override;
  void OnContextDestroying(CUcontext context) override;
  void OnModuleLoaded(const ModuleEvent& module) override {}
  void OnModuleUnloaded(const ModuleEvent& module) override;
  void OnLaunch(const LaunchEvent& launch) override;
  void OnSynchronize(CUcontext context, CUstream stream) override {}

  CuptiSeam& seam_;
  HookConfig config_;
  OutputFactory make_output_;
  InitStateMachine lifecycle_;
  bool subscribed_ = false;
  Switchboard board_;
  std::atomic<bool> launch_callbacks_on_{false};
  // Leaked on purpose (never deleted): CUPTI may call back after teardown.
  TraceOutput* output_ = nullptr;
  Tracer* tracer_ = nullptr;
  ActivityController* activity_ = nullptr;
  Watcher* watcher_ = nullptr;
  Watcher* ring_pump_ = nullptr;
  BundleInstrumenter* instrumenter_ = nullptr;
  DeviceMaps* device_maps_ = nullptr;
  ModulePatcher* patcher_ = nullptr;
  ImageRegistry* images_ = nullptr;
  LateAttach* attach_ = nullptr;
  CaptureRanges* capture_ = nullptr;
  SanitizerSeam* const sanitizer_;
  bool sanitizer_subscribed_ = false;
  bool on_sanitizer_ = false;  // the Sanitizer's callbacks, not CUPTI's (set before READY)
  KernelPatcher* kernel_patcher_ = nullptr;
  std::atomic<uint64_t> launch_serial_{0};
  // Callbacks that fell through (not READY, re-entered, forked child). No
  // counter of every callback: its locked add, twice per launch, costs a
  // measurable part of the hook's time per launch (bench/hook_bench).
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
