// File: ptx_rewriter/fatbin.h
//
// The fatbin container format written by nvcc/fatbinary (magic 0xBA55ED50):
// parsing of one or several chained containers into entries, and extraction
// of an entry's payload with zstd or LZ4 decompression. Most callers want
// ReadImage() in image.h, which also accepts cubins, PTX and the runtime's
// fatbin wrapper; this header holds the format itself.
//
//   CUPROBE_ASSIGN_OR_RETURN(Image image, ReadImage(bytes));
//   const ImageEntry* ptx = PickPtxFor(image, 90);
//   CUPROBE_ASSIGN_OR_RETURN(std::string text, ExtractPtx(*ptx));
//
// Layout (little-endian; measured on nvcc/fatbinary 13.0 output, see
// tests/ptx_rewriter/fatbin_test.cc):
//
//   container header, 16 bytes
//     +0x00 u32 magic 0xBA55ED50   +0x04 u16 version (1)
//     +0x06 u16 header size (16)   +0x08 u64 bytes of entries that follow
//   entry header, header_size bytes (0x40; 0x48..0x80 with the optional
//   areas below), followed by payload_size bytes of payload:
//     +0x00 u16 kind (1 PTX, 2 ELF)     +0x02 u16 0x0101 in every entry seen
//     +0x04 u32 header size             +0x08 u64 payload size (padded to 8)
//     +0x10 u32 compressed size (0: stored uncompressed)
//     +0x14 u32 offset of the options descriptor {u32 offset, u32 size}
//               in this header, or 0 (PTX: ptxas options text, e.g. "-O1 -v";
//               sm_100+ ELF: a binary blob)
//     +0x18 u16 minor  +0x1a u16 major  (PTX: ISA version 9.0; ELF: 1.8)
//     +0x1c u32 SM arch (90)
//     +0x20 u32 object name offset in this header  +0x24 u32 its size
//               (nvcc -G writes the source name, e.g. "k.cu")
//     +0x28 u64 flags (kEntryFlag* below)
//     +0x30 u64 0 in every entry seen
//     +0x38 u64 decompressed size (0 when stored uncompressed)
//   The next entry starts right after the payload; the container ends
//   exactly after the last one. Compressed payloads hold `compressed size`
//   bytes and decompress to `decompressed size` bytes. PTX payloads are text
//   as fatbinary stores it (comments removed, whitespace collapsed), ending
//   in a NUL; uncompressed payloads are zero-padded to 8 bytes.
//
// Every field is bounds-checked; a truncated or lying header is an error such
// as "fatbin at offset 0x0: entry 1 at offset 0x21d0: header claims a payload
// of 0x210 bytes but only 0x1f0 remain in the container". Entries are
// numbered from 0 within their container.
#ifndef CUPROBE_PTX_REWRITER_FATBIN_H_
#define CUPROBE_PTX_REWRITER_FATBIN_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace cuprobe {

inline constexpr uint32_t kFatbinMagic = 0xBA55ED50;
inline constexpr uint32_t kFatbinWrapperMagic = 0x466243b1;
inline constexpr uint64_t kFatbinHeaderSize = 16;
inline constexpr uint64_t kFatbinEntryHeaderSize = 64;  // the smallest entry header

// Entry flags (bits seen in nvcc 13 output; others are kept, not interpreted).
inline constexpr uint64_t kEntryFlag64Bit = 0x1;
inline constexpr uint64_t kEntryFlagDebug = 0x2;          // nvcc -G
inline constexpr uint64_t kEntryFlagLinux = 0x10;
inline constexpr uint64_t kEntryFlagCompressedLegacy = 0x1000;  // pre-CUDA-11.x scheme
inline constexpr uint64_t kEntryFlagLz4 = 0x2000;         // raw LZ4 block
inline constexpr uint64_t kEntryFlagZstd = 0x8000;        // zstd frame (nvcc 13 default)
inline constexpr uint64_t kEntryFlagArchSpecific = 0x100000;    // sm_90a, compute_90a
inline constexpr uint64_t kEntryFlagFamilySpecific = 0x200000;  // sm_100f, compute_100f

// Decompressed sizes beyond this are treated as lies.
inline constexpr uint64_t kMaxDecompressedBytes = uint64_t{1} << 30;

enum class EntryKind : uint16_t { kPtx = 1, kElf = 2 };  // other values are kept as read

enum class Compression : uint8_t {
  kNone,
  kZstd,
  kLz4,
  kLegacy,  // flag 0x1000: listed, but ExtractPayload() says it is unsupported
};

// One code object: a fatbin entry, or the whole of a bare cubin / PTX image
// (then container_index is -1 and the header fields are 0).
struct ImageEntry {
  EntryKind kind = EntryKind::kPtx;
  uint32_t sm_arch = 0;        // 90 for sm_90 / compute_90
  uint16_t version_major = 0;  // PTX: ISA version (9.0); ELF: code version (1.8)
  uint16_t version_minor = 0;
  uint64_t flags = 0;
  Compression compression = Compression::kNone;

  int container_index = -1;  // index into Image::containers
  int index_in_container = 0;
  uint64_t offset = 0;       // of the entry header, from the start of the image
  uint32_t header_size = 0;
  uint16_t entry_format = 0;   // the u16 at +0x02 (0x0101)
  uint64_t payload_size = 0;   // stored bytes after the header, padding included
  uint32_t compressed_size = 0;
  uint64_t decompressed_size = 0;
  std::string object_name;  // empty when the entry names none
  std::string options;      // empty when the entry has none

  // The bytes as stored: the compressed stream (compressed_size bytes), or
  // the whole payload when uncompressed. A view into the image's buffer.
  absl::Span<const uint8_t> stored;

  [[nodiscard]] bool is_ptx() const { return kind == EntryKind::kPtx; }
  [[nodiscard]] bool is_elf() const { return kind == EntryKind::kElf; }
};

struct FatbinContainer {
  uint64_t offset = 0;  // of the container header, from the start of the image
  uint64_t size = 0;    // header and entries
  uint16_t version = 0;
  uint16_t header_size = 0;
  size_t first_entry = 0;  // index into Image::entries
  size_t entry_count = 0;
};

// "PTX", "ELF", or "kind 0x10".
[[nodiscard]] std::string EntryKindName(EntryKind kind);
[[nodiscard]] std::string_view CompressionName(Compression compression);

// The size of the container whose 16-byte header starts `header` (header
// included), checked against kMaxImageBytes. Reads exactly 16 bytes.
[[nodiscard]] absl::StatusOr<uint64_t> FatbinContainerSize(absl::Span<const uint8_t> header);

// Parses `bytes` as one or more containers back to back (zero padding between
// them and at the end is allowed, as in a host ELF's .nv_fatbin section) and
// appends them and their entries. Offsets are relative to bytes.data().
[[nodiscard]] absl::Status ParseFatbinChain(absl::Span<const uint8_t> bytes,
                                            std::vector<FatbinContainer>* containers,
                                            std::vector<ImageEntry>* entries);

// The entry's payload, decompressed: exactly decompressed_size bytes for a
// compressed entry, the stored bytes (padding included) otherwise. Errors
// say why a stream does not decode or does not have the size the header
// claims.
[[nodiscard]] absl::StatusOr<std::vector<uint8_t>> ExtractPayload(const ImageEntry& entry);

// The PTX text of a PTX entry: the payload up to its first NUL.
[[nodiscard]] absl::StatusOr<std::string> ExtractPtx(const ImageEntry& entry);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_FATBIN_H_
