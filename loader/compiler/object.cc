#include "loader/compiler/object.h"

#include <elf.h>

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "probe/map_desc.h"
#include "probe/map_layout.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

constexpr uint32_t kMaxSections = 1u << 16;

uint64_t RoundUp8(uint64_t v) { return (v + 7) & ~uint64_t{7}; }

struct Section {
  std::string name;
  Elf64_Shdr hdr{};
  absl::Span<const uint8_t> bytes;  // empty for SHT_NOBITS
};

struct Symbol {
  std::string name;
  Elf64_Sym sym{};
};

class ElfReader {
 public:
  ElfReader(absl::Span<const uint8_t> bytes, std::string_view name) : bytes_(bytes), name_(name) {}

  absl::Status Error(std::string_view where, uint64_t offset, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": ", where, " at offset ", offset, ": ", what));
  }

  absl::StatusOr<BpfObject> Read();

 private:
  absl::Status ReadSections();
  absl::Status ReadSymbols();
  absl::Status ReadBtf(BpfObject& obj);
  absl::Status ReadBtfMaps(BpfObject& obj, uint16_t shndx);
  absl::Status ReadLegacyMaps(BpfObject& obj, uint16_t shndx);
  absl::Status ReadGlobalData(BpfObject& obj);
  absl::Status ReadPrograms(BpfObject& obj);
  absl::Status ReadRelocations(BpfObject& obj);
  const Symbol* FindSymbol(uint16_t shndx, std::string_view name) const {
    for (const Symbol& s : symbols_) {
      if (s.sym.st_shndx == shndx && s.name == name) return &s;
    }
    return nullptr;
  }
  absl::StatusOr<MapRef> ResolveReloc(const Section& target, const Elf64_Rel& rel,
                                      const Insn& insn, uint64_t rel_offset) const;

  absl::Span<const uint8_t> bytes_;
  std::string name_;
  Elf64_Ehdr ehdr_{};
  std::vector<Section> sections_;
  std::vector<Symbol> symbols_;
  std::optional<Btf> btf_;
  // Map lookup for relocations: (section index, symbol value) -> map index.
  std::map<std::pair<uint16_t, uint64_t>, uint32_t> map_by_symbol_;
  std::map<uint16_t, uint32_t> data_map_by_section_;
  // Programs by (section index): indices into obj.programs.
  std::map<uint16_t, std::vector<uint32_t>> programs_by_section_;
};

absl::StatusOr<std::string> CString(absl::Span<const uint8_t> table, uint64_t offset) {
  if (offset >= table.size()) return absl::InvalidArgumentError("string offset out of bounds");
  const auto* begin = reinterpret_cast<const char*>(table.data() + offset);
  const void* nul = std::memchr(begin, 0, table.size() - offset);
  if (nul == nullptr) return absl::InvalidArgumentError("string not NUL-terminated");
  return std::string(begin, static_cast<const char*>(nul));
}

