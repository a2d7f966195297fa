// File: ptx_rewriter/image.cc
#include "ptx_rewriter/image.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ptx_rewriter/byte_view.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

using image_internal::AsText;
using image_internal::Bytes;
using image_internal::Hex;
using image_internal::HexPrefix;
using image_internal::LoadLe32;

constexpr uint8_t kWrapperMagicBytes[4] = {0xb1, 0x43, 0x62, 0x46};
constexpr uint8_t kFatbinMagicBytes[4] = {0x50, 0xed, 0x55, 0xba};
constexpr uint8_t kElfMagicBytes[4] = {0x7f, 'E', 'L', 'F'};

// Compares byte by byte and stops at the first mismatch. None of the magics
// holds a 0 byte, so on a short NUL-terminated PTX string this never reads
// past its terminator.
bool StartsWithMagic(const uint8_t* p, const uint8_t (&magic)[4]) {
  for (uint8_t m : magic) {
    if (*p != m) return false;
    ++p;
  }
  return true;
}

bool StartsWithMagic(Bytes b, const uint8_t (&magic)[4]) {
  return b.size() >= 4 && StartsWithMagic(b.data(), magic);
}

// Index of the first byte that is neither whitespace nor inside a comment.
size_t SkipSpaceAndComments(std::string_view text, size_t i) {
  while (i < text.size()) {
    if (absl::ascii_isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
    } else if (text.compare(i, 2, "//") == 0) {
      const size_t nl = text.find('\n', i);
      i = nl == std::string_view::npos ? text.size() : nl + 1;
    } else if (text.compare(i, 2, "/*") == 0) {
      const size_t close = text.find("*/", i + 2);
      i = close == std::string_view::npos ? text.size() : close + 2;
    } else {
      break;
    }
  }
  return i;
}

bool IsSpace(std::string_view text, size_t i) {
  return i < text.size() && (text[i] == ' ' || text[i] == '\t');
}

// Reads a decimal number of at most 6 digits at text[*i].
bool ReadNumber(std::string_view text, size_t* i, uint32_t* value) {
  size_t j = *i;
  uint32_t v = 0;
  while (j < text.size() && j - *i < 6 && absl::ascii_isdigit(static_cast<unsigned char>(text[j]))) {
    v = v * 10 + static_cast<uint32_t>(text[j] - '0');
    ++j;
  }
  if (j == *i) return false;
  *i = j;
  *value = v;
  return true;
}

// True when the text (after whitespace) starts like PTX: a directive or a
// comment. Used to tell "bad PTX" from "not an image at all".
bool LooksLikePtx(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[i]))) ++i;
  return text.compare(i, 1, ".") == 0 || text.compare(i, 2, "//") == 0 ||
         text.compare(i, 2, "/*") == 0;
}

absl::StatusOr<Image> ReadFatbin(Bytes bytes) {
  Image image;
  image.format = ImageFormat::kFatbin;
  image.bytes = bytes;
  CUPROBE_RETURN_IF_ERROR(ParseFatbinChain(bytes, &image.containers, &image.entries));
  return image;
}

absl::StatusOr<Image> ReadCubinImage(Bytes bytes) {
  CUPROBE_ASSIGN_OR_RETURN(ElfFile elf, ElfFile::Parse(bytes));
  if (elf.machine() != kEmCuda) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "image is an ELF file for e_machine %d, not a cubin (EM_CUDA = %d)%s", elf.machine(),
        kEmCuda,
        elf.machine() == kEmX86_64 ? "; for a host executable use FindFatbinsInHostElf()" : ""));
  }
  CUPROBE_ASSIGN_OR_RETURN(uint64_t size, ElfSize(bytes));
  Image image;
  image.format = ImageFormat::kCubin;
  image.bytes = bytes.first(size);
  ImageEntry e;
  e.kind = EntryKind::kElf;
  e.sm_arch = CubinSmFromFlags(elf.flags(), elf.abi_version());
  e.payload_size = size;
  e.stored = image.bytes;
  image.entries.push_back(std::move(e));
  return image;
}

