// File: loader/oneliner/parser.h
//
// Parses a one-liner (ast.h, docs/ONELINERS.md). Errors say where and what
// was expected, with the line and a caret under the column:
//
//   -e:1:24: expected ';' or '}' after a statement, found '@'
//   exit:vec_add* { @a = 1 @b = 2 }
//                          ^
//
//   CUPROBE_ASSIGN_OR_RETURN(oneliner::Program p, oneliner::ParseOneliner(text));
#ifndef CUPROBE_LOADER_ONELINER_PARSER_H_
#define CUPROBE_LOADER_ONELINER_PARSER_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "loader/oneliner/ast.h"

namespace cuprobe::oneliner {

[[nodiscard]] absl::StatusOr<Program> ParseOneliner(std::string_view text);

// INVALID_ARGUMENT "-e:LINE:COL: message", the line and a caret under
// `column` (a 0-based offset into `text`).
[[nodiscard]] absl::Status OnelinerError(std::string_view text, int column,
                                         std::string_view message);

}  // namespace cuprobe::oneliner

#endif  // CUPROBE_LOADER_ONELINER_PARSER_H_
