// File: ptx_rewriter/settings.h
//
// What the rewriter and the PTX compiler can be told: where the compile
// cache is, which PTX compiler to use, where the CUDA toolkit is, and the
// switches that turn an optimization off for comparisons. The program's
// top reads them once (the hook's config, the CLI's main) and sets them
// before any rewriting starts; nothing in ptx_rewriter reads the
// environment.
//
//   SetRewriterSettings(RewriterSettings::FromEnvironment(&std::getenv));
//   ...
//   CompileCache cache(CurrentRewriterSettings().cache_dir);
#ifndef CUPROBE_PTX_REWRITER_SETTINGS_H_
#define CUPROBE_PTX_REWRITER_SETTINGS_H_

#include <functional>
#include <string>
#include <vector>

namespace cuprobe {

struct RewriterSettings {
  // The compile cache: CUPROBE_CACHE_DIR ("off" or "0": none), else
  // $XDG_CACHE_HOME/cuprobe, else ~/.cache/cuprobe. Empty: no cache.
  std::string cache_dir;
  // CUPROBE_SITE_COUNTERS=0: every probe is called, even where it only adds
  // site constants to add-only maps (docs/REWRITER.md, "Site counters").
  bool site_counters = true;
  // CUPROBE_INLINE=0: probe calls stay calls.
  bool inline_probes = true;
  // CUPROBE_MEM_PROBE_AFTER=1: memory probes run after their access, not
  // before (ptx_rewriter/memory_pass.h).
  bool mem_probes_after = false;
  // CUPROBE_REGISTER_CAP=0: no occupancy guard on instrumented kernels.
  bool register_cap = true;
  // CUPROBE_PTX_COMPILER=nvjitlink: compile with nvJitLink rather than the
  // toolkit's ptxas.
  bool use_ptxas = true;
  // CUDA_HOME: where the toolkit is looked for first (then /usr/local/cuda).
  std::string cuda_home;
  // LD_LIBRARY_PATH's directories (where nvJitLink is looked for).
  std::vector<std::string> library_path;
  // TMPDIR (default /tmp): ptxas's scratch files.
  std::string tmp_dir = "/tmp";

  // The settings from the environment, read through `env` (the caller's
  // std::getenv, or a test's table). HOME's fallback is the passwd entry.
  using Lookup = std::function<const char*(const char*)>;
  [[nodiscard]] static RewriterSettings FromEnvironment(const Lookup& env);
};

// The settings in force: defaults (and no cache) until set.
[[nodiscard]] const RewriterSettings& CurrentRewriterSettings();
// Set once, before rewriting starts (tests set and restore them).
void SetRewriterSettings(RewriterSettings settings);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_SETTINGS_H_
