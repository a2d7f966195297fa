// File: tests/gpu/map_lines.h
//
// Reading the GPU tests' maps reports (PREFIX.maps.txt, bpftrace-style
// `@name[key]: value` lines).
//
//   EXPECT_EQ(SumOfEntries(ReadWholeFile(prefix + ".maps.txt")), 160 * 1024 + 8);
#ifndef CUPROBE_TESTS_GPU_MAP_LINES_H_
#define CUPROBE_TESTS_GPU_MAP_LINES_H_

#include <cstdint>
#include <regex>
#include <string>

namespace cuprobe::testing {

// The sum of the `@NAME[K]: N` lines of an array keyed by a number.
inline uint64_t SumOfMap(const std::string& maps, const std::string& name) {
  uint64_t sum = 0;
  std::regex line("@" + name + R"(\[\d+\]: (\d+))");
  for (auto it = std::sregex_iterator(maps.begin(), maps.end(), line); it != std::sregex_iterator();
       ++it) {
    sum += std::stoull((*it)[1].str());
  }
  return sum;
}

// The sum of the `@entries[K]: N` lines (tests/gpu/probes/count_entries.bpf.c,
// samples/torch_transformer/triton_entries.bpf.c).
inline uint64_t SumOfEntries(const std::string& maps) { return SumOfMap(maps, "entries"); }

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_GPU_MAP_LINES_H_
