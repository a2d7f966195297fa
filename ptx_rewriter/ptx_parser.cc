// File: ptx_rewriter/ptx_parser.cc
#include "ptx_rewriter/ptx_parser.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ptx_rewriter/ptx_lexer.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

// Bounds nesting so hostile input cannot make the parser's bookkeeping grow
// without limit (no recursion is involved, but a million '{' is not PTX).
constexpr int kMaxDepth = 4096;

std::string_view Describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kEnd: return "end of input";
    default: return t.text;
  }
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view name, Module* module)
      : lex_(text), src_(text), name_(name), m_(module) {}

  absl::Status ParseModule();
  absl::Status ParseBody(std::vector<Statement>* body, const Token* open, bool top_level_snippet);

 private:
  absl::Status Error(const Token& at, std::string_view what, std::string_view hint = {}) const {
    std::string msg = absl::StrCat(name_, ":", at.line, ":", at.col, ": error: ", what);
    if (!hint.empty()) absl::StrAppend(&msg, "\n  hint: ", hint);
    return absl::InvalidArgumentError(msg);
  }
  absl::Status LexError(const Token& t) const {
    if (t.text.size() == 1) {
      const unsigned char c = static_cast<unsigned char>(t.text[0]);
      if (c < 0x20 || c >= 0x7f) {
        return Error(t, absl::StrCat("unexpected byte 0x", absl::Hex(c, absl::kZeroPad2)),
                     "PTX is ASCII text; is this a binary file?");
      }
      return Error(t, absl::StrCat("unexpected character '", t.text, "'"));
    }
    return Error(t, t.text);
  }

  // Verbatim source from the start of `first` to the end of `last`.
  std::string_view Slice(const Token& first, const Token& last) const {
    const size_t b = static_cast<size_t>(first.text.data() - src_.data());
    const size_t e = static_cast<size_t>(last.text.data() + last.text.size() - src_.data());
    return src_.substr(b, e - b);
  }

  // Consumes tokens up to and including the ';' that ends a statement,
  // skipping over (), [] and {} groups. `*last` is the ';'.
  absl::Status SkipToSemicolon(const Token& first, Token* last, std::string_view what);
  // Consumes the tokens that remain on `first`'s line; `*last` is the last.
  absl::Status SkipRestOfLine(const Token& first, Token* last);

  // Module level: one directive, starting at `t` (ParseModule's step).
  absl::Status ParseModuleDirective(const Token& t);
  // Steps of ParseModuleDirective for the header directives; `*last` is the
  // directive's last token.
  absl::Status ParseVersion(const Token& t, Token* last);
  absl::Status ParseTarget(const Token& t, Token* last);
  absl::Status ParseAddressSize(const Token& t, Token* last);
  // `.visible` / `.extern` / `.weak` / `.common` and what they qualify.
  absl::Status ParseLinkage(const Token& t);
  // Adds the module-level directive from `first` to `last`, verbatim.
  void AddDirective(const Token& first, const Token& last);

  absl::Status ParseFunction(const Token& first, Token kind_token, Linkage linkage);
  absl::Status ParseParams(std::vector<Param>* params, Token* close, const Token& open);
  absl::Status ParseTopDeclaration(const Token& first, const Token& space, std::string_view linkage);
  absl::Status ParseSection(const Token& first);

  // Steps of ParseBody: each fills the statement `s` that starts at token
  // `t`, and `*last`, its last token so far.
  absl::Status ParseBodyDirective(const Token& t, Statement* s, Token* last);
  // After `@`: the guard (`%p1`, `!%p1`) and the opcode it guards.
  absl::Status ParseGuard(Statement* s);
  absl::Status ParseLabelOrOpcode(const Token& t, Statement* s, Token* last);
  // An instruction's operands: up to the ';' at depth 0 (vector operands
  // use braces).
  absl::Status ParseOperands(const Token& t, Statement* s, Token* last);

  PtxLexer lex_;
  std::string_view src_;
  std::string_view name_;
  Module* m_;
  bool saw_version_ = false;
};

