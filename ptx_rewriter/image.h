// File: ptx_rewriter/image.h
//
// Reads a CUDA module image, whatever form cuLibraryLoadData,
// cuModuleLoadData[Ex] or cuModuleLoadFatBinary was handed: the runtime's
// fatbin wrapper (magic 0x466243b1), a fatbin container (0xBA55ED50; several
// back to back as in a host ELF's .nv_fatbin section), a bare cubin (ELF,
// e_machine EM_CUDA) or PTX text. It lists the code objects (kind, SM, PTX
// ISA version, compression, sizes), picks the PTX to rewrite for a device,
// extracts payloads (zstd / LZ4) and names the kernels of SASS-only modules.
//
//   // In the hook, at ENTER of cuLibraryLoadData(&lib, code, ...):
//   CUPROBE_ASSIGN_OR_RETURN(Image image, ReadImageAt(code));
//   if (const ImageEntry* ptx = PickPtxFor(image, /*sm=*/90)) {
//     CUPROBE_ASSIGN_OR_RETURN(std::string text, ExtractPtx(*ptx));
//     ...  // rewrite, compile, replace `code`
//   }
//
//   // Offline, on bytes read from a file:
//   CUPROBE_ASSIGN_OR_RETURN(Image image, ReadImage(bytes));
//   std::cout << DescribeImage(image);
//
// An Image keeps views into the memory it was read from (the caller's buffer,
// or the application's image for ReadImageAt); it must not outlive it.
// Nothing here calls the CUDA driver.
#ifndef CUPROBE_PTX_REWRITER_IMAGE_H_
#define CUPROBE_PTX_REWRITER_IMAGE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ptx_rewriter/elf.h"
#include "ptx_rewriter/fatbin.h"

namespace cuprobe {

// What the CUDA runtime registers and passes to cuLibraryLoadData
// (__fatBinC_Wrapper_t in the toolkit's fatbinary_section.h). `data` points
// at a fatbin container; version 2 wrappers (-rdc) also point at the
// prelinked fatbins.
struct FatbinWrapper {
  int32_t magic;    // kFatbinWrapperMagic
  int32_t version;  // 1 or 2
  const void* data;
  void* filename_or_fatbins;
};
static_assert(std::is_standard_layout_v<FatbinWrapper>);
static_assert(sizeof(FatbinWrapper) == 24 && offsetof(FatbinWrapper, data) == 8 &&
              offsetof(FatbinWrapper, filename_or_fatbins) == 16);

enum class ImageFormat : uint8_t { kFatbin, kCubin, kPtx };

struct Image {
  ImageFormat format = ImageFormat::kFatbin;
  int32_t wrapper_version = 0;      // 1 or 2 when ReadImageAt() followed a wrapper
  absl::Span<const uint8_t> bytes;  // the image as sized (containers / ELF / PTX text)
  std::vector<FatbinContainer> containers;  // empty unless kFatbin
  std::vector<ImageEntry> entries;          // one entry for a bare cubin or PTX
};

// The header directives of PTX text.
struct PtxHeader {
  uint16_t version_major = 0;  // .version 9.0
  uint16_t version_minor = 0;
  uint32_t sm_arch = 0;        // .target sm_90a -> 90; 0 without a .target
  char arch_suffix = 0;        // 'a', 'f' or 0
};

// Reads bytes of a known size. A fatbin wrapper in a byte buffer is an error
// (its pointer cannot be followed offline). A cubin is trimmed to the size
// its headers give; PTX ends at the first NUL.
[[nodiscard]] absl::StatusOr<Image> ReadImage(absl::Span<const uint8_t> bytes);

// Reads an image in live memory, as the driver would: follows a wrapper's
// pointer to its fatbin and sizes the fatbin from its header, a cubin from
// its ELF headers and PTX by strnlen() up to kMaxImageBytes. Reads nothing
// beyond the size so found; the memory up to it must be readable.
[[nodiscard]] absl::StatusOr<Image> ReadImageAt(const void* image);

// The PTX to compile for a device of compute capability `sm` (90 for 9.0):
// the PTX entry of highest SM <= sm. Arch-specific PTX (compute_90a) counts
// only for exactly that SM, family-specific PTX (compute_100f) for SMs of its
// family (same major) at or above it. Ties go to the more specific PTX, then
// the newer ISA version, then the first. nullptr when there is none.
[[nodiscard]] const ImageEntry* PickPtxFor(const Image& image, uint32_t sm);

// The kernel names of an ELF entry (decompressing it if needed), symbol-table
// order.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> KernelNames(const ImageEntry& entry);

// The .version and .target of PTX text (comments and whitespace before them
// skipped). An error when the text does not start with a .version directive.
[[nodiscard]] absl::StatusOr<PtxHeader> ReadPtxHeader(std::string_view text);

// A fatbin container inside a host executable or shared library.
struct HostFatbin {
  uint64_t offset = 0;  // from the start of the file
  uint64_t size = 0;    // container header and entries
};

// The fatbin containers of a host ELF (x86-64, AArch64, ...): those of its
// .nv_fatbin section, or, when it has none or its section headers are
// missing or unreadable (stripped, truncated), every well-formed container
// found by scanning for the 0xBA55ED50 magic. Read one with
// ReadImage(bytes.subspan(offset, size)). A .nv_fatbin that does not parse
// is an error.
[[nodiscard]] absl::StatusOr<std::vector<HostFatbin>> FindFatbinsInHostElf(
    absl::Span<const uint8_t> bytes);

// Every well-formed fatbin container anywhere in `bytes` (a magic followed
// by a container that parses whole), in file order. Libraries that load
// their own modules keep containers outside .nv_fatbin (cuFFT: 24,000 of
// them in .ldata); `cuprobe inspect` lists those too.
[[nodiscard]] std::vector<HostFatbin> ScanForFatbinContainers(absl::Span<const uint8_t> bytes);

[[nodiscard]] std::string_view ImageFormatName(ImageFormat format);

// One line per entry, cuobjdump-like:
//   "entry 3 @0x4058: PTX sm_90 ISA 9.0 zstd 0x20c->0x663 flags 0x8011 header 0x50"
[[nodiscard]] std::string DescribeEntry(const ImageEntry& entry);
[[nodiscard]] std::string DescribeImage(const Image& image);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_IMAGE_H_
