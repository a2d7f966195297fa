// File: tests/ptx_rewriter/fixtures.cc
#include "tests/ptx_rewriter/fixtures.h"

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace cuprobe::testing {

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in),
                              std::istreambuf_iterator<char>());
}

std::vector<uint8_t> ReadFixture(std::string_view name) {
  return ReadFile(absl::StrCat(CUPROBE_IMAGE_FIXTURE_DIR, "/", name));
}

std::string ReadFixtureText(std::string_view name) {
  std::vector<uint8_t> bytes = ReadFixture(name);
  return std::string(bytes.begin(), bytes.end());
}

std::string MinifyLikeFatbinary(std::string_view ptx) {
  std::string out;
  size_t start = 0;
  while (start <= ptx.size()) {
    size_t end = ptx.find('\n', start);
    if (end == std::string_view::npos) end = ptx.size();
    std::string_view line = ptx.substr(start, end - start);
    if (size_t comment = line.find("//"); comment != std::string_view::npos) {
      line = line.substr(0, comment);
    }
    std::string collapsed;
    for (char c : line) {
      const bool blank = c == ' ' || c == '\t' || c == '\r';
      if (blank) {
        if (!collapsed.empty() && collapsed.back() != ' ') collapsed += ' ';  // not leading
      } else {
        collapsed += c;
      }
    }
    // Leading blanks go; a trailing one stays (fatbinary keeps "{ " from
    // "\t{ // callseq 0, 0" and nvcc's own trailing blanks).
    out += collapsed;
    if (end == ptx.size()) break;
    out += '\n';
    start = end + 1;
  }
  return out;
}

std::vector<std::pair<EntryKind, uint32_t>> KindsAndArchs(const Image& image) {
  std::vector<std::pair<EntryKind, uint32_t>> out;
  for (const ImageEntry& e : image.entries) out.emplace_back(e.kind, e.sm_arch);
  return out;
}

void PokeLe(std::vector<uint8_t>& bytes, size_t offset, uint64_t value, int width) {
  ASSERT_LE(offset + width, bytes.size());
  for (int i = 0; i < width; ++i) bytes[offset + i] = static_cast<uint8_t>(value >> (8 * i));
}

}  // namespace cuprobe::testing
