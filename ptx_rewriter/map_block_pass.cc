// File: ptx_rewriter/map_block_pass.cc
#include "ptx_rewriter/map_block_pass.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cuprobe/abi.h"
#include "ptx_rewriter/ptx_lexer.h"
#include "ptx_rewriter/ptx_parser.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

bool IsMapSymbol(std::string_view name) {
  return name == CUPROBE_MAP_TABLE_SYMBOL || name == CUPROBE_MAP_DESCS_SYMBOL;
}

// Whether `text` names either map symbol (as a whole identifier).
bool ReferencesMapSymbols(std::string_view text) {
  if (!absl::StrContains(text, "__cuprobe_map_")) return false;
  PtxLexer lex(text);
  for (Token t = lex.Next(); t.kind != TokenKind::kEnd && t.kind != TokenKind::kError;
       t = lex.Next()) {
    if (t.kind == TokenKind::kIdentifier && IsMapSymbol(t.text)) return true;
  }
  return false;
}

absl::Status Refuse(const Module& m, const Statement& s, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "the patch backend cannot take this probe: ", m.name, ":", s.line, ": ", why, ": '", s.text,
      "'\n  hint: it reaches the maps only through ld.const of ", CUPROBE_MAP_DESCS_SYMBOL,
      ", ld.global of ", CUPROBE_MAP_TABLE_SYMBOL, " and mov.u64 of either"));
}

// `sym`, `sym+K`, `[sym]` or `[sym+K]` with K decimal: the symbol and K.
struct SymbolOffset {
  std::string_view symbol;
  uint64_t offset = 0;
};
std::optional<SymbolOffset> ParseSymbolOffset(std::string_view operand, bool bracketed) {
  operand = absl::StripAsciiWhitespace(operand);
  if (bracketed != absl::StartsWith(operand, "[")) return std::nullopt;
  if (bracketed) {
    if (!absl::EndsWith(operand, "]")) return std::nullopt;
    operand = absl::StripAsciiWhitespace(operand.substr(1, operand.size() - 2));
  }
  SymbolOffset out;
  const size_t plus = operand.find('+');
  out.symbol = absl::StripAsciiWhitespace(operand.substr(0, plus));
  if (!IsMapSymbol(out.symbol)) return std::nullopt;
  if (plus != std::string_view::npos) {
    std::string_view k = absl::StripAsciiWhitespace(operand.substr(plus + 1));
    if (k.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(k[0])) ||
        !absl::SimpleAtoi(k, &out.offset)) {
      return std::nullopt;
    }
  }
  return out;
}

std::string GuardPrefix(const Statement& s) {
  return s.guard.empty() ? std::string() : absl::StrCat("@", s.guard_negated ? "!" : "", s.guard, " ");
}

// `ld.const.v2.u32` -> `ld.global.nc.v2.u32`.
std::string ConstLoadAsGlobal(std::string_view opcode) {
  std::vector<std::string_view> parts = absl::StrSplit(opcode, '.');
  std::vector<std::string_view> out;
  for (std::string_view p : parts) {
    if (p == "const") {
      out.push_back("global");
      out.push_back("nc");
    } else {
      out.push_back(p);
    }
  }
  return absl::StrJoin(out, ".");
}

// What one function's rewrite found.
struct FunctionEdits {
  bool referenced = false;    // a map symbol was rewritten
  bool descs_moved = false;   // `mov %r, __cuprobe_map_descs` was rewritten
};

// The rewritten text of an instruction that references a map symbol.
absl::StatusOr<std::string> RewriteInstruction(const Module& m, const Statement& s,
                                               uint64_t table_offset, FunctionEdits* edits) {
  std::vector<std::string_view> ops = SplitOperands(s.operands);
  if (ops.size() != 2) return Refuse(m, s, "unexpected use of a map symbol");
  const std::string guard = GuardPrefix(s);
  if (s.Op() == "ld") {
    std::optional<SymbolOffset> a = ParseSymbolOffset(ops[1], true);
    if (!a) return Refuse(m, s, "unexpected address of a map symbol");
    if (a->symbol == CUPROBE_MAP_DESCS_SYMBOL && s.HasModifier("const")) {
      return absl::StrCat(guard, ConstLoadAsGlobal(s.opcode), " ", ops[0], ", [",
                          kMapBlockRegister, "+", a->offset, "];");
    }
    if (a->symbol == CUPROBE_MAP_TABLE_SYMBOL && s.HasModifier("global")) {
      return absl::StrCat(guard, s.opcode, " ", ops[0], ", [", kMapBlockRegister, "+",
                          table_offset + a->offset, "];");
    }
    return Refuse(m, s, "a load of a map symbol from an unexpected state space");
  }
  if (s.Op() == "mov" &&
      (s.HasModifier("u64") || s.HasModifier("b64") || s.HasModifier("s64"))) {
    std::optional<SymbolOffset> a = ParseSymbolOffset(ops[1], false);
    if (!a) return Refuse(m, s, "unexpected use of a map symbol");
    const bool table = a->symbol == CUPROBE_MAP_TABLE_SYMBOL;
    edits->descs_moved |= !table;
    return absl::StrCat(guard, "add.s64 ", ops[0], ", ", kMapBlockRegister, ", ",
                        (table ? table_offset : 0) + a->offset, ";");
  }
  return Refuse(m, s, "unexpected use of a map symbol");
}