absl::StatusOr<Image> ReadPtxImage(Bytes bytes) {
  const uint8_t* nul = std::find(bytes.begin(), bytes.end(), uint8_t{0});
  const Bytes text = bytes.first(nul - bytes.data());
  CUPROBE_ASSIGN_OR_RETURN(PtxHeader header, ReadPtxHeader(AsText(text)));
  Image image;
  image.format = ImageFormat::kPtx;
  image.bytes = text;
  ImageEntry e;
  e.kind = EntryKind::kPtx;
  e.sm_arch = header.sm_arch;
  e.version_major = header.version_major;
  e.version_minor = header.version_minor;
  if (header.arch_suffix == 'a') e.flags |= kEntryFlagArchSpecific;
  if (header.arch_suffix == 'f') e.flags |= kEntryFlagFamilySpecific;
  e.payload_size = text.size();
  e.stored = text;
  image.entries.push_back(std::move(e));
  return image;
}

// 0 generic, 1 family-specific, 2 arch-specific: higher wins a tie.
int Specificity(const ImageEntry& e) {
  if (e.flags & kEntryFlagArchSpecific) return 2;
  if (e.flags & kEntryFlagFamilySpecific) return 1;
  return 0;
}

bool RunsOn(const ImageEntry& e, uint32_t sm) {
  if (e.sm_arch > sm) return false;
  if (e.flags & kEntryFlagArchSpecific) return e.sm_arch == sm;
  if (e.flags & kEntryFlagFamilySpecific) return e.sm_arch / 10 == sm / 10;
  return true;
}

absl::StatusOr<std::vector<HostFatbin>> ScanForFatbins(Bytes bytes) {
  std::vector<HostFatbin> found;
  uint64_t off = 0;
  while (bytes.size() >= 4 && off <= bytes.size() - 4) {
    const uint8_t* start = bytes.data() + off;
    const void* hit = std::memchr(start, kFatbinMagicBytes[0], bytes.size() - 3 - off);
    if (hit == nullptr) break;
    off = static_cast<const uint8_t*>(hit) - bytes.data();
    if (!StartsWithMagic(bytes.subspan(off), kFatbinMagicBytes)) {
      ++off;
      continue;
    }
    // A candidate: keep it only if the whole container parses.
    const Bytes rest = bytes.subspan(off);
    absl::StatusOr<uint64_t> size = FatbinContainerSize(rest);
    if (size.ok() && *size <= rest.size()) {
      std::vector<FatbinContainer> containers;
      std::vector<ImageEntry> entries;
      if (ParseFatbinChain(rest.first(*size), &containers, &entries).ok() &&
          containers.size() == 1) {
        found.push_back({off, *size});
        off += *size;
        continue;
      }
    }
    ++off;
  }
  return found;
}

}  // namespace

absl::StatusOr<PtxHeader> ReadPtxHeader(std::string_view text) {
  PtxHeader header;
  size_t i = SkipSpaceAndComments(text, 0);
  constexpr std::string_view kVersion = ".version";
  if (text.compare(i, kVersion.size(), kVersion) != 0 || !IsSpace(text, i + kVersion.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PTX: expected a .version directive at offset ", Hex(i), " (after comments and "
        "whitespace), found '", absl::CEscape(text.substr(i, 16)), "'"));
  }
  const size_t version_at = i;
  i += kVersion.size();
  while (IsSpace(text, i)) ++i;
  uint32_t major = 0;
  uint32_t minor = 0;
  if (!ReadNumber(text, &i, &major) || text.compare(i, 1, ".") != 0 ||
      !(++i, ReadNumber(text, &i, &minor)) || major > 0xffff || minor > 0xffff) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PTX: .version at offset ", Hex(version_at), " is not MAJOR.MINOR"));
  }
  header.version_major = static_cast<uint16_t>(major);
  header.version_minor = static_cast<uint16_t>(minor);

  i = SkipSpaceAndComments(text, i);
  constexpr std::string_view kTarget = ".target";
  if (text.compare(i, kTarget.size(), kTarget) == 0 && IsSpace(text, i + kTarget.size())) {
    i += kTarget.size();
    while (IsSpace(text, i)) ++i;
    uint32_t sm = 0;
    if (text.compare(i, 3, "sm_") == 0 && (i += 3, ReadNumber(text, &i, &sm))) {
      header.sm_arch = sm;
      if (i < text.size() && (text[i] == 'a' || text[i] == 'f')) header.arch_suffix = text[i];
    }
  }
  return header;
}