absl::StatusOr<BpfObject> ElfReader::Read() {
  if (bytes_.size() < 4 || std::memcmp(bytes_.data(), ELFMAG, SELFMAG) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": not an ELF file (no ELF magic); expected an eBPF object from clang-19 "
               "-target bpf -O2 -g -c probe.bpf.c"));
  }
  if (bytes_.size() < sizeof(Elf64_Ehdr)) return Error("ELF header", 0, "truncated");
  std::memcpy(&ehdr_, bytes_.data(), sizeof(ehdr_));
  if (ehdr_.e_ident[EI_CLASS] != ELFCLASS64 || ehdr_.e_ident[EI_DATA] != ELFDATA2LSB) {
    return Error("ELF header", EI_CLASS, "not a 64-bit little-endian ELF file");
  }
  if (ehdr_.e_machine != EM_BPF) {
    return Error("ELF header", offsetof(Elf64_Ehdr, e_machine),
                 absl::StrCat("machine ", ehdr_.e_machine,
                              " is not eBPF (247): compile the probe with clang -target bpf"));
  }
  if (ehdr_.e_type != ET_REL) {
    return Error("ELF header", offsetof(Elf64_Ehdr, e_type),
                 "not a relocatable object (compile with -c)");
  }
  BpfObject obj;
  obj.name = name_;
  CUPROBE_RETURN_IF_ERROR(ReadSections());
  CUPROBE_RETURN_IF_ERROR(ReadSymbols());
  CUPROBE_RETURN_IF_ERROR(ReadBtf(obj));
  for (uint16_t i = 0; i < sections_.size(); ++i) {
    if (sections_[i].name == ".maps") CUPROBE_RETURN_IF_ERROR(ReadBtfMaps(obj, i));
    if (sections_[i].name == "maps") CUPROBE_RETURN_IF_ERROR(ReadLegacyMaps(obj, i));
  }
  CUPROBE_RETURN_IF_ERROR(ReadGlobalData(obj));
  CUPROBE_RETURN_IF_ERROR(ReadPrograms(obj));
  CUPROBE_RETURN_IF_ERROR(ReadRelocations(obj));
  // An object of host programs only reads as one with no program: the
  // compiler warns about each, and `cuprobe run` refuses a bundle without
  // programs.
  if (obj.programs.empty() && obj.skipped.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": no probe program: put each probe in a section such as "
               "SEC(\"cuprobe/entry/<kernel glob>\") and make it non-static"));
  }
  return obj;
}

absl::Status ElfReader::ReadSections() {
  if (ehdr_.e_shentsize != sizeof(Elf64_Shdr)) {
    return Error("ELF header", offsetof(Elf64_Ehdr, e_shentsize), "bad section header size");
  }
  if (ehdr_.e_shnum == 0 || ehdr_.e_shnum > kMaxSections) {
    return Error("ELF header", offsetof(Elf64_Ehdr, e_shnum), "bad section count");
  }
  const uint64_t table_end = ehdr_.e_shoff + uint64_t{ehdr_.e_shnum} * sizeof(Elf64_Shdr);
  if (ehdr_.e_shoff > bytes_.size() || table_end > bytes_.size()) {
    return Error("section header table", ehdr_.e_shoff, "out of bounds (truncated file?)");
  }
  sections_.resize(ehdr_.e_shnum);
  for (uint32_t i = 0; i < ehdr_.e_shnum; ++i) {
    Section& s = sections_[i];
    const uint64_t at = ehdr_.e_shoff + uint64_t{i} * sizeof(Elf64_Shdr);
    std::memcpy(&s.hdr, bytes_.data() + at, sizeof(Elf64_Shdr));
    if (s.hdr.sh_type != SHT_NOBITS && s.hdr.sh_type != SHT_NULL) {
      if (s.hdr.sh_offset > bytes_.size() || s.hdr.sh_size > bytes_.size() - s.hdr.sh_offset) {
        return Error(absl::StrCat("section ", i), at,
                     absl::StrCat("contents [", s.hdr.sh_offset, ", +", s.hdr.sh_size,
                                  ") lie outside the file (", bytes_.size(), " bytes)"));
      }
      s.bytes = bytes_.subspan(s.hdr.sh_offset, s.hdr.sh_size);
    }
  }
  if (ehdr_.e_shstrndx >= sections_.size()) {
    return Error("ELF header", offsetof(Elf64_Ehdr, e_shstrndx), "bad section name table index");
  }
  const absl::Span<const uint8_t> names = sections_[ehdr_.e_shstrndx].bytes;
  for (uint32_t i = 1; i < sections_.size(); ++i) {
    auto name = CString(names, sections_[i].hdr.sh_name);
    if (!name.ok()) {
      return Error(absl::StrCat("section ", i), ehdr_.e_shoff + uint64_t{i} * sizeof(Elf64_Shdr),
                   "name out of bounds");
    }
    sections_[i].name = *std::move(name);
  }
  return absl::OkStatus();
}

