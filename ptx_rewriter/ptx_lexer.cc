// File: ptx_rewriter/ptx_lexer.cc
#include "ptx_rewriter/ptx_lexer.h"

#include <array>

namespace cuprobe {
namespace {

// One table lookup per character keeps the hot loops of the lexer branch-light
// (the rewriter's budget is >= 50 MB/s of PTX for everything, parse included).
enum : uint8_t {
  kIdent = 1,       // [A-Za-z0-9_$]
  kIdentStart = 2,  // [A-Za-z_$%]
  kDigit = 4,
  kBlank = 8,       // space, tab, CR, VT, FF (newline is handled apart)
  kPunctChar = 16,
};

constexpr std::array<uint8_t, 256> MakeTable() {
  std::array<uint8_t, 256> t{};
  for (int c = 'a'; c <= 'z'; ++c) t[c] = kIdent | kIdentStart;
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = kIdent | kIdentStart;
  for (int c = '0'; c <= '9'; ++c) t[c] = kIdent | kDigit;
  t['_'] = kIdent | kIdentStart;
  t['$'] = kIdent | kIdentStart;
  t['%'] = kIdentStart;
  t[' '] = t['\t'] = t['\r'] = t['\v'] = t['\f'] = kBlank;
  for (char c : std::string_view(",;:[]{}()<>@!+-*/=|&^~?")) t[static_cast<uint8_t>(c)] = kPunctChar;
  return t;
}
constexpr std::array<uint8_t, 256> kTable = MakeTable();

inline bool Has(char c, uint8_t cls) { return (kTable[static_cast<uint8_t>(c)] & cls) != 0; }

// The steps of PtxLexer::Lex: each scans one kind of token of `src` from
// offset `pos` and returns the offset just past it.

// The rest of a word, from the character after its first (an identifier's
// first character, which may be `%`, or a directive's dot): identifier
// characters, then modifiers (`.global`, `.v4`, `::cta`), each followed by
// identifier characters.
size_t WordEnd(std::string_view src, size_t pos) {
  const size_t n = src.size();
  while (pos < n && Has(src[pos], kIdent)) ++pos;
  for (;;) {
    if (pos + 1 < n && src[pos] == '.' && Has(src[pos + 1], kIdent)) {
      pos += 1;
    } else if (pos + 2 < n && src[pos] == ':' && src[pos + 1] == ':' && Has(src[pos + 2], kIdent)) {
      pos += 2;
    } else {
      break;
    }
    while (pos < n && Has(src[pos], kIdent)) ++pos;
  }
  return pos;
}

// A number, from its first character: 0x1F / 0f3F800000 / 0d... / 0b...,
// or decimal digits with an optional fraction and exponent.
size_t NumberEnd(std::string_view src, size_t pos) {
  const size_t n = src.size();
  const bool prefixed = src[pos] == '0' && pos + 1 < n &&
                        std::string_view("xXfFdDbB").find(src[pos + 1]) != std::string_view::npos;
  if (prefixed) {
    pos += 2;
    while (pos < n && Has(src[pos], kIdent)) ++pos;
    return pos;
  }
  while (pos < n && Has(src[pos], kDigit)) ++pos;
  if (pos < n && src[pos] == '.') {
    ++pos;
    while (pos < n && Has(src[pos], kDigit)) ++pos;
  }
  if (pos < n && (src[pos] == 'e' || src[pos] == 'E')) {
    size_t p = pos + 1;
    if (p < n && (src[p] == '+' || src[p] == '-')) ++p;
    if (p < n && Has(src[p], kDigit)) {
      pos = p;
      while (pos < n && Has(src[pos], kDigit)) ++pos;
    }
  }
  // Suffixes (7U) and anything glued on are part of the number; the
  // parser never needs more than its digits.
  while (pos < n && Has(src[pos], kIdent)) ++pos;
  return pos;
}

// A string, from its opening quote; `*closed` is false when the line or the
// input ends before the closing quote (then the offset is where it did).
size_t StringEnd(std::string_view src, size_t pos, bool* closed) {
  const size_t n = src.size();
  ++pos;
  *closed = false;
  while (pos < n && src[pos] != '\n') {
    if (src[pos] == '\\' && pos + 1 < n && src[pos + 1] != '\n') {
      pos += 2;
      continue;
    }
    if (src[pos] == '"') {
      *closed = true;
      return pos + 1;
    }
    ++pos;
  }
  return pos;
}

}  // namespace

bool IsPtxIdentChar(char c) { return Has(c, kIdent); }
bool IsPtxIdentStart(char c) { return Has(c, kIdentStart); }

void PtxLexer::SkipBlanksAndComments() {
  const size_t n = src_.size();
  while (pos_ < n) {
    const char c = src_[pos_];
    if (c == '\n') {
      ++pos_;
      ++line_;
      line_start_ = pos_;
    } else if (Has(c, kBlank)) {
      ++pos_;
    } else if (c == '/' && pos_ + 1 < n && src_[pos_ + 1] == '/') {
      pos_ += 2;
      while (pos_ < n && src_[pos_] != '\n') ++pos_;
    } else if (c == '/' && pos_ + 1 < n && src_[pos_ + 1] == '*') {
      const uint32_t start_line = line_;
      const uint32_t start_col = static_cast<uint32_t>(pos_ - line_start_ + 1);
      pos_ += 2;
      bool closed = false;
      while (pos_ < n) {
        if (src_[pos_] == '*' && pos_ + 1 < n && src_[pos_ + 1] == '/') {
          pos_ += 2;
          closed = true;
          break;
        }
        if (src_[pos_] == '\n') {
          ++line_;
          line_start_ = pos_ + 1;
        }
        ++pos_;
      }
      if (!closed) {
        comment_error_ = true;
        comment_line_ = start_line;
        comment_col_ = start_col;
        return;
      }
    } else {
      return;
    }
  }
}

const Token& PtxLexer::Peek() {
  if (!has_peek_) {
    peek_ = Lex();
    peek_offset_ = pos_;
    has_peek_ = true;
  }
  return peek_;
}

Token PtxLexer::Next() {
  if (has_peek_) {
    has_peek_ = false;
    return peek_;
  }
  return Lex();
}

Token PtxLexer::Lex() {
  Token t;
  if (done_) return t;
  SkipBlanksAndComments();
  if (comment_error_) {
    done_ = true;
    t.kind = TokenKind::kError;
    t.text = "unterminated /* comment";
    t.line = comment_line_;
    t.col = comment_col_;
    return t;
  }
  const size_t n = src_.size();
  if (pos_ >= n) {
    done_ = true;
    t.line = line_;
    t.col = static_cast<uint32_t>(pos_ - line_start_ + 1);
    return t;
  }
  const size_t start = pos_;
  t.line = line_;
  t.col = static_cast<uint32_t>(start - line_start_ + 1);
  const char c = src_[pos_];

  if (Has(c, kIdentStart)) {
    ++pos_;
    if (c == '%' && (pos_ >= n || !Has(src_[pos_], kIdent))) {
      t.kind = TokenKind::kPunct;  // a lone '%' (never valid; the parser says so)
    } else {
      pos_ = WordEnd(src_, pos_);
      t.kind = TokenKind::kIdentifier;
    }
  } else if (c == '.' && pos_ + 1 < n && Has(src_[pos_ + 1], kIdentStart) && src_[pos_ + 1] != '%') {
    pos_ = WordEnd(src_, pos_ + 1);
    t.kind = TokenKind::kDirective;
  } else if (Has(c, kDigit) || (c == '.' && pos_ + 1 < n && Has(src_[pos_ + 1], kDigit))) {
    t.kind = TokenKind::kNumber;
    pos_ = NumberEnd(src_, pos_);
  } else if (c == '"') {
    bool closed = false;
    pos_ = StringEnd(src_, pos_, &closed);
    if (!closed) {
      done_ = true;
      t.kind = TokenKind::kError;
      t.text = "unterminated string";
      return t;
    }
    t.kind = TokenKind::kString;
  } else if (Has(c, kPunctChar)) {
    ++pos_;
    t.kind = TokenKind::kPunct;
  } else {
    done_ = true;
    t.kind = TokenKind::kError;
    t.text = src_.substr(start, 1);
    return t;
  }
  t.text = src_.substr(start, pos_ - start);
  return t;
}

}  // namespace cuprobe
