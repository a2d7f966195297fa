// File: ptx_rewriter/ptx_lexer.h
//
// A zero-copy lexer for PTX text as nvcc 13 and LLVM's NVPTX backend emit it
// (and as fatbinary stores it: comments removed, blanks collapsed). Tokens
// are string_views into the source; nothing is allocated. Comments (`//`,
// `/* */`) and whitespace are skipped, but every token knows its line and
// column, so a parser can tell where a line ends (`.loc`, `.version` and
// `.file` are terminated by the newline, not by `;`).
//
//   PtxLexer lexer(text);
//   for (Token t = lexer.Next(); t.kind != TokenKind::kEnd; t = lexer.Next()) {
//     if (t.kind == TokenKind::kError) return Error(t.line, t.col, t.text);
//     ...
//   }
//
// Words are lexed whole, modifiers included: `ld.global.nc.v4.f32`,
// `%tid.x`, `cp.async.bulk.shared::cluster.global` and `$L__BB0_2` are one
// kIdentifier token each. Directives (`.reg`, `.b32`, `.entry`) are
// kDirective tokens that start with the dot.
#ifndef CUPROBE_PTX_REWRITER_PTX_LEXER_H_
#define CUPROBE_PTX_REWRITER_PTX_LEXER_H_

#include <cstdint>
#include <string_view>

namespace cuprobe {

enum class TokenKind : uint8_t {
  kEnd,         // end of input
  kIdentifier,  // opcode, register, symbol, label: `add.s32`, `%r1`, `$L__BB0_2`
  kDirective,   // `.reg`, `.u32`, `.entry`, `.align`
  kNumber,      // 42, 0x1F, 0f3F800000, 0d3FF0000000000000, 1.5e-3, 7U
  kString,      // "text" (quotes included in the view)
  kPunct,       // one character: , ; : [ ] { } ( ) < > @ ! + - * / = | & ^ ~ ?
  kError,       // a character PTX does not allow, or an unterminated string /
                // comment; `text` says which
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string_view text;  // into the source (kError: the offending bytes)
  uint32_t line = 0;      // 1-based
  uint32_t col = 0;       // 1-based, in bytes

  [[nodiscard]] bool Is(TokenKind k, std::string_view t) const { return kind == k && text == t; }
  [[nodiscard]] bool IsPunct(char c) const {
    return kind == TokenKind::kPunct && text.size() == 1 && text[0] == c;
  }
};

class PtxLexer {
 public:
  // `first_line` numbers the first line of `source` (snippets of a larger
  // file keep their real line numbers in diagnostics).
  explicit PtxLexer(std::string_view source, uint32_t first_line = 1)
      : src_(source), line_(first_line) {}

  // The next token. After kEnd or kError it keeps returning kEnd.
  [[nodiscard]] Token Next();

  // The token Next() would return, without consuming it.
  [[nodiscard]] const Token& Peek();

  // Byte offset of the next unread character.
  [[nodiscard]] size_t offset() const { return has_peek_ ? peek_offset_ : pos_; }
  [[nodiscard]] std::string_view source() const { return src_; }

  // Offset of `t` in the source (t must be a token of this lexer).
  [[nodiscard]] size_t OffsetOf(const Token& t) const {
    return static_cast<size_t>(t.text.data() - src_.data());
  }

 private:
  Token Lex();
  void SkipBlanksAndComments();

  std::string_view src_;
  size_t pos_ = 0;
  uint32_t line_ = 1;
  size_t line_start_ = 0;
  bool done_ = false;
  bool has_peek_ = false;
  size_t peek_offset_ = 0;
  Token peek_;
  // An unterminated block comment found while skipping blanks.
  bool comment_error_ = false;
  uint32_t comment_line_ = 0, comment_col_ = 0;
};

// Character classes of PTX identifiers: [A-Za-z0-9_$] after the first
// character; the first may also be `%` (registers) and may not be a digit.
[[nodiscard]] bool IsPtxIdentChar(char c);
[[nodiscard]] bool IsPtxIdentStart(char c);

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_PTX_LEXER_H_