absl::Status ElfReader::ReadSymbols() {
  const Section* symtab = nullptr;
  for (const Section& s : sections_) {
    if (s.hdr.sh_type == SHT_SYMTAB) symtab = &s;
  }
  if (symtab == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": no symbol table (was the object stripped?)"));
  }
  if (symtab->hdr.sh_entsize != sizeof(Elf64_Sym) || symtab->bytes.size() % sizeof(Elf64_Sym)) {
    return Error(".symtab", symtab->hdr.sh_offset, "bad symbol entry size");
  }
  if (symtab->hdr.sh_link >= sections_.size()) {
    return Error(".symtab", symtab->hdr.sh_offset, "bad string table link");
  }
  const absl::Span<const uint8_t> strtab = sections_[symtab->hdr.sh_link].bytes;
  const size_t count = symtab->bytes.size() / sizeof(Elf64_Sym);
  symbols_.resize(count);
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(&symbols_[i].sym, symtab->bytes.data() + i * sizeof(Elf64_Sym), sizeof(Elf64_Sym));
    if (symbols_[i].sym.st_name != 0) {
      auto name = CString(strtab, symbols_[i].sym.st_name);
      if (!name.ok()) {
        return Error(".symtab", symtab->hdr.sh_offset + i * sizeof(Elf64_Sym),
                     "symbol name out of bounds");
      }
      symbols_[i].name = *std::move(name);
    }
  }
  return absl::OkStatus();
}

absl::Status ElfReader::ReadBtf(BpfObject& obj) {
  for (const Section& s : sections_) {
    if (s.name != ".BTF") continue;
    auto btf = Btf::Parse(s.bytes);
    if (!btf.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": ", btf.status().message()));
    }
    btf_ = *std::move(btf);
    obj.has_btf = true;
  }
  return absl::OkStatus();
}

// Reads `__uint(name, N)` (int (*name)[N]) of a BTF map definition.
absl::StatusOr<uint32_t> UintField(const Btf& btf, uint32_t type, std::string_view field) {
  const BtfType* ptr = btf.Type(btf.SkipModifiers(type));
  const BtfType* array = ptr != nullptr && ptr->kind == BtfKind::kPtr
                             ? btf.Type(btf.SkipModifiers(ptr->size_or_type))
                             : nullptr;
  if (array == nullptr || array->kind != BtfKind::kArray) {
    return absl::InvalidArgumentError(
        absl::StrCat("field '", field, "' is not __uint(", field, ", N)"));
  }
  return array->nelems;
}

// The fields of a BTF map definition as cuprobe's map types mean them.
// `value_from_type`: the value size came from __type(value, T) alone.
void NormalizeMapSpec(uint32_t raw_type, bool value_from_type, MapSpec& spec) {
  if (raw_type == CUPROBE_MAP_ALIAS_BPFTIME_GPU_RINGBUF) {
    // bpftime's record count and record type, for a ring of bytes without
    // keys; the type still names the records' fields.
    spec.max_entries = BpftimeRingBytes(spec.max_entries, spec.value_size);
    spec.key_size = 0;
    spec.key_type = TypeDescription{};
    spec.value_size = 0;
  } else if (spec.type == CUPROBE_MAP_RINGBUF && value_from_type) {
    // A ring's records have no fixed size (BPF's value_size is 0); its
    // __type(value, T) only names the fields that event printers decode.
    spec.value_size = 0;
  }
  if (spec.type == CUPROBE_MAP_HIST_LINEAR) {
    // probe.h packs min | step << 16 into the 32 bits __uint can hold.
    const uint64_t raw = spec.map_extra;
    spec.map_extra = (raw & 0xffff) | ((raw >> 16) << 32);
  }
}

