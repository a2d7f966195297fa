// File: tests/ptx_rewriter/fixtures.h
//
// Access to the nvcc-built image fixtures (tests/ptx_rewriter/CMakeLists.txt
// lists them) and small helpers shared by the image-reader tests.
//
//   std::vector<uint8_t> fatbin = ReadFixture("multi_default.fatbin");
//   EXPECT_EQ(MinifyLikeFatbinary(ReadFixtureText("kernels_sm90.ptx")), ptx);
#ifndef CUPROBE_TESTS_PTX_REWRITER_FIXTURES_H_
#define CUPROBE_TESTS_PTX_REWRITER_FIXTURES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ptx_rewriter/image.h"

namespace cuprobe::testing {

// The bytes of a file; fails the test (and returns empty) when unreadable.
std::vector<uint8_t> ReadFile(const std::string& path);
std::vector<uint8_t> ReadFixture(std::string_view name);
std::string ReadFixtureText(std::string_view name);

// What fatbinary does to PTX text before storing it, as measured on nvcc 13:
// every line keeps its place, "//" comments are removed, runs of blanks
// become one space and leading blanks are dropped (a trailing blank stays).
// (The NUL it appends is not part of the text ExtractPtx() returns.)
std::string MinifyLikeFatbinary(std::string_view ptx);

// (kind, sm) of every entry, in order; e.g. {{kElf, 75}, {kPtx, 80}}.
std::vector<std::pair<EntryKind, uint32_t>> KindsAndArchs(const Image& image);

// Writes a little-endian value into a byte buffer (to forge lying headers).
void PokeLe(std::vector<uint8_t>& bytes, size_t offset, uint64_t value, int width);

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_PTX_REWRITER_FIXTURES_H_
