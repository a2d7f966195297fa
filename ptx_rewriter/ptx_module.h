// File: ptx_rewriter/ptx_module.h
//
// The in-memory model of a PTX module: what ParsePtx() (ptx_parser.h) builds
// and PrintPtx() writes back. It is statement-level and zero-copy: every
// statement keeps its verbatim text as a view into the parsed source (or into
// strings the module owns, for statements a pass added), plus the few parsed
// fields the passes need: an instruction's guard, opcode and operand text, a
// declaration's state space, a function's parameters. Operands are split on
// demand (SplitOperands), never stored as a tree.
//
//   CUPROBE_ASSIGN_OR_RETURN(Module m, ParsePtx(text, "kernels.ptx"));
//   for (Function& f : m.functions)
//     if (f.is_kernel) for (const Statement& s : f.body)
//       if (s.IsInstruction() && s.Op() == "ret") ...
//   std::string out = PrintPtx(m);
//
// A Module holds views into the text it was parsed from: the text must
// outlive it (ParsePtxOwned keeps its own copy). Modules move but never copy.
#ifndef CUPROBE_PTX_REWRITER_PTX_MODULE_H_
#define CUPROBE_PTX_REWRITER_PTX_MODULE_H_

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cuprobe {

enum class StatementKind : uint8_t {
  kDirective,    // .version .target .address_size .file .section .pragma .loc .alias
  kDeclaration,  // .reg .local .shared .param .global .const (variables, registers)
  kLabel,        // `$L__BB0_2:`
  kInstruction,  // [@[!]guard] opcode operands ;
  kBlockOpen,    // `{` inside a function body
  kBlockClose,   // `}`
  kPrototype,    // `prototype_0 : .callprototype (...) _ (...);`
};

struct Statement {
  StatementKind kind = StatementKind::kDirective;
  bool guard_negated = false;  // `@!%p1`
  uint32_t line = 0;           // first source line; 0 for statements a pass added
  std::string_view text;       // verbatim, from the first to the last token
  // kInstruction: guard register without `@`/`!`, or empty.
  std::string_view guard;
  // kInstruction: the opcode with modifiers (`ld.global.v4.f32`);
  // kDirective / kDeclaration: the first directive (`.reg`, `.loc`, `.global`
  // after any linkage directive).
  std::string_view opcode;
  // kInstruction: the operand text between opcode and `;` (trimmed);
  // kLabel / kPrototype: the label name;
  // module-level kDeclaration: the declared symbol's name.
  std::string_view operands;
  // Module-level kDeclaration: the linkage directive (`.extern`, `.visible`,
  // `.weak`, `.common`) or empty.
  std::string_view linkage;

  [[nodiscard]] bool IsInstruction() const { return kind == StatementKind::kInstruction; }
  // The base opcode, before the first modifier: "ld" for "ld.global.f32".
  [[nodiscard]] std::string_view Op() const;
  // True when the opcode carries modifier `m` (without the dot), e.g.
  // HasModifier("global") for `ld.global.f32`; `shared::cta` matches "shared".
  [[nodiscard]] bool HasModifier(std::string_view m) const;
};

// A parameter of an .entry or .func (or a return parameter of a .func).
struct Param {
  std::string_view name;
  std::string_view space;  // ".param" (or ".reg" for register parameters)
  std::string_view type;   // ".u64", ".b8", ...
  uint32_t align = 0;      // .align N, 0 when not given
  uint32_t array_count = 0;  // N of `name[N]`, 0 for a scalar
  uint32_t size = 0;       // bytes: type size, times array_count for arrays
};

enum class Linkage : uint8_t { kNone, kVisible, kExtern, kWeak, kCommon };

struct Function {
  bool is_kernel = false;  // .entry (else .func)
  Linkage linkage = Linkage::kNone;
  bool has_body = false;   // else a declaration ending in `;`
  uint32_t line = 0;
  std::string_view name;
  // Verbatim from the first token (linkage or .entry/.func) up to the body's
  // `{` or the declaration's `;` (exclusive): parameters, .maxntid,
  // .reqntid, .maxnreg, .noreturn ... all stay exactly as written.
  std::string_view header;
  std::vector<Param> params;
  std::vector<Param> returns;
  // The statements between the outer braces (nested blocks included as
  // kBlockOpen / kBlockClose statements).
  std::vector<Statement> body;
};

// A module-level item: a statement, or the function functions[index].
struct ModuleItem {
  bool is_function = false;
  size_t function_index = 0;
  Statement statement;
};

struct PtxVersion {
  uint32_t major = 0;
  uint32_t minor = 0;
  friend bool operator<(PtxVersion a, PtxVersion b) {
    return a.major != b.major ? a.major < b.major : a.minor < b.minor;
  }
  friend bool operator==(PtxVersion a, PtxVersion b) {
    return a.major == b.major && a.minor == b.minor;
  }
};

class Module {
 public:
  Module() = default;
  Module(Module&&) = default;
  Module& operator=(Module&&) = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  std::string name;  // for diagnostics ("kernels.ptx", "<bundle>")
  std::vector<ModuleItem> items;
  std::vector<Function> functions;
  PtxVersion version;       // of .version
  std::string_view target;  // the .target operands as written: "sm_90" or "sm_90a, debug"
  uint32_t address_size = 64;

  // Keeps `text` alive as long as the module and returns a view of it. The
  // view stays valid when the module moves (a deque never relocates).
  std::string_view Own(std::string text);

  [[nodiscard]] Function* FindFunction(std::string_view name);
  [[nodiscard]] const Function* FindFunction(std::string_view name) const;

 private:
  std::deque<std::string> owned_;
};

// Writes the module as PTX: module-level statements as written, functions as
// header + body, one statement per line, body statements indented by a tab
// (labels not). Comments are not kept; .loc, .file and debug sections are.
[[nodiscard]] std::string PrintPtx(const Module& module);

// Splits instruction operand text at top-level commas (commas inside [], {}
// and () stay): "{%r1, %r2}, [%rd1+8]" -> {"{%r1, %r2}", "[%rd1+8]"}. Each
// piece is trimmed.
[[nodiscard]] std::vector<std::string_view> SplitOperands(std::string_view operands);

// Size in bytes of a PTX fundamental type directive (".u32" -> 4, ".f16x2"
// -> 4, ".b128" -> 16, ".pred" -> 0); 0 when unknown.
[[nodiscard]] uint32_t PtxTypeSize(std::string_view type_directive);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_PTX_MODULE_H_