absl::Status ElfReader::ReadBtfMaps(BpfObject& obj, uint16_t shndx) {
  if (!btf_) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": section .maps needs BTF to be read: compile the probe with -g"));
  }
  const uint32_t datasec = btf_->FindDatasec(".maps");
  if (datasec == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": .BTF has no DATASEC for .maps"));
  }
  for (const BtfMember& var_info : btf_->Type(datasec)->members) {
    const BtfType* var = btf_->Type(var_info.type);
    if (var == nullptr || var->kind != BtfKind::kVar) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": .maps entry is not a variable"));
    }
    const BtfType* def = btf_->Type(btf_->SkipModifiers(var->size_or_type));
    auto fail = [&](std::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, ": map '", var->name, "' (section .maps, offset ", var_info.offset, "): ", what));
    };
    if (def == nullptr || def->kind != BtfKind::kStruct) {
      return fail("not a struct { __uint(type, ...); ... } definition");
    }
    ObjectMap map;
    map.origin = MapOrigin::kBtfMaps;
    map.spec.name = var->name;
    uint32_t raw_type = 0;
    bool value_from_type = false, value_size_given = false;
    for (const BtfMember& m : def->members) {
      if (m.name == "type" || m.name == "max_entries" || m.name == "map_flags" ||
          m.name == "key_size" || m.name == "value_size" || m.name == "map_extra") {
        auto v = UintField(*btf_, m.type, m.name);
        if (!v.ok()) return fail(v.status().message());
        if (m.name == "type") raw_type = *v;
        if (m.name == "max_entries") map.spec.max_entries = *v;
        if (m.name == "map_flags") map.spec.flags = *v;
        if (m.name == "key_size") map.spec.key_size = *v;
        if (m.name == "value_size") {
          map.spec.value_size = *v;
          value_size_given = true;
        }
        if (m.name == "map_extra") map.spec.map_extra = *v;
      } else if (m.name == "key" || m.name == "value") {
        const BtfType* ptr = btf_->Type(btf_->SkipModifiers(m.type));
        if (ptr == nullptr || ptr->kind != BtfKind::kPtr) {
          return fail(absl::StrCat("field '", m.name, "' is not __type(", m.name, ", T)"));
        }
        auto size = btf_->SizeOf(ptr->size_or_type);
        if (!size.ok()) return fail(absl::StrCat(m.name, " type: ", size.status().message()));
        TypeDescription desc = btf_->Describe(ptr->size_or_type);
        if (m.name == "key") {
          map.spec.key_size = *size;
          map.spec.key_type = std::move(desc);
        } else {
          map.spec.value_size = *size;
          map.spec.value_type = std::move(desc);
          value_from_type = true;
        }
      } else if (m.name == "pinning") {
        // Accepted and ignored: maps live as long as the session.
      } else {
        return fail(absl::StrCat("unsupported field '", m.name, "'"));
      }
    }
    std::optional<uint32_t> type = ResolveMapType(raw_type);
    if (!type) return fail(absl::StrCat("map type ", raw_type, " is not supported on the GPU"));
    map.spec.type = *type;
    NormalizeMapSpec(raw_type, value_from_type && !value_size_given, map.spec);
    // clang leaves DATASEC offsets to the loader: the ELF symbol has the truth.
    const Symbol* sym = FindSymbol(shndx, var->name);
    if (sym == nullptr) return fail("no ELF symbol for the map");
    map_by_symbol_[{shndx, sym->sym.st_value}] = static_cast<uint32_t>(obj.maps.size());
    obj.maps.push_back(std::move(map));
  }
  return absl::OkStatus();
}

