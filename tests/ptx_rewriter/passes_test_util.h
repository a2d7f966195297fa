// File: tests/ptx_rewriter/passes_test_util.h
//
// What the sources of ptx_rewriter_passes_test (tests/ptx_rewriter/
// passes_test.cc, passes_site_counters_test.cc) share: the golden files,
// probe programs and the test bundle they instrument with, and counting
// what the rewritten PTX holds.
//
//   ProbeBundle b = TestBundle({Program("entry", AttachKind::kEntry, "on_entry")});
//   absl::StatusOr<InstrumentResult> r = InstrumentPtx(Golden("passes_input.ptx"), b, options);
//   EXPECT_EQ(Count(r->ptx, "call (__cp_ret)"), 2);
#ifndef CUPROBE_TESTS_PTX_REWRITER_PASSES_TEST_UTIL_H_
#define CUPROBE_TESTS_PTX_REWRITER_PASSES_TEST_UTIL_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "probe/bundle.h"
#include "tests/ptx_rewriter/ptx_test_util.h"

namespace cuprobe::testing {

// tests/ptx_rewriter/golden/: inputs, the test bundle and the expected PTX.
inline const std::string kGoldenDir = std::string(CUPROBE_SOURCE_DIR) + "/tests/ptx_rewriter/golden/";

// golden/<name>, read whole.
inline std::string Golden(std::string_view name) { return testing::ReadTextFile(kGoldenDir + std::string(name)); }

// A probe program attached as `kind` to the kernels matching `glob`: the PTX
// function `function` of the bundle.
inline ProbeProgram Program(std::string name, AttachKind kind, std::string function, bool reads_args = false,
                     std::string glob = "*") {
  ProbeProgram p;
  p.name = name;
  p.section = absl::StrCat("cuprobe/", name, "/", glob);
  p.attach = kind;
  p.kernel_glob = glob;
  p.ptx_function = function;
  p.reads_args = reads_args;
  return p;
}

// The bundle of golden/test_bundle.ptx with `programs`: three maps, the
// map_add helper.
inline ProbeBundle TestBundle(std::vector<ProbeProgram> programs) {
  ProbeBundle b;
  b.source_name = "test_bundle";
  b.ptx = Golden("test_bundle.ptx");
  b.programs = std::move(programs);
  b.maps.resize(3);
  b.helpers = {CUPROBE_HELPER_SYMBOL_MAP_ADD};
  return b;
}

// How many times `what` occurs in `text`.
inline int Count(std::string_view text, std::string_view what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string_view::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_PTX_REWRITER_PASSES_TEST_UTIL_H_
