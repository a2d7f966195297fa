// File: ptx_rewriter/exit_pass.cc
#include "ptx_rewriter/exit_pass.h"

#include <string>

#include "ptx_rewriter/site_counter_pass.h"
#include "support/status_macros.h"

namespace cuprobe {

absl::Status RunExitPass(KernelEditor& editor, const KernelProbes& probes, std::string_view args,
                         PassStats* stats) {
  if (probes.exit.empty()) return absl::OkStatus();
  const std::vector<Statement>& body = editor.kernel().body;
  uint32_t site = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const Statement& s = body[i];
    if (!s.IsInstruction()) continue;
    const std::string_view op = s.Op();
    if (op != "ret" && op != "exit") continue;
    std::string ptx;
    for (const ProbeRef& p : probes.exit) {
      ProbeCall call;
      call.function = p.function;
      call.kernel_id = probes.kernel_id;
      call.indirect = probes.indirect_calls;
      call.site_index = site;
      call.args = p.reads_args ? args : "0";
      call.guard = s.guard;
      call.guard_negated = s.guard_negated;
      if (std::optional<std::string> counted =
              SiteCounterIncrement(editor, probes, p, AttachKind::kExit, call)) {
        ptx += *counted;
        ++stats->counted_calls;
        continue;
      }
      ptx += ProbeCallText(call);
    }
    CUPROBE_RETURN_IF_ERROR(editor.InsertBefore(i, std::move(ptx)));
    ++site;
  }
  stats->exit_sites = site;
  return absl::OkStatus();
}

}  // namespace cuprobe