// Replaces body[i] by the statement(s) of `text`, keeping its line.
absl::Status ReplaceStatement(Module& m, Function& f, size_t i, std::string text) {
  CUPROBE_ASSIGN_OR_RETURN(std::vector<Statement> parsed,
                           ParseBodyStatements(m.Own(std::move(text)), m.name));
  if (parsed.size() != 1) return absl::InternalError("map block pass: one statement expected");
  parsed[0].line = f.body[i].line;
  f.body[i] = parsed[0];
  return absl::OkStatus();
}

// After `mov %r, __cuprobe_map_descs` became an address in the block, no
// constant load may go through a register (it might be %r).
absl::Status CheckNoConstLoadThroughRegister(const Module& m, const Function& f) {
  for (const Statement& s : f.body) {
    if (!s.IsInstruction() || s.Op() != "ld" || !s.HasModifier("const")) continue;
    std::vector<std::string_view> ops = SplitOperands(s.operands);
    if (ops.size() == 2 && absl::StrContains(ops[1], "%")) {
      return Refuse(m, s,
                    absl::StrCat("a constant load through a register in ", f.name,
                                 ", which takes the address of ", CUPROBE_MAP_DESCS_SYMBOL));
    }
  }
  return absl::OkStatus();
}

// The declaration and the two loads that set kMapBlockRegister from the
// probe's `args` parameter (its 5th), after the leading declarations.
absl::Status InsertPreamble(Module& m, Function& f) {
  if (f.params.size() != 5 || f.returns.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the patch backend cannot take this probe: ", m.name, ":", f.line, ": ",
                     f.name, " does not have the probe signature (include/cuprobe/abi.h, 2.)"));
  }
  size_t at = 0;
  while (at < f.body.size() && f.body[at].kind == StatementKind::kDeclaration) ++at;
  CUPROBE_ASSIGN_OR_RETURN(
      std::vector<Statement> loads,
      ParseBodyStatements(m.Own(absl::StrCat("ld.param.u64 ", kMapBlockRegister, ", [",
                                             f.params[4].name, "];\nld.u64 ", kMapBlockRegister,
                                             ", [", kMapBlockRegister, "+-16];\n")),
                          m.name));
  for (Statement& s : loads) s.line = 0;
  f.body.insert(f.body.begin() + static_cast<ptrdiff_t>(at), loads.begin(), loads.end());
  CUPROBE_ASSIGN_OR_RETURN(
      std::vector<Statement> decl,
      ParseBodyStatements(m.Own(absl::StrCat(".reg .b64 ", kMapBlockRegister, ";\n")), m.name));
  for (Statement& s : decl) s.line = 0;
  f.body.insert(f.body.begin(), decl.begin(), decl.end());
  return absl::OkStatus();
}

absl::Status RewriteFunction(Module& m, Function& f, bool is_probe, uint64_t table_offset) {
  FunctionEdits edits;
  for (size_t i = 0; i < f.body.size(); ++i) {
    const Statement& s = f.body[i];
    if (absl::StrContains(s.text, kMapBlockRegister)) {
      return Refuse(m, s, absl::StrCat("the probe already uses the register ", kMapBlockRegister));
    }
    if (!ReferencesMapSymbols(s.text)) continue;
    if (!is_probe) {
      return Refuse(m, s, absl::StrCat(f.name, " reads the maps but is not a probe function"));
    }
    if (!s.IsInstruction()) return Refuse(m, s, "unexpected use of a map symbol");
    CUPROBE_ASSIGN_OR_RETURN(std::string text, RewriteInstruction(m, s, table_offset, &edits));
    CUPROBE_RETURN_IF_ERROR(ReplaceStatement(m, f, i, std::move(text)));
    edits.referenced = true;
  }
  if (!edits.referenced) return absl::OkStatus();
  if (edits.descs_moved) CUPROBE_RETURN_IF_ERROR(CheckNoConstLoadThroughRegister(m, f));
  return InsertPreamble(m, f);
}

}  // namespace

absl::Status RunMapBlockPass(Module& module, absl::Span<const std::string> probes,
                             uint32_t map_slots) {
  const uint64_t table_offset = uint64_t{CUPROBE_MAP_DESCS_ENTRY_SIZE} * map_slots;
  const absl::flat_hash_set<std::string_view> probe_names(probes.begin(), probes.end());
  for (Function& f : module.functions) {
    if (!f.has_body) continue;
    CUPROBE_RETURN_IF_ERROR(RewriteFunction(module, f, probe_names.contains(f.name), table_offset));
  }
  // Module level: the .extern declarations go; nothing else may name them.
  std::vector<ModuleItem> items;
  items.reserve(module.items.size());
  for (ModuleItem& item : module.items) {
    const Statement& s = item.statement;
    if (!item.is_function && ReferencesMapSymbols(s.text)) {
      if (s.kind == StatementKind::kDeclaration && s.linkage == ".extern" &&
          IsMapSymbol(s.operands)) {
        continue;
      }
      return Refuse(module, s, "a module-level use of a map symbol");
    }
    items.push_back(std::move(item));
  }
  module.items = std::move(items);
  return absl::OkStatus();
}

}  // namespace cuprobe
