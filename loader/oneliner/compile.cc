#include "loader/oneliner/compile.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "loader/oneliner/translate.h"

namespace cuprobe::oneliner {
namespace {

// A private directory for the generated C, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::error_code ec;
    std::string pattern = (std::filesystem::temp_directory_path(ec) / "cuprobe-e-XXXXXX").string();
    if (ec) pattern = "/tmp/cuprobe-e-XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

absl::StatusOr<CompileResult> CompileOneliner(std::string_view text,
                                              const ProbeCompileOptions& options) {
  absl::StatusOr<Translation> translation = TranslateOneliner(text);
  if (!translation.ok()) return translation.status();
  ScratchDir dir;
  if (dir.path().empty()) {
    return absl::InternalError("cannot create a temporary directory for the one-liner's C");
  }
  const std::string source = dir.path() + "/oneliner.bpf.c";
  {
    std::ofstream out(source, std::ios::trunc);
    out << translation->c_source;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", source));
  }
  absl::StatusOr<CompileResult> result = CompileFile(source, options);
  if (!result.ok() && result.status().code() == absl::StatusCode::kFailedPrecondition) {
    // No clang: say so, nothing more (compile the one-liner where clang is,
    // `cuprobe compile -e ... -o x.cpb`, and run the bundle).
    return absl::Status(result.status().code(),
                        absl::StrCat("cannot compile the one-liner: ", result.status().message(),
                                     "; or compile it on a machine with clang-19: cuprobe "
                                     "compile -e '...' -o oneliner.cpb, then run -p oneliner.cpb"));
  }
  if (!result.ok()) {
    // The one-liner was accepted, so this is cuprobe's fault: say so, with
    // the C that failed.
    return absl::Status(result.status().code(),
                        absl::StrCat("the one-liner's C probe did not compile (a cuprobe bug; "
                                     "please report it with this message):\n",
                                     result.status().message(), "\n--- generated C ---\n",
                                     translation->c_source));
  }
  for (ProbeProgram& p : result->bundle.programs) {
    for (const auto& [name, spaces] : translation->mem_spaces) {
      if (p.name == name) p.mem_spaces = spaces;
    }
  }
  result->bundle.oneliner = std::string(text);
  result->bundle.source_name = "-e";
  return result;
}

}  // namespace cuprobe::oneliner
