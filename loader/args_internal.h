// File: loader/args_internal.h
//
// The command-line parser's internals, shared by its source files; not a
// public header (users include loader/args.h). ParseArgs (args.cc)
// dispatches on the command to one parser per command, defined by the kind
// of command:
//   args_traced_run.cc  trace, run and attach: a program and its report
//                       (the options of a traced run are shared);
//   args_files.cc       inspect, compile and instrument: one input file;
//   args_list.cc        list: a file, a running program or a program to run;
//   args_usage.cc       the --help texts.
// Every parser fills the CliArgs it is given and returns it; errors are
// INVALID_ARGUMENT with a "Try 'cuprobe <topic> --help'." line (Invalid).
#ifndef CUPROBE_LOADER_ARGS_INTERNAL_H_
#define CUPROBE_LOADER_ARGS_INTERNAL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loader/args.h"

namespace cuprobe::args_internal {

// A user error: `message`, then where to read more.
[[nodiscard]] absl::Status Invalid(std::string_view message, std::string_view topic);

// Reads the value of an option given as "--name value" or "--name=value".
class OptionReader {
 public:
  OptionReader(const std::vector<std::string>& argv, size_t& i) : argv_(argv), i_(i) {}

  // True if argv[i] is this option; fills *value or sets *error.
  bool Match(std::string_view short_name, std::string_view long_name, std::string* value,
             absl::Status* error) {
    std::string_view arg = argv_[i_];
    std::string_view name = arg;
    std::string_view inline_value;
    bool has_inline = false;
    if (size_t eq = arg.find('='); arg.substr(0, 2) == "--" && eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
      has_inline = true;
    }
    if (name != long_name && (short_name.empty() || name != short_name)) return false;
    if (has_inline) {
      *value = std::string(inline_value);
      return true;
    }
    if (i_ + 1 >= argv_.size()) {
      *error = absl::InvalidArgumentError(absl::StrCat("option ", name, " needs a value"));
      return true;
    }
    *value = argv_[++i_];
    return true;
  }

 private:
  const std::vector<std::string>& argv_;
  size_t& i_;
};

template <typename T>
absl::StatusOr<T> ParseNumber(std::string_view option, std::string_view text, T min, T max,
                              std::string_view topic) {
  uint64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < static_cast<uint64_t>(min) ||
      v > static_cast<uint64_t>(max)) {
    return Invalid(absl::StrCat(option, " expects a number from ", min, " to ", max, ", got '",
                                text, "'"),
                   topic);
  }
  return static_cast<T>(v);
}

// One parser per command: argv[i] is the first argument after the command.
[[nodiscard]] absl::StatusOr<CliArgs> ParseTrace(const std::vector<std::string>& argv, size_t i,
                                                 CliArgs args);
[[nodiscard]] absl::StatusOr<CliArgs> ParseRun(const std::vector<std::string>& argv, size_t i,
                                               CliArgs args);
[[nodiscard]] absl::StatusOr<CliArgs> ParseAttach(const std::vector<std::string>& argv, size_t i,
                                                  CliArgs args);
[[nodiscard]] absl::StatusOr<CliArgs> ParseInspect(const std::vector<std::string>& argv, size_t i,
                                                   CliArgs args);
[[nodiscard]] absl::StatusOr<CliArgs> ParseCompile(const std::vector<std::string>& argv, size_t i,
                                                   CliArgs args);
[[nodiscard]] absl::StatusOr<CliArgs> ParseInstrument(const std::vector<std::string>& argv,
                                                      size_t i, CliArgs args);
// args_list.cc
[[nodiscard]] absl::StatusOr<CliArgs> ParseList(const std::vector<std::string>& argv, size_t i,
                                                CliArgs args);

}  // namespace cuprobe::args_internal

#endif  // CUPROBE_LOADER_ARGS_INTERNAL_H_
