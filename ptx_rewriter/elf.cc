// File: ptx_rewriter/elf.cc
#include "ptx_rewriter/elf.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ptx_rewriter/byte_view.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

using image_internal::AddOk;
using image_internal::Bytes;
using image_internal::FitsIn;
using image_internal::Hex;
using image_internal::HexPrefix;
using image_internal::Load8;
using image_internal::LoadLe16;
using image_internal::LoadLe32;
using image_internal::LoadLe64;
using image_internal::MulOk;

constexpr uint64_t kEhdrSize = 64;
constexpr uint64_t kShdrSize = 64;
constexpr uint64_t kPhdrSize = 56;
constexpr uint64_t kSymSize = 24;

constexpr uint32_t kShtSymtab = 2;
constexpr uint32_t kShtStrtab = 3;
constexpr uint32_t kShtNobits = 8;
constexpr uint32_t kShtSymtabShndx = 18;
constexpr uint16_t kShnLoreserve = 0xff00;
constexpr uint16_t kShnXindex = 0xffff;
constexpr uint8_t kSttFunc = 2;
constexpr uint8_t kStbLocal = 0;

absl::Status Bad(std::string message) {
  return absl::InvalidArgumentError(absl::StrCat("ELF: ", message));
}

std::string MachineName(uint16_t machine) {
  switch (machine) {
    case kEmCuda: return "EM_CUDA";
    case kEmX86_64: return "x86-64";
    case 183: return "AArch64";
    case 21: return "PowerPC64";
    default: return "unknown";
  }
}

// Checks the ELF identification bytes of a header that is fully visible.
absl::Status CheckIdent(Bytes b) {
  if (b.size() < kEhdrSize) {
    return Bad(absl::StrFormat("header truncated: %d bytes needed, %d present", kEhdrSize,
                               b.size()));
  }
  if (std::memcmp(b.data(), "\x7f" "ELF", 4) != 0) {
    return Bad(absl::StrCat("not an ELF file (first bytes ", HexPrefix(b, 4), ")"));
  }
  if (b[4] != 2) {
    return absl::UnimplementedError(absl::StrFormat(
        "ELF: class %d is not supported (only 64-bit ELF, class 2)", b[4]));
  }
  if (b[5] != 1) {
    return absl::UnimplementedError(absl::StrFormat(
        "ELF: data encoding %d is not supported (only little-endian, 1)", b[5]));
  }
  return absl::OkStatus();
}

// A string of a string table: NUL-terminated inside the table.
absl::StatusOr<std::string_view> TableString(Bytes table, uint64_t offset,
                                             std::string_view table_name) {
  // Callers prefix these messages with the symbol or section they read.
  if (offset >= table.size()) {
    return absl::InvalidArgumentError(absl::StrCat("string offset ", Hex(offset),
                                                   " lies outside ", table_name, " (",
                                                   Hex(table.size()), " bytes)"));
  }
  const void* nul = std::memchr(table.data() + offset, 0, table.size() - offset);
  if (nul == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("string at ", Hex(offset), " in ",
                                                   table_name, " is not NUL-terminated"));
  }
  const char* start = reinterpret_cast<const char*>(table.data() + offset);
  return std::string_view(start, static_cast<const char*>(nul) - start);
}

// [start, start + count * entsize), or an error naming `what`.
absl::StatusOr<uint64_t> TableEnd(uint64_t start, uint64_t count, uint64_t entsize,
                                  std::string_view what) {
  uint64_t bytes = 0;
  uint64_t end = 0;
  if (!MulOk(count, entsize, &bytes) || !AddOk(start, bytes, &end)) {
    return Bad(absl::StrCat(what, " at offset ", Hex(start), " with ", count,
                            " entries overflows 64 bits"));
  }
  return end;
}

// The extent computation shared by ElfSize() and ElfSizeAt(). With only part
// of the file visible it may answer "show me `need` bytes first".
struct Extent {
  bool complete = false;
  uint64_t need = 0;  // when !complete: bytes that must be visible
  uint64_t size = 0;  // when complete: the ELF's size
};

