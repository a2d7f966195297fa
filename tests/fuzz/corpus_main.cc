// File: tests/fuzz/corpus_main.cc
//
// A main() for fuzz targets in builds without libFuzzer: runs every regular
// file under the given files or directories through LLVMFuzzerTestOneInput
// once, so the seed corpus (tests/corpus/...) and the generated fixtures are
// checked by ctest in every build, sanitizers included.
//
//   image_fuzz_corpus tests/corpus/image build/tests/ptx_rewriter/fixtures
//
// Exits 0 after running at least one input; a crash is the failure signal.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::filesystem::path> InputsUnder(const std::filesystem::path& root) {
  std::vector<std::filesystem::path> inputs;
  std::error_code ec;
  if (std::filesystem::is_regular_file(root, ec)) {
    inputs.push_back(root);
  } else {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root, ec)) {
      if (entry.is_regular_file()) inputs.push_back(entry.path());
    }
  }
  if (ec) std::fprintf(stderr, "corpus: cannot read %s: %s\n", root.c_str(), ec.message().c_str());
  std::sort(inputs.begin(), inputs.end());
  return inputs;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  size_t ran = 0;
  for (int i = 1; i < argc; ++i) {
    for (const std::filesystem::path& path : InputsUnder(argv[i])) {
      std::ifstream in(path, std::ios::binary);
      // An exact-size buffer, so sanitizers see reads past the input's end.
      const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                       std::istreambuf_iterator<char>());
      std::vector<uint8_t> exact(bytes);
      LLVMFuzzerTestOneInput(exact.data(), exact.size());
      ++ran;
    }
  }
  std::printf("corpus: ran %zu inputs\n", ran);
  return ran > 0 ? 0 : 1;
}
