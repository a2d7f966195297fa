// File: ptx_rewriter/instrument.cc
#include "ptx_rewriter/instrument.h"
#include "ptx_rewriter/settings.h"

#include <cstdlib>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ptx_rewriter/context_pass.h"
#include "ptx_rewriter/entry_pass.h"
#include "ptx_rewriter/exit_pass.h"
#include "probe/kernel_glob.h"
#include "ptx_rewriter/link_pass.h"
#include "ptx_rewriter/memory_pass.h"
#include "ptx_rewriter/ptx_parser.h"
#include "ptx_rewriter/site_counter_pass.h"
#include "ptx_rewriter/site_summary.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

absl::Status RewriteKernel(Module& module, Function& kernel, const KernelProbes& probes,
                           PassStats* stats) {
  KernelEditor editor(module, kernel);
  CUPROBE_ASSIGN_OR_RETURN(std::string args, RunContextPass(editor, probes, stats));
  CUPROBE_RETURN_IF_ERROR(RunEntryPass(editor, probes, args, stats));
  // Memory before exit: a probe placed after an access just before a `ret`
  // goes in at the ret's index, ahead of the exit probes and counter
  // flushes there (the editor keeps the order of inserts at one index).
  CUPROBE_RETURN_IF_ERROR(RunMemoryPass(editor, probes, args, stats,
                                        CurrentRewriterSettings().mem_probes_after));
  CUPROBE_RETURN_IF_ERROR(RunExitPass(editor, probes, args, stats));
  CUPROBE_RETURN_IF_ERROR(RunSiteCounterPass(editor, probes));
  return editor.Finish();
}


}  // namespace

bool SiteCountersEnabled() { return CurrentRewriterSettings().site_counters; }

absl::Status CheckProbeSignature(const Function& f) {
  auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "probe function '", f.name, "' ", what,
        "; the probe ABI (include/cuprobe/abi.h) is .func (.param .b32 r) NAME(.param .b64 "
        "mem_addr, .param .b32 mem_info, .param .b32 kernel_id, .param .b32 site_index, "
        ".param .b64 args)"));
  };
  if (f.is_kernel) return bad("is an .entry");
  if (!f.has_body) return bad("has no body");
  if (f.returns.size() != 1 || f.returns[0].size != 4) return bad("does not return one .b32");
  static constexpr uint32_t kSizes[] = {8, 4, 4, 4, 8};
  if (f.params.size() != 5) return bad(absl::StrCat("has ", f.params.size(), " parameters, not 5"));
  for (size_t i = 0; i < 5; ++i) {
    if (f.params[i].size != kSizes[i] || f.params[i].space != ".param") {
      return bad(absl::StrCat("parameter ", i, " ('", f.params[i].name, "') is not .param .b",
                              kSizes[i] * 8));
    }
  }
  return absl::OkStatus();
}

namespace {

// InstrumentPtx's steps.

// Every program's function is in the bundle's PTX, with the probe
// signature.
absl::Status CheckProbePrograms(const ProbeBundle& bundle, const Module& probes) {
  for (const ProbeProgram& p : bundle.programs) {
    const Function* f = probes.FindFunction(p.ptx_function);
    if (f == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("probe program '", p.name, "' (", p.section,
                                                     "): function '", p.ptx_function,
                                                     "' is not in the bundle's PTX"));
    }
    absl::Status sig = CheckProbeSignature(*f);
    if (!sig.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("probe program '", p.name, "' (", p.section, "): ", sig.message()));
    }
  }
  return absl::OkStatus();
}

// A kernel to rewrite and the programs that attach to it.
struct Plan {
  size_t function_index;
  std::vector<const ProbeProgram*> programs;
};

// Which programs attach to which kernel. Counts the module's kernels in
// `result` and lists those skipped on request.
std::vector<Plan> PlanKernels(const Module& main, const ProbeBundle& bundle,
                              const InstrumentOptions& options, InstrumentResult* result) {
  const absl::flat_hash_set<std::string_view> skip(options.skip_kernels.begin(),
                                                   options.skip_kernels.end());
  std::vector<Plan> plans;
  for (size_t i = 0; i < main.functions.size(); ++i) {
    const Function& f = main.functions[i];
    if (!f.is_kernel || !f.has_body) continue;
    ++result->kernels_in_module;
    Plan plan{i, {}};
    const std::string base = KernelBaseName(f.name);
    for (const ProbeProgram& p : bundle.programs) {
      if (KernelGlobMatches(p.kernel_glob, f.name, base)) plan.programs.push_back(&p);
    }
    if (plan.programs.empty()) continue;
    if (skip.contains(f.name)) {
      result->skipped.push_back({std::string(f.name), "skipped on request"});
      continue;
    }
    plans.push_back(std::move(plan));
  }
  return plans;
}