absl::Status Parser::SkipToSemicolon(const Token& first, Token* last, std::string_view what) {
  int depth = 0;
  for (;;) {
    Token t = lex_.Next();
    if (t.kind == TokenKind::kError) return LexError(t);
    if (t.kind == TokenKind::kEnd) {
      return Error(first, absl::StrCat("unterminated ", what, ": no ';' before the end of input"),
                   "every PTX statement ends with ';'");
    }
    if (t.kind == TokenKind::kPunct) {
      const char c = t.text[0];
      if (c == '(' || c == '[' || c == '{') {
        if (++depth > kMaxDepth) return Error(t, "nesting too deep");
      } else if (c == ')' || c == ']' || c == '}') {
        if (--depth < 0) {
          return Error(t, absl::StrCat("unbalanced '", t.text, "' in ", what));
        }
      } else if (c == ';' && depth == 0) {
        *last = t;
        return absl::OkStatus();
      }
    }
  }
}

absl::Status Parser::SkipRestOfLine(const Token& first, Token* last) {
  *last = first;
  for (;;) {
    const Token& p = lex_.Peek();
    if (p.kind == TokenKind::kError) return LexError(p);
    if (p.kind == TokenKind::kEnd || p.line != first.line) return absl::OkStatus();
    *last = lex_.Next();
  }
}