absl::StatusOr<Extent> ComputeExtent(Bytes b) {
  CUPROBE_RETURN_IF_ERROR(CheckIdent(b));
  const uint64_t phoff = LoadLe64(b, 32);
  const uint64_t shoff = LoadLe64(b, 40);
  const uint16_t ehsize = LoadLe16(b, 52);
  const uint16_t phentsize = LoadLe16(b, 54);
  const uint64_t phnum = LoadLe16(b, 56);
  const uint16_t shentsize = LoadLe16(b, 58);
  uint64_t shnum = LoadLe16(b, 60);

  uint64_t end = std::max<uint64_t>(kEhdrSize, ehsize);
  uint64_t ph_end = 0;
  if (phoff != 0 && phnum != 0) {
    if (phentsize < kPhdrSize) {
      return Bad(absl::StrFormat("e_phentsize is %d, expected %d", phentsize, kPhdrSize));
    }
    CUPROBE_ASSIGN_OR_RETURN(ph_end, TableEnd(phoff, phnum, phentsize, "program header table"));
  }
  uint64_t sh_end = 0;
  if (shoff != 0) {
    if (shentsize != kShdrSize) {
      return Bad(absl::StrFormat("e_shentsize is %d, expected %d", shentsize, kShdrSize));
    }
    if (shnum == 0) {  // more than 0xff00 sections: the count is in section 0
      uint64_t first_end = 0;
      if (!AddOk(shoff, kShdrSize, &first_end)) {
        return Bad(absl::StrCat("e_shoff ", Hex(shoff), " overflows"));
      }
      if (first_end > b.size()) return Extent{false, first_end, 0};
      shnum = LoadLe64(b, shoff + 32);
    }
    CUPROBE_ASSIGN_OR_RETURN(sh_end, TableEnd(shoff, shnum, kShdrSize, "section header table"));
  }
  const uint64_t tables_end = std::max(ph_end, sh_end);
  if (tables_end > b.size()) return Extent{false, tables_end, 0};
  end = std::max(end, tables_end);

  for (uint64_t i = 0; i < phnum && ph_end != 0; ++i) {
    const uint64_t at = phoff + i * phentsize;
    const uint64_t offset = LoadLe64(b, at + 8);
    const uint64_t filesz = LoadLe64(b, at + 32);
    uint64_t seg_end = 0;
    if (!AddOk(offset, filesz, &seg_end)) {
      return Bad(absl::StrFormat("program header %d: p_offset %s + p_filesz %s overflows", i,
                                 Hex(offset), Hex(filesz)));
    }
    end = std::max(end, seg_end);
  }
  for (uint64_t i = 0; i < shnum && sh_end != 0; ++i) {
    const uint64_t at = shoff + i * kShdrSize;
    if (LoadLe32(b, at + 4) == kShtNobits) continue;
    const uint64_t offset = LoadLe64(b, at + 24);
    const uint64_t size = LoadLe64(b, at + 32);
    uint64_t sec_end = 0;
    if (!AddOk(offset, size, &sec_end)) {
      return Bad(absl::StrFormat("section %d: sh_offset %s + sh_size %s overflows", i,
                                 Hex(offset), Hex(size)));
    }
    end = std::max(end, sec_end);
  }
  return Extent{true, 0, end};
}

}  // namespace