// The probes of `plan`'s programs by attach point, under their linked
// names; `done` lists the programs.
void AttachPrograms(const Plan& plan, const ProbeLinker& linker, KernelProbes* kp,
                    InstrumentedKernel* done) {
  for (const ProbeProgram* p : plan.programs) {
    ProbeRef ref{std::string(linker.LinkedName(p->ptx_function)), p->reads_args, p->mem_spaces, p};
    switch (p->attach) {
      case AttachKind::kEntry: kp->entry.push_back(std::move(ref)); break;
      case AttachKind::kExit: kp->exit.push_back(std::move(ref)); break;
      case AttachKind::kMemory: kp->memory.push_back(std::move(ref)); break;
    }
    done->programs.push_back(p->name);
  }
}

// Fault injection (tests): an instruction ptxas refuses.
absl::Status InjectFault(Module& main, Function& kernel) {
  KernelEditor fault(main, kernel);
  CUPROBE_RETURN_IF_ERROR(
      fault.InsertBefore(fault.EntryPoint(), "mov.u32 %__cp_fault, %__cp_fault_undeclared;\n"));
  return fault.Finish();
}

// Rewrites the kernel of `plan` with kernel id `kernel_id`: listed in
// `result` as instrumented, or as skipped with the reason. `counters`: the
// module's site counters, or null when every site calls its probes.
void InstrumentKernel(Module& main, const Plan& plan, uint32_t kernel_id, const ProbeLinker& linker,
                      const ProbeBundle& bundle, SiteCounterTable* counters,
                      const InstrumentOptions& options, InstrumentResult* result) {
  Function& kernel = main.functions[plan.function_index];
  SiteCounterState sites{counters, bundle.maps, {}};
  KernelProbes kp;
  kp.indirect_calls = options.indirect_calls;
  if (counters != nullptr) kp.sites = &sites;
  kp.kernel_id = kernel_id;
  InstrumentedKernel done;
  done.name = std::string(kernel.name);
  done.kernel_id = kp.kernel_id;
  AttachPrograms(plan, linker, &kp, &done);
  absl::Status s = RewriteKernel(main, kernel, kp, &done.stats);
  if (s.ok() && !options.fault_kernel.empty() && kernel.name == options.fault_kernel) {
    s = InjectFault(main, kernel);
  }
  if (!s.ok()) {
    result->skipped.push_back({done.name, std::string(s.message())});
    return;
  }
  result->instrumented.push_back(std::move(done));
}

}  // namespace

absl::StatusOr<InstrumentResult> InstrumentPtx(std::string_view module_ptx,
                                               const ProbeBundle& bundle,
                                               const InstrumentOptions& options) {
  InstrumentResult result;
  result.sm = options.sm;
  CUPROBE_ASSIGN_OR_RETURN(Module main, ParsePtx(module_ptx, options.module_name));
  CUPROBE_ASSIGN_OR_RETURN(Module probes, ParsePtx(bundle.ptx, "<bundle " + bundle.source_name + ">"));
  std::vector<Module*> added;
  Module helpers;
  if (!options.helper_ptx.empty()) {
    CUPROBE_ASSIGN_OR_RETURN(helpers, ParsePtx(options.helper_ptx, "<helper library>"));
    added.push_back(&helpers);
  }
  added.push_back(&probes);
  CUPROBE_RETURN_IF_ERROR(CheckProbePrograms(bundle, probes));

  const std::vector<Plan> plans = PlanKernels(main, bundle, options, &result);
  if (plans.empty()) {
    result.ptx = std::string(module_ptx);
    return result;
  }
  CUPROBE_ASSIGN_OR_RETURN(ProbeLinker linker, ProbeLinker::Create(main, added));
  uint32_t next_id = options.first_kernel_id;
  SiteCounterTable counters;
  const bool count_sites = options.site_counters && SiteCountersEnabled();
  for (const Plan& plan : plans) {
    // Kernels without an id of their own take the next one, in module order.
    const std::string_view name = main.functions[plan.function_index].name;
    const auto it = options.kernel_ids.find(name);
    const uint32_t kernel_id = it != options.kernel_ids.end() ? it->second : next_id++;
    InstrumentKernel(main, plan, kernel_id, linker, bundle, count_sites ? &counters : nullptr,
                     options, &result);
  }
  if (result.instrumented.empty()) {
    result.ptx = std::string(module_ptx);
    return result;
  }
  result.site_counters = counters.counters();
  CUPROBE_RETURN_IF_ERROR(
      linker.Link(static_cast<uint32_t>(bundle.maps.size()), !result.site_counters.empty()));
  result.warnings = linker.warnings();
  result.ptx = PrintPtx(main);
  return result;
}

}  // namespace cuprobe
