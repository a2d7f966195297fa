// File: loader/compiler/btf.h
//
// A reader of BTF (.BTF) and of the line information of .BTF.ext, as clang
// -target bpf -g writes them. The object reader uses it to read BTF-defined
// maps, to describe map keys and values with field names, and to name the
// source line of an instruction in verifier messages. Every offset and size
// is checked; bad bytes give an error that names the section and the offset.
//
//   CUPROBE_ASSIGN_OR_RETURN(Btf btf, Btf::Parse(btf_section_bytes));
//   const BtfType* t = btf.Type(id);
//   TypeDescription d = btf.Describe(id);
#ifndef CUPROBE_LOADER_COMPILER_BTF_H_
#define CUPROBE_LOADER_COMPILER_BTF_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "probe/bundle.h"

namespace cuprobe {

enum class BtfKind : uint8_t {
  kUnknown = 0, kInt = 1, kPtr = 2, kArray = 3, kStruct = 4, kUnion = 5, kEnum = 6, kFwd = 7,
  kTypedef = 8, kVolatile = 9, kConst = 10, kRestrict = 11, kFunc = 12, kFuncProto = 13,
  kVar = 14, kDatasec = 15, kFloat = 16, kDeclTag = 17, kTypeTag = 18, kEnum64 = 19,
};

struct BtfMember {
  std::string name;
  uint32_t type = 0;
  uint32_t offset = 0;  // struct/union: bit offset; datasec: byte offset
  uint32_t size = 0;    // datasec only: bytes
};

struct BtfType {
  BtfKind kind = BtfKind::kUnknown;
  std::string name;
  uint32_t size_or_type = 0;  // size (int, struct, union, enum, datasec) or referred type
  bool kind_flag = false;
  // Array.
  uint32_t elem_type = 0;
  uint32_t nelems = 0;
  // Struct / union / datasec / func_proto members, enum values (name only).
  std::vector<BtfMember> members;
};

struct LineInfo {
  uint32_t insn_offset = 0;  // bytes from the start of the section
  std::string file;
  std::string line_text;
  uint32_t line = 0;
  uint32_t column = 0;
};

class Btf {
 public:
  // Parses the bytes of a .BTF section.
  [[nodiscard]] static absl::StatusOr<Btf> Parse(absl::Span<const uint8_t> bytes);

  // nullptr for id 0 (void) or an id out of range.
  [[nodiscard]] const BtfType* Type(uint32_t id) const;
  // Skips typedef / const / volatile / restrict / type_tag (bounded depth).
  [[nodiscard]] uint32_t SkipModifiers(uint32_t id) const;
  // Size in bytes of a type, or an error for void / functions / cycles.
  [[nodiscard]] absl::StatusOr<uint32_t> SizeOf(uint32_t id) const;
  // "u32", "struct event", "char[16]", "u64 *".
  [[nodiscard]] std::string TypeName(uint32_t id) const;
  // Name, size and (for structs, unions and datasecs) fields.
  [[nodiscard]] TypeDescription Describe(uint32_t id) const;
  // The DATASEC of this name, or 0.
  [[nodiscard]] uint32_t FindDatasec(std::string_view name) const;
  [[nodiscard]] absl::StatusOr<std::string> String(uint32_t offset) const;

  // Parses .BTF.ext line info: section name -> records sorted by insn_offset.
  [[nodiscard]] absl::StatusOr<std::map<std::string, std::vector<LineInfo>>> ParseLineInfo(
      absl::Span<const uint8_t> btf_ext) const;

 private:
  std::vector<BtfType> types_;  // index = id; types_[0] is void
  std::string strings_;
};

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_COMPILER_BTF_H_
