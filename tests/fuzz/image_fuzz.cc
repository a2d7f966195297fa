// File: tests/fuzz/image_fuzz.cc
//
// Fuzz target of the CUDA image reader (ptx_rewriter/image.h): every input is
// read as an image, each entry's payload extracted (zstd / LZ4), each ELF
// payload read as a cubin, and the input also searched as a host ELF. Any
// crash, hang, over-read or leak is a bug; errors are the expected outcome.
//
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-19
//       -DCMAKE_C_COMPILER=clang-19 -DCUPROBE_BUILD_FUZZERS=ON
//       -DCUPROBE_SANITIZE="address;undefined"
//   ninja -C build-fuzz image_fuzz cuprobe_image_fixtures
//   build-fuzz/bin/image_fuzz -max_total_time=60 /tmp/new_inputs
//       tests/corpus/image build-fuzz/tests/ptx_rewriter/fixtures
//
// Normal builds link this file with corpus_main.cc instead (ctest
// image_fuzz_corpus), which runs the seed corpus through it.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "ptx_rewriter/elf.h"
#include "ptx_rewriter/fatbin.h"
#include "ptx_rewriter/image.h"

namespace {

using cuprobe::Image;
using cuprobe::ImageEntry;

void ExerciseImage(const Image& image) {
  (void)cuprobe::DescribeImage(image);
  for (uint32_t sm : {75u, 90u, 100u, 120u}) (void)cuprobe::PickPtxFor(image, sm);
  for (const ImageEntry& e : image.entries) {
    absl::StatusOr<std::vector<uint8_t>> payload = cuprobe::ExtractPayload(e);
    if (!payload.ok()) continue;
    if (e.is_ptx()) {
      absl::StatusOr<std::string> text = cuprobe::ExtractPtx(e);
      if (text.ok()) (void)cuprobe::ReadPtxHeader(*text);
    }
    if (e.is_elf()) {
      absl::StatusOr<cuprobe::CubinInfo> cubin = cuprobe::ReadCubin(*payload);
      if (cubin.ok()) (void)cubin->KernelNames();
      (void)cuprobe::ElfSize(*payload);
    }
  }
}

bool StartsWithBinaryMagic(const uint8_t* data, size_t size) {
  if (size < 4) return false;
  uint32_t magic;
  std::memcpy(&magic, data, 4);
  return magic == cuprobe::kFatbinMagic || magic == cuprobe::kFatbinWrapperMagic ||
         std::memcmp(data, "\x7f" "ELF", 4) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> bytes(data, size);

  absl::StatusOr<Image> image = cuprobe::ReadImage(bytes);
  if (image.ok()) ExerciseImage(*image);

  absl::StatusOr<cuprobe::CubinInfo> cubin = cuprobe::ReadCubin(bytes);
  if (cubin.ok()) (void)cubin->KernelNames();

  absl::StatusOr<std::vector<cuprobe::HostFatbin>> found = cuprobe::FindFatbinsInHostElf(bytes);
  if (found.ok()) {
    for (const cuprobe::HostFatbin& c : *found) {
      absl::StatusOr<Image> inner = cuprobe::ReadImage(bytes.subspan(c.offset, c.size));
      if (inner.ok()) ExerciseImage(*inner);
    }
  }

  (void)cuprobe::ReadPtxHeader(
      std::string_view(reinterpret_cast<const char*>(data), size));

  // ReadImageAt trusts the sizes in binary headers (the driver does too), so
  // only text goes through it: as a NUL-terminated copy, like a PTX string.
  if (!StartsWithBinaryMagic(data, size)) {
    std::vector<char> text(data, data + size);
    text.push_back('\0');
    absl::StatusOr<Image> live = cuprobe::ReadImageAt(text.data());
    if (live.ok()) ExerciseImage(*live);
  }
  return 0;
}
