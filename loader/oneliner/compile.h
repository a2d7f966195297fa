// File: loader/oneliner/compile.h
//
// A one-liner through the whole probe pipeline: translated to C
// (translate.h), compiled and verified as any C probe (loader/compiler),
// into a bundle that remembers the one-liner so that its maps print the
// one-liner's way (print.h).
//
//   CUPROBE_ASSIGN_OR_RETURN(CompileResult r, oneliner::CompileOneliner(text, options));
#ifndef CUPROBE_LOADER_ONELINER_COMPILE_H_
#define CUPROBE_LOADER_ONELINER_COMPILE_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "loader/compiler/compiler.h"

namespace cuprobe::oneliner {

[[nodiscard]] absl::StatusOr<CompileResult> CompileOneliner(std::string_view text,
                                                            const ProbeCompileOptions& options);

}  // namespace cuprobe::oneliner

#endif  // CUPROBE_LOADER_ONELINER_COMPILE_H_