absl::Status ElfReader::ReadLegacyMaps(BpfObject& obj, uint16_t shndx) {
  const Section& s = sections_[shndx];
  for (const Symbol& sym : symbols_) {
    if (sym.sym.st_shndx != shndx || ELF64_ST_TYPE(sym.sym.st_info) == STT_SECTION) continue;
    const uint64_t off = sym.sym.st_value;
    if (off > s.bytes.size() || s.bytes.size() - off < 20) {
      return Error("maps", s.hdr.sh_offset + off,
                   absl::StrCat("map '", sym.name, "' is not a whole struct bpf_map_def"));
    }
    uint32_t f[5];
    std::memcpy(f, s.bytes.data() + off, sizeof(f));
    ObjectMap map;
    map.origin = MapOrigin::kLegacy;
    map.spec.name = sym.name;
    std::optional<uint32_t> type = ResolveMapType(f[0]);
    if (!type) {
      return Error("maps", s.hdr.sh_offset + off,
                   absl::StrCat("map '", sym.name, "': type ", f[0], " is not supported"));
    }
    map.spec.type = *type;
    map.spec.key_size = f[1];
    map.spec.value_size = f[2];
    map.spec.max_entries = f[3];
    map.spec.flags = f[4];
    map_by_symbol_[{shndx, off}] = static_cast<uint32_t>(obj.maps.size());
    obj.maps.push_back(std::move(map));
  }
  return absl::OkStatus();
}

absl::Status ElfReader::ReadGlobalData(BpfObject& obj) {
  for (uint16_t i = 1; i < sections_.size(); ++i) {
    const Section& s = sections_[i];
    if ((s.hdr.sh_flags & SHF_ALLOC) == 0 || (s.hdr.sh_flags & SHF_EXECINSTR) != 0) continue;
    MapOrigin origin;
    if (absl::StartsWith(s.name, ".rodata")) {
      origin = MapOrigin::kRodata;
    } else if (absl::StartsWith(s.name, ".data")) {
      origin = MapOrigin::kData;
    } else if (absl::StartsWith(s.name, ".bss")) {
      origin = MapOrigin::kBss;
    } else {
      continue;
    }
    if (s.hdr.sh_size == 0) continue;
    if (s.hdr.sh_size > (64u << 20)) {
      return Error(s.name, s.hdr.sh_offset, "global data larger than 64 MiB");
    }
    ObjectMap map;
    map.origin = origin;
    map.spec.name = s.name;
    map.spec.type = CUPROBE_MAP_ARRAY;
    map.spec.key_size = 4;
    map.spec.value_size = static_cast<uint32_t>(s.hdr.sh_size);
    map.spec.max_entries = 1;
    map.spec.key_type = TypeDescription{"u32", 4, {}};
    if (s.hdr.sh_type == SHT_NOBITS) {
      map.spec.initial_value.assign(s.hdr.sh_size, 0);
    } else {
      map.spec.initial_value.assign(s.bytes.begin(), s.bytes.end());
    }
    if (btf_) {
      if (uint32_t ds = btf_->FindDatasec(s.name); ds != 0) {
        map.spec.value_type = btf_->Describe(ds);
        // DATASEC offsets are the loader's job (clang writes 0): use symbols.
        for (TypeField& f : map.spec.value_type.fields) {
          if (const Symbol* sym = FindSymbol(i, f.name); sym != nullptr) {
            f.offset = static_cast<uint32_t>(sym->sym.st_value);
            if (f.size == 0) f.size = static_cast<uint32_t>(sym->sym.st_size);
          }
        }
      }
    }
    map.spec.value_type.name = s.name;
    map.spec.value_type.size = map.spec.value_size;
    data_map_by_section_[i] = static_cast<uint32_t>(obj.maps.size());
    obj.maps.push_back(std::move(map));
  }
  return absl::OkStatus();
}

