// File: probe/kernel_glob.cc
#include "probe/kernel_glob.h"

#include <cxxabi.h>

#include <cstdlib>

namespace cuprobe {

bool GlobMatch(std::string_view glob, std::string_view text) {
  // Iterative with one backtrack point: linear in practice, never recursive
  // (globs come from users and bundles).
  size_t g = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (g < glob.size() && (glob[g] == '?' || glob[g] == text[t])) {
      ++g;
      ++t;
    } else if (g < glob.size() && glob[g] == '*') {
      star = g++;
      mark = t;
    } else if (star != std::string_view::npos) {
      g = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (g < glob.size() && glob[g] == '*') ++g;
  return g == glob.size();
}

std::string KernelBaseName(std::string_view mangled) {
  if (mangled.size() < 3 || mangled.substr(0, 2) != "_Z") return std::string(mangled);
  const std::string z(mangled);
  int status = 0;
  char* d = abi::__cxa_demangle(z.c_str(), nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) {
    std::free(d);
    return z;
  }
  std::string full(d);
  std::free(d);
  // Drop the parameter list: the '(' matching the final ')'.
  if (!full.empty() && full.back() == ')') {
    int depth = 0;
    for (size_t i = full.size(); i-- > 0;) {
      if (full[i] == ')') ++depth;
      if (full[i] == '(' && --depth == 0) {
        full.resize(i);
        break;
      }
    }
  }
  // Drop a return type ("void ns::scale<float>"): the text up to the last
  // blank outside <> and ().
  int depth = 0;
  size_t cut = std::string::npos;
  for (size_t i = 0; i < full.size(); ++i) {
    const char c = full[i];
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (c == ' ' && depth == 0) cut = i;
  }
  if (cut != std::string::npos) full = full.substr(cut + 1);
  return full;
}

bool KernelGlobMatches(std::string_view glob, std::string_view mangled,
                       std::string_view demangled_base) {
  return GlobMatch(glob, mangled) || (!demangled_base.empty() && GlobMatch(glob, demangled_base));
}

}  // namespace cuprobe
