// File: loader/compiler/bpf_helper_names.h
//
// Names of the Linux kernel's BPF helpers by id, for diagnostics about
// helpers that exist only in the kernel:
//
//   KernelHelperName(16) == "bpf_get_current_comm"
#ifndef CUPROBE_LOADER_COMPILER_BPF_HELPER_NAMES_H_
#define CUPROBE_LOADER_COMPILER_BPF_HELPER_NAMES_H_

#include <cstdint>
#include <string_view>

namespace cuprobe {

// The kernel helper with id `id` ("bpf_probe_read_user"), or empty if the
// kernel has none.
[[nodiscard]] std::string_view KernelHelperName(int32_t id);

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_COMPILER_BPF_HELPER_NAMES_H_
