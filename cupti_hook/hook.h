// File: cupti_hook/hook.h
//
// The hook: owns the init state machine and the CUPTI subscription, and
// dispatches callbacks. All CUPTI/driver access goes through a CuptiSeam, so
// the whole class is unit-tested against testing/FakeSeam.
//
//   static auto* seam = new RealSeam;          // leaked: callbacks run at exit
//   static auto* hook = new Hook(*seam, HookConfig::FromEnvironment());
//   hook->Start();
//   ...
//   hook->Stop();                              // idempotent
#ifndef CUPROBE_CUPTI_HOOK_HOOK_H_
#define CUPROBE_CUPTI_HOOK_HOOK_H_

#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "cupti_hook/init_state.h"
#include "cupti_hook/seam.h"

namespace cuprobe {

struct HookConfig {
  // CUPROBE_SESSION: the session segment created by `cuprobe` (empty when the
  // injection path was set by hand).
  std::string session;

  [[nodiscard]] static HookConfig FromEnvironment();
};

class Hook {
 public:
  Hook(CuptiSeam& seam, HookConfig config);
  Hook(const Hook&) = delete;
  Hook& operator=(const Hook&) = delete;

  // Runs init once (the first caller owns it) and returns the resulting
  // state. Failures leave the hook DISABLED with one stderr line; the
  // application is never affected.
  HookState Start();
  // Teardown; only the first call does anything.
  void Stop();

  [[nodiscard]] const InitStateMachine& lifecycle() const { return lifecycle_; }
  [[nodiscard]] uint64_t callbacks_seen() const { return callbacks_seen_.load(); }
  [[nodiscard]] uint64_t callbacks_fell_through() const { return callbacks_fell_through_.load(); }

  // The CUPTI callback; userdata is the Hook.
  static void CUPTIAPI Callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const void* cbdata);

 private:
  void OnCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata);
  void DisableWith(const std::string& reason);

  CuptiSeam& seam_;
  HookConfig config_;
  InitStateMachine lifecycle_;
  bool subscribed_ = false;
  std::atomic<uint64_t> callbacks_seen_{0};
  std::atomic<uint64_t> callbacks_fell_through_{0};
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_HOOK_H_
