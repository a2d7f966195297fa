// File: tests/unit/source_policy_test.cc
//
// Issue 9: user strings never reach system() or a shell. Every external
// program cuprobe starts (clang, ptxas, the user's command) goes through
// posix_spawn with an argument vector; this test keeps it that way: no
// source file of the tool calls system(), popen() or an exec* function, or
// names a shell.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace {

// "name(" as a call (not the tail of a longer identifier), a shell's path,
// or a shell given a command string.
std::vector<std::string> ShellUses(std::string_view text) {
  static const char* const kCalls[] = {"system(", "popen(", "execl(", "execlp(", "execle(",
                                       "execv(", "execvp(", "execve(", "execvpe("};
  static const char* const kNames[] = {"/bin/sh", "/bin/bash", "\"sh\", \"-c\"",
                                       "\"bash\", \"-c\""};
  std::vector<std::string> found;
  for (const char* call : kCalls) {
    for (size_t at = text.find(call); at != std::string_view::npos;
         at = text.find(call, at + 1)) {
      const char before = at == 0 ? ' ' : text[at - 1];
      const bool ident = (before >= 'a' && before <= 'z') || (before >= 'A' && before <= 'Z') ||
                         (before >= '0' && before <= '9') || before == '_';
      if (!ident) found.emplace_back(call);
    }
  }
  for (const char* name : kNames) {
    if (text.find(name) != std::string_view::npos) found.emplace_back(name);
  }
  return found;
}

TEST(SourcePolicy, TheCheckFindsShellUses) {
  EXPECT_EQ(ShellUses("  std::system(cmd.c_str());").size(), 1u);
  EXPECT_EQ(ShellUses("FILE* f = popen(c, \"r\");").size(), 1u);
  EXPECT_EQ(ShellUses("execvp(argv[0], argv);").size(), 1u);
  EXPECT_EQ(ShellUses("const char* sh = \"/bin/sh\";").size(), 1u);
  EXPECT_EQ(ShellUses("Spawn({\"sh\", \"-c\", command});").size(), 1u);
  EXPECT_TRUE(ShellUses("Subsystem(x); my_system(y); posix_spawnp(&pid, f, 0, 0, a, e);").empty());
}

TEST(SourcePolicy, NoCodeStartsAShellOrExecsAString) {
  const std::filesystem::path root = CUPROBE_SOURCE_DIR;
  int files = 0;
  bool spawns = false;
  for (const char* dir : {"cupti_hook", "loader", "maps", "ptx_rewriter", "support", "include"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cc" && ext != ".h" && ext != ".cu")) continue;
      std::ifstream in(e.path());
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string text = ss.str();
      ++files;
      spawns = spawns || text.find("posix_spawn") != std::string::npos;
      for (const std::string& use : ShellUses(text)) {
        ADD_FAILURE() << e.path() << " uses " << use
                      << ": start programs with posix_spawn and an argument vector";
      }
    }
  }
  EXPECT_GT(files, 100) << "the walk did not see the source tree under " << root;
  EXPECT_TRUE(spawns) << "no posix_spawn call found: the check is looking at the wrong tree";
}

}  // namespace
