// File: ptx_rewriter/site_counter_pass.cc
#include "ptx_rewriter/site_counter_pass.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "probe/map_layout.h"
#include "ptx_rewriter/site_summary.h"

namespace cuprobe {
namespace {

std::string CounterRegister(KernelEditor& editor, uint32_t counter) {
  return editor.KernelRegister(absl::StrCat("sc", counter), ".b64");
}

std::string GuardPrefix(std::string_view guard, bool negated) {
  if (guard.empty()) return "";
  return absl::StrCat("@", negated ? "!" : "", guard, " ");
}

// The ids per key of the PERTHREAD maps that `adds` targets when every add
// can be a thread-range add (abi.h): u64 values, a key in range, one id
// count for all. 0 when no add targets a PERTHREAD map; nullopt for a mix,
// or an add the GPU would refuse for every thread.
std::optional<uint32_t> ThreadRangeIds(const std::vector<SiteAdd>& adds,
                                       absl::Span<const MapSpec> maps) {
  uint32_t ids = 0;
  size_t per_thread = 0;
  for (const SiteAdd& a : adds) {
    if (a.map >= maps.size()) return std::nullopt;
    const MapSpec& spec = maps[a.map];
    if (spec.type != CUPROBE_MAP_PERTHREAD) continue;
    ++per_thread;
    uint32_t key = 0;
    if (a.hist || a.key.size() != sizeof(key) || spec.value_size < 8) return std::nullopt;
    std::memcpy(&key, a.key.data(), sizeof(key));
    if (key >= spec.max_entries) return std::nullopt;
    uint32_t n = static_cast<uint32_t>(spec.map_extra);
    if (n == 0) n = kDefaultPerThreadIds;
    if (ids != 0 && n != ids) return std::nullopt;
    ids = n;
  }
  if (per_thread == 0) return 0;
  if (per_thread != adds.size()) return std::nullopt;
  return ids;
}

// Whether a thread may leave the kernel without passing one of its exit
// sites: a function of the module has an `exit`, or is only declared (an
// -rdc module's extern function could have one; cuprobe's own helpers and
// probes never do), or the kernel's body does not end in an unguarded
// `ret` / `exit` (its threads could run off the end).
bool ThreadsMayLeaveUnseen(const Module& module, const Function& kernel) {
  for (const Function& f : module.functions) {
    if (f.is_kernel) continue;
    if (!f.has_body) {
      if (!absl::StartsWith(f.name, "__cuprobe_")) return true;
      continue;
    }
    for (const Statement& s : f.body) {
      if (s.IsInstruction() && s.Op() == "exit") return true;
    }
  }
  for (auto it = kernel.body.rbegin(); it != kernel.body.rend(); ++it) {
    if (!it->IsInstruction()) continue;
    return !((it->Op() == "ret" || it->Op() == "exit") && it->guard.empty());
  }
  return true;  // no instruction at all
}

}  // namespace

std::optional<std::string> SiteCounterIncrement(KernelEditor& editor, const KernelProbes& probes,
                                                 const ProbeRef& probe, AttachKind attach,
                                                 const ProbeCall& call) {
  SiteCounterState* sites = probes.sites;
  if (sites == nullptr || sites->table == nullptr || probe.program == nullptr ||
      probe.program->summary_code.empty()) {
    return std::nullopt;
  }
  SiteConstants site;
  site.attach = attach;
  site.kernel_id = call.kernel_id;
  site.mem_info = call.mem_info;
  site.site_index = call.site_index;
  std::optional<std::vector<SiteAdd>> adds = SummarizeSite(*probe.program, sites->maps, site);
  if (!adds) return std::nullopt;
  if (adds->empty()) return std::string();  // the program does nothing here
  const std::optional<uint32_t> ids = ThreadRangeIds(*adds, sites->maps);
  if (!ids) return std::nullopt;
  if (*ids != 0) {
    // A thread-range counter: every thread passes the entry once; the exits
    // are decided together (ExitThreadRange), so one exit alone calls.
    if (attach != AttachKind::kEntry) return std::nullopt;
    sites->thread_ranges.push_back(sites->table->IndexOf(*std::move(adds), *ids));
    return std::string();
  }
  const uint32_t counter = sites->table->IndexOf(*std::move(adds));
  if (std::find(sites->used.begin(), sites->used.end(), counter) == sites->used.end()) {
    sites->used.push_back(counter);
  }
  const std::string reg = CounterRegister(editor, counter);
  return absl::StrCat(GuardPrefix(call.guard, call.guard_negated), "add.u64 ", reg, ", ", reg,
                      ", 1;\n");
}

bool ExitThreadRange(KernelEditor& editor, const KernelProbes& probes, const ProbeRef& probe,
                     uint32_t exit_sites) {
  SiteCounterState* sites = probes.sites;
  if (sites == nullptr || sites->table == nullptr || probe.program == nullptr ||
      probe.program->summary_code.empty() || exit_sites == 0) {
    return false;
  }
  std::optional<std::vector<SiteAdd>> first;
  for (uint32_t i = 0; i < exit_sites; ++i) {
    SiteConstants site;
    site.attach = AttachKind::kExit;
    site.kernel_id = probes.kernel_id;
    site.site_index = i;
    std::optional<std::vector<SiteAdd>> adds = SummarizeSite(*probe.program, sites->maps, site);
    if (!adds || adds->empty() || (first && *adds != *first)) return false;
    if (!first) first = std::move(adds);
  }
  const std::optional<uint32_t> ids = ThreadRangeIds(*first, sites->maps);
  if (!ids || *ids == 0 || ThreadsMayLeaveUnseen(editor.module(), editor.kernel())) {
    return false;
  }
  sites->thread_ranges.push_back(sites->table->IndexOf(*std::move(first), *ids));
  return true;
}

namespace {

// Global thread 0 of the launch records the launch's thread count in each
// thread-range counter (see the header). Runs right after `counts` is
// loaded; every other thread skips it after one block-uniform test and
// one per thread.
std::string ThreadRangeRecord(KernelEditor& editor, const SiteCounterState& sites,
                              const std::string& counts, bool load_counts) {
  const std::string done = "$__cp_tr_done";
  const std::string a = editor.ScratchRegister(".b32", 0);
  const std::string b = editor.ScratchRegister(".b32", 1);
  const std::string area = editor.ScratchRegister(".b64", 1);
  const std::string threads = editor.ScratchRegister(".b64", 2);
  const std::string x = editor.ScratchRegister(".b64", 3);
  const std::string skip = editor.ScratchRegister(".pred", 0);
  std::string ptx;
  // Block (0, 0, 0) first: the test is the same for the whole block.
  absl::StrAppend(&ptx, "mov.u32 ", a, ", %ctaid.x;\n", "mov.u32 ", b, ", %ctaid.y;\n",
                  "or.b32 ", a, ", ", a, ", ", b, ";\n", "mov.u32 ", b, ", %ctaid.z;\n",
                  "or.b32 ", a, ", ", a, ", ", b, ";\n", "setp.ne.u32 ", skip, ", ", a, ", 0;\n",
                  "@", skip, " bra.uni ", done, ";\n");
  absl::StrAppend(&ptx, "mov.u32 ", a, ", %tid.x;\n", "mov.u32 ", b, ", %tid.y;\n",
                  "or.b32 ", a, ", ", a, ", ", b, ";\n", "mov.u32 ", b, ", %tid.z;\n",
                  "or.b32 ", a, ", ", a, ", ", b, ";\n", "setp.ne.u32 ", skip, ", ", a, ", 0;\n",
                  "@", skip, " bra ", done, ";\n");
  if (load_counts) {
    absl::StrAppend(&ptx, "ld.global.nc.u64 ", counts, ", [", CUPROBE_SITE_COUNTS_SYMBOL, "];\n");
  }
  absl::StrAppend(&ptx, "setp.eq.u64 ", skip, ", ", counts, ", 0;\n",
                  "@", skip, " bra ", done, ";\n");
  // T = threads per block x blocks, in 64 bits.
  absl::StrAppend(&ptx, "mov.u32 ", a, ", %ntid.x;\n", "mov.u32 ", b, ", %ntid.y;\n",
                  "mul.lo.u32 ", a, ", ", a, ", ", b, ";\n", "mov.u32 ", b, ", %ntid.z;\n",
                  "mul.lo.u32 ", a, ", ", a, ", ", b, ";\n",
                  "cvt.u64.u32 ", threads, ", ", a, ";\n",
                  "mov.u32 ", a, ", %nctaid.x;\n", "cvt.u64.u32 ", x, ", ", a, ";\n",
                  "mul.lo.u64 ", threads, ", ", threads, ", ", x, ";\n",
                  "mov.u32 ", a, ", %nctaid.y;\n", "cvt.u64.u32 ", x, ", ", a, ";\n",
                  "mul.lo.u64 ", threads, ", ", threads, ", ", x, ";\n",
                  "mov.u32 ", a, ", %nctaid.z;\n", "cvt.u64.u32 ", x, ", ", a, ";\n",
                  "mul.lo.u64 ", threads, ", ", threads, ", ", x, ";\n");
  uint32_t k = 0;
  for (uint32_t c : sites.thread_ranges) {
    const SiteCounter& counter = sites.table->counters()[c];
    const uint64_t ids = counter.thread_ids;
    const uint64_t slot =
        uint64_t{c / CUPROBE_SITE_COUNTERS_PER_LINE} * CUPROBE_SITE_COUNTER_GROUP_BYTES +
        uint64_t{c % CUPROBE_SITE_COUNTERS_PER_LINE} * 8;
    const std::string next = absl::StrCat("$__cp_tr_next", k++);
    absl::StrAppend(&ptx, "ld.global.u64 ", area, ", [", counts, "+", slot, "];\n",
                    "setp.eq.u64 ", skip, ", ", area, ", 0;\n",
                    "@", skip, " bra ", next, ";\n",
                    // The refusals: threads with ids past the map's.
                    "setp.gt.u64 ", skip, ", ", threads, ", ", ids, ";\n",
                    "sub.u64 ", x, ", ", threads, ", ", ids, ";\n",
                    "@", skip, " red.global.add.u64 [", area, "], ", x, ";\n",
                    "min.u64 ", x, ", ", threads, ", ", ids, ";\n",
                    "red.global.max.u64 [", area, "+8], ", x, ";\n",  // the high water
                    "shl.b64 ", x, ", ", x, ", 3;\n",
                    "add.u64 ", x, ", ", x, ", ", area, ";\n",
                    "red.global.add.u64 [", x, "+16], 1;\n",
                    next, ":\n");
  }
  absl::StrAppend(&ptx, done, ":\n");
  return ptx;
}

// RunSiteCounterPass's steps.

// Zeroes the counter registers first thing at entry, and loads the
// counters' address there, so that its latency is hidden by the time a
// thread exits. With thread-range counters alone, only the launch's first
// thread loads it.
absl::Status ZeroCountersAtEntry(KernelEditor& editor, const SiteCounterState& sites,
                                 const std::string& counts) {
  const std::vector<uint32_t>& used = sites.used;
  std::string entry;
  if (!used.empty()) {
    absl::StrAppend(&entry, "ld.global.nc.u64 ", counts, ", [", CUPROBE_SITE_COUNTS_SYMBOL,
                    "];\n");
  }
  for (uint32_t c : used) absl::StrAppend(&entry, "mov.u64 ", CounterRegister(editor, c), ", 0;\n");
  if (!sites.thread_ranges.empty()) {
    entry += ThreadRangeRecord(editor, sites, counts, /*load_counts=*/used.empty());
  }
  return editor.InsertAtEntryFront(std::move(entry));
}

// The scratch registers of the flush, taken in this order (the order the
// kernel declares them in).
struct FlushRegisters {
  explicit FlushRegisters(KernelEditor& editor)
      : base(editor.ScratchRegister(".b64", 1)),
        sum(editor.ScratchRegister(".b64", 2)),
        part(editor.ScratchRegister(".b64", 3)),
        mask(editor.ScratchRegister(".b32", 0)),
        lo(editor.ScratchRegister(".b32", 1)),
        mid(editor.ScratchRegister(".b32", 2)),
        hi(editor.ScratchRegister(".b32", 3)),
        flag(editor.ScratchRegister(".pred", 0)),
        leader(editor.ScratchRegister(".pred", 1)) {}

