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
//
// Thread-range counters (abi.h). A PERTHREAD add of a constant at entry (or
// at every exit alike) gives each thread of a launch the same count: the
// thread with global id 0 records the launch's thread count T once, at
// entry, and the host adds count x delta to ids [0, min(T, ids)):
//
//   { .reg .u32 / .u64 ...;  or of %ctaid.x/y/z and %tid.x/y/z == 0 ?
//     ld the counter's area address from its shard-0 slot;
//     T = %ntid.x*y*z * %nctaid.x*y*z;
//     red.global.max.u64 [area + 8], min(T, ids);        // the high water
//     red.global.add.u64 [area + 16 + 8 * min(T, ids)], 1;
//     T > ids: red.global.add.u64 [area], T - ids }   // the refusals
//
// threadhist on vec_add then costs a few instructions per thread instead of
// a load and a store of the thread's slot.
#ifndef CUPROBE_PTX_REWRITER_SITE_COUNTER_PASS_H_
#define CUPROBE_PTX_REWRITER_SITE_COUNTER_PASS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "probe/bundle.h"
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

// Whether `probe`, attached at the kernel's `exit_sites` exits, reduces to
// one thread-range counter (abi.h): its adds at every exit are the same
// PERTHREAD adds, and every thread passes one of the exits (no function
// of the module may end it with `exit`, and the body ends in an unguarded
// `ret` or `exit`). Then the counter
// is recorded in probes.sites->thread_ranges and the exits need nothing.
[[nodiscard]] bool ExitThreadRange(KernelEditor& editor, const KernelProbes& probes,
                                   const ProbeRef& probe, uint32_t exit_sites);

// Zeroes and flushes the counters the kernel uses (probes.sites->used), and
// has the launch's first thread record the thread-range counters
// (probes.sites->thread_ranges).
[[nodiscard]] absl::Status RunSiteCounterPass(KernelEditor& editor, const KernelProbes& probes);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_SITE_COUNTER_PASS_H_
