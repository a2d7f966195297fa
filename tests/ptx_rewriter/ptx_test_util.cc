// File: tests/ptx_rewriter/ptx_test_util.cc
#include "tests/ptx_rewriter/ptx_test_util.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace cuprobe::testing {

int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  size_t n;
  output->clear();
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) output->append(buf, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string MakeTempDir() {
  const char* tmp = getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/cuprobe_test_XXXXXX");
  char* made = mkdtemp(templ.data());
  EXPECT_NE(made, nullptr) << "mkdtemp " << templ;
  return templ;
}

absl::StatusOr<std::string> RunPtxas(std::string_view ptx, std::string_view arch) {
  const std::string dir = MakeTempDir();
  const std::string in = dir + "/in.ptx";
  WriteTextFile(in, ptx);
  std::string out;
  const int rc = RunCommand(absl::StrCat(CUPROBE_PTXAS, " -arch=", arch, " -v ", in, " -o ",
                                         dir, "/out.cubin"),
                            &out);
  std::filesystem::remove_all(dir);
  if (rc != 0) return absl::InvalidArgumentError(absl::StrCat("ptxas failed (", rc, "):\n", out));
  return out;
}

std::string ResourceReport(std::string_view ptxas_output) {
  std::string report;
  for (std::string_view line : absl::StrSplit(ptxas_output, '\n')) {
    if (absl::StrContains(line, "Compile time")) continue;
    if (line.empty()) continue;
    absl::StrAppend(&report, line, "\n");
  }
  return report;
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

ProbeBundle CompiledProbeBundle(std::string_view name) {
  const std::string path = absl::StrCat(CUPROBE_BINARY_DIR, "/probes/", name, ".cpb");
  const std::string bytes = ReadTextFile(path);
  absl::StatusOr<ProbeBundle> bundle =
      ReadBundle(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  EXPECT_TRUE(bundle.ok()) << path << ": " << bundle.status();
  if (!bundle.ok()) return {};
  for (ProbeProgram& p : bundle->programs) p.kernel_glob.assign(1, '*');
  return *std::move(bundle);
}

void WriteTextFile(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

}  // namespace cuprobe::testing