  const std::string base;  // the counters' line of this SM
  const std::string sum;
  const std::string part;
  const std::string mask;  // the active lanes
  const std::string lo;
  const std::string mid;
  const std::string hi;
  const std::string flag;
  const std::string leader;  // the lowest active lane, which adds for the warp
};

// The leader's add of `value` to `counter` in its SM's line.
void AddToLine(std::string* ptx, const FlushRegisters& r, uint32_t counter,
               const std::string& value) {
  const uint64_t offset =
      uint64_t{counter / CUPROBE_SITE_COUNTERS_PER_LINE} * CUPROBE_SITE_COUNTER_GROUP_BYTES +
      uint64_t{counter % CUPROBE_SITE_COUNTERS_PER_LINE} * 8;
  absl::StrAppend(ptx, "@", r.leader, " red.global.add.u64 [", r.base, "+", offset, "], ", value,
                  ";\n");
}

// Sends every ret / exit (under its guard) to `flush`; returns how many
// there are.
absl::StatusOr<uint32_t> BranchExitsTo(KernelEditor& editor, const std::string& flush) {
  const std::vector<Statement>& body = editor.kernel().body;
  uint32_t exits = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const Statement& s = body[i];
    if (!s.IsInstruction() || (s.Op() != "ret" && s.Op() != "exit")) continue;
    ++exits;
    if (absl::Status st = editor.InsertBefore(
            i, absl::StrCat(GuardPrefix(s.guard, s.guard_negated), "bra ", flush, ";\n"));
        !st.ok()) {
      return st;
    }
  }
  return exits;
}

// The flush's start: skip it all when the counters' address is 0; else
// find the active lanes, the leader, and this SM's line of counters.
std::string FlushPrologue(const FlushRegisters& r, const std::string& counts,
                          const std::string& done) {
  std::string ptx;
  absl::StrAppend(&ptx, "setp.eq.u64 ", r.flag, ", ", counts, ", 0;\n",
                  "@", r.flag, " bra.uni ", done, ";\n",
                  "activemask.b32 ", r.mask, ";\n",
                  "mov.u32 ", r.lo, ", %lanemask_lt;\n",
                  "and.b32 ", r.lo, ", ", r.lo, ", ", r.mask, ";\n",
                  "setp.eq.u32 ", r.leader, ", ", r.lo, ", 0;\n",
                  "mov.u32 ", r.lo, ", %smid;\n",
                  "and.b32 ", r.lo, ", ", r.lo, ", ", CUPROBE_SITE_COUNTER_SHARDS - 1, ";\n",
                  "mul.wide.u32 ", r.part, ", ", r.lo, ", 128;\n",
                  "add.u64 ", r.base, ", ", counts, ", ", r.part, ";\n");
  return ptx;
}

// Usual case: every lane's counts are below 2^11, so two counters share
// one 32-bit warp sum (16 bits each, at most 32 * 2047). Branches to
// `wide` when a count is not.
std::string NarrowSums(KernelEditor& editor, const FlushRegisters& r,
                       const std::vector<uint32_t>& used, const std::string& wide) {
  std::string ptx;
  absl::StrAppend(&ptx, "mov.u64 ", r.part, ", ", CounterRegister(editor, used[0]), ";\n");
  for (size_t k = 1; k < used.size(); ++k) {
    absl::StrAppend(&ptx, "or.b64 ", r.part, ", ", r.part, ", ", CounterRegister(editor, used[k]),
                    ";\n");
  }
  absl::StrAppend(&ptx, "setp.lt.u64 ", r.flag, ", ", r.part, ", 2048;\n",
                  "vote.sync.all.pred ", r.flag, ", ", r.flag, ", ", r.mask, ";\n",
                  "@!", r.flag, " bra.uni ", wide, ";\n");
  for (size_t k = 0; k < used.size(); k += 2) {
    const std::string a = CounterRegister(editor, used[k]);
    absl::StrAppend(&ptx, "cvt.u32.u64 ", r.lo, ", ", a, ";\n");
    if (k + 1 < used.size()) {
      absl::StrAppend(&ptx, "cvt.u32.u64 ", r.mid, ", ", CounterRegister(editor, used[k + 1]),
                      ";\n", "shl.b32 ", r.mid, ", ", r.mid, ", 16;\n",
                      "or.b32 ", r.lo, ", ", r.lo, ", ", r.mid, ";\n");
    }
    absl::StrAppend(&ptx, "redux.sync.add.u32 ", r.lo, ", ", r.lo, ", ", r.mask, ";\n",
                    "and.b32 ", r.mid, ", ", r.lo, ", 65535;\n",
                    "cvt.u64.u32 ", r.sum, ", ", r.mid, ";\n");
    AddToLine(&ptx, r, used[k], r.sum);
    if (k + 1 < used.size()) {
      absl::StrAppend(&ptx, "shr.u32 ", r.mid, ", ", r.lo, ", 16;\n",
                      "cvt.u64.u32 ", r.sum, ", ", r.mid, ";\n");
      AddToLine(&ptx, r, used[k + 1], r.sum);
    }
  }
  return ptx;
}

// Any counts: per counter, the lanes' sum modulo 2^64, from three 32-bit
// sums: bits 0-15 and 16-31 cannot overflow over 32 lanes; bits 32-63
// wrap as a 64-bit add would.
std::string WideSums(KernelEditor& editor, const FlushRegisters& r,
                     const std::vector<uint32_t>& used) {
  std::string ptx;
  for (uint32_t c : used) {
    const std::string reg = CounterRegister(editor, c);
    absl::StrAppend(&ptx, "cvt.u32.u64 ", r.mid, ", ", reg, ";\n",
                    "and.b32 ", r.lo, ", ", r.mid, ", 65535;\n",
                    "shr.u32 ", r.mid, ", ", r.mid, ", 16;\n",
                    "shr.u64 ", r.part, ", ", reg, ", 32;\n",
                    "cvt.u32.u64 ", r.hi, ", ", r.part, ";\n",
                    "redux.sync.add.u32 ", r.lo, ", ", r.lo, ", ", r.mask, ";\n",
                    "redux.sync.add.u32 ", r.mid, ", ", r.mid, ", ", r.mask, ";\n",
                    "redux.sync.add.u32 ", r.hi, ", ", r.hi, ", ", r.mask, ";\n",
                    "cvt.u64.u32 ", r.sum, ", ", r.hi, ";\n",
                    "shl.b64 ", r.sum, ", ", r.sum, ", 32;\n",
                    "mul.wide.u32 ", r.part, ", ", r.mid, ", 65536;\n",
                    "add.u64 ", r.sum, ", ", r.sum, ", ", r.part, ";\n",
                    "cvt.u64.u32 ", r.part, ", ", r.lo, ";\n",
                    "add.u64 ", r.sum, ", ", r.sum, ", ", r.part, ";\n");
    AddToLine(&ptx, r, c, r.sum);
  }
  return ptx;
}

}  // namespace

