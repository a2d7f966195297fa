// File: loader/args_list.cc
//
// Parsing of `cuprobe list [-v] [--sm N] [PATTERN] (FILE | PID | -- PROGRAM
// ARGS...)`. With two operands the first is the pattern; with one, it is the
// target, unless a program follows `--`.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loader/args_internal.h"
#include "support/status_macros.h"

namespace cuprobe::args_internal {

absl::StatusOr<CliArgs> ParseList(const std::vector<std::string>& argv, size_t i, CliArgs args) {
  args.command = Command::kList;
  ListOptions& o = args.list;
  std::vector<std::string> operands;
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      args.command = Command::kHelp;
      args.help_topic = "list";
      return args;
    }
    if (arg == "--") {
      o.command.assign(argv.begin() + static_cast<std::ptrdiff_t>(i) + 1, argv.end());
      if (o.command.empty()) return Invalid("list: no program after '--'", "list");
      break;
    }
    std::string value;
    absl::Status error;
    OptionReader r(argv, i);
    if (arg == "-v" || arg == "--verbose") {
      o.verbose = true;
    } else if (r.Match("", "--sm", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(o.sm, ParseNumber<uint32_t>("--sm", value, 10, 200, "list"));
    } else if (arg.size() > 1 && arg[0] == '-') {
      return Invalid(absl::StrCat("unknown option '", arg, "'"), "list");
    } else {
      operands.push_back(arg);
    }
  }
  const size_t most = o.command.empty() ? 2 : 1;
  if (operands.size() > most) {
    return Invalid(absl::StrCat("list takes ", o.command.empty() ? "a pattern and a target" :
                                "a pattern before '--'", ", got '", operands[most], "' too"),
                   "list");
  }
  if (o.command.empty()) {
    if (operands.empty()) {
      return Invalid("list needs a file, a pid or a program: cuprobe list FILE | PID | -- CMD",
                     "list");
    }
    o.target = operands.back();
    if (operands.size() == 2) o.pattern = operands.front();
  } else if (!operands.empty()) {
    o.pattern = operands.front();
  }
  return args;
}

}  // namespace cuprobe::args_internal
