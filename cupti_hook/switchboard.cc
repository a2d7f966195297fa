// File: cupti_hook/switchboard.cc
#include "cupti_hook/switchboard.h"

#include "absl/strings/str_cat.h"

namespace cuprobe {

Switchboard::Switchboard() {
  // Every id of the domains the hook subscribes to; the others stay empty
  // (Add refuses them).
  tables_[CUPTI_CB_DOMAIN_DRIVER_API].resize(CUPTI_DRIVER_TRACE_CBID_SIZE);
  tables_[CUPTI_CB_DOMAIN_RUNTIME_API].resize(CUPTI_RUNTIME_TRACE_CBID_SIZE);
  tables_[CUPTI_CB_DOMAIN_RESOURCE].resize(CUPTI_CBID_RESOURCE_SIZE);
  tables_[CUPTI_CB_DOMAIN_SYNCHRONIZE].resize(CUPTI_CBID_SYNCHRONIZE_SIZE);
  tables_[CUPTI_CB_DOMAIN_STATE].resize(CUPTI_CBID_STATE_SIZE);
}

absl::Status Switchboard::Add(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                              Handler handler, void* owner) {
  const Slot* found = Find(domain, cbid);
  if (found == nullptr || handler == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("no switchboard slot for CUPTI domain ", domain, ", callback id ", cbid));
  }
  Slot& slot = const_cast<Slot&>(*found);
  if (slot.count == kMaxHandlers) {
    return absl::ResourceExhaustedError(absl::StrCat("more than ", kMaxHandlers,
                                                     " handlers for CUPTI domain ", domain,
                                                     ", callback id ", cbid));
  }
  slot.handlers[slot.count] = handler;
  slot.owners[slot.count] = owner;
  ++slot.count;
  return absl::OkStatus();
}

std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> Switchboard::Keys() const {
  std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> keys;
  for (int d = 0; d < CUPTI_CB_DOMAIN_SIZE; ++d) {
    for (size_t id = 0; id < tables_[d].size(); ++id) {
      if (tables_[d][id].count > 0) {
        keys.emplace_back(static_cast<CUpti_CallbackDomain>(d), static_cast<CUpti_CallbackId>(id));
      }
    }
  }
  return keys;
}

}  // namespace cuprobe
