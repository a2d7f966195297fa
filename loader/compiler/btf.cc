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

// Where the type and string sections lie: offsets from the end of the
// header (hdr_len), checked against the section's bytes.
struct BtfLayout {
  uint32_t hdr_len;
  uint32_t type_off;
  uint32_t type_len;
  uint32_t str_off;
  uint32_t str_len;
};

absl::StatusOr<BtfLayout> ParseHeader(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < 24) return Corrupt(".BTF", 0, "header truncated");
  if (Le16(bytes.data()) != kBtfMagic) return Corrupt(".BTF", 0, "bad magic (not BTF)");
  if (bytes[2] != 1) return Corrupt(".BTF", 2, absl::StrCat("unsupported version ", bytes[2]));
  const BtfLayout l{Le32(bytes.data() + 4), Le32(bytes.data() + 8), Le32(bytes.data() + 12),
                    Le32(bytes.data() + 16), Le32(bytes.data() + 20)};
  if (l.hdr_len < 24 || l.hdr_len > bytes.size()) return Corrupt(".BTF", 4, "bad header length");
  const uint64_t body = bytes.size() - l.hdr_len;
  if (uint64_t{l.type_off} + l.type_len > body) {
    return Corrupt(".BTF", 8, "type section out of bounds");
  }
  if (uint64_t{l.str_off} + l.str_len > body) {
    return Corrupt(".BTF", 16, "string section out of bounds");
  }
  if (l.str_len == 0 || bytes[l.hdr_len + l.str_off + l.str_len - 1] != 0) {
    return Corrupt(".BTF", l.hdr_len + l.str_off, "string section is not NUL-terminated");
  }
  return l;
}

// What follows a type record's 12 common bytes: `extra` bytes of its own,
// then vlen members of `member_size` bytes each.
struct RecordTail {
  uint64_t extra = 0;
  uint32_t member_size = 0;
};

RecordTail TailOf(BtfKind kind) {
  switch (kind) {
    case BtfKind::kInt: return {4, 0};
    case BtfKind::kArray: return {12, 0};
    case BtfKind::kStruct:
    case BtfKind::kUnion: return {0, 12};
    case BtfKind::kEnum: return {0, 8};
    case BtfKind::kFuncProto: return {0, 8};
    case BtfKind::kVar: return {4, 0};
    case BtfKind::kDatasec: return {0, 12};
    case BtfKind::kDeclTag: return {4, 0};
    case BtfKind::kEnum64: return {0, 12};
    default: return {};
  }
}

// The `vlen` members at `p` of a type record (at `record_start`) into `t`.
absl::Status ParseMembers(const Btf& btf, const uint8_t* p, uint32_t vlen, uint32_t member_size,
                          uint64_t record_start, BtfType& t) {
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
  return absl::OkStatus();
}

// The type record at *p (before `end`) into `t`; *p moves past it. The
// names it refers to are in `btf`'s strings, which are read first.
absl::Status ParseType(const Btf& btf, absl::Span<const uint8_t> bytes, const uint8_t** p,
                       const uint8_t* end, BtfType& t) {
  auto here = [&] { return static_cast<uint64_t>(*p - bytes.data()); };
  if (end - *p < 12) return Corrupt(".BTF", here(), "type record truncated");
  const uint32_t name_off = Le32(*p);
  const uint32_t info = Le32(*p + 4);
  t.size_or_type = Le32(*p + 8);
  const uint32_t vlen = info & 0xffff;
  const uint32_t kind = (info >> 24) & 0x1f;
  t.kind_flag = (info >> 31) != 0;
  if (kind == 0 || kind > 19) return Corrupt(".BTF", here(), absl::StrCat("unknown kind ", kind));
  t.kind = static_cast<BtfKind>(kind);
  auto name = btf.String(name_off);
  if (!name.ok()) return Corrupt(".BTF", here(), "type name offset out of bounds");
  t.name = *std::move(name);
  const uint64_t record_start = here();
  *p += 12;
  const RecordTail tail = TailOf(t.kind);
  const uint64_t extra = tail.extra + uint64_t{tail.member_size} * vlen;
  if (static_cast<uint64_t>(end - *p) < extra) {
    return Corrupt(".BTF", record_start, "type record truncated");
  }
  if (t.kind == BtfKind::kArray) {
    t.elem_type = Le32(*p);
    t.nelems = Le32(*p + 8);
  }
  if (tail.member_size != 0) {
    CUPROBE_RETURN_IF_ERROR(ParseMembers(btf, *p, vlen, tail.member_size, record_start, t));
  }
  *p += extra;
  return absl::OkStatus();
}

// Every type id that a type refers to must exist.
absl::Status CheckReferences(const std::vector<BtfType>& types) {
  const uint32_t count = static_cast<uint32_t>(types.size());
  for (uint32_t id = 1; id < count; ++id) {
    const BtfType& t = types[id];
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
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Btf> Btf::Parse(absl::Span<const uint8_t> bytes) {
  CUPROBE_ASSIGN_OR_RETURN(const BtfLayout l, ParseHeader(bytes));
  Btf btf;
  btf.strings_.assign(reinterpret_cast<const char*>(bytes.data() + l.hdr_len + l.str_off),
                      l.str_len);
  btf.types_.emplace_back();  // id 0: void

  const uint8_t* p = bytes.data() + l.hdr_len + l.type_off;
  const uint8_t* end = p + l.type_len;
  while (p < end) {
    if (btf.types_.size() > kMaxTypes) {
      return Corrupt(".BTF", static_cast<uint64_t>(p - bytes.data()), "too many types");
    }
    BtfType t;
    CUPROBE_RETURN_IF_ERROR(ParseType(btf, bytes, &p, end, t));
    btf.types_.push_back(std::move(t));
  }
  CUPROBE_RETURN_IF_ERROR(CheckReferences(btf.types_));
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
