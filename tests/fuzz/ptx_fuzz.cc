// File: tests/fuzz/ptx_fuzz.cc
//
// Fuzz target of the PTX parser and rewriter (ptx_rewriter/ptx_parser.h,
// instrument.h): every input is parsed as PTX; when it parses, it must print
// to text that parses again and prints identically (the round trip is
// stable), and the rewriter must instrument it with builtin:count at every
// attach point without crashing -- failing cleanly is fine, the rewritten
// PTX must parse again. Declarations, split operands and memory-access
// classification run on every statement. Any crash, hang, over-read, leak or
// abort() is a bug.
//
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-19
//       -DCMAKE_C_COMPILER=clang-19 -DCUPROBE_BUILD_FUZZERS=ON
//       -DCUPROBE_SANITIZE="address;undefined"
//   ninja -C build-fuzz ptx_fuzz
//   build-fuzz/bin/ptx_fuzz -max_total_time=300 -dict=tests/fuzz/ptx.dict
//       /tmp/ptx_corpus tests/corpus/ptx
//
// Normal builds link this file with corpus_main.cc instead (ctest
// ptx_fuzz_corpus), which replays the seed corpus through it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ptx_rewriter/builtin_probes.h"
#include "ptx_rewriter/instrument.h"
#include "ptx_rewriter/memory_pass.h"
#include "ptx_rewriter/ptx_parser.h"

namespace {

// The helper the builtin probe calls, so that linking succeeds.
constexpr char kHelper[] = R"(.version 8.0
.target sm_90
.address_size 64
.visible .func (.param .b64 r) __cuprobe_map_add(.param .b64 a, .param .b64 b, .param .b64 c)
{
	st.param.b64 [r], 0;
	ret;
}
)";

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "ptx_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Bound the work per input: PTX modules are big, fuzz inputs need not be.
  if (size > (1u << 20)) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<cuprobe::Module> m = cuprobe::ParsePtx(text, "fuzz.ptx");
  // Snippet parsing sees the same bytes (what passes generate goes there).
  (void)cuprobe::ParseBodyStatements(text);
  if (!m.ok()) return 0;

  for (const cuprobe::Function& f : m->functions) {
    for (const cuprobe::Statement& s : f.body) {
      if (s.kind == cuprobe::StatementKind::kDeclaration) (void)cuprobe::ParseDeclaration(s);
      if (s.IsInstruction()) {
        (void)cuprobe::SplitOperands(s.operands);
        (void)cuprobe::ClassifyMemoryAccess(s);
      }
    }
  }

  const std::string printed = cuprobe::PrintPtx(*m);
  absl::StatusOr<cuprobe::Module> again = cuprobe::ParsePtx(printed, "printed.ptx");
  Check(again.ok(), "printed PTX does not parse");
  Check(cuprobe::PrintPtx(*again) == printed, "print -> parse -> print is not stable");

  cuprobe::BuiltinBundleOptions bo;
  bo.entry = bo.exit = bo.memory = true;
  bo.mem_spaces = 0x3e;  // every space
  absl::StatusOr<cuprobe::ProbeBundle> bundle = cuprobe::BuiltinBundle("builtin:count", bo);
  Check(bundle.ok(), "builtin bundle");
  cuprobe::InstrumentOptions options;
  options.helper_ptx = kHelper;
  absl::StatusOr<cuprobe::InstrumentResult> r = cuprobe::InstrumentPtx(text, *bundle, options);
  if (r.ok() && !r->instrumented.empty()) {
    absl::StatusOr<cuprobe::Module> rewritten = cuprobe::ParsePtx(r->ptx, "rewritten.ptx");
    Check(rewritten.ok(), "rewritten PTX does not parse");
  }
  return 0;
}