absl::StatusOr<Image> ReadImage(absl::Span<const uint8_t> bytes) {
  if (bytes.empty()) return absl::InvalidArgumentError("image is empty");
  if (StartsWithMagic(bytes, kWrapperMagicBytes)) {
    const uint32_t version = bytes.size() >= 8 ? LoadLe32(bytes, 4) : 0;
    return absl::InvalidArgumentError(absl::StrCat(
        "image at offset 0x0 is a fatbin wrapper (magic ", Hex(kFatbinWrapperMagic),
        ", version ", version, "): it holds a pointer to the fatbin, which cannot be followed "
        "in a byte buffer read offline; pass the fatbin container itself (magic ",
        Hex(kFatbinMagic), ") or call ReadImageAt() on live memory"));
  }
  if (StartsWithMagic(bytes, kFatbinMagicBytes)) return ReadFatbin(bytes);
  if (StartsWithMagic(bytes, kElfMagicBytes)) return ReadCubinImage(bytes);
  const uint8_t* nul = std::find(bytes.begin(), bytes.end(), uint8_t{0});
  if (LooksLikePtx(AsText(bytes.first(nul - bytes.data())))) return ReadPtxImage(bytes);
  return absl::InvalidArgumentError(absl::StrCat(
      "image of ", Hex(bytes.size()), " bytes is not a fatbin wrapper, fatbin, cubin or PTX "
      "(first bytes ", HexPrefix(bytes), ")"));
}

absl::StatusOr<Image> ReadImageAt(const void* image) {
  if (image == nullptr) return absl::InvalidArgumentError("image pointer is null");
  const auto* p = static_cast<const uint8_t*>(image);
  int32_t wrapper_version = 0;
  if (StartsWithMagic(p, kWrapperMagicBytes)) {
    FatbinWrapper wrapper;
    std::memcpy(&wrapper, p, sizeof wrapper);
    if (wrapper.version != 1 && wrapper.version != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fatbin wrapper at ", absl::StrFormat("%p", image), " has version ", wrapper.version,
          " (expected 1 or 2)"));
    }
    if (wrapper.data == nullptr) {
      return absl::InvalidArgumentError("fatbin wrapper's data pointer is null");
    }
    p = static_cast<const uint8_t*>(wrapper.data);
    if (!StartsWithMagic(p, kFatbinMagicBytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fatbin wrapper points at ", absl::StrFormat("%p", wrapper.data),
          ", which does not start with the fatbin magic ", Hex(kFatbinMagic)));
    }
    wrapper_version = wrapper.version;
  }
  uint64_t size = 0;
  if (StartsWithMagic(p, kFatbinMagicBytes)) {
    CUPROBE_ASSIGN_OR_RETURN(size, FatbinContainerSize(Bytes(p, kFatbinHeaderSize)));
  } else if (StartsWithMagic(p, kElfMagicBytes)) {
    CUPROBE_ASSIGN_OR_RETURN(size, ElfSizeAt(p));
  } else {
    size = strnlen(reinterpret_cast<const char*>(p), kMaxImageBytes);
    if (size == kMaxImageBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "image is neither a fatbin nor a cubin, and as PTX text it has no NUL within ",
          Hex(kMaxImageBytes), " bytes"));
    }
    if (size == 0) return absl::InvalidArgumentError("image is an empty string");
  }
  CUPROBE_ASSIGN_OR_RETURN(Image result, ReadImage(Bytes(p, size)));
  result.wrapper_version = wrapper_version;
  return result;
}

const ImageEntry* PickPtxFor(const Image& image, uint32_t sm) {
  const ImageEntry* best = nullptr;
  for (const ImageEntry& e : image.entries) {
    if (!e.is_ptx() || !RunsOn(e, sm)) continue;
    if (best == nullptr) {
      best = &e;
      continue;
    }
    const auto key = [](const ImageEntry& x) {
      return std::make_tuple(x.sm_arch, Specificity(x), x.version_major, x.version_minor);
    };
    if (key(e) > key(*best)) best = &e;
  }
  return best;
}

