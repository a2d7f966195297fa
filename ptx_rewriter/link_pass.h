// File: ptx_rewriter/link_pass.h
//
// The link pass: turns the application's module plus the probe bundle's PTX
// and the GPU helper library's PTX into one module that ptxas/nvJitLink
// compiles alone (the hook loads exactly one module, so `__device__` globals
// and cudaMemcpyToSymbol of the application stay correct).
//
//   - Defines the map table the hook fills after loading (abi.h, 3.):
//       .visible .global .align 8 .u64 __cuprobe_map_table[N];
//     with N the bundle's map count (at least 1), and drops every
//     `.extern` declaration of it.
//   - Adds the helper library's and the bundle's functions and variables
//     ahead of the application's code (PTX wants a callee declared before
//     its first call), minus their .version/.target/.address_size, .file,
//     .loc and debug sections (their file numbers mean nothing here).
//   - Leaves out the helper library's functions and variables that no probe
//     reaches (directly or through other helpers): ptxas would compile them.
//   - Drops `.extern` declarations that another added module defines
//     (`__cuprobe_map_add` of the bundle, defined by the helper library) and
//     duplicate declarations (both the bundle and the application declare
//     `vprintf`: the first, ours, stays).
//   - Resolves name clashes: an added symbol the application also uses is
//     renamed (`probe` -> `probe_cuprobe`, everywhere in the added modules);
//     LinkedName() tells the passes the new name of a probe.
//   - Reconciles headers: the application's .target wins; .version becomes
//     the highest of all modules; .address_size must agree.
//
// Before (application, bundle):
//   .version 8.0                        .version 8.5
//   .target sm_90                       .target sm_90
//   .address_size 64                    .address_size 64
//   .visible .entry k(...) {...}        .extern .global .align 8 .u64 __cuprobe_map_table[];
//                                       .extern .func (.param .b64 r) __cuprobe_map_add(...);
//                                       .visible .func (.param .b32 r) on_entry(...) {...}
// After (with the helper library):
//   .version 8.5
//   .target sm_90
//   .address_size 64
//   .visible .global .align 8 .u64 __cuprobe_map_table[1];
//   .visible .func (.param .b64 r) __cuprobe_map_add(...) {...}
//   .visible .func (.param .b32 r) on_entry(...) {...}
//   .visible .entry k(...) {...}
#ifndef CUPROBE_PTX_REWRITER_LINK_PASS_H_
#define CUPROBE_PTX_REWRITER_LINK_PASS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "ptx_rewriter/ptx_module.h"

namespace cuprobe {

class ProbeLinker {
 public:
  // Checks the modules and renames clashing symbols of `added` (in order:
  // helper library first, then the bundle; everything of the last module is
  // kept, of the others only what it reaches). The modules must outlive the
  // linker and `main` must outlive the added modules' text (Link moves their
  // functions into `main`, which keeps viewing their text).
  [[nodiscard]] static absl::StatusOr<ProbeLinker> Create(Module& main,
                                                          std::vector<Module*> added);

  // The name a symbol of an added module has after renaming.
  [[nodiscard]] std::string_view LinkedName(std::string_view name) const;
  [[nodiscard]] const absl::flat_hash_map<std::string, std::string>& renames() const {
    return renames_;
  }

  // Merges the added modules into `main` (see the file comment). Once.
  // With `site_counts`, also defines CUPROBE_SITE_COUNTS_SYMBOL (abi.h), the
  // address of the module's site counters, which the hook fills.
  [[nodiscard]] absl::Status Link(uint32_t map_count, bool site_counts = false);

  // Notes for the user, e.g. a probe compiled for a newer SM than the module.
  [[nodiscard]] const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  ProbeLinker(Module& main, std::vector<Module*> added) : main_(&main), added_(std::move(added)) {}
  absl::Status Prepare();

  Module* main_;
  std::vector<Module*> added_;
  absl::flat_hash_map<std::string, std::string> renames_;
  std::vector<std::string> warnings_;
  bool linked_ = false;
};

// `text` with every identifier token found in `renames` replaced, or nullopt
// when there is none (the common case costs no copy).
[[nodiscard]] std::optional<std::string> RenameIdentifiers(
    std::string_view text, const absl::flat_hash_map<std::string, std::string>& renames);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_LINK_PASS_H_
