// File: ptx_rewriter/ptx_parser.h
//
// Parses PTX text into a Module (ptx_module.h): the module-level directives,
// variables, .entry/.func declarations and definitions, and function bodies
// as flat statement lists. It understands what the passes need and keeps the
// rest verbatim, so parse -> print -> parse is stable and the printed PTX
// assembles to the same code as the original.
//
//   absl::StatusOr<Module> m = ParsePtx(text, "kernels.ptx");
//   if (!m.ok()) std::cerr << m.status().message();
//   // kernels.ptx:42:9: error: expected ';' after the instruction 'add.s32'
//   //   hint: PTX instructions end with ';'
//
// Errors are INVALID_ARGUMENT diagnostics "name:line:col: error: what" with
// a hint where one helps. Any bytes may be passed: the parser never crashes
// or reads outside `text` (tests/fuzz/ptx_fuzz.cc checks this).
#ifndef CUPROBE_PTX_REWRITER_PTX_PARSER_H_
#define CUPROBE_PTX_REWRITER_PTX_PARSER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ptx_rewriter/ptx_module.h"

namespace cuprobe {

// Parses `text`, which must outlive the returned module (its statements are
// views into it). `name` prefixes diagnostics.
[[nodiscard]] absl::StatusOr<Module> ParsePtx(std::string_view text,
                                              std::string_view name = "<ptx>");

// Like ParsePtx, but the module keeps its own copy of the text.
[[nodiscard]] absl::StatusOr<Module> ParsePtxOwned(std::string text,
                                                   std::string_view name = "<ptx>");

// Parses function-body statements (instructions, labels, declarations,
// blocks) from `text`, e.g. a snippet a pass generated. `text` must outlive
// the statements (Module::Own it first). Blocks must balance.
[[nodiscard]] absl::StatusOr<std::vector<Statement>> ParseBodyStatements(
    std::string_view text, std::string_view name = "<snippet>");

// A register or variable declaration of a function body, split up:
// `.reg .b32 %r<6>;` -> {".reg", ".b32", names {"%r"}, count 6}.
struct Declaration {
  std::string_view space;              // ".reg", ".local", ".shared", ".param", ...
  std::string_view type;               // ".b32", ".pred", ... (empty when absent)
  std::vector<std::string_view> names;  // `%a, %b` declares two
  uint32_t count = 0;                  // N of `%r<N>` (0: not parameterized)
};
[[nodiscard]] absl::StatusOr<Declaration> ParseDeclaration(const Statement& statement);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_PTX_PARSER_H_