absl::Status Parser::ParseModule() {
  for (;;) {
    Token t = lex_.Next();
    if (t.kind == TokenKind::kEnd) break;
    if (t.kind == TokenKind::kError) return LexError(t);
    if (t.kind != TokenKind::kDirective) {
      return Error(t, absl::StrCat("expected a directive at module level, found '", Describe(t), "'"),
                   "module level holds .version, .target, variables and .entry/.func");
    }
    CUPROBE_RETURN_IF_ERROR(ParseModuleDirective(t));
  }
  if (!saw_version_) {
    Token at;
    at.line = 1;
    at.col = 1;
    return Error(at, "no .version directive", "PTX text starts with '.version X.Y'");
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseModuleDirective(const Token& t) {
  const std::string_view d = t.text;
  Token last = t;
  if (d == ".version") {
    CUPROBE_RETURN_IF_ERROR(ParseVersion(t, &last));
  } else if (d == ".target") {
    CUPROBE_RETURN_IF_ERROR(ParseTarget(t, &last));
  } else if (d == ".address_size") {
    CUPROBE_RETURN_IF_ERROR(ParseAddressSize(t, &last));
  } else if (d == ".file" || d == ".loc") {
    CUPROBE_RETURN_IF_ERROR(SkipRestOfLine(t, &last));
  } else if (d == ".section") {
    return ParseSection(t);
  } else if (d == ".pragma" || d == ".alias") {
    CUPROBE_RETURN_IF_ERROR(SkipToSemicolon(t, &last, d));
  } else if (d == ".entry" || d == ".func") {
    return ParseFunction(t, t, Linkage::kNone);
  } else if (d == ".visible" || d == ".extern" || d == ".weak" || d == ".common") {
    return ParseLinkage(t);
  } else if (d == ".global" || d == ".const" || d == ".shared" || d == ".local" ||
             d == ".tex" || d == ".texref" || d == ".samplerref" || d == ".surfref") {
    return ParseTopDeclaration(t, t, {});
  } else {
    return Error(t, absl::StrCat("unknown module-level directive '", d, "'"));
  }
  AddDirective(t, last);
  return absl::OkStatus();
}

void Parser::AddDirective(const Token& first, const Token& last) {
  ModuleItem item;
  item.statement.kind = StatementKind::kDirective;
  item.statement.line = first.line;
  item.statement.opcode = first.text;
  item.statement.text = Slice(first, last);
  m_->items.push_back(std::move(item));
}

absl::Status Parser::ParseVersion(const Token& t, Token* last) {
  Token v = lex_.Next();
  if (v.kind != TokenKind::kNumber || v.line != t.line) {
    return Error(t, "expected a version number after .version", "e.g. '.version 9.0'");
  }
  const size_t dot = v.text.find('.');
  uint32_t major = 0, minor = 0;
  if (dot == std::string_view::npos || !absl::SimpleAtoi(v.text.substr(0, dot), &major) ||
      !absl::SimpleAtoi(v.text.substr(dot + 1), &minor)) {
    return Error(v, absl::StrCat("malformed PTX ISA version '", v.text, "'"),
                 "expected MAJOR.MINOR, e.g. 9.0");
  }
  if (saw_version_) return Error(t, "second .version directive");
  saw_version_ = true;
  m_->version = {major, minor};
  *last = v;
  return absl::OkStatus();
}

absl::Status Parser::ParseTarget(const Token& t, Token* last) {
  CUPROBE_RETURN_IF_ERROR(SkipRestOfLine(t, last));
  if (last->text.data() == t.text.data()) return Error(t, "expected a target after .target");
  const char* b = t.text.data() + t.text.size();
  while (*b == ' ' || *b == '\t') ++b;
  m_->target = std::string_view(b, static_cast<size_t>(last->text.data() + last->text.size() - b));
  return absl::OkStatus();
}

absl::Status Parser::ParseAddressSize(const Token& t, Token* last) {
  Token v = lex_.Next();
  uint32_t size = 0;
  if (v.kind != TokenKind::kNumber || !absl::SimpleAtoi(v.text, &size) ||
      (size != 32 && size != 64)) {
    return Error(t, "expected 32 or 64 after .address_size");
  }
  m_->address_size = size;
  *last = v;
  return absl::OkStatus();
}

absl::Status Parser::ParseLinkage(const Token& t) {
  const std::string_view d = t.text;
  const Linkage linkage = d == ".visible" ? Linkage::kVisible
                          : d == ".extern" ? Linkage::kExtern
                          : d == ".weak"   ? Linkage::kWeak
                                           : Linkage::kCommon;
  Token next = lex_.Next();
  if (next.kind == TokenKind::kError) return LexError(next);
  if (next.Is(TokenKind::kDirective, ".entry") || next.Is(TokenKind::kDirective, ".func")) {
    return ParseFunction(t, next, linkage);
  }
  if (next.kind == TokenKind::kDirective) return ParseTopDeclaration(t, next, d);
  return Error(next, absl::StrCat("expected .entry, .func or a variable after ", d, ", found '",
                                  Describe(next), "'"));
}

absl::Status Parser::ParseSection(const Token& first) {
  // `.section .debug_info { ... }`: data directives without ';', kept whole.
  Token name = lex_.Next();
  if (name.kind != TokenKind::kDirective && name.kind != TokenKind::kIdentifier) {
    return Error(first, "expected a section name after .section");
  }
  Token open = lex_.Next();
  if (!open.IsPunct('{')) return Error(open, "expected '{' after the section name");
  int depth = 1;
  Token last = open;
  while (depth > 0) {
    last = lex_.Next();
    if (last.kind == TokenKind::kError) return LexError(last);
    if (last.kind == TokenKind::kEnd) return Error(first, "unterminated .section (missing '}')");
    if (last.IsPunct('{')) {
      if (++depth > kMaxDepth) return Error(last, "nesting too deep");
    }
    if (last.IsPunct('}')) --depth;
  }
  AddDirective(first, last);
  return absl::OkStatus();
}

absl::Status Parser::ParseTopDeclaration(const Token& first, const Token& space,
                                         std::string_view linkage) {
  ModuleItem item;
  Statement& s = item.statement;
  s.kind = StatementKind::kDeclaration;
  s.line = first.line;
  s.opcode = space.text;
  s.linkage = linkage;
  Token last;
  // The declared name is the first identifier (types and qualifiers are
  // directives); `= {...}` initializers are skipped with the rest.
  int depth = 0;
  bool in_init = false;
  for (;;) {
    Token t = lex_.Next();
    if (t.kind == TokenKind::kError) return LexError(t);
    if (t.kind == TokenKind::kEnd) {
      return Error(first, "unterminated declaration: no ';' before the end of input");
    }
    if (t.kind == TokenKind::kIdentifier && s.operands.empty() && !in_init) s.operands = t.text;
    if (t.kind == TokenKind::kPunct) {
      const char c = t.text[0];
      if (c == '=' && depth == 0) in_init = true;
      if (c == '(' || c == '[' || c == '{') {
        if (++depth > kMaxDepth) return Error(t, "nesting too deep");
      } else if (c == ')' || c == ']' || c == '}') {
        if (--depth < 0) return Error(t, absl::StrCat("unbalanced '", t.text, "' in declaration"));
      } else if (c == ';' && depth == 0) {
        last = t;
        break;
      }
    }
  }
  if (s.operands.empty()) {
    return Error(first, absl::StrCat("declaration of ", space.text, " has no name"));
  }
  s.text = Slice(first, last);
  m_->items.push_back(std::move(item));
  return absl::OkStatus();
}

absl::Status Parser::ParseParams(std::vector<Param>* params, Token* close, const Token& open) {
  // After '(' : `.param .align 8 .b8 name[24], .param .u64 .ptr .global name2 )`
  Token t = lex_.Next();
  if (t.IsPunct(')')) {
    *close = t;
    return absl::OkStatus();
  }
  for (;;) {
    Param p;
    Token start = t;
    bool done = false;
    for (;; t = lex_.Next()) {
      if (t.kind == TokenKind::kError) return LexError(t);
      if (t.kind == TokenKind::kEnd) {
        return Error(open, "unterminated parameter list (no ')' before the end of input)");
      }
      if (t.IsPunct(',')) break;
      if (t.IsPunct(')')) {
        *close = t;
        done = true;
        break;
      }
      if (t.kind == TokenKind::kDirective) {
        if (t.text == ".param" || t.text == ".reg") {
          p.space = t.text;
        } else if (t.text == ".align") {
          Token n = lex_.Next();
          if (n.kind != TokenKind::kNumber || !absl::SimpleAtoi(n.text, &p.align)) {
            return Error(n, "expected a number after .align");
          }
        } else if (PtxTypeSize(t.text) != 0 || t.text == ".pred") {
          // The first type wins; `.ptr .global .align N` qualifiers follow it.
          if (p.type.empty()) p.type = t.text;
        }
      } else if (t.kind == TokenKind::kIdentifier) {
        if (!p.name.empty()) return Error(t, absl::StrCat("parameter '", p.name, "' has two names"));
        p.name = t.text;
      } else if (t.IsPunct('[')) {
        Token n = lex_.Next();
        if (n.IsPunct(']')) continue;  // `name[]`
        if (n.kind != TokenKind::kNumber || !absl::SimpleAtoi(n.text, &p.array_count)) {
          return Error(n, "expected an array size");
        }
        if (!lex_.Next().IsPunct(']')) return Error(n, "expected ']' after the array size");
      } else {
        return Error(t, absl::StrCat("unexpected '", Describe(t), "' in a parameter list"));
      }
    }
    if (p.name.empty()) return Error(start, "parameter without a name");
    if (p.space.empty()) p.space = ".param";
    const uint64_t elem = PtxTypeSize(p.type);
    const uint64_t size = p.array_count ? elem * p.array_count : elem;
    if (size > UINT32_MAX) return Error(start, "parameter too large");
    p.size = static_cast<uint32_t>(size);
    params->push_back(p);
    if (done) return absl::OkStatus();
    t = lex_.Next();
  }
}

absl::Status Parser::ParseFunction(const Token& first, Token kind_token, Linkage linkage) {
  Function f;
  f.is_kernel = kind_token.text == ".entry";
  f.linkage = linkage;
  f.line = first.line;
  Token t = lex_.Next();
  if (!f.is_kernel && t.IsPunct('(')) {
    Token close;
    CUPROBE_RETURN_IF_ERROR(ParseParams(&f.returns, &close, t));
    t = lex_.Next();
  }
  if (t.kind != TokenKind::kIdentifier) {
    return Error(t, absl::StrCat("expected the name of the ", kind_token.text, ", found '",
                                 Describe(t), "'"));
  }
  f.name = t.text;
  Token last = t;
  if (lex_.Peek().IsPunct('(')) {
    const Token open = lex_.Next();
    CUPROBE_RETURN_IF_ERROR(ParseParams(&f.params, &last, open));
  }
  // Performance directives (.maxntid 256, 1, 1 / .reqntid / .maxnreg /
  // .minnctapersm / .noreturn / .pragma ...) up to '{' or ';'.
  for (;;) {
    Token n = lex_.Next();
    if (n.kind == TokenKind::kError) return LexError(n);
    if (n.kind == TokenKind::kEnd) {
      return Error(first, absl::StrCat("unterminated ", kind_token.text, " '", f.name,
                                       "': no body or ';'"));
    }
    if (n.IsPunct(';')) {
      f.has_body = false;
      break;
    }
    if (n.IsPunct('{')) {
      f.has_body = true;
      f.header = Slice(first, last);
      CUPROBE_RETURN_IF_ERROR(ParseBody(&f.body, &n, false));
      break;
    }
    last = n;
  }
  // For a declaration the header ends before ';' (the printer adds it). For a
  // definition it was set before the body (the scan already moved on).
  if (!f.has_body) f.header = Slice(first, last);
  ModuleItem item;
  item.is_function = true;
  item.function_index = m_->functions.size();
  item.statement.line = first.line;
  m_->functions.push_back(std::move(f));
  m_->items.push_back(std::move(item));
  return absl::OkStatus();
}

absl::Status Parser::ParseBody(std::vector<Statement>* body, const Token* open,
                               bool top_level_snippet) {
  int depth = 0;
  for (;;) {
    Token t = lex_.Next();
    if (t.kind == TokenKind::kError) return LexError(t);
    if (t.kind == TokenKind::kEnd) {
      if (top_level_snippet) {
        if (depth != 0) return Error(t, "unbalanced '{' in snippet");
        return absl::OkStatus();
      }
      return Error(*open, "unterminated function body (missing '}')");
    }
    Statement s;
    s.line = t.line;
    Token last = t;
    if (t.kind == TokenKind::kPunct && t.text[0] == '{') {
      if (++depth > kMaxDepth) return Error(t, "blocks nested too deep");
      s.kind = StatementKind::kBlockOpen;
    } else if (t.kind == TokenKind::kPunct && t.text[0] == '}') {
      if (depth == 0) {
        if (top_level_snippet) return Error(t, "unbalanced '}' in snippet");
        return absl::OkStatus();
      }
      --depth;
      s.kind = StatementKind::kBlockClose;
    } else if (t.kind == TokenKind::kDirective) {
      CUPROBE_RETURN_IF_ERROR(ParseBodyDirective(t, &s, &last));
    } else if (t.kind == TokenKind::kPunct && t.text[0] == '@') {
      CUPROBE_RETURN_IF_ERROR(ParseGuard(&s));
    } else if (t.kind == TokenKind::kIdentifier) {
      CUPROBE_RETURN_IF_ERROR(ParseLabelOrOpcode(t, &s, &last));
    } else {
      return Error(t, absl::StrCat("expected an instruction, a label, a declaration or '}', "
                                   "found '", Describe(t), "'"));
    }
    if (s.kind == StatementKind::kInstruction) CUPROBE_RETURN_IF_ERROR(ParseOperands(t, &s, &last));
    s.text = Slice(t, last);
    body->push_back(s);
  }
}

absl::Status Parser::ParseBodyDirective(const Token& t, Statement* s, Token* last) {
  s->opcode = t.text;
  if (t.text == ".loc" || t.text == ".file") {
    s->kind = StatementKind::kDirective;
    return SkipRestOfLine(t, last);
  }
  if (t.text == ".pragma") {
    s->kind = StatementKind::kDirective;
    return SkipToSemicolon(t, last, ".pragma");
  }
  if (t.text == ".reg" || t.text == ".local" || t.text == ".shared" || t.text == ".param" ||
      t.text == ".const" || t.text == ".global" || t.text == ".tex") {
    s->kind = StatementKind::kDeclaration;
    return SkipToSemicolon(t, last, "declaration");
  }
  return Error(t, absl::StrCat("unexpected directive '", t.text, "' in a function body"));
}

absl::Status Parser::ParseGuard(Statement* s) {
  // Guarded instruction: @%p1 / @!%p1
  s->kind = StatementKind::kInstruction;
  Token g = lex_.Next();
  if (g.IsPunct('!')) {
    s->guard_negated = true;
    g = lex_.Next();
  }
  if (g.kind != TokenKind::kIdentifier) {
    return Error(g, "expected a predicate register after '@'", "e.g. '@%p1 bra $L__BB0_2;'");
  }
  s->guard = g.text;
  Token op = lex_.Next();
  if (op.kind != TokenKind::kIdentifier) {
    return Error(op, absl::StrCat("expected an opcode after '@", s->guard_negated ? "!" : "",
                                  s->guard, "'"));
  }
  s->opcode = op.text;
  return absl::OkStatus();
}

absl::Status Parser::ParseLabelOrOpcode(const Token& t, Statement* s, Token* last) {
  if (!lex_.Peek().IsPunct(':')) {
    s->kind = StatementKind::kInstruction;
    s->opcode = t.text;
    return absl::OkStatus();
  }
  *last = lex_.Next();
  s->operands = t.text;
  if (lex_.Peek().Is(TokenKind::kDirective, ".callprototype")) {
    s->kind = StatementKind::kPrototype;
    return SkipToSemicolon(t, last, ".callprototype");
  }
  s->kind = StatementKind::kLabel;
  return absl::OkStatus();
}

absl::Status Parser::ParseOperands(const Token& t, Statement* s, Token* last) {
  Token first_operand;
  Token prev;
  bool any = false;
  int d = 0;
  for (;;) {
    Token n = lex_.Next();
    if (n.kind == TokenKind::kError) return LexError(n);
    if (n.kind == TokenKind::kEnd) {
      return Error(t, absl::StrCat("expected ';' after the instruction '", s->opcode, "'"),
                   "PTX instructions end with ';'");
    }
    if (n.kind == TokenKind::kPunct) {
      const char c = n.text[0];
      if (c == '(' || c == '[' || c == '{') {
        if (++d > kMaxDepth) return Error(n, "nesting too deep");
      } else if (c == ')' || c == ']' || c == '}') {
        if (--d < 0) {
          if (c == '}' && any) {
            // `add.s32 %r1, %r2, 1` + newline + `}`: the ';' is missing.
            Token end = prev;
            end.col += static_cast<uint32_t>(prev.text.size());
            return Error(end, absl::StrCat("expected ';' after the instruction '", s->opcode, "'"),
                         "PTX instructions end with ';'");
          }
          return Error(n, absl::StrCat("unbalanced '", n.text, "' in the operands of '",
                                       s->opcode, "'"),
                       "is a ';' missing before it?");
        }
      } else if (c == ';' && d == 0) {
        *last = n;
        break;
      }
    }
    if (!any) {
      first_operand = n;
      any = true;
    }
    prev = n;
  }
  if (any) s->operands = Slice(first_operand, prev);
  return absl::OkStatus();
}

uint32_t ParseCount(std::string_view text) {
  uint32_t v = 0;
  if (!absl::SimpleAtoi(text, &v)) return 0;
  return v;
}

}  // namespace

absl::StatusOr<Module> ParsePtx(std::string_view text, std::string_view name) {
  Module m;
  m.name = std::string(name);
  Parser p(text, name, &m);
  CUPROBE_RETURN_IF_ERROR(p.ParseModule());
  return m;
}

absl::StatusOr<Module> ParsePtxOwned(std::string text, std::string_view name) {
  Module m;
  m.name = std::string(name);
  std::string_view owned = m.Own(std::move(text));
  Parser p(owned, name, &m);
  CUPROBE_RETURN_IF_ERROR(p.ParseModule());
  return m;
}

absl::StatusOr<std::vector<Statement>> ParseBodyStatements(std::string_view text,
                                                           std::string_view name) {
  std::vector<Statement> out;
  Parser p(text, name, nullptr);
  CUPROBE_RETURN_IF_ERROR(p.ParseBody(&out, nullptr, true));
  return out;
}

absl::StatusOr<Declaration> ParseDeclaration(const Statement& statement) {
  if (statement.kind != StatementKind::kDeclaration) {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", statement.line, ": not a declaration: ", statement.text));
  }
  Declaration d;
  PtxLexer lex(statement.text, statement.line);
  bool expect_name = true;
  for (;;) {
    Token t = lex.Next();
    if (t.kind == TokenKind::kEnd || t.kind == TokenKind::kError || t.IsPunct(';')) break;
    if (t.IsPunct('=')) break;  // initializer
    if (t.kind == TokenKind::kDirective) {
      if (d.space.empty() && (t.text == ".reg" || t.text == ".local" || t.text == ".shared" ||
                              t.text == ".param" || t.text == ".const" || t.text == ".global" ||
                              t.text == ".tex")) {
        d.space = t.text;
      } else if (t.text == ".align") {
        (void)lex.Next();
      } else if (d.type.empty() && (PtxTypeSize(t.text) != 0 || t.text == ".pred")) {
        d.type = t.text;
      }
    } else if (t.kind == TokenKind::kIdentifier && expect_name) {
      d.names.push_back(t.text);
      expect_name = false;
    } else if (t.IsPunct(',')) {
      expect_name = true;
    } else if (t.IsPunct('<')) {
      Token n = lex.Next();
      if (n.kind == TokenKind::kNumber) d.count = ParseCount(n.text);
    } else if (t.IsPunct('[')) {
      // array dimension: skip to ']'
      for (Token n = lex.Next(); n.kind != TokenKind::kEnd && !n.IsPunct(']'); n = lex.Next()) {
      }
    }
  }
  if (d.space.empty() || d.names.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", statement.line, ": malformed declaration: ", statement.text));
  }
  return d;
}

}  // namespace cuprobe
