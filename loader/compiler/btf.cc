#include "loader/compiler/btf.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

constexpr uint16_t kBtfMagic = 0xeb9f;
// Far more types than clang emits for any probe; bounds memory on bad input.
constexpr uint32_t kMaxTypes = 1u << 20;
constexpr int kMaxDepth = 32;

uint32_t Le32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint16_t Le16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

absl::Status Corrupt(std::string_view section, uint64_t offset, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(section, " at offset ", offset, ": ", what,
                   " (the object is corrupt; recompile it with clang -target bpf -g)"));
}

}  // namespace

absl::StatusOr<Btf> Btf::Parse(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < 24) return Corrupt(".BTF", 0, "header truncated");
  if (Le16(bytes.data()) != kBtfMagic) return Corrupt(".BTF", 0, "bad magic (not BTF)");
  if (bytes[2] != 1) return Corrupt(".BTF", 2, absl::StrCat("unsupported version ", bytes[2]));
  const uint32_t hdr_len = Le32(bytes.data() + 4);
  const uint32_t type_off = Le32(bytes.data() + 8);
  const uint32_t type_len = Le32(bytes.data() + 12);
  const uint32_t str_off = Le32(bytes.data() + 16);
  const uint32_t str_len = Le32(bytes.data() + 20);
  if (hdr_len < 24 || hdr_len > bytes.size()) return Corrupt(".BTF", 4, "bad header length");
  const uint64_t body = bytes.size() - hdr_len;
  if (uint64_t{type_off} + type_len > body) return Corrupt(".BTF", 8, "type section out of bounds");
  if (uint64_t{str_off} + str_len > body) return Corrupt(".BTF", 16, "string section out of bounds");
  if (str_len == 0 || bytes[hdr_len + str_off + str_len - 1] != 0) {
    return Corrupt(".BTF", hdr_len + str_off, "string section is not NUL-terminated");
  }
  Btf btf;
  btf.strings_.assign(reinterpret_cast<const char*>(bytes.data() + hdr_len + str_off), str_len);
  btf.types_.emplace_back();  // id 0: void

  const uint8_t* p = bytes.data() + hdr_len + type_off;
  const uint8_t* end = p + type_len;
  auto here = [&] { return static_cast<uint64_t>(p - bytes.data()); };
  while (p < end) {
    if (btf.types_.size() > kMaxTypes) return Corrupt(".BTF", here(), "too many types");
    if (end - p < 12) return Corrupt(".BTF", here(), "type record truncated");
    BtfType t;
    const uint32_t name_off = Le32(p);
    const uint32_t info = Le32(p + 4);
    t.size_or_type = Le32(p + 8);
    const uint32_t vlen = info & 0xffff;
    const uint32_t kind = (info >> 24) & 0x1f;
    t.kind_flag = (info >> 31) != 0;
    if (kind == 0 || kind > 19) return Corrupt(".BTF", here(), absl::StrCat("unknown kind ", kind));
    t.kind = static_cast<BtfKind>(kind);
    auto name = btf.String(name_off);
    if (!name.ok()) return Corrupt(".BTF", here(), "type name offset out of bounds");
    t.name = *std::move(name);
    const uint64_t record_start = here();
    p += 12;
    uint64_t extra = 0;
    uint32_t member_size = 0;
    switch (t.kind) {
      case BtfKind::kInt: extra = 4; break;
      case BtfKind::kArray: extra = 12; break;
      case BtfKind::kStruct:
      case BtfKind::kUnion: member_size = 12; break;
      case BtfKind::kEnum: member_size = 8; break;
      case BtfKind::kFuncProto: member_size = 8; break;
      case BtfKind::kVar: extra = 4; break;
      case BtfKind::kDatasec: member_size = 12; break;
      case BtfKind::kDeclTag: extra = 4; break;
      case BtfKind::kEnum64: member_size = 12; break;
      default: break;
    }
    extra += uint64_t{member_size} * vlen;
    if (static_cast<uint64_t>(end - p) < extra) {
      return Corrupt(".BTF", record_start, "type record truncated");
    }
    if (t.kind == BtfKind::kArray) {
      t.elem_type = Le32(p);
      t.nelems = Le32(p + 8);
    }
    if (member_size != 0) {
      t.members.reserve(vlen);
      for (uint32_t i = 0; i < vlen; ++i) {
        const uint8_t* m = p + uint64_t{i} * member_size;
        BtfMember member;
        if (t.kind == BtfKind::kDatasec) {
          member.type = Le32(m);
          member.offset = Le32(m + 4);
          member.size = Le32(m + 8);
        } else {
          auto mname = btf.String(Le32(m));
          if (!mname.ok()) return Corrupt(".BTF", record_start, "member name out of bounds");
          member.name = *std::move(mname);
          if (t.kind == BtfKind::kStruct || t.kind == BtfKind::kUnion) {
            member.type = Le32(m + 4);
            member.offset = Le32(m + 8);
          } else if (t.kind == BtfKind::kFuncProto) {
            member.type = Le32(m + 4);
          }
        }
        t.members.push_back(std::move(member));
      }
    }
    p += extra;
    btf.types_.push_back(std::move(t));
  }
  // Referenced ids must exist.
  const uint32_t count = static_cast<uint32_t>(btf.types_.size());
  for (uint32_t id = 1; id < count; ++id) {
    const BtfType& t = btf.types_[id];
    auto check = [&](uint32_t ref) -> absl::Status {
      if (ref >= count) {
        return Corrupt(".BTF", 0, absl::StrCat("type ", id, " refers to missing type ", ref));
      }
      return absl::OkStatus();
    };
    switch (t.kind) {
      case BtfKind::kPtr: case BtfKind::kTypedef: case BtfKind::kVolatile:
      case BtfKind::kConst: case BtfKind::kRestrict: case BtfKind::kFunc:
      case BtfKind::kVar: case BtfKind::kTypeTag: case BtfKind::kDeclTag:
        CUPROBE_RETURN_IF_ERROR(check(t.size_or_type));
        break;
      case BtfKind::kArray: CUPROBE_RETURN_IF_ERROR(check(t.elem_type)); break;
      case BtfKind::kStruct: case BtfKind::kUnion: case BtfKind::kDatasec:
        for (const BtfMember& m : t.members) CUPROBE_RETURN_IF_ERROR(check(m.type));
        break;
      default: break;
    }
  }
  return btf;
}

