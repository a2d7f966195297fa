#include "cupti_hook/hook.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "support/log.h"

namespace cuprobe {

HookConfig HookConfig::FromEnvironment() {
  HookConfig config;
  if (const char* s = std::getenv("CUPROBE_SESSION"); s != nullptr) config.session = s;
  return config;
}

Hook::Hook(CuptiSeam& seam, HookConfig config) : seam_(seam), config_(std::move(config)) {}

void Hook::DisableWith(const std::string& reason) {
  if (lifecycle_.Disable(reason)) {
    CUPROBE_LOG(kWarning, "%s; not instrumenting, the application runs unchanged", reason);
  }
}

HookState Hook::Start() {
  if (!lifecycle_.TryBeginInit()) return lifecycle_.state();
  // Everything the hook calls from here on must fall through our own callback.
  ReentrancyGuard guard;

  std::string other_tool;
  absl::Status status = seam_.Subscribe(&Hook::Callback, this, "cuprobe", &other_tool);
  if (!status.ok()) {
    if (status.code() == absl::StatusCode::kAlreadyExists) {
      DisableWith(absl::StrCat("CUPTI is already in use by ",
                               other_tool.empty() ? std::string("another tool")
                                                  : absl::StrCat("'", other_tool, "'")));
    } else {
      DisableWith(absl::StrCat("cannot subscribe to CUPTI (", status.message(), ")",
                               status.code() == absl::StatusCode::kUnavailable
                                   ? "; is the NVIDIA driver installed?"
                                   : ""));
    }
    return lifecycle_.state();
  }
  subscribed_ = true;
  lifecycle_.FinishInit();
  CUPROBE_LOG(kInfo, "hook ready: subscribed to CUPTI as 'cuprobe'%s",
              config_.session.empty() ? " (standalone)"
                                      : absl::StrCat(", session ", config_.session));
  return lifecycle_.state();
}

void Hook::Stop() {
  if (!lifecycle_.TryBeginStop()) return;
  ReentrancyGuard guard;
  if (subscribed_) {
    absl::Status status = seam_.Unsubscribe();
    if (!status.ok()) CUPROBE_LOG(kDebug, "teardown: %s", status.ToString());
    subscribed_ = false;
  }
  lifecycle_.FinishStop();
}

void CUPTIAPI Hook::Callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                             const void* cbdata) {
  static_cast<Hook*>(userdata)->OnCallback(domain, cbid, cbdata);
}

void Hook::OnCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata) {
  callbacks_seen_.fetch_add(1, std::memory_order_relaxed);
  // Not READY (still initializing, disabled, stopping) or a call the hook made
  // itself: fall through untouched.
  if (!lifecycle_.IsReady() || ReentrancyGuard::Active()) {
    callbacks_fell_through_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ReentrancyGuard guard;
}

}  // namespace cuprobe