absl::StatusOr<std::vector<std::string>> KernelNames(const ImageEntry& entry) {
  if (!entry.is_elf()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel names come from ELF entries; this entry is ", EntryKindName(entry.kind)));
  }
  CUPROBE_ASSIGN_OR_RETURN(std::vector<uint8_t> elf, ExtractPayload(entry));
  CUPROBE_ASSIGN_OR_RETURN(CubinInfo cubin, ReadCubin(elf));
  return cubin.KernelNames();
}

std::vector<HostFatbin> ScanForFatbinContainers(absl::Span<const uint8_t> bytes) {
  absl::StatusOr<std::vector<HostFatbin>> found = ScanForFatbins(bytes);
  return found.ok() ? *std::move(found) : std::vector<HostFatbin>{};
}

absl::StatusOr<std::vector<HostFatbin>> FindFatbinsInHostElf(absl::Span<const uint8_t> bytes) {
  if (!StartsWithMagic(bytes, kElfMagicBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host ELF: not an ELF file (first bytes ", HexPrefix(bytes, 4), ")"));
  }
  absl::StatusOr<ElfFile> parsed = ElfFile::Parse(bytes);
  // Section headers that are missing or cut off (a truncated file, a dump)
  // leave the contents readable: scan them.
  if (!parsed.ok()) return ScanForFatbins(bytes);
  const ElfFile& elf = *parsed;
  if (elf.machine() == kEmCuda) {
    return absl::InvalidArgumentError(
        "ELF is a cubin (EM_CUDA), not a host executable; read it with ReadImage()");
  }
  const ElfSection* section = elf.FindSection(".nv_fatbin");
  if (section == nullptr) return ScanForFatbins(bytes);
  CUPROBE_ASSIGN_OR_RETURN(Bytes data, elf.SectionData(*section));
  std::vector<FatbinContainer> containers;
  std::vector<ImageEntry> entries;
  absl::Status status = ParseFatbinChain(data, &containers, &entries);
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("section .nv_fatbin at file offset ", Hex(section->offset),
                                     ": ", status.message()));
  }
  std::vector<HostFatbin> found;
  for (const FatbinContainer& c : containers) found.push_back({section->offset + c.offset, c.size});
  return found;
}

std::string_view ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kFatbin: return "fatbin";
    case ImageFormat::kCubin: return "cubin";
    case ImageFormat::kPtx: return "PTX";
  }
  return "?";
}

std::string DescribeEntry(const ImageEntry& e) {
  std::string out = absl::StrCat("entry ", e.index_in_container, " @", Hex(e.offset), ": ",
                                 EntryKindName(e.kind), " sm_", e.sm_arch);
  if (e.flags & kEntryFlagArchSpecific) out += "a";
  if (e.flags & kEntryFlagFamilySpecific) out += "f";
  absl::StrAppend(&out, e.is_ptx() ? " ISA " : " code ", e.version_major, ".", e.version_minor,
                  " ", CompressionName(e.compression));
  if (e.compression == Compression::kZstd || e.compression == Compression::kLz4) {
    absl::StrAppend(&out, " ", Hex(e.compressed_size), "->", Hex(e.decompressed_size));
  } else {
    absl::StrAppend(&out, " ", Hex(e.payload_size));
  }
  absl::StrAppend(&out, " flags ", Hex(e.flags), " header ", Hex(e.header_size));
  if (!e.object_name.empty()) absl::StrAppend(&out, " name '", absl::CEscape(e.object_name), "'");
  if (e.is_ptx() && !e.options.empty()) {
    absl::StrAppend(&out, " options '", absl::CEscape(e.options), "'");
  }
  return out;
}

std::string DescribeImage(const Image& image) {
  std::string out = absl::StrCat(ImageFormatName(image.format), ", ", Hex(image.bytes.size()),
                                 " bytes");
  if (image.wrapper_version != 0) absl::StrAppend(&out, ", via wrapper v", image.wrapper_version);
  if (image.format == ImageFormat::kFatbin) {
    absl::StrAppend(&out, ", ", image.containers.size(), " container(s), ",
                    image.entries.size(), " entries");
  }
  out += "\n";
  for (const ImageEntry& e : image.entries) absl::StrAppend(&out, "  ", DescribeEntry(e), "\n");
  return out;
}

}  // namespace cuprobe
