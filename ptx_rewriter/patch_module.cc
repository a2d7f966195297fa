// File: ptx_rewriter/patch_module.cc
#include "ptx_rewriter/patch_module.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "ptx_rewriter/content_hash.h"
#include "ptx_rewriter/link_pass.h"
#include "ptx_rewriter/map_block_pass.h"
#include "ptx_rewriter/nvjitlink.h"
#include "ptx_rewriter/ptx_parser.h"
#include "ptx_rewriter/redux_pass.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

// The PTX of a patch module and the callbacks its adapters serve.
struct PatchSource {
  std::string ptx;
  std::vector<PatchCallback> callbacks;
};

// The linker defines the map table (and the descriptors' copy) for the PTX
// backend; a patch module has neither.
void DropMapSymbolDefinitions(Module& m) {
  std::erase_if(m.items, [](const ModuleItem& item) {
    return !item.is_function && item.statement.kind == StatementKind::kDeclaration &&
           (item.statement.operands == CUPROBE_MAP_TABLE_SYMBOL ||
            item.statement.operands == CUPROBE_MAP_DESCS_SYMBOL);
  });
}

absl::Status CheckAdapterNamesFree(const Module& m, const std::vector<PatchCallback>& callbacks) {
  for (const PatchCallback& cb : callbacks) {
    if (m.FindFunction(cb.function) != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the patch backend cannot take this bundle: it defines ", cb.function,
          ", the name of a patch module adapter"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PatchSource> BuildPatchSource(const ProbeBundle& bundle,
                                             std::string_view helper_ptx) {
  const uint32_t slots = PatchMapSlots(bundle);
  CUPROBE_ASSIGN_OR_RETURN(Module probes, ParsePtx(bundle.ptx, "<bundle>"));
  std::vector<std::string> functions;
  for (const ProbeProgram& p : bundle.programs) functions.push_back(p.ptx_function);
  CUPROBE_RETURN_IF_ERROR(RunMapBlockPass(probes, functions, slots));
  CUPROBE_ASSIGN_OR_RETURN(Module helpers, ParsePtx(helper_ptx, "<helpers>"));
  // An empty main module with the bundle's header: the linker raises
  // .version to the helper library's.
  CUPROBE_ASSIGN_OR_RETURN(
      Module main, ParsePtxOwned(absl::StrCat(".version ", probes.version.major, ".",
                                              probes.version.minor, "\n.target ", probes.target,
                                              "\n.address_size ", probes.address_size, "\n"),
                                 "<patch module>"));
  CUPROBE_ASSIGN_OR_RETURN(ProbeLinker linker, ProbeLinker::Create(main, {&helpers, &probes}));
  CUPROBE_RETURN_IF_ERROR(linker.Link(slots));
  DropMapSymbolDefinitions(main);
  CUPROBE_RETURN_IF_ERROR(LowerRedux(main).status());
  for (std::string& f : functions) f = std::string(linker.LinkedName(f));
  CUPROBE_ASSIGN_OR_RETURN(PatchAdapters adapters, GeneratePatchAdapters(bundle, functions));
  CUPROBE_RETURN_IF_ERROR(CheckAdapterNamesFree(main, adapters.callbacks));
  PatchSource out;
  out.ptx = absl::StrCat(PrintPtx(main), "\n", adapters.ptx);
  out.callbacks = std::move(adapters.callbacks);
  // A generator bug is an error here, not a ptxas message later.
  CUPROBE_RETURN_IF_ERROR(ParsePtx(out.ptx, "<patch module>").status());
  return out;
}

bool IsElf(std::string_view bytes) { return absl::StartsWith(bytes, "\x7f" "ELF"); }

}  // namespace

uint32_t PatchMapSlots(const ProbeBundle& bundle) {
  return std::max<uint32_t>(static_cast<uint32_t>(bundle.maps.size()), 1);
}

absl::StatusOr<std::string> PatchModulePtx(const ProbeBundle& bundle,
                                           std::string_view helper_ptx) {
  CUPROBE_ASSIGN_OR_RETURN(PatchSource source, BuildPatchSource(bundle, helper_ptx));
  return std::move(source.ptx);
}

absl::StatusOr<PatchModule> BuildPatchModule(const ProbeBundle& bundle,
                                             std::string_view helper_ptx, uint32_t sm,
                                             const CompileCache& cache) {
  CUPROBE_ASSIGN_OR_RETURN(PatchSource source, BuildPatchSource(bundle, helper_ptx));
  PatchModule out;
  out.callbacks = std::move(source.callbacks);
  out.map_slots = PatchMapSlots(bundle);
  CUPROBE_ASSIGN_OR_RETURN(std::string compiler, PtxCompilerFingerprint(/*tools_patch=*/true));
  CacheKeyBuilder key;
  key.Add("patch", kPatchModuleVersion);
  key.Add("abi", uint64_t{CUPROBE_ABI_VERSION});
  key.Add("compiler", compiler);
  key.Add("sm", uint64_t{sm});
  key.Add("ptx", source.ptx);
  const std::string hex = key.Hex();
  // An entry that is not an ELF is not ours: compile again (and replace it).
  if (std::optional<std::string> hit = cache.Lookup(hex); hit.has_value() && IsElf(*hit)) {
    out.cubin.assign(hit->begin(), hit->end());
    out.cache_hit = true;
    return out;
  }
  CompileOptions options;
  options.sm = sm;
  options.tools_patch = true;
  options.input_name = "cuprobe-patch.ptx";
  CUPROBE_ASSIGN_OR_RETURN(CompiledCubin compiled, CompilePtx(source.ptx, options));
  out.cubin = std::move(compiled.cubin);
  cache.Store(hex, std::string_view(reinterpret_cast<const char*>(out.cubin.data()),
                                    out.cubin.size()));
  return out;
}

uint32_t ProgramMask(const ProbeBundle& bundle, std::string_view mangled,
                     std::string_view demangled_base) {
  uint32_t mask = 0;
  const size_t n = std::min<size_t>(bundle.programs.size(), CUPROBE_PATCH_MAX_PROGRAMS);
  for (size_t i = 0; i < n; ++i) {
    if (KernelGlobMatches(bundle.programs[i].kernel_glob, mangled, demangled_base)) {
      mask |= uint32_t{1} << i;
    }
  }
  return mask;
}

}  // namespace cuprobe
