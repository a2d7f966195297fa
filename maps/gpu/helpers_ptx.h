// File: maps/gpu/helpers_ptx.h
//
// The GPU helper library (maps/gpu/helpers.cu) as PTX text, compiled by nvcc
// at build time (`-rdc=true -ptx -arch=sm_90`) and embedded in the binary, for
// the rewriter's link step in the hook and the CLI:
//
//   InstrumentOptions options;
//   options.helper_ptx = std::string(cuprobe::HelpersPtx());
//
// The module defines exactly the CUPROBE_HELPER_SYMBOL_* functions of
// include/cuprobe/abi.h as .visible .func (every parameter and the result
// .b64), the .visible .global CUPROBE_PID_TGID_SYMBOL, and internal .func
// helpers with file-unique mangled names. The same text is also written to
// ${build}/generated/cuprobe_helpers.ptx (CUPROBE_HELPERS_PTX_PATH in CMake).
#ifndef CUPROBE_MAPS_GPU_HELPERS_PTX_H_
#define CUPROBE_MAPS_GPU_HELPERS_PTX_H_

#include <string_view>

namespace cuprobe {

// Static storage; never empty.
[[nodiscard]] std::string_view HelpersPtx();

}  // namespace cuprobe

#endif  // CUPROBE_MAPS_GPU_HELPERS_PTX_H_