absl::StatusOr<std::string> Btf::String(uint32_t offset) const {
  if (offset >= strings_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("BTF string offset ", offset, " out of bounds"));
  }
  return std::string(strings_.c_str() + offset);
}

const BtfType* Btf::Type(uint32_t id) const {
  if (id == 0 || id >= types_.size()) return nullptr;
  return &types_[id];
}

uint32_t Btf::SkipModifiers(uint32_t id) const {
  for (int depth = 0; depth < kMaxDepth; ++depth) {
    const BtfType* t = Type(id);
    if (t == nullptr) return id;
    switch (t->kind) {
      case BtfKind::kTypedef: case BtfKind::kVolatile: case BtfKind::kConst:
      case BtfKind::kRestrict: case BtfKind::kTypeTag:
        id = t->size_or_type;
        break;
      default:
        return id;
    }
  }
  return id;
}

absl::StatusOr<uint32_t> Btf::SizeOf(uint32_t id) const {
  uint64_t multiplier = 1;
  for (int depth = 0; depth < kMaxDepth; ++depth) {
    const BtfType* t = Type(id);
    if (t == nullptr) return absl::InvalidArgumentError("BTF: size of void");
    switch (t->kind) {
      case BtfKind::kInt: case BtfKind::kStruct: case BtfKind::kUnion: case BtfKind::kEnum:
      case BtfKind::kEnum64: case BtfKind::kDatasec: case BtfKind::kFloat: {
        const uint64_t size = multiplier * t->size_or_type;
        if (size > UINT32_MAX) return absl::InvalidArgumentError("BTF: type too large");
        return static_cast<uint32_t>(size);
      }
      case BtfKind::kPtr: return static_cast<uint32_t>(8 * multiplier);
      case BtfKind::kArray:
        multiplier *= t->nelems;
        if (multiplier > UINT32_MAX) return absl::InvalidArgumentError("BTF: array too large");
        id = t->elem_type;
        break;
      case BtfKind::kTypedef: case BtfKind::kVolatile: case BtfKind::kConst:
      case BtfKind::kRestrict: case BtfKind::kTypeTag: case BtfKind::kVar:
        id = t->size_or_type;
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat("BTF: type ", id, " has no size"));
    }
  }
  return absl::InvalidArgumentError("BTF: type chain too deep (a cycle?)");
}

std::string Btf::TypeName(uint32_t id) const {
  std::string suffix;
  for (int depth = 0; depth < kMaxDepth; ++depth) {
    const BtfType* t = Type(id);
    if (t == nullptr) return "void" + suffix;
    switch (t->kind) {
      case BtfKind::kInt: case BtfKind::kFloat: case BtfKind::kTypedef:
        return (t->name.empty() ? "?" : t->name) + suffix;
      case BtfKind::kStruct: return "struct " + t->name + suffix;
      case BtfKind::kUnion: return "union " + t->name + suffix;
      case BtfKind::kEnum: case BtfKind::kEnum64: return "enum " + t->name + suffix;
      case BtfKind::kFwd: return (t->kind_flag ? "union " : "struct ") + t->name + suffix;
      case BtfKind::kPtr: suffix = " *" + suffix; id = t->size_or_type; break;
      case BtfKind::kArray:
        suffix = absl::StrCat(suffix, "[", t->nelems, "]");
        id = t->elem_type;
        break;
      case BtfKind::kVolatile: case BtfKind::kConst: case BtfKind::kRestrict:
      case BtfKind::kTypeTag: case BtfKind::kVar:
        id = t->size_or_type;
        break;
      default:
        return (t->name.empty() ? "?" : t->name) + suffix;
    }
  }
  return "?";
}

