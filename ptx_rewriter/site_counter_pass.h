// File: ptx_rewriter/site_counter_pass.h
//
// Site counters in a kernel (site_summary.h; abi.h, "Site counters"). The
// entry, exit and memory passes ask SiteCounterIncrement at each probe call
// whether the call reduces to adds of site constants; if so, they emit an
// increment of the kernel register of that site's counter instead of the
// call. RunSiteCounterPass, after every other pass, zeroes those registers
// first thing at entry, sends every ret / exit (under its guard) to one
// flush at the end of the body, and returns from there:
//
//   ld.global.nc.u64 %__cp_scbase, [__cuprobe_site_counts];   // entry
//   mov.u64 %__cp_sc0, 0;
//   ...
//   @%p3 add.u64 %__cp_sc0, %__cp_sc0, 1;  // was: @%p3 call probe, (...)
//   ...
//   @%p1 bra $__cp_sc_flush;                // before `@%p1 ret;`
//   ...
//   $__cp_sc_flush:
//   { skip when the address is 0; per counter, the sum over the active
//     lanes (redux.sync: two counters per 32-bit sum while every count is
//     below 2^11, else three 16/16/32-bit sums), and the lowest active lane
//     does red.global.add.u64 into its SM's line (abi.h, "Site counters") }
//   ret;
#ifndef CUPROBE_PTX_REWRITER_SITE_COUNTER_PASS_H_
#define CUPROBE_PTX_REWRITER_SITE_COUNTER_PASS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "ptx_rewriter/bundle.h"
#include "ptx_rewriter/kernel_editor.h"

namespace cuprobe {

// The PTX that replaces the call of `probe` described by `call` at a site of
// `attach` kind: a counter increment (under the call's guard), or "" when
// the program does nothing at this site. nullopt: emit the call.
[[nodiscard]] std::optional<std::string> SiteCounterIncrement(KernelEditor& editor,
                                                              const KernelProbes& probes,
                                                              const ProbeRef& probe,
                                                              AttachKind attach,
                                                              const ProbeCall& call);

// Zeroes and flushes the counters the kernel uses (probes.sites->used).
[[nodiscard]] absl::Status RunSiteCounterPass(KernelEditor& editor, const KernelProbes& probes);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_SITE_COUNTER_PASS_H_