absl::Status ElfReader::ReadPrograms(BpfObject& obj) {
  std::map<std::string, std::vector<LineInfo>> lines;
  if (btf_) {
    for (const Section& s : sections_) {
      if (s.name != ".BTF.ext") continue;
      auto parsed = btf_->ParseLineInfo(s.bytes);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(name_, ": ", parsed.status().message()));
      }
      lines = *std::move(parsed);
    }
  }
  for (uint16_t i = 1; i < sections_.size(); ++i) {
    const Section& s = sections_[i];
    if (s.hdr.sh_type != SHT_PROGBITS || (s.hdr.sh_flags & SHF_EXECINSTR) == 0) continue;
    if (s.bytes.size() % 8 != 0) {
      return Error(s.name, s.hdr.sh_offset,
                   absl::StrCat("code size ", s.bytes.size(), " is not a multiple of 8"));
    }
    const std::optional<std::string> not_attached = NotAttachedReason(s.name);
    for (const Symbol& sym : symbols_) {
      if (sym.sym.st_shndx != i || ELF64_ST_TYPE(sym.sym.st_info) != STT_FUNC) continue;
      if (not_attached) {
        // Not decoded, nor are its relocations read: a host program may use
        // what the GPU has not (externs, kernel helpers).
        obj.skipped.push_back({sym.name, s.name, *not_attached});
        continue;
      }
      if (s.name == ".text") {
        return absl::InvalidArgumentError(absl::StrCat(
            name_, ": function '", sym.name,
            "' is not inlined: probes cannot call functions; mark it static __always_inline"));
      }
      if (ELF64_ST_BIND(sym.sym.st_info) != STB_GLOBAL) {
        return absl::InvalidArgumentError(absl::StrCat(
            name_, ": function '", sym.name, "' in section ", s.name,
            " is static: only non-static functions are probes (mark helpers __always_inline)"));
      }
      const uint64_t start = sym.sym.st_value;
      const uint64_t size = sym.sym.st_size;
      if (start % 8 != 0 || size % 8 != 0 || size == 0 || start > s.bytes.size() ||
          size > s.bytes.size() - start) {
        return Error(s.name, s.hdr.sh_offset + start,
                     absl::StrCat("program '", sym.name, "' [", start, ", +", size,
                                  ") does not lie within its section"));
      }
      BpfProgram p;
      p.name = sym.name;
      p.section = s.name;
      p.section_offset = static_cast<uint32_t>(start);
      p.insns.reserve(size / 8);
      for (uint64_t o = start; o < start + size; o += 8) {
        p.insns.push_back(DecodeInsn(s.bytes.data() + o));
      }
      if (auto it = lines.find(s.name); it != lines.end()) {
        for (LineInfo li : it->second) {
          if (li.insn_offset < start || li.insn_offset >= start + size) continue;
          li.insn_offset -= static_cast<uint32_t>(start);
          p.lines.push_back(std::move(li));
        }
      }
      programs_by_section_[i].push_back(static_cast<uint32_t>(obj.programs.size()));
      obj.programs.push_back(std::move(p));
    }
  }
  std::sort(obj.programs.begin(), obj.programs.end(),
            [](const BpfProgram& a, const BpfProgram& b) {
              return a.section != b.section ? a.section < b.section
                                            : a.section_offset < b.section_offset;
            });
  // Re-index after sorting (relocations find programs by section and offset).
  programs_by_section_.clear();
  for (uint32_t p = 0; p < obj.programs.size(); ++p) {
    for (uint16_t i = 1; i < sections_.size(); ++i) {
      if (sections_[i].name == obj.programs[p].section &&
          (sections_[i].hdr.sh_flags & SHF_EXECINSTR) != 0) {
        programs_by_section_[i].push_back(p);
        break;
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<MapRef> ElfReader::ResolveReloc(const Section& target, const Elf64_Rel& rel,
                                               const Insn& insn, uint64_t rel_offset) const {
  const uint64_t sym_index = ELF64_R_SYM(rel.r_info);
  if (sym_index >= symbols_.size()) {
    return Error(absl::StrCat(".rel", target.name), rel_offset, "symbol index out of range");
  }
  const Symbol& sym = symbols_[sym_index];
  const uint16_t shndx = sym.sym.st_shndx;
  if (shndx == SHN_UNDEF) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": section ", target.name, " refers to extern symbol '", sym.name,
        "': externs (kconfig, ksyms) do not exist on the GPU"));
  }
  if (auto it = map_by_symbol_.find({shndx, sym.sym.st_value}); it != map_by_symbol_.end()) {
    return MapRef{it->second, false, 0};
  }
  if (auto it = data_map_by_section_.find(shndx); it != data_map_by_section_.end()) {
    // A section symbol carries the offset in the immediate; a variable's symbol
    // adds its own value.
    const uint64_t base = ELF64_ST_TYPE(sym.sym.st_info) == STT_SECTION ? 0 : sym.sym.st_value;
    const uint64_t offset = base + static_cast<uint32_t>(insn.imm);
    return MapRef{it->second, true, static_cast<uint32_t>(offset)};
  }
  const std::string sec = shndx < sections_.size() ? sections_[shndx].name : "?";
  return Error(absl::StrCat(".rel", target.name), rel_offset,
               absl::StrCat("reference to '", sym.name, "' in section ", sec,
                            ", which is neither a map nor global data"));
}

