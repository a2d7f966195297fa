// File: ptx_rewriter/site_counter_pass.cc
#include "ptx_rewriter/site_counter_pass.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
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
  const uint32_t counter = sites->table->IndexOf(*std::move(adds));
  if (std::find(sites->used.begin(), sites->used.end(), counter) == sites->used.end()) {
    sites->used.push_back(counter);
  }
  const std::string reg = CounterRegister(editor, counter);
  return absl::StrCat(GuardPrefix(call.guard, call.guard_negated), "add.u64 ", reg, ", ", reg,
                      ", 1;\n");
}

absl::Status RunSiteCounterPass(KernelEditor& editor, const KernelProbes& probes) {
  if (probes.sites == nullptr || probes.sites->used.empty()) return absl::OkStatus();
  const std::vector<uint32_t>& used = probes.sites->used;
  std::string zero;
  for (uint32_t c : used) absl::StrAppend(&zero, "mov.u64 ", CounterRegister(editor, c), ", 0;\n");
  if (absl::Status s = editor.InsertAtEntryFront(std::move(zero)); !s.ok()) return s;

  const std::string base = editor.ScratchRegister(".b64", 1);
  const std::string sum = editor.ScratchRegister(".b64", 2);
  const std::string part = editor.ScratchRegister(".b64", 3);
  const std::string mask = editor.ScratchRegister(".b32", 0);
  const std::string lo = editor.ScratchRegister(".b32", 1);
  const std::string mid = editor.ScratchRegister(".b32", 2);
  const std::string hi = editor.ScratchRegister(".b32", 3);
  const std::string none = editor.ScratchRegister(".pred", 0);
  const std::string leader = editor.ScratchRegister(".pred", 1);
  const uint64_t stride = uint64_t{CUPROBE_SITE_COUNTER_SHARDS} * 8;
  const std::vector<Statement>& body = editor.kernel().body;
  uint32_t exits = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const Statement& s = body[i];
    if (!s.IsInstruction() || (s.Op() != "ret" && s.Op() != "exit")) continue;
    const std::string skip = absl::StrCat("$__cp_sc_done", exits++);
    std::string ptx;
    if (!s.guard.empty()) {
      absl::StrAppend(&ptx, GuardPrefix(s.guard, !s.guard_negated), "bra ", skip, ";\n");
    }
    absl::StrAppend(&ptx, "ld.global.nc.u64 ", base, ", [", CUPROBE_SITE_COUNTS_SYMBOL, "];\n",
                    "setp.eq.u64 ", none, ", ", base, ", 0;\n",
                    "@", none, " bra.uni ", skip, ";\n",
                    "activemask.b32 ", mask, ";\n",
                    "mov.u32 ", lo, ", %lanemask_lt;\n",
                    "and.b32 ", lo, ", ", lo, ", ", mask, ";\n",
                    "setp.eq.u32 ", leader, ", ", lo, ", 0;\n",
                    "mov.u32 ", lo, ", %smid;\n",
                    "and.b32 ", lo, ", ", lo, ", ", CUPROBE_SITE_COUNTER_SHARDS - 1, ";\n",
                    "mul.wide.u32 ", part, ", ", lo, ", 8;\n",
                    "add.u64 ", base, ", ", base, ", ", part, ";\n");
    for (uint32_t c : used) {
      const std::string reg = CounterRegister(editor, c);
      // The lanes' sum modulo 2^64, from three 32-bit sums: bits 0-15 and
      // 16-31 cannot overflow over 32 lanes; bits 32-63 wrap as a 64-bit
      // add would.
      absl::StrAppend(&ptx, "cvt.u32.u64 ", mid, ", ", reg, ";\n",
                      "and.b32 ", lo, ", ", mid, ", 65535;\n",
                      "shr.u32 ", mid, ", ", mid, ", 16;\n",
                      "shr.u64 ", part, ", ", reg, ", 32;\n",
                      "cvt.u32.u64 ", hi, ", ", part, ";\n",
                      "redux.sync.add.u32 ", lo, ", ", lo, ", ", mask, ";\n",
                      "redux.sync.add.u32 ", mid, ", ", mid, ", ", mask, ";\n",
                      "redux.sync.add.u32 ", hi, ", ", hi, ", ", mask, ";\n",
                      "cvt.u64.u32 ", sum, ", ", hi, ";\n",
                      "shl.b64 ", sum, ", ", sum, ", 32;\n",
                      "mul.wide.u32 ", part, ", ", mid, ", 65536;\n",
                      "add.u64 ", sum, ", ", sum, ", ", part, ";\n",
                      "cvt.u64.u32 ", part, ", ", lo, ";\n",
                      "add.u64 ", sum, ", ", sum, ", ", part, ";\n",
                      "@", leader, " red.global.add.u64 [", base, "+", uint64_t{c} * stride,
                      "], ", sum, ";\n");
    }
    absl::StrAppend(&ptx, skip, ":\n");
    if (absl::Status st = editor.InsertBefore(i, std::move(ptx)); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace cuprobe
