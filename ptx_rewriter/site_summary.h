// File: ptx_rewriter/site_summary.h
//
// Site counters (include/cuprobe/abi.h): a probe site whose whole effect is
// adding constants to add-only maps costs one register increment instead of
// a probe call. A counting probe such as
//
//   struct access_key key = {.kernel_id = ctx->kernel_id, .kind = ctx->mem_kind};
//   cuprobe_map_add(&accesses, &key, 1);
//   cuprobe_map_add(&bytes, &key, ctx->mem_size);
//
// does, at one load site of one kernel, exactly "accesses[{7, LOAD}] += 1;
// bytes[{7, LOAD}] += 4" every time it runs. The rewriter finds that by
// running the program's eBPF code on the host with the site's constants
// (SummarizeSite), gives each distinct list of adds a counter of the module
// (SiteCounterTable: the two load sites of a kernel share one), makes every
// thread count its executions in a register, and flushes the registers into
// the module's counters when the thread exits. The host then adds
// count x delta to each map's snapshot (maps/map_set.h).
//
//   SiteCounterTable table;
//   std::optional<std::vector<SiteAdd>> adds = SummarizeSite(program, bundle.maps, site);
//   if (adds) uint32_t counter = table.IndexOf(*std::move(adds));
//
// A site is summarized only when the run is decided by the site alone: it
// reads no context field that varies per thread or launch (ids, timers, the
// address, lane masks), calls no helper but map_add / hist_add, and only on
// add-only HASH, ARRAY or HIST maps, or (at entry and exit) PERTHREAD maps;
// otherwise the probe is called as usual.
// What readers see differs in one way: a thread's adds at summarized sites
// reach the map when the thread exits, not at the access.
#ifndef CUPROBE_PTX_REWRITER_SITE_SUMMARY_H_
#define CUPROBE_PTX_REWRITER_SITE_SUMMARY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "probe/bundle.h"

namespace cuprobe {

// The constants a probe site fixes (the probe call's arguments, abi.h).
struct SiteConstants {
  AttachKind attach = AttachKind::kEntry;
  uint32_t kernel_id = 0;
  uint32_t mem_info = 0;  // CUPROBE_MEM_INFO; 0 at entry and exit
  uint32_t site_index = 0;
  // The patch backend's sites of one access class differ in their index
  // (the pc): a program that reads it is not summarized there.
  bool site_index_varies = false;
};

// The adds `program` makes at a site with these constants, in call order,
// or nullopt when the program has no summary code or its run depends on
// more than the site (see the file comment). Never trusts the code: it runs
// confined to its stack, with a step limit.
[[nodiscard]] std::optional<std::vector<SiteAdd>> SummarizeSite(const ProbeProgram& program,
                                                                absl::Span<const MapSpec> maps,
                                                                const SiteConstants& site);

// The counters of one module, in index order.
class SiteCounterTable {
 public:
  // Index of the counter for `adds`: equal lists share one. `thread_ids`:
  // SiteCounter::thread_ids (a thread-range counter when not 0).
  [[nodiscard]] uint32_t IndexOf(std::vector<SiteAdd> adds, uint32_t thread_ids = 0);
  [[nodiscard]] const std::vector<SiteCounter>& counters() const { return counters_; }

 private:
  std::vector<SiteCounter> counters_;
  absl::flat_hash_map<std::string, uint32_t> index_;  // serialized adds -> index
};

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_SITE_SUMMARY_H_
