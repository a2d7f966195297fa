// File: cupti_hook/activity_controller.h
//
// CUPTI's activity (kernel, memcpy and memset timing) and when it is on.
// Enabled once at Start (so that a CUPTI that refuses it says so then);
// then, with a capture range (--capture-range), on only while a range is
// open, or lingering after ranges back to back (RangeActivity: the watcher
// turns it off once no range follows), and pre-warmed until the program's
// first launch returns; with CUPROBE_DIAG=activity-at-context, off until the
// first context; off for good at teardown (Finish).
//
//   ActivityController activity(seam, config, capture_ranges);
//   activity.SetWaker([&](auto delay) { watcher->WakeAt(now + delay); });
//   CUPROBE_RETURN_IF_ERROR(activity.EnableKinds());
//   activity.Arm(/*launch_callbacks_on=*/true);
//   ...   // callbacks: OnProfilerCall, OnLaunchReturned, OnContextCreated
//   ...   // watcher:   EndLingering, Flush
//   activity.Finish();                        // teardown
//
// Why outside a range: CUPTI's kernel activity is most of what a trace costs
// on a launch-bound program (it instruments every launch on Hopper), so a
// capture range's trace is cheap only if the activity is off between ranges.
//
// Threading: the mutex orders the profiler calls' switching with each other,
// with the watcher's (which ends a linger) and with teardown. A launch never
// waits on it (OnLaunchReturned: TryLock, the next launch tries again).
#ifndef CUPROBE_CUPTI_HOOK_ACTIVITY_CONTROLLER_H_
#define CUPROBE_CUPTI_HOOK_ACTIVITY_CONTROLLER_H_

#include <cupti.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cupti_hook/capture_range.h"
#include "cupti_hook/hook_config.h"
#include "cupti_hook/seam.h"

namespace cuprobe {

class ActivityController {
 public:
  // `capture`: the capture ranges (null without --capture-range).
  ActivityController(CuptiSeam& seam, const HookConfig& config, CaptureRanges* capture);
  ActivityController(const ActivityController&) = delete;
  ActivityController& operator=(const ActivityController&) = delete;

  // Asks the watcher to run EndLingering again after `delay` (set before
  // the first profiler call can come).
  void SetWaker(std::function<void(std::chrono::nanoseconds delay)> wake) {
    wake_ = std::move(wake);
  }

  // The activity kinds the config asks for (a subset of Tracer::kActivityKinds).
  [[nodiscard]] std::vector<CUpti_ActivityKind> Kinds() const;
  // Whether launch records should come from the API activity of the launch
  // calls (HookConfig::launch_api_activity, with launches and kernels traced).
  [[nodiscard]] bool WantsLaunchApiActivity() const;
  // Launch records from API activity, in two steps around EnableKinds:
  // thread ids from the OS (before any activity), then the launch calls'
  // activity on. Either is false (with one warning, and nothing left on)
  // where CUPTI cannot: the launch callbacks must record them instead.
  bool UseSystemThreadIds();
  bool EnableLaunchApiActivity();
  // Start: enables every kind; returns the first refusal.
  absl::Status EnableKinds();
  // After a successful Start: the activity's state until the first range,
  // context or launch (see the file comment). `launch_callbacks_on`: the
  // pre-warm needs a launch's return to end it.
  void Arm(bool launch_callbacks_on);

  // A profiler start or stop call's ENTER (either API): opens or closes a
  // range, turning the activity on before a range opens and off once it
  // closes. `call`: the API's name, for messages.
  void OnProfilerCall(bool start, uint32_t correlation_id, const char* call);
  // CUPROBE_DIAG=activity-at-context: on at the first context.
  void OnContextCreated();
  // Whether a launch's return still has the pre-warm to end (relaxed: read
  // on every launch's EXIT while the pre-warm is armed).
  [[nodiscard]] bool prewarm_pending() const {
    return prewarm_pending_.load(std::memory_order_relaxed);
  }
  // A launch returned while the pre-warm was pending: the activity off,
  // unless a range opened meanwhile. Skipped when the lock is busy.
  void OnLaunchReturned() ABSL_LOCKS_EXCLUDED(mu_);
  // The watcher's part: turns off the activity that ranges back to back left
  // on, once no range opened 1 ms after the last close; asks to be woken
  // again while that is not yet due.
  void EndLingering();
  // Hands CUPTI's completed buffers over (the watcher: while the program
  // runs; teardown: forced).
  void Flush(bool forced);
  // Teardown: off for good (a profiler call still on its way turns nothing
  // on), then a forced flush. Waits up to 2 s for a thread inside a switch.
  void Finish();

  // Start found the profiler callbacks unavailable: the whole run is
  // traced, with the activity on throughout.
  void DropCaptureRanges() { capture_ = nullptr; }

  [[nodiscard]] bool enabled() const { return enabled_; }
  // Launch records come from API activity (EnableLaunchApiActivity).
  [[nodiscard]] bool launch_activity() const { return launch_activity_; }

 private:
  // Turns the kinds (and with `launch_apis` the launch calls' API activity
  // when launch records come from it) on or off; returns the first refusal.
  // A capture range switches the kinds alone: switching the API activity
  // off lost the record of the last launch before it (the launch records
  // are filtered by range anyway).
  absl::Status Set(bool on, bool launch_apis) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The driver's and the runtime's launch calls' API activity on (the first
  // refusal is returned) or off (refusals ignored).
  absl::Status SetLaunchApiActivity(bool enable);
  // Opens or closes the range under the lock; what the caller must do then.
  struct RangeChange {
    CaptureRanges::Change change = CaptureRanges::Change::kUnchanged;
    int number = 0;
    absl::Status refused;  // turning the activity on for it
    bool warn_refused = false;
    bool lingers = false;
  };
  RangeChange SwitchForRange(bool start, uint32_t correlation_id) ABSL_LOCKS_EXCLUDED(mu_);
  void LogRangeChange(const RangeChange& c, const char* call) const;

  CuptiSeam& seam_;
  const HookConfig& config_;
  CaptureRanges* capture_;  // null without --capture-range
  std::function<void(std::chrono::nanoseconds)> wake_;
  bool enabled_ = false;  // by EnableKinds: buffers may hold records
  bool launch_activity_ = false;

  absl::Mutex mu_;
  // Whether the kinds are on now.
  bool on_ ABSL_GUARDED_BY(mu_) = false;
  bool final_ ABSL_GUARDED_BY(mu_) = false;
  bool warned_ ABSL_GUARDED_BY(mu_) = false;
  // Ranges back to back share one switch (capture_range.h).
  RangeActivity range_activity_ ABSL_GUARDED_BY(mu_);
  // CUPTI refused to turn the activity on for the open range.
  bool range_refused_ ABSL_GUARDED_BY(mu_) = false;
  // With a capture range and the launch callbacks on, the activity is left
  // on from Start until the program's first launch returns or the first
  // range opens, whichever comes first: CUPTI sets itself up at the first
  // launch after its activity is first turned on (docs/PERFORMANCE.md),
  // which would otherwise stall the first range's first launch. What CUPTI
  // records meanwhile is outside every range and filtered like any other.
  // Written under mu_.
  std::atomic<bool> prewarm_pending_{false};
  // How often Set turned the kinds on and off, and how long that took the
  // calling thread (logged at teardown with CUPROBE_LOG=debug).
  struct SwitchTimes {
    int count = 0;
    int64_t ns = 0;
  };
  SwitchTimes switched_on_ ABSL_GUARDED_BY(mu_);
  SwitchTimes switched_off_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_ACTIVITY_CONTROLLER_H_
