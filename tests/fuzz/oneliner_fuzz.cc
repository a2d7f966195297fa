// File: tests/fuzz/oneliner_fuzz.cc
//
// Fuzz target of the one-liner front end (loader/oneliner): every input is
// parsed and translated; errors are the expected outcome, and one that is
// accepted must produce C with a program per attach point. Each input's
// prefixes are tried too, so that every truncation reaches the parser.
//
//   ninja -C build-fuzz oneliner_fuzz
//   build-fuzz/bin/oneliner_fuzz -max_total_time=60 /tmp/new tests/gpu/oneliners
//
// Normal builds run the seed corpus through it (ctest oneliner_fuzz_corpus).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "loader/oneliner/translate.h"

namespace {

void Translate(std::string_view text) {
  absl::StatusOr<cuprobe::oneliner::Translation> t = cuprobe::oneliner::TranslateOneliner(text);
  if (!t.ok()) {
    if (t.status().message().empty()) std::abort();  // every error says what
    return;
  }
  if (t->c_source.find("SEC(\"cuprobe/") == std::string::npos) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Translate(text);
  for (size_t n = 0; n < text.size() && n < 256; ++n) Translate(text.substr(0, n));
  return 0;
}