absl::Status ElfReader::ReadRelocations(BpfObject& obj) {
  for (const Section& rs : sections_) {
    if (rs.hdr.sh_type != SHT_REL) continue;
    if (rs.hdr.sh_info >= sections_.size()) {
      return Error(rs.name, rs.hdr.sh_offset, "relocation target section out of range");
    }
    const uint16_t target_index = static_cast<uint16_t>(rs.hdr.sh_info);
    auto progs = programs_by_section_.find(target_index);
    const Section& target = sections_[target_index];
    if (progs == programs_by_section_.end()) {
      if (target.name == ".text" && !rs.bytes.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name_, ": code in .text is not supported: mark functions "
                                "static __always_inline"));
      }
      continue;  // debug info, BTF, ...
    }
    if (rs.bytes.size() % sizeof(Elf64_Rel) != 0) {
      return Error(rs.name, rs.hdr.sh_offset, "size is not a multiple of the entry size");
    }
    for (size_t k = 0; k < rs.bytes.size() / sizeof(Elf64_Rel); ++k) {
      Elf64_Rel rel;
      std::memcpy(&rel, rs.bytes.data() + k * sizeof(Elf64_Rel), sizeof(rel));
      const uint64_t rel_offset = rs.hdr.sh_offset + k * sizeof(Elf64_Rel);
      const uint32_t type = ELF64_R_TYPE(rel.r_info);
      BpfProgram* prog = nullptr;
      for (uint32_t p : progs->second) {
        BpfProgram& c = obj.programs[p];
        if (rel.r_offset >= c.section_offset &&
            rel.r_offset < c.section_offset + 8 * uint64_t{c.insns.size()}) {
          prog = &c;
        }
      }
      if (prog == nullptr || rel.r_offset % 8 != 0) {
        return Error(rs.name, rel_offset,
                     absl::StrCat("relocation at ", target.name, "+", rel.r_offset,
                                  " is not on an instruction of a program"));
      }
      const uint32_t index = static_cast<uint32_t>((rel.r_offset - prog->section_offset) / 8);
      Insn& insn = prog->insns[index];
      if (type == R_BPF_64_32 || (insn.Class() == kClassJmp && insn.Op() == kJmpCall)) {
        return absl::InvalidArgumentError(absl::StrCat(
            name_, ": program '", prog->name, "' insn ", index,
            " calls another function: probes cannot call functions; mark it static "
            "__always_inline"));
      }
      if (type != R_BPF_64_64 || insn.code != kLdImm64 || index + 1 >= prog->insns.size()) {
        return Error(rs.name, rel_offset,
                     absl::StrCat("unsupported relocation type ", type, " on insn ", index,
                                  " of program '", prog->name, "'"));
      }
      CUPROBE_ASSIGN_OR_RETURN(MapRef ref, ResolveReloc(target, rel, insn, rel_offset));
      if (ref.value && ref.offset >= obj.maps[ref.map].spec.value_size) {
        return Error(rs.name, rel_offset,
                     absl::StrCat("reference past the end of ", obj.maps[ref.map].spec.name));
      }
      insn.src = ref.value ? kPseudoMapValue : kPseudoMapFd;
      insn.imm = static_cast<int32_t>(ref.map);
      prog->insns[index + 1].imm = static_cast<int32_t>(ref.offset);
      prog->map_refs[index] = ref;
    }
  }
  return absl::OkStatus();
}

}  // namespace