TypeDescription Btf::Describe(uint32_t id) const {
  TypeDescription d;
  d.name = TypeName(id);
  d.size = SizeOf(id).value_or(0);
  const BtfType* t = Type(SkipModifiers(id));
  if (t == nullptr) return d;
  if (t->kind == BtfKind::kStruct || t->kind == BtfKind::kUnion) {
    for (const BtfMember& m : t->members) {
      TypeField f;
      f.name = m.name;
      f.type = TypeName(m.type);
      // kind_flag: the offset holds the bitfield size in bits 24..31.
      f.offset = (t->kind_flag ? (m.offset & 0xffffff) : m.offset) / 8;
      f.size = SizeOf(m.type).value_or(0);
      d.fields.push_back(std::move(f));
    }
  } else if (t->kind == BtfKind::kDatasec) {
    for (const BtfMember& m : t->members) {
      const BtfType* var = Type(m.type);
      TypeField f;
      f.name = var != nullptr ? var->name : "?";
      f.type = var != nullptr ? TypeName(var->size_or_type) : "?";
      f.offset = m.offset;
      f.size = m.size;
      d.fields.push_back(std::move(f));
    }
  }
  return d;
}

uint32_t Btf::FindDatasec(std::string_view name) const {
  for (uint32_t id = 1; id < types_.size(); ++id) {
    if (types_[id].kind == BtfKind::kDatasec && types_[id].name == name) return id;
  }
  return 0;
}

absl::StatusOr<std::map<std::string, std::vector<LineInfo>>> Btf::ParseLineInfo(
    absl::Span<const uint8_t> ext) const {
  std::map<std::string, std::vector<LineInfo>> out;
  if (ext.size() < 24) return Corrupt(".BTF.ext", 0, "header truncated");
  if (Le16(ext.data()) != kBtfMagic) return Corrupt(".BTF.ext", 0, "bad magic");
  const uint32_t hdr_len = Le32(ext.data() + 4);
  if (hdr_len < 24 || hdr_len > ext.size()) return Corrupt(".BTF.ext", 4, "bad header length");
  const uint32_t line_off = Le32(ext.data() + 16);
  const uint32_t line_len = Le32(ext.data() + 20);
  const uint64_t start = uint64_t{hdr_len} + line_off;
  if (start + line_len > ext.size()) return Corrupt(".BTF.ext", 16, "line info out of bounds");
  if (line_len == 0) return out;
  if (line_len < 4) return Corrupt(".BTF.ext", start, "line info truncated");
  const uint8_t* p = ext.data() + start;
  const uint8_t* end = p + line_len;
  const uint32_t rec_size = Le32(p);
  if (rec_size < 16) return Corrupt(".BTF.ext", start, "line info record size below 16");
  p += 4;
  while (p < end) {
    const uint64_t at = static_cast<uint64_t>(p - ext.data());
    if (end - p < 8) return Corrupt(".BTF.ext", at, "line info block truncated");
    auto section = String(Le32(p));
    if (!section.ok()) return Corrupt(".BTF.ext", at, "section name out of bounds");
    const uint32_t num = Le32(p + 4);
    p += 8;
    if (static_cast<uint64_t>(end - p) < uint64_t{num} * rec_size) {
      return Corrupt(".BTF.ext", at, "line info block truncated");
    }
    std::vector<LineInfo>& lines = out[*section];
    for (uint32_t i = 0; i < num; ++i, p += rec_size) {
      LineInfo li;
      li.insn_offset = Le32(p);
      auto file = String(Le32(p + 4));
      auto text = String(Le32(p + 8));
      if (!file.ok() || !text.ok()) return Corrupt(".BTF.ext", at, "line info string out of bounds");
      li.file = *std::move(file);
      li.line_text = *std::move(text);
      const uint32_t line_col = Le32(p + 12);
      li.line = line_col >> 10;
      li.column = line_col & 0x3ff;
      lines.push_back(std::move(li));
    }
    std::stable_sort(lines.begin(), lines.end(), [](const LineInfo& a, const LineInfo& b) {
      return a.insn_offset < b.insn_offset;
    });
  }
  return out;
}

}  // namespace cuprobe