absl::Status RunSiteCounterPass(KernelEditor& editor, const KernelProbes& probes) {
  if (probes.sites == nullptr ||
      (probes.sites->used.empty() && probes.sites->thread_ranges.empty())) {
    return absl::OkStatus();
  }
  const std::vector<uint32_t>& used = probes.sites->used;
  const std::string counts = editor.KernelRegister("scbase", ".b64");
  if (absl::Status s = ZeroCountersAtEntry(editor, *probes.sites, counts); !s.ok()) return s;
  if (used.empty()) return absl::OkStatus();

  const FlushRegisters r(editor);
  // Every ret / exit branches (under its guard) to one flush at the end of
  // the body, which then returns: one copy of the code, and threads leaving
  // by different exits meet there, so their counts share warp sums.
  const std::string flush = "$__cp_sc_flush";
  const std::string wide = "$__cp_sc_wide";
  const std::string done = "$__cp_sc_done";
  absl::StatusOr<uint32_t> exits = BranchExitsTo(editor, flush);
  if (!exits.ok()) return exits.status();
  if (*exits == 0) return absl::OkStatus();  // no thread ever leaves normally
  std::string ptx = absl::StrCat(flush, ":\n");
  ptx += FlushPrologue(r, counts, done);
  ptx += NarrowSums(editor, r, used, wide);
  absl::StrAppend(&ptx, "bra.uni ", done, ";\n", wide, ":\n");
  ptx += WideSums(editor, r, used);
  absl::StrAppend(&ptx, done, ":\nret;\n");
  return editor.InsertBefore(editor.kernel().body.size(), std::move(ptx));
}

}  // namespace cuprobe
