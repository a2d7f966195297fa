// File: probe/kernel_glob.h
//
// Which kernels a probe's glob selects (abi.h, "Attach points"): the glob
// matches the kernel's mangled name or its demangled name without
// parameters (and without the return type templates carry), with '*' and
// '?' as in fnmatch and every other character literal.
//
//   KernelBaseName("_ZN2ns5scaleIfEEvPT_S1_")  -> "ns::scale<float>"
//   KernelGlobMatches("ns::scale*", "_ZN2ns5scaleIfEEvPT_S1_",
//                     KernelBaseName("_ZN2ns5scaleIfEEvPT_S1_"))  -> true
//
// KernelGlobMatches itself is declared in bundle.h (it is part of the bundle
// contract); it is defined in kernel_glob.cc.
#ifndef CUPROBE_PROBE_KERNEL_GLOB_H_
#define CUPROBE_PROBE_KERNEL_GLOB_H_

#include <string>
#include <string_view>

#include "probe/bundle.h"

namespace cuprobe {

// The demangled name without parameters and return type; `mangled` itself
// when it is not a mangled C++ name (extern "C" kernels).
[[nodiscard]] std::string KernelBaseName(std::string_view mangled);

// fnmatch-like: '*' any run, '?' one character, nothing else special.
[[nodiscard]] bool GlobMatch(std::string_view glob, std::string_view text);

}  // namespace cuprobe

#endif  // CUPROBE_PROBE_KERNEL_GLOB_H_
