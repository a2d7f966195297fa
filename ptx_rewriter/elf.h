// File: ptx_rewriter/elf.h
//
// A small, bounds-checked reader for 64-bit little-endian ELF files: the
// section table of any ELF (host executables are searched for `.nv_fatbin`
// this way), and for CUDA cubins (e_machine EM_CUDA = 190) the target SM and
// the functions of the symbol table, so that a module that ships SASS only can
// still be named kernel by kernel.
//
//   CUPROBE_ASSIGN_OR_RETURN(CubinInfo cubin, ReadCubin(bytes));
//   for (const std::string& name : cubin.KernelNames()) ...  // "_Z7add_onePfi"
//
// What marks a kernel (checked on nvcc 13 cubins for sm_75 .. sm_120,
// whole-program and -rdc): a kernel is an STT_FUNC symbol whose st_other has
// bit 0x10 set (kStoCudaEntry), local kernels (static, anonymous namespace)
// included. A `.text.<name>` section is not enough: in -rdc cubins every
// non-inlined __device__ function has one too. Whole-program cubins also hold
// LOCAL STT_FUNC symbols such as "$_Z2k1Pi$_Z6helperi" for device functions
// placed inside a kernel's section; those are functions, not kernels.
//
// Every offset and size read from the file is checked; a bad file yields an
// error naming the field and the offset, never an over-read. The reader keeps
// views into the caller's buffer, which must outlive it.
#ifndef CUPROBE_PTX_REWRITER_ELF_H_
#define CUPROBE_PTX_REWRITER_ELF_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace cuprobe {

inline constexpr uint16_t kEmCuda = 190;    // e_machine of a cubin
inline constexpr uint16_t kEmX86_64 = 62;   // e_machine of a host x86-64 ELF
inline constexpr uint8_t kStoCudaEntry = 0x10;  // st_other bit of a kernel symbol

// Sizes beyond this are treated as lies (live images are sized from headers).
inline constexpr uint64_t kMaxImageBytes = uint64_t{1} << 30;

struct ElfSection {
  std::string name;
  uint32_t type = 0;  // SHT_*
  uint64_t flags = 0;
  uint64_t addr = 0;  // sh_addr: where a host ELF maps it
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t link = 0;
  uint32_t info = 0;
  uint64_t entsize = 0;
};

// The ELF header fields and the section table of a 64-bit little-endian ELF.
class ElfFile {
 public:
  // Validates the ELF header and the section header table (its range, entry
  // size, the section-name string table and every name). Section contents
  // are checked when SectionData() asks for them.
  [[nodiscard]] static absl::StatusOr<ElfFile> Parse(absl::Span<const uint8_t> bytes);

  [[nodiscard]] uint16_t type() const { return type_; }        // ET_EXEC = 2, ET_REL = 1, ...
  [[nodiscard]] uint16_t machine() const { return machine_; }  // kEmCuda, kEmX86_64, ...
  [[nodiscard]] uint32_t flags() const { return flags_; }
  [[nodiscard]] uint8_t os_abi() const { return os_abi_; }
  [[nodiscard]] uint8_t abi_version() const { return abi_version_; }
  [[nodiscard]] absl::Span<const uint8_t> bytes() const { return bytes_; }
  [[nodiscard]] const std::vector<ElfSection>& sections() const { return sections_; }

  // The first section with this name, or nullptr.
  [[nodiscard]] const ElfSection* FindSection(std::string_view name) const;

  // The bytes of a section (empty for SHT_NOBITS); an error when the section
  // header points outside the file.
  [[nodiscard]] absl::StatusOr<absl::Span<const uint8_t>> SectionData(
      const ElfSection& section) const;

 private:
  ElfFile() = default;

  absl::Span<const uint8_t> bytes_;
  uint16_t type_ = 0;
  uint16_t machine_ = 0;
  uint32_t flags_ = 0;
  uint8_t os_abi_ = 0;
  uint8_t abi_version_ = 0;
  std::vector<ElfSection> sections_;
};

struct CubinFunction {
  std::string name;          // as in the symbol table (mangled)
  bool is_kernel = false;    // st_other & kStoCudaEntry
  bool is_local = false;     // STB_LOCAL
  uint64_t size = 0;         // st_size (bytes of SASS)
  std::string section_name;  // e.g. ".text._Z7add_onePfi"; empty if none
};

struct CubinInfo {
  uint32_t sm_arch = 0;       // 90 for sm_90, from e_flags
  uint8_t abi_version = 0;    // EI_ABIVERSION (8 for CUDA 13 cubins)
  uint16_t elf_type = 0;      // ET_EXEC for a linked cubin, ET_REL for -rdc
  std::vector<CubinFunction> functions;  // every STT_FUNC, symbol-table order

  // Names of the functions that are kernels, symbol-table order.
  [[nodiscard]] std::vector<std::string> KernelNames() const;
};

// Reads a cubin: checks e_machine == EM_CUDA, decodes the SM from e_flags and
// lists the functions of the symbol table (SHN_XINDEX handled). Trailing
// bytes after the ELF (fatbin padding) are ignored.
[[nodiscard]] absl::StatusOr<CubinInfo> ReadCubin(absl::Span<const uint8_t> bytes);

// The SM encoded in a cubin's e_flags: bits 8..15 for EI_ABIVERSION >= 8
// (CUDA 11.8+; 0x6005a04 -> 90), bits 0..7 for older cubins.
[[nodiscard]] uint32_t CubinSmFromFlags(uint32_t e_flags, uint8_t abi_version);

// The size of the ELF that starts at `image` in live memory, from its headers
// only: the furthest end of the ELF header, the program and section header
// tables, every segment and every section with file contents. Reads nothing
// beyond that size. An error when the headers are inconsistent or the size
// exceeds kMaxImageBytes.
[[nodiscard]] absl::StatusOr<uint64_t> ElfSizeAt(const void* image);

// The same, for a buffer of known size: the ELF must end inside `bytes`.
[[nodiscard]] absl::StatusOr<uint64_t> ElfSize(absl::Span<const uint8_t> bytes);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_ELF_H_
