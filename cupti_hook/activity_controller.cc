// File: cupti_hook/activity_controller.cc
#include "cupti_hook/activity_controller.h"

#include "absl/time/clock.h"
#include "cupti_hook/tracer.h"
#include "support/log.h"
#include "support/status_macros.h"

namespace cuprobe {

ActivityController::ActivityController(CuptiSeam& seam, const HookConfig& config,
                                       CaptureRanges* capture)
    : seam_(seam), config_(config), capture_(capture) {}

std::vector<CUpti_ActivityKind> ActivityController::Kinds() const {
  std::vector<CUpti_ActivityKind> kinds;
  for (CUpti_ActivityKind kind : Tracer::kActivityKinds) {
    bool is_kernel = kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    if (!(is_kernel ? config_.trace_kernels : config_.trace_memory)) continue;
    kinds.push_back(is_kernel && config_.serial_kernels ? CUPTI_ACTIVITY_KIND_KERNEL : kind);
  }
  return kinds;
}

bool ActivityController::WantsLaunchApiActivity() const {
  return config_.launch_api_activity && config_.trace_launches && config_.trace_kernels;
}

absl::Status ActivityController::SetLaunchApiActivity(bool enable) {
  for (CUpti_CallbackId cbid : Tracer::kLaunchCallbacks) {
    absl::Status s = seam_.ActivityEnableDriverApi(cbid, enable);
    if (!s.ok() && enable) return s;
  }
  for (CUpti_CallbackId cbid : Tracer::kRuntimeLaunchApis) {
    absl::Status s = seam_.ActivityEnableRuntimeApi(cbid, enable);
    if (!s.ok() && enable) return s;
  }
  return absl::OkStatus();
}

bool ActivityController::UseSystemThreadIds() {
  // Launch records carry the launching thread's OS id, as the callbacks
  // write it; CUPTI's default is pthread_self(). Set before any activity.
  absl::Status s = seam_.ActivityUseSystemThreadIds();
  if (!s.ok()) {
    CUPROBE_LOG(kWarning,
                "CUPROBE_LAUNCH_TIMES=activity: CUPTI cannot give OS thread ids (%s); "
                "recording launches with callbacks",
                s.message());
  }
  return s.ok();
}

bool ActivityController::EnableLaunchApiActivity() {
  if (absl::Status s = SetLaunchApiActivity(true); !s.ok()) {
    // This CUPTI cannot: the launch callbacks record launches instead.
    CUPROBE_LOG(kWarning,
                "CUPROBE_LAUNCH_TIMES=activity: CUPTI cannot record the launch calls' API "
                "activity (%s); recording launches with callbacks",
                s.message());
    (void)SetLaunchApiActivity(false);
    return false;
  }
  launch_activity_ = true;
  return true;
}

absl::Status ActivityController::EnableKinds() {
  for (CUpti_ActivityKind kind : Kinds()) {
    CUPROBE_RETURN_IF_ERROR(seam_.ActivityEnable(kind));
    enabled_ = true;
  }
  return absl::OkStatus();
}

void ActivityController::Arm(bool launch_callbacks_on) {
  absl::MutexLock lock(&mu_);
  on_ = enabled_;
  // With a capture range: off until the first start call, once the
  // program's first launch has returned (prewarm_pending_: the launch
  // callbacks end it; without them it is off from here); with
  // CUPROBE_DIAG=activity-at-context, off until the first context.
  // (Enabled above all the same, so that a CUPTI that refuses it says so
  // now.)
  if (capture_ != nullptr && !config_.capture_activity_on && on_ && !config_.no_prewarm &&
      launch_callbacks_on) {
    prewarm_pending_.store(true, std::memory_order_relaxed);
  } else if ((capture_ != nullptr && !config_.capture_activity_on) ||
             (capture_ == nullptr && config_.activity_at_context)) {
    (void)Set(false, /*launch_apis=*/false);
    switched_off_ = {};  // counted from the first range on
  }
}

void ActivityController::OnContextCreated() {
  if (capture_ != nullptr || !config_.activity_at_context) return;
  absl::MutexLock lock(&mu_);
  if (enabled_ && !on_ && !final_) (void)Set(true, /*launch_apis=*/false);
}

void ActivityController::OnLaunchReturned() {
  // Never waits on the lock from a launch: another thread holding it is
  // inside a CUPTI call (a start or stop call's switch, or teardown). The
  // flag stays set, and the next launch to return tries again.
  if (!mu_.TryLock()) return;
  // Not another thread's launch, or a range, first.
  if (prewarm_pending_.load(std::memory_order_relaxed)) {
    prewarm_pending_.store(false, std::memory_order_relaxed);
    if (on_ && !final_) {
      (void)Set(false, /*launch_apis=*/false);
      switched_off_ = {};  // counted from the first range on
    }
  }
  mu_.Unlock();
}

absl::Status ActivityController::Set(bool on, bool launch_apis) {
  const int64_t t0 = absl::GetCurrentTimeNanos();
  absl::Status first;
  for (CUpti_ActivityKind kind : Kinds()) {
    absl::Status s = on ? seam_.ActivityEnable(kind) : seam_.ActivityDisable(kind);
    if (first.ok()) first = s;
  }
  if (launch_apis && launch_activity_) {
    absl::Status s = SetLaunchApiActivity(on);
    if (first.ok()) first = s;
  }
  on_ = on;
  SwitchTimes& times = on ? switched_on_ : switched_off_;
  ++times.count;
  times.ns += absl::GetCurrentTimeNanos() - t0;
  return first;
}

ActivityController::RangeChange ActivityController::SwitchForRange(bool start,
                                                                   uint32_t correlation_id) {
  RangeChange c;
  absl::MutexLock lock(&mu_);
  const bool switching = enabled_ && !config_.capture_activity_on && !final_;
  // On before the range opens, so that every call of the range (this
  // thread's next ones first) finds CUPTI recording; already on when the
  // range before lingers. (Past the last range nothing opens: no switching
  // then.)
  bool turned_on = false;
  if (start && switching && !on_ && capture_->count() < capture_->limit()) {
    c.refused = Set(true, /*launch_apis=*/false);
    turned_on = true;
    c.warn_refused = !c.refused.ok() && !warned_;
    warned_ = warned_ || c.warn_refused;
  }
  c.change = start ? capture_->Open(correlation_id, &c.number)
                   : capture_->Close(correlation_id, &c.number);
  // The first range came before the program's first launch returned: the
  // activity the pre-warm left on is the range's now.
  if (c.change == CaptureRanges::Change::kOpened) {
    prewarm_pending_.store(false, std::memory_order_relaxed);
  }
  if (!switching) return c;
  // Off once the range has closed, unless it came right after the one
  // before (RangeActivity: then the watcher turns it off once no range
  // follows): CUPTI still hands over the records of kernels launched while
  // it was on, also of those that run after this call. And off again if
  // this start opened nothing.
  if (c.change == CaptureRanges::Change::kOpened) {
    range_activity_.Opened(seam_.Timestamp());
    range_refused_ = turned_on && !c.refused.ok();
  } else if (c.change == CaptureRanges::Change::kClosed) {
    const bool may_linger =
        !range_refused_ && capture_->count() < capture_->limit() && !config_.no_linger;
    if (range_activity_.Closed(seam_.Timestamp(), may_linger)) {
      if (on_) (void)Set(false, /*launch_apis=*/false);
    } else {
      c.lingers = true;
    }
  } else if (turned_on && on_) {
    (void)Set(false, /*launch_apis=*/false);
  }
  return c;
}

void ActivityController::OnProfilerCall(bool start, uint32_t correlation_id, const char* call) {
  // --capture-range-end none: the range runs to the end of the program.
  if (!start && config_.capture_range_end.ignore_stop) return;
  const RangeChange c = SwitchForRange(start, correlation_id);
  // The watcher turns a lingering activity off once no range follows
  // (outside the lock: the watcher takes it).
  if (c.lingers && wake_) {
    wake_(std::chrono::nanoseconds(RangeActivity::kBackToBackNs + 50'000));
  }
  if (c.warn_refused) {
    CUPROBE_LOG(kWarning,
                "CUPROBE_CAPTURE_RANGE=cudaProfilerApi: cannot turn CUPTI's activity on at %s "
                "(%s); kernels, copies and sets of the range may be missing",
                call, c.refused.message());
  }
  LogRangeChange(c, call);
}

void ActivityController::LogRangeChange(const RangeChange& c, const char* call) const {
  switch (c.change) {
    case CaptureRanges::Change::kOpened:
      CUPROBE_LOG(kInfo, "capture range %d: %s, tracing", c.number, call);
      break;
    case CaptureRanges::Change::kClosed:
      CUPROBE_LOG(kInfo, "capture range %d: %s, not tracing", c.number, call);
      break;
    case CaptureRanges::Change::kFull:
      if (capture_->limit() < CaptureRanges::kMaxRanges) {
        CUPROBE_LOG(kInfo,
                    "capture range: %d range(s) traced, as --capture-range-end "
                    "(CUPROBE_CAPTURE_RANGE_END) asks; later ranges are not",
                    capture_->limit());
      } else {
        CUPROBE_LOG(kWarning,
                    "CUPROBE_CAPTURE_RANGE=cudaProfilerApi: %d ranges traced; later ranges are "
                    "not",
                    CaptureRanges::kMaxRanges);
      }
      break;
    case CaptureRanges::Change::kUnchanged:
      break;
  }
}

void ActivityController::EndLingering() {
  if (capture_ == nullptr || !enabled_) return;
  // A program thread switching it now (a start or stop call) holds the
  // lock: then look again shortly.
  uint64_t wait_ns = 200'000;
  if (mu_.TryLock()) {
    const uint64_t now = seam_.Timestamp();
    if (on_ && !final_ && range_activity_.Tick(now)) (void)Set(false, /*launch_apis=*/false);
    // Still lingering (woken before CUPTI's clock says it is due): again
    // when it is. Not lingering: nothing to ask for.
    wait_ns = range_activity_.lingering() && !final_ ? range_activity_.WaitNs(now) : 0;
    mu_.Unlock();
    if (wait_ns == 0) return;
  }
  if (wake_) wake_(std::chrono::nanoseconds(wait_ns + 50'000));
}

void ActivityController::Flush(bool forced) {
  if (!enabled_) return;
  absl::Status s = seam_.ActivityFlushAll(forced);
  if (!s.ok() && forced) CUPROBE_LOG(kDebug, "teardown: %s", s.ToString());
}

void ActivityController::Finish() {
  if (!enabled_) return;
  // A program thread may hold the lock inside a CUPTI call; teardown does
  // not wait on it past 2 s (the activity is then left as it is).
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  bool locked = false;
  while (!(locked = mu_.TryLock()) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (!locked) {
    CUPROBE_LOG(kWarning, "teardown: a thread is still switching CUPTI's activity; left on");
  } else {
    const SwitchTimes on = switched_on_, off = switched_off_;
    (void)Set(false, /*launch_apis=*/true);
    final_ = true;
    mu_.Unlock();
    // What the capture ranges' switching cost the threads that did it
    // (teardown's own switch left out).
    if (capture_ != nullptr && on.count + off.count > 0) {
      CUPROBE_LOG(kDebug,
                  "capture ranges: CUPTI's activity turned on %d time(s), %.1f us each; "
                  "off %d time(s), %.1f us each",
                  on.count, on.count > 0 ? on.ns / 1e3 / on.count : 0.0, off.count,
                  off.count > 0 ? off.ns / 1e3 / off.count : 0.0);
    }
  }
  // Again, now that nothing adds records: what completed since the first
  // flush reaches the sink while it is open.
  Flush(/*forced=*/true);
  enabled_ = false;
}

}  // namespace cuprobe
