// File: ptx_rewriter/settings.cc
#include "ptx_rewriter/settings.h"

#include <pwd.h>
#include <unistd.h>

#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cuprobe {
namespace {

bool Set(const char* value) { return value != nullptr && *value != '\0'; }

// Whether a switch that is on by default stays on ("0" turns it off).
bool On(const char* value) { return value == nullptr || std::string_view(value) != "0"; }

std::string CacheDir(const RewriterSettings::Lookup& env) {
  if (const char* d = env("CUPROBE_CACHE_DIR"); Set(d)) {
    if (std::string_view(d) == "off" || std::string_view(d) == "0") return "";
    return d;
  }
  if (const char* x = env("XDG_CACHE_HOME"); x != nullptr && *x == '/') {
    return absl::StrCat(x, "/cuprobe");
  }
  const char* home = env("HOME");
  std::string h = home != nullptr ? home : "";
  if (h.empty()) {
    if (const passwd* pw = getpwuid(getuid()); pw != nullptr && pw->pw_dir != nullptr) {
      h = pw->pw_dir;
    }
  }
  return h.empty() ? "" : absl::StrCat(h, "/.cache/cuprobe");
}

RewriterSettings* Current() {
  // Leaked on purpose: the hook compiles modules from callbacks that may
  // run after static destructors.
  static auto* settings = new RewriterSettings;
  return settings;
}

}  // namespace

RewriterSettings RewriterSettings::FromEnvironment(const Lookup& env) {
  RewriterSettings s;
  s.cache_dir = CacheDir(env);
  s.site_counters = On(env("CUPROBE_SITE_COUNTERS"));
  s.inline_probes = On(env("CUPROBE_INLINE"));
  s.register_cap = On(env("CUPROBE_REGISTER_CAP"));
  if (const char* a = env("CUPROBE_MEM_PROBE_AFTER"); a != nullptr) {
    s.mem_probes_after = std::string_view(a) == "1";
  }
  const char* compiler = env("CUPROBE_PTX_COMPILER");
  s.use_ptxas = !(compiler != nullptr && std::string_view(compiler) == "nvjitlink");
  if (const char* h = env("CUDA_HOME"); Set(h)) s.cuda_home = h;
  if (const char* lp = env("LD_LIBRARY_PATH"); lp != nullptr) {
    for (std::string_view d : absl::StrSplit(lp, ':', absl::SkipEmpty())) {
      s.library_path.emplace_back(d);
    }
  }
  if (const char* t = env("TMPDIR"); Set(t)) s.tmp_dir = t;
  return s;
}

const RewriterSettings& CurrentRewriterSettings() { return *Current(); }

void SetRewriterSettings(RewriterSettings settings) { *Current() = std::move(settings); }

}  // namespace cuprobe
