// File: ptx_rewriter/exit_pass.cc
#include "ptx_rewriter/exit_pass.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ptx_rewriter/site_counter_pass.h"
#include "support/status_macros.h"

namespace cuprobe {

absl::Status RunExitPass(KernelEditor& editor, const KernelProbes& probes, std::string_view args,
                         PassStats* stats) {
  if (probes.exit.empty()) return absl::OkStatus();
  const std::vector<Statement>& body = editor.kernel().body;
  auto is_exit = [](const Statement& s) {
    return s.IsInstruction() && (s.Op() == "ret" || s.Op() == "exit");
  };
  const auto exits = static_cast<uint32_t>(std::count_if(body.begin(), body.end(), is_exit));
  // Probes whose exits reduce to one thread-range counter need nothing at
  // the exits (site_counter_pass.h).
  std::vector<bool> ranged(probes.exit.size(), false);
  for (size_t k = 0; k < probes.exit.size(); ++k) {
    ranged[k] = ExitThreadRange(editor, probes, probes.exit[k], exits);
    if (ranged[k]) stats->counted_calls += exits;
  }
  uint32_t site = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const Statement& s = body[i];
    if (!is_exit(s)) continue;
    std::string ptx;
    for (size_t k = 0; k < probes.exit.size(); ++k) {
      const ProbeRef& p = probes.exit[k];
      if (ranged[k]) continue;
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
