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

// The sum of the `@entries[K]: N` lines (tests/gpu/probes/count_entries.bpf.c).
inline uint64_t SumOfEntries(const std::string& maps) {
  uint64_t entries = 0;
  std::regex line(R"(@entries\[\d+\]: (\d+))");
  for (auto it = std::sregex_iterator(maps.begin(), maps.end(), line); it != std::sregex_iterator();
       ++it) {
    entries += std::stoull((*it)[1].str());
  }
  return entries;
}

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_GPU_MAP_LINES_H_