absl::StatusOr<ElfFile> ElfFile::Parse(absl::Span<const uint8_t> bytes) {
  const Bytes b = bytes;
  CUPROBE_RETURN_IF_ERROR(CheckIdent(b));
  ElfFile elf;
  elf.bytes_ = bytes;
  elf.os_abi_ = Load8(b, 7);
  elf.abi_version_ = Load8(b, 8);
  elf.type_ = LoadLe16(b, 16);
  elf.machine_ = LoadLe16(b, 18);
  elf.flags_ = LoadLe32(b, 48);
  const uint64_t shoff = LoadLe64(b, 40);
  const uint16_t shentsize = LoadLe16(b, 58);
  uint64_t shnum = LoadLe16(b, 60);
  uint64_t shstrndx = LoadLe16(b, 62);
  if (shoff == 0) return elf;  // no section header table (legal, e.g. sstrip)

  if (shentsize != kShdrSize) {
    return Bad(absl::StrFormat("e_shentsize is %d, expected %d", shentsize, kShdrSize));
  }
  if (!FitsIn(b.size(), shoff, kShdrSize)) {
    return Bad(absl::StrCat("section header table at offset ", Hex(shoff),
                            " lies outside the file of ", Hex(b.size()), " bytes"));
  }
  if (shnum == 0) shnum = LoadLe64(b, shoff + 32);
  if (shstrndx == kShnXindex) shstrndx = LoadLe32(b, shoff + 40);
  if (shnum > (b.size() - shoff) / kShdrSize) {
    return Bad(absl::StrCat("section header table at offset ", Hex(shoff), " claims ", shnum,
                            " entries of 64 bytes but only ", Hex(b.size() - shoff),
                            " bytes remain"));
  }
  elf.sections_.resize(shnum);
  std::vector<uint32_t> name_offsets(shnum);
  for (uint64_t i = 0; i < shnum; ++i) {
    const uint64_t at = shoff + i * kShdrSize;
    ElfSection& s = elf.sections_[i];
    name_offsets[i] = LoadLe32(b, at);
    s.type = LoadLe32(b, at + 4);
    s.flags = LoadLe64(b, at + 8);
    s.addr = LoadLe64(b, at + 16);
    s.offset = LoadLe64(b, at + 24);
    s.size = LoadLe64(b, at + 32);
    s.link = LoadLe32(b, at + 40);
    s.info = LoadLe32(b, at + 44);
    s.entsize = LoadLe64(b, at + 56);
  }
  if (shstrndx == 0) return elf;  // SHN_UNDEF: sections have no names
  if (shstrndx >= shnum) {
    return Bad(absl::StrCat("e_shstrndx ", shstrndx, " is not a section (", shnum,
                            " sections)"));
  }
  CUPROBE_ASSIGN_OR_RETURN(Bytes names, elf.SectionData(elf.sections_[shstrndx]));
  for (uint64_t i = 0; i < shnum; ++i) {
    auto name = TableString(names, name_offsets[i], ".shstrtab");
    if (!name.ok()) {
      return Bad(absl::StrCat("section ", i, ": ", name.status().message()));
    }
    elf.sections_[i].name = std::string(*name);
  }
  return elf;
}

