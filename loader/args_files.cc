// File: loader/args_files.cc
//
// Parsing of the commands that work on one input file: `inspect` (list the
// CUDA code in a file), `compile` (a probe into a bundle) and `instrument`
// (rewrite a file's kernels offline).
#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "loader/args_internal.h"
#include "ptx_rewriter/builtin_probes.h"
#include "support/status_macros.h"

namespace cuprobe::args_internal {
namespace {

// --mem-spaces LIST: bits 1 << CUPROBE_SPACE_* (include/cuprobe/abi.h).
absl::StatusOr<uint32_t> ParseMemSpaces(std::string_view list) {
  uint32_t spaces = 0;
  for (std::string_view sp : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    if (sp == "global") spaces |= 1u << 1;
    else if (sp == "shared") spaces |= 1u << 2;
    else if (sp == "local") spaces |= 1u << 3;
    else if (sp == "generic") spaces |= 1u << 4;
    else if (sp == "const") spaces |= 1u << 5;
    else if (sp == "all") spaces |= 0x3e;
    else return Invalid(absl::StrCat("--mem-spaces: unknown space '", sp,
                                     "' (global, generic, shared, local, const, all)"),
                        "instrument");
  }
  if (spaces == 0) return Invalid("--mem-spaces needs at least one space", "instrument");
  return spaces;
}

}  // namespace

absl::StatusOr<CliArgs> ParseInspect(const std::vector<std::string>& argv, size_t i,
                                     CliArgs args) {
  args.command = Command::kInspect;
  InspectOptions& o = args.inspect;
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      args.command = Command::kHelp;
      args.help_topic = "inspect";
      return args;
    }
    std::string value;
    absl::Status error;
    OptionReader r(argv, i);
    if (r.Match("", "--sm", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(o.sm, ParseNumber<uint32_t>("--sm", value, 10, 200, "inspect"));
    } else if (r.Match("", "--extract-ptx", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      o.extract_ptx = value;
    } else if (arg.size() > 1 && arg[0] == '-') {
      return Invalid(absl::StrCat("unknown option '", arg, "'"), "inspect");
    } else if (!o.path.empty()) {
      return Invalid(absl::StrCat("inspect takes one file, got '", o.path, "' and '", arg, "'"),
                     "inspect");
    } else {
      o.path = arg;
    }
  }
  if (o.path.empty()) return Invalid("inspect needs a file: cuprobe inspect FILE", "inspect");
  return args;
}

absl::StatusOr<CliArgs> ParseCompile(const std::vector<std::string>& argv, size_t i,
                                     CliArgs args) {
  args.command = Command::kCompile;
  CompileArgs& c = args.compile;
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      args.command = Command::kHelp;
      args.help_topic = "compile";
      return args;
    }
    if (arg == "--emit-ptx") {
      c.emit_ptx = true;
      continue;
    }
    if (arg == "--emit-llvm") {
      c.emit_llvm = true;
      continue;
    }
    if ((arg.rfind("-D", 0) == 0 || arg.rfind("-I", 0) == 0) && arg.size() > 2) {
      c.clang_args.push_back(arg);
      continue;
    }
    if ((arg == "-D" || arg == "-I") && i + 1 < argv.size()) {
      c.clang_args.push_back(arg + argv[++i]);
      continue;
    }
    std::string value;
    absl::Status error;
    OptionReader r(argv, i);
    if (r.Match("-o", "--output", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      if (value.empty()) return Invalid("--output needs a file name", "compile");
      c.output = value;
    } else if (r.Match("-e", "-e", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      if (value.empty()) return Invalid("-e needs a one-liner", "compile");
      c.oneliner = value;
    } else if (r.Match("", "--max-insns", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(c.max_insns, ParseNumber<uint32_t>("--max-insns", value, 1,
                                                                  1u << 20, "compile"));
    } else if (r.Match("", "--max-steps", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(c.max_steps, ParseNumber<uint64_t>("--max-steps", value, 1,
                                                                  uint64_t{1} << 32, "compile"));
    } else if (arg.size() > 1 && arg[0] == '-') {
      return Invalid(absl::StrCat("unknown option '", arg, "'"), "compile");
    } else if (!c.input.empty()) {
      return Invalid(absl::StrCat("compile takes one probe, got '", c.input, "' and '", arg, "'"),
                     "compile");
    } else {
      c.input = arg;
    }
  }
  if (c.input.empty() && c.oneliner.empty()) {
    return Invalid("compile needs a probe: cuprobe compile probe.bpf.c -o probe.cpb, or a "
                   "one-liner: cuprobe compile -e 'exit:* { @n = count(); }' -o n.cpb", "compile");
  }
  if (!c.input.empty() && !c.oneliner.empty()) {
    return Invalid(absl::StrCat("compile takes a probe file or -e, not both ('", c.input, "')"),
                   "compile");
  }
  return args;
}

absl::StatusOr<CliArgs> ParseInstrument(const std::vector<std::string>& argv, size_t i,
                                        CliArgs args) {
  args.command = Command::kInstrument;
  InstrumentCommandOptions& o = args.instrument;
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      args.command = Command::kHelp;
      args.help_topic = "instrument";
      return args;
    }
    if (arg == "--entry" || arg == "--exit" || arg == "--mem" || arg == "--stats") {
      (arg == "--entry" ? o.entry : arg == "--exit" ? o.exit : arg == "--mem" ? o.mem : o.stats) =
          true;
      continue;
    }
    std::string value;
    absl::Status error;
    OptionReader r(argv, i);
    if (r.Match("-p", "--probe", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      o.probe = value;
    } else if (r.Match("-k", "--kernels", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      if (value.empty()) return Invalid("--kernels needs a glob", "instrument");
      o.kernels = value;
    } else if (r.Match("-o", "--output", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      o.output = value;
    } else if (r.Match("", "--sm", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(o.sm, ParseNumber<uint32_t>("--sm", value, 10, 200, "instrument"));
    } else if (r.Match("", "--mem-spaces", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(o.mem_spaces, ParseMemSpaces(value));
    } else if (r.Match("", "--helpers", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      o.helpers = value;
    } else if (r.Match("", "--kernel-id", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(o.first_kernel_id, ParseNumber<uint32_t>("--kernel-id", value, 0,
                                                                        UINT32_MAX, "instrument"));
    } else if (arg.size() > 1 && arg[0] == '-') {
      return Invalid(absl::StrCat("unknown option '", arg, "'"), "instrument");
    } else if (!o.input.empty()) {
      return Invalid(absl::StrCat("instrument takes one input file, got '", o.input, "' and '",
                                  arg, "'"),
                     "instrument");
    } else {
      o.input = arg;
    }
  }
  if (o.probe.empty()) {
    return Invalid("instrument needs --probe (builtin:count or a bundle file)", "instrument");
  }
  if (o.input.empty()) return Invalid("instrument needs an input file", "instrument");
  if (o.output.empty()) return Invalid("instrument needs -o OUT.cubin or OUT.ptx", "instrument");
  if (!absl::EndsWith(o.output, ".cubin") && !absl::EndsWith(o.output, ".ptx")) {
    return Invalid(absl::StrCat("-o '", o.output, "': the output must end in .cubin or .ptx"),
                   "instrument");
  }
  // A bundle's programs carry their own attach points (the flags then
  // narrow them); the built-in probe has none.
  if (IsBuiltinProbeSpec(o.probe) && o.UsesBundleAttachPoints()) {
    return Invalid(absl::StrCat("--probe ", o.probe,
                                " needs at least one attach point: --entry, --exit, --mem"),
                   "instrument");
  }
  return args;
}

}  // namespace cuprobe::args_internal
