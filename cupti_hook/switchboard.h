// File: cupti_hook/switchboard.h
//
// One CUPTI subscriber, many consumers: the hook's one callback hands every
// call to the handlers registered for its (domain, callback id), in the
// order they were added. The table is filled once at Start, before any
// callback is enabled, and only read after that: dispatch takes no lock,
// allocates nothing and costs an index and an indirect call per handler
// (Kineto's CuptiCallbackApi does the same).
//
//   Switchboard board;
//   board.Add(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
//             [](void* self, CUpti_CallbackId cbid, const void* data) {
//               static_cast<Tracer*>(self)->OnLaunchApi(cbid, Cast(data));
//             }, &tracer);
//   // the CUPTI callback:
//   board.Dispatch(domain, cbid, cbdata);
//
// Measuring switches and configuration choose which handlers are added, so
// that nothing tests them per call.
#ifndef CUPROBE_CUPTI_HOOK_SWITCHBOARD_H_
#define CUPROBE_CUPTI_HOOK_SWITCHBOARD_H_

#include <cupti.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace cuprobe {

class Switchboard {
 public:
  using Handler = void (*)(void* owner, CUpti_CallbackId cbid, const void* cbdata);
  static constexpr int kMaxHandlers = 4;  // per (domain, callback id)

  Switchboard();

  // Adds `handler` (called with `owner`) for (domain, cbid). Not thread-safe
  // against Dispatch: add everything before enabling the callbacks.
  // INVALID_ARGUMENT for a domain or id out of range, RESOURCE_EXHAUSTED
  // past kMaxHandlers.
  absl::Status Add(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, Handler handler,
                   void* owner);

  // Runs the handlers of (domain, cbid); nothing for an unknown key.
  void Dispatch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata) const {
    const Slot* slot = Find(domain, cbid);
    if (slot == nullptr) return;
    for (int i = 0; i < slot->count; ++i) slot->handlers[i](slot->owners[i], cbid, cbdata);
  }

  // Whether (domain, cbid) has a handler.
  [[nodiscard]] bool Has(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) const {
    const Slot* slot = Find(domain, cbid);
    return slot != nullptr && slot->count > 0;
  }
  // Every (domain, cbid) with a handler, in domain and id order.
  [[nodiscard]] std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> Keys() const;

 private:
  struct Slot {
    Handler handlers[kMaxHandlers] = {};
    void* owners[kMaxHandlers] = {};
    int count = 0;
  };
  [[nodiscard]] const Slot* Find(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) const {
    if (domain <= CUPTI_CB_DOMAIN_INVALID || domain >= CUPTI_CB_DOMAIN_SIZE) return nullptr;
    const std::vector<Slot>& table = tables_[domain];
    return cbid < table.size() ? &table[cbid] : nullptr;
  }

  std::vector<Slot> tables_[CUPTI_CB_DOMAIN_SIZE];
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_SWITCHBOARD_H_
