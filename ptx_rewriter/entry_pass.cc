// File: ptx_rewriter/entry_pass.cc
#include "ptx_rewriter/entry_pass.h"

#include <string>

#include "ptx_rewriter/site_counter_pass.h"
#include "support/status_macros.h"

namespace cuprobe {

absl::Status RunEntryPass(KernelEditor& editor, const KernelProbes& probes,
                          std::string_view args, PassStats* stats) {
  if (probes.entry.empty()) return absl::OkStatus();
  std::string ptx;
  for (const ProbeRef& p : probes.entry) {
    ProbeCall call;
    call.function = p.function;
    call.kernel_id = probes.kernel_id;
    call.indirect = probes.indirect_calls;
    call.site_index = 0;
    call.args = p.reads_args ? args : "0";
    if (std::optional<std::string> counted =
            SiteCounterIncrement(editor, probes, p, AttachKind::kEntry, call)) {
      ptx += *counted;
      ++stats->counted_calls;
      continue;
    }
    ptx += ProbeCallText(call);
  }
  CUPROBE_RETURN_IF_ERROR(editor.InsertBefore(editor.EntryPoint(), std::move(ptx)));
  stats->entry_sites = 1;
  return absl::OkStatus();
}

}  // namespace cuprobe
