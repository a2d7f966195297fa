// File: tests/fuzz/bpf_object_fuzz.cc
//
// Fuzz target of the eBPF object reader and the verifier
// (loader/compiler/object.h, verifier.h): every input is read as an object
// and every program found is verified with a small budget. Errors are the
// expected outcome; a crash, hang, over-read or leak is a bug.
//
//   ninja -C build-fuzz bpf_object_fuzz
//   build-fuzz/bin/bpf_object_fuzz -max_total_time=60 /tmp/new tests/corpus/bpf_object
//       build-fuzz/tests/compiler/corpus/bpf_object
//
// Normal builds run the seed corpus through it (ctest bpf_object_fuzz_corpus).
#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "loader/compiler/object.h"
#include "loader/compiler/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<cuprobe::BpfObject> obj =
      cuprobe::ReadBpfObject(absl::Span<const uint8_t>(data, size), "fuzz.o");
  if (!obj.ok()) return 0;
  cuprobe::VerifierOptions options;
  options.max_steps = 20'000;
  for (const cuprobe::BpfProgram& p : obj->programs) {
    (void)cuprobe::Verify(*obj, p, options);
    for (uint32_t i = 0; i < p.insns.size(); ++i) {
      (void)obj->LineOf(p, i);
      (void)cuprobe::Disassemble(p.insns[i], i + 1 < p.insns.size() ? &p.insns[i + 1] : nullptr);
    }
  }
  return 0;
}