const LineInfo* BpfObject::LineOf(const BpfProgram& program, uint32_t insn) const {
  const LineInfo* best = nullptr;
  for (const LineInfo& li : program.lines) {
    if (li.insn_offset <= insn * 8u) best = &li;
  }
  return best;
}

std::optional<uint32_t> ResolveMapType(uint32_t type) {
  switch (type) {
    case CUPROBE_MAP_HASH:
    case CUPROBE_MAP_ARRAY:
    case CUPROBE_MAP_RINGBUF:
    case CUPROBE_MAP_PERTHREAD:
    case CUPROBE_MAP_PERWARP:
    case CUPROBE_MAP_PERSM:
    case CUPROBE_MAP_HIST_LOG2:
    case CUPROBE_MAP_HIST_LINEAR:
      return type;
    case 5: return CUPROBE_MAP_HASH;   // PERCPU_HASH
    case 6: return CUPROBE_MAP_PERSM;  // PERCPU_ARRAY
    case CUPROBE_MAP_ALIAS_BPFTIME_GPU_HASH: return CUPROBE_MAP_HASH;
    case CUPROBE_MAP_ALIAS_BPFTIME_PERGPUTD_ARRAY: return CUPROBE_MAP_PERTHREAD;
    case CUPROBE_MAP_ALIAS_BPFTIME_GPU_ARRAY: return CUPROBE_MAP_ARRAY;
    case CUPROBE_MAP_ALIAS_BPFTIME_KERNEL_SHARED_ARRAY: return CUPROBE_MAP_ARRAY;
    case CUPROBE_MAP_ALIAS_BPFTIME_PERGPUTD_ARRAY_HOST: return CUPROBE_MAP_PERTHREAD;
    case CUPROBE_MAP_ALIAS_BPFTIME_GPU_ARRAY_HOST: return CUPROBE_MAP_ARRAY;
    case CUPROBE_MAP_ALIAS_BPFTIME_GPU_RINGBUF: return CUPROBE_MAP_RINGBUF;
    default: return std::nullopt;
  }
}

uint32_t BpftimeRingBytes(uint32_t max_entries, uint32_t value_size) {
  constexpr uint64_t kMinBytes = uint64_t{1} << 20;
  const uint64_t want =
      uint64_t{max_entries} * (RoundUp8(value_size) + CUPROBE_RING_HEADER_SIZE);
  uint64_t bytes = kMinBytes;
  while (bytes < want && bytes < kMaxRingBytes) bytes <<= 1;
  return static_cast<uint32_t>(bytes);
}

std::optional<std::string> NotAttachedReason(std::string_view section) {
  if (section == "kprobe/__directly_run") {
    return std::string(
        "bpftime runs it as a kernel of its own (direct run); cuprobe only attaches probes to "
        "the application's kernels");
  }
  // libbpf's host (CPU) program types whose programs bpftime's examples pair
  // with GPU probes.
  static constexpr std::string_view kHostTypes[] = {
      "uprobe",      "uretprobe",      "uprobe.s",   "uretprobe.s", "uprobe.multi",
      "uretprobe.multi", "usdt",       "ksyscall",   "kretsyscall", "tracepoint",
      "tp",          "raw_tracepoint", "raw_tp",     "tp_btf",      "fentry",
      "fexit",       "fmod_ret",       "fentry.s",   "fexit.s",     "kprobe.multi",
      "kretprobe.multi", "perf_event", "syscall",
  };
  const std::string_view type = section.substr(0, section.find('/'));
  for (std::string_view host : kHostTypes) {
    if (type == host) {
      return absl::StrCat("a host program (", type,
                          ") runs on the CPU; cuprobe runs GPU probes only");
    }
  }
  return std::nullopt;
}

absl::StatusOr<BpfObject> ReadBpfObject(absl::Span<const uint8_t> bytes, std::string_view name) {
  ElfReader reader(bytes, name);
  return reader.Read();
}

}  // namespace cuprobe
