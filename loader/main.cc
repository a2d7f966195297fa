// cuprobe: the command-line tool. Parses arguments into CliArgs and hands
// them to one command; all text for the user comes from here or the command.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "loader/args.h"
#include "loader/attach_command.h"
#include "loader/compile_command.h"
#include "loader/inspect_command.h"
#include "loader/instrument_command.h"
#include "loader/list_command.h"
#include "loader/maps_command.h"
#include "loader/run_command.h"
#include "loader/trace_command.h"
#include "ptx_rewriter/settings.h"
#include "support/log.h"

#ifndef CUPROBE_VERSION
#define CUPROBE_VERSION "0.0.0"
#endif

namespace {

// A command's outcome as the exit status: 1 for a failed command, 2 for a
// program that could not be started; a run's own exit code otherwise.
int Report(const absl::Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "cuprobe: %s\n", std::string(s.message()).c_str());
  return 1;
}
int Report(const absl::StatusOr<int>& code) {
  if (code.ok()) return *code;
  std::fprintf(stderr, "cuprobe: %s\n", std::string(code.status().message()).c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cuprobe;
  // The CLI talks to the user at info level unless CUPROBE_LOG says
  // otherwise (the variable also reaches the hook in the program). The
  // environment is read here, once (and by the hook in the program).
  ConfigureLogging(std::getenv("CUPROBE_LOG"), std::getenv("CUPROBE_LOG_FILE"), LogLevel::kInfo);
  SetRewriterSettings(RewriterSettings::FromEnvironment(&std::getenv));

  std::vector<std::string> args(argv, argv + argc);
  absl::StatusOr<CliArgs> parsed = ParseArgs(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "cuprobe: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  switch (parsed->command) {
    case Command::kHelp:
      std::fputs(UsageText(parsed->help_topic).c_str(), stdout);
      return 0;
    case Command::kVersion:
      std::printf("cuprobe %s\n", CUPROBE_VERSION);
      return 0;
    case Command::kInspect:
      return Report(RunInspect(parsed->inspect));
    case Command::kCompile:
      return Report(RunCompile(parsed->compile));
    case Command::kInstrument:
      return Report(RunInstrument(parsed->instrument));
    case Command::kMaps:
      return Report(RunMaps(parsed->maps));
    case Command::kRun:
      return Report(RunRun(parsed->run));
    case Command::kAttach:
      return Report(RunAttach(parsed->attach));
    case Command::kTrace:
      return Report(RunTrace(parsed->trace));
    case Command::kList: {
      absl::StatusOr<int> listed = RunList(parsed->list);
      // Only a program that could not be started is a 2.
      if (!listed.ok() && parsed->list.command.empty()) return Report(listed.status());
      return Report(listed);
    }
  }
  return 2;
}