const ElfSection* ElfFile::FindSection(std::string_view name) const {
  for (const ElfSection& s : sections_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

absl::StatusOr<absl::Span<const uint8_t>> ElfFile::SectionData(const ElfSection& s) const {
  if (s.type == kShtNobits) return absl::Span<const uint8_t>();
  if (!FitsIn(bytes_.size(), s.offset, s.size)) {
    return Bad(absl::StrCat("section '", s.name, "' claims ", Hex(s.size), " bytes at offset ",
                            Hex(s.offset), " but the file holds ", Hex(bytes_.size()),
                            " bytes"));
  }
  return bytes_.subspan(s.offset, s.size);
}

uint32_t CubinSmFromFlags(uint32_t e_flags, uint8_t abi_version) {
  return abi_version >= 8 ? (e_flags >> 8) & 0xff : e_flags & 0xff;
}

std::vector<std::string> CubinInfo::KernelNames() const {
  std::vector<std::string> names;
  for (const CubinFunction& f : functions) {
    if (f.is_kernel) names.push_back(f.name);
  }
  return names;
}

absl::StatusOr<CubinInfo> ReadCubin(absl::Span<const uint8_t> bytes) {
  CUPROBE_ASSIGN_OR_RETURN(ElfFile elf, ElfFile::Parse(bytes));
  if (elf.machine() != kEmCuda) {
    return Bad(absl::StrFormat("e_machine is %d (%s), not EM_CUDA (%d): not a cubin",
                               elf.machine(), MachineName(elf.machine()), kEmCuda));
  }
  CubinInfo info;
  info.abi_version = elf.abi_version();
  info.elf_type = elf.type();
  info.sm_arch = CubinSmFromFlags(elf.flags(), elf.abi_version());

  const std::vector<ElfSection>& sections = elf.sections();
  size_t symtab_index = sections.size();
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].type == kShtSymtab) {
      symtab_index = i;
      break;
    }
  }
  if (symtab_index == sections.size()) return info;  // stripped: no names to give

  const ElfSection& symtab = sections[symtab_index];
  if (symtab.entsize != kSymSize) {
    return Bad(absl::StrFormat("section '%s': sh_entsize is %d, expected %d", symtab.name,
                               symtab.entsize, kSymSize));
  }
  CUPROBE_ASSIGN_OR_RETURN(Bytes syms, elf.SectionData(symtab));
  if (syms.size() % kSymSize != 0) {
    return Bad(absl::StrFormat("section '%s': size %s is not a multiple of %d", symtab.name,
                               Hex(syms.size()), kSymSize));
  }
  if (symtab.link >= sections.size() || sections[symtab.link].type != kShtStrtab) {
    return Bad(absl::StrFormat("section '%s': sh_link %d is not a string table", symtab.name,
                               symtab.link));
  }
  CUPROBE_ASSIGN_OR_RETURN(Bytes strtab, elf.SectionData(sections[symtab.link]));
  Bytes xindex;
  for (const ElfSection& s : sections) {
    if (s.type == kShtSymtabShndx && s.link == symtab_index) {
      CUPROBE_ASSIGN_OR_RETURN(xindex, elf.SectionData(s));
      break;
    }
  }

  const uint64_t count = syms.size() / kSymSize;
  for (uint64_t i = 1; i < count; ++i) {
    const uint64_t at = i * kSymSize;
    const uint8_t st_info = Load8(syms, at + 4);
    if ((st_info & 0xf) != kSttFunc) continue;
    CubinFunction f;
    auto name = TableString(strtab, LoadLe32(syms, at), sections[symtab.link].name);
    if (!name.ok()) {
      return Bad(absl::StrCat("symbol ", i, ": ", name.status().message()));
    }
    f.name = std::string(*name);
    f.is_kernel = (Load8(syms, at + 5) & kStoCudaEntry) != 0;
    f.is_local = (st_info >> 4) == kStbLocal;
    f.size = LoadLe64(syms, at + 16);
    uint64_t shndx = LoadLe16(syms, at + 6);
    if (shndx == kShnXindex) {
      if (!FitsIn(xindex.size(), i * 4, 4)) {
        return Bad(absl::StrCat("symbol ", i, " '", f.name,
                                "' uses SHN_XINDEX but SHT_SYMTAB_SHNDX has no entry for it"));
      }
      shndx = LoadLe32(xindex, i * 4);
    } else if (shndx >= kShnLoreserve) {
      shndx = sections.size();  // SHN_ABS, SHN_COMMON, ...: no section
    }
    if (shndx != 0 && shndx < sections.size()) f.section_name = sections[shndx].name;
    info.functions.push_back(std::move(f));
  }
  return info;
}

absl::StatusOr<uint64_t> ElfSize(absl::Span<const uint8_t> bytes) {
  CUPROBE_ASSIGN_OR_RETURN(Extent extent, ComputeExtent(bytes));
  if (!extent.complete) {
    return Bad(absl::StrCat("header tables end at offset ", Hex(extent.need),
                            " but the buffer holds ", Hex(bytes.size()), " bytes"));
  }
  if (extent.size > bytes.size()) {
    return Bad(absl::StrCat("contents extend to offset ", Hex(extent.size),
                            " but the buffer holds ", Hex(bytes.size()), " bytes"));
  }
  return extent.size;
}

absl::StatusOr<uint64_t> ElfSizeAt(const void* image) {
  if (image == nullptr) return absl::InvalidArgumentError("ELF: null image pointer");
  const auto* p = static_cast<const uint8_t*>(image);
  // Widen the visible window only as far as the headers already read require:
  // ELF header -> (section 0 for an extended count) -> header tables.
  uint64_t visible = kEhdrSize;
  for (int round = 0; round < 4; ++round) {
    CUPROBE_ASSIGN_OR_RETURN(Extent extent, ComputeExtent(Bytes(p, visible)));
    if (extent.complete) {
      if (extent.size > kMaxImageBytes) {
        return Bad(absl::StrCat("headers claim a size of ", Hex(extent.size),
                                " bytes, more than the limit of ", Hex(kMaxImageBytes)));
      }
      return extent.size;
    }
    if (extent.need > kMaxImageBytes) {
      return Bad(absl::StrCat("header tables end at offset ", Hex(extent.need),
                              ", beyond the limit of ", Hex(kMaxImageBytes), " bytes"));
    }
    if (extent.need <= visible) break;
    visible = extent.need;
  }
  return absl::InternalError("ELF: header tables could not be sized");
}

}  // namespace cuprobe
