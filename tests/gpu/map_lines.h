// File: tests/gpu/map_lines.h
//
// Reading the GPU tests' maps reports (PREFIX.maps.txt, bpftrace-style
// `@name[key]: value` lines).
//
//   EXPECT_EQ(SumOfEntries(ReadWholeFile(prefix + ".maps.txt")), 160 * 1024 + 8);
#ifndef CUPROBE_TESTS_GPU_MAP_LINES_H_
#define CUPROBE_TESTS_GPU_MAP_LINES_H_

#include <cstdint>
#include <map>
#include <regex>
#include <string>
#include <utility>

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

// "[id] name" lines of the final maps: kernel name (demangled, up to its
// parameter list) -> id.
inline std::map<std::string, uint32_t> KernelIds(const std::string& maps) {
  std::map<std::string, uint32_t> ids;
  std::regex line(R"(\n  \[(\d+)\] ([^(\n]+))");
  for (auto it = std::sregex_iterator(maps.begin(), maps.end(), line); it != std::sregex_iterator();
       ++it) {
    ids[(*it)[2].str()] = static_cast<uint32_t>(std::stoul((*it)[1].str()));
  }
  return ids;
}

// (kernel id, kind) -> count, from "@name[{kernel_id: K, kind: D}]: V" lines
// (samples/mem_trace, samples/cublas_probe).
inline std::map<std::pair<uint32_t, uint32_t>, uint64_t> AccessCounts(const std::string& maps,
                                                                      const std::string& map) {
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> out;
  std::regex line("@" + map + R"(\[\{kernel_id: (\d+), kind: (\d+)\}\]: (\d+))");
  for (auto it = std::sregex_iterator(maps.begin(), maps.end(), line); it != std::sregex_iterator();
       ++it) {
    out[{static_cast<uint32_t>(std::stoul((*it)[1].str())),
         static_cast<uint32_t>(std::stoul((*it)[2].str()))}] = std::stoull((*it)[3].str());
  }
  return out;
}

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_GPU_MAP_LINES_H_
