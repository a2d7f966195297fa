// A recursive-descent parser over the raw text: the attach points' globs
// (`mem:*gemm*`) and the filter's closing '/' need the context, so the
// scanner runs on demand instead of tokenizing first.
#include "loader/oneliner/parser.h"

#include <cctype>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cuprobe::oneliner {

absl::Status OnelinerError(std::string_view text, int column, std::string_view message) {
  const size_t at = std::min<size_t>(static_cast<size_t>(std::max(column, 0)), text.size());
  const size_t line_start = text.rfind('\n', at == 0 ? 0 : at - 1);
  const size_t begin = (line_start == std::string_view::npos || at == 0) ? 0 : line_start + 1;
  size_t end = text.find('\n', at);
  if (end == std::string_view::npos) end = text.size();
  int line = 1;
  for (size_t i = 0; i < begin; ++i) line += text[i] == '\n';
  const std::string_view source = text.substr(begin, end - begin);
  // The caret sits under the column, tabs kept so it lines up.
  std::string pad;
  for (size_t i = begin; i < at; ++i) pad += text[i] == '\t' ? '\t' : ' ';
  return absl::InvalidArgumentError(absl::StrFormat("-e:%d:%d: %s\n%s\n%s^", line,
                                                    at - begin + 1, message, source, pad));
}

namespace {

bool IsIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Binary operators by precedence level, lowest first (C's order).
constexpr std::string_view kLevels[][5] = {
    {"||"}, {"&&"}, {"|"}, {"^"}, {"&"}, {"==", "!="}, {"<=", ">=", "<", ">"},
    {"<<", ">>"}, {"+", "-"}, {"*", "/", "%"},
};
constexpr int kNumLevels = sizeof(kLevels) / sizeof(kLevels[0]);

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<Program> Parse() {
    Program program;
    Skip();
    if (AtEnd()) return Error("expected a probe, e.g. 'exit:vec_add* { @n = count(); }'");
    while (!AtEnd()) {
      absl::StatusOr<Probe> probe = ParseProbe();
      if (!probe.ok()) return probe.status();
      program.probes.push_back(*std::move(probe));
      Skip();
    }
    return program;
  }

 private:
  // ---- scanning ----
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  void Skip() {
    while (!AtEnd()) {
      if (std::isspace(static_cast<unsigned char>(Peek()))) {
        ++pos_;
      } else if (Peek() == '/' && Peek(1) == '/') {
        while (!AtEnd() && Peek() != '\n') ++pos_;
      } else {
        return;
      }
    }
  }
  bool LookingAt(std::string_view s) {
    Skip();
    return text_.substr(pos_, s.size()) == s;
  }
  bool Accept(std::string_view s) {
    if (!LookingAt(s)) return false;
    pos_ += s.size();
    return true;
  }
  std::string Found() {
    Skip();
    if (AtEnd()) return "the end of the program";
    if (IsIdentStart(Peek())) {
      size_t e = pos_;
      while (e < text_.size() && IsIdentChar(text_[e])) ++e;
      return absl::StrCat("'", text_.substr(pos_, e - pos_), "'");
    }
    return absl::StrCat("'", text_.substr(pos_, 1), "'");
  }
  absl::Status Expect(std::string_view s, std::string_view what) {
    if (Accept(s)) return absl::OkStatus();
    return Error(absl::StrCat("expected ", what, ", found ", Found()));
  }
  absl::Status Error(std::string_view message) {
    return OnelinerError(text_, static_cast<int>(pos_), message);
  }
  int Column() {
    Skip();
    return static_cast<int>(pos_);
  }
  std::string Ident() {
    Skip();
    const size_t start = pos_;
    if (!AtEnd() && IsIdentStart(Peek())) {
      while (!AtEnd() && IsIdentChar(Peek())) ++pos_;
    }
    return std::string(text_.substr(start, pos_ - start));
  }
  // A word that is all of `word` (not a prefix of a longer identifier).
  bool AcceptWord(std::string_view word) {
    if (!LookingAt(word)) return false;
    if (pos_ + word.size() < text_.size() && IsIdentChar(text_[pos_ + word.size()])) return false;
    pos_ += word.size();
    return true;
  }

  // ---- probes ----
  absl::StatusOr<Probe> ParseProbe() {
    Probe probe;
    probe.column = Column();
    do {
      absl::StatusOr<Attach> a = ParseAttach();
      if (!a.ok()) return a.status();
      probe.attaches.push_back(*std::move(a));
    } while (Accept(","));
    if (Accept("/")) {
      in_filter_ = true;
      absl::StatusOr<ExprPtr> filter = ParseExpr();
      in_filter_ = false;
      if (!filter.ok()) return filter.status();
      probe.filter = *std::move(filter);
      if (absl::Status s = Expect("/", "'/' to close the filter"); !s.ok()) return s;
    }
    if (!LookingAt("{")) {
      return Error(absl::StrCat("expected '{' to start the probe's block",
                                probe.filter ? "" : " or '/' to start a filter",
                                ", found ", Found()));
    }
    absl::StatusOr<Block> body = ParseBlock();
    if (!body.ok()) return body.status();
    probe.body = *std::move(body);
    return probe;
  }

  absl::StatusOr<Attach> ParseAttach() {
    Attach a;
    a.column = Column();
    const std::string kind = Ident();
    if (kind == "entry") {
      a.point = AttachPoint::kEntry;
    } else if (kind == "exit") {
      a.point = AttachPoint::kExit;
    } else if (kind == "mem") {
      a.point = AttachPoint::kMem;
    } else {
      pos_ = static_cast<size_t>(a.column);
      return Error(absl::StrCat("expected an attach point (entry:GLOB, exit:GLOB or mem:GLOB), "
                                "found ", Found()));
    }
    if (Peek() != ':') {
      return Error(absl::StrCat("expected ':' and a kernel glob after '", kind, "', e.g. ",
                                kind, ":vec_add*"));
    }
    ++pos_;
    const size_t start = pos_;
    // The glob runs to white space, ',', '{' or '/' ('[...]' may hold any
    // of them but white space).
    int depth = 0;
    while (!AtEnd()) {
      const char c = Peek();
      if (std::isspace(static_cast<unsigned char>(c))) break;
      if (depth == 0 && (c == ',' || c == '{' || c == '/')) break;
      if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        return Error("a kernel glob holds no quotes, backslashes or control characters");
      }
      if (c == '[') ++depth;
      if (c == ']' && depth > 0) --depth;
      ++pos_;
    }
    a.glob = std::string(text_.substr(start, pos_ - start));
    if (a.glob.empty()) {
      return Error(absl::StrCat("expected a kernel glob after '", kind, ":' (use * for every "
                                "kernel)"));
    }
    return a;
  }

  absl::StatusOr<Block> ParseBlock() {
    if (absl::Status s = Expect("{", "'{'"); !s.ok()) return s;
    Block block;
    while (!Accept("}")) {
      if (AtEnd()) return Error("expected '}' to close the block");
      absl::StatusOr<Stmt> stmt = ParseStmt();
      if (!stmt.ok()) return stmt.status();
      const bool is_if = stmt->kind == Stmt::Kind::kIf;
      block.push_back(*std::move(stmt));
      if (Accept(";")) continue;
      if (is_if || LookingAt("}")) continue;
      return Error(absl::StrCat("expected ';' or '}' after a statement, found ", Found()));
    }
    return block;
  }

  // ---- statements ----
  absl::StatusOr<Stmt> ParseStmt() {
    Stmt stmt;
    stmt.column = Column();
    if (Accept("@")) return ParseMapAssign(std::move(stmt));
    if (Accept("$")) {
      stmt.kind = Stmt::Kind::kVarAssign;
      stmt.var = Ident();
      if (stmt.var.empty()) return Error("expected a variable name after '$'");
      if (absl::Status s = Expect("=", absl::StrCat("'=' after $", stmt.var)); !s.ok()) return s;
      absl::StatusOr<ExprPtr> e = ParseExpr();
      if (!e.ok()) return e.status();
      stmt.args.push_back(*std::move(e));
      return stmt;
    }
    if (AcceptWord("printf")) return ParsePrintf(std::move(stmt));
    if (AcceptWord("if")) return ParseIf(std::move(stmt));
    return Error(absl::StrCat("expected a statement (@map = ..., $var = ..., printf(...) or "
                              "if (...) {...}), found ", Found()));
  }

  absl::StatusOr<Stmt> ParseMapAssign(Stmt stmt) {
    stmt.kind = Stmt::Kind::kMapAssign;
    stmt.map.column = stmt.column;
    stmt.map.name = Ident();
    if (Accept("[")) {
      do {
        absl::StatusOr<ExprPtr> key = ParseExpr();
        if (!key.ok()) return key.status();
        stmt.map.keys.push_back(*std::move(key));
      } while (Accept(","));
      if (absl::Status s = Expect("]", "',' or ']' in the map's key"); !s.ok()) return s;
    }
    if (absl::Status s = Expect("=", absl::StrCat("'=' after @", stmt.map.name)); !s.ok()) {
      return s;
    }
    // A map function: NAME(...).
    const size_t save = pos_;
    const int func_column = Column();
    const std::string name = Ident();
    if (!name.empty() && Accept("(")) {
      stmt.func = name;
      stmt.func_column = func_column;
      if (!Accept(")")) {
        do {
          absl::StatusOr<ExprPtr> arg = ParseExpr();
          if (!arg.ok()) return arg.status();
          stmt.args.push_back(*std::move(arg));
        } while (Accept(","));
        if (absl::Status s = Expect(")", absl::StrCat("',' or ')' in ", name, "(...)")); !s.ok()) {
          return s;
        }
      }
      return stmt;
    }
    pos_ = save;
    absl::StatusOr<ExprPtr> value = ParseExpr();
    if (!value.ok()) return value.status();
    stmt.args.push_back(*std::move(value));
    return stmt;
  }

  absl::StatusOr<Stmt> ParsePrintf(Stmt stmt) {
    stmt.kind = Stmt::Kind::kPrintf;
    if (absl::Status s = Expect("(", "'(' after printf"); !s.ok()) return s;
    Skip();
    if (Peek() != '"') return Error("expected a format string in double quotes");
    absl::StatusOr<std::string> format = ParseString();
    if (!format.ok()) return format.status();
    stmt.format = *std::move(format);
    while (Accept(",")) {
      absl::StatusOr<ExprPtr> arg = ParseExpr();
      if (!arg.ok()) return arg.status();
      stmt.args.push_back(*std::move(arg));
    }
    if (absl::Status s = Expect(")", "',' or ')' in printf(...)"); !s.ok()) return s;
    return stmt;
  }

  absl::StatusOr<std::string> ParseString() {
    const size_t start = pos_++;
    std::string out;
    while (!AtEnd() && Peek() != '"') {
      char c = text_[pos_++];
      if (c == '\\') {
        if (AtEnd()) break;
        const char e = text_[pos_++];
        switch (e) {
          case 'n': c = '\n'; break;
          case 't': c = '\t'; break;
          case '\\': c = '\\'; break;
          case '"': c = '"'; break;
          default:
            pos_ -= 2;
            return Error("unknown escape in the string (use \\n, \\t, \\\\ or \\\")");
        }
      }
      out += c;
    }
    if (AtEnd()) {
      pos_ = start;
      return Error("the string is not closed: expected '\"'");
    }
    ++pos_;
    return out;
  }

  absl::StatusOr<Stmt> ParseIf(Stmt stmt) {
    stmt.kind = Stmt::Kind::kIf;
    if (absl::Status s = Expect("(", "'(' after if"); !s.ok()) return s;
    absl::StatusOr<ExprPtr> cond = ParseExpr();
    if (!cond.ok()) return cond.status();
    stmt.args.push_back(*std::move(cond));
    if (absl::Status s = Expect(")", "')' after the condition"); !s.ok()) return s;
    absl::StatusOr<Block> then_block = ParseBlock();
    if (!then_block.ok()) return then_block.status();
    stmt.then_block = *std::move(then_block);
    if (AcceptWord("else")) {
      if (LookingAt("if")) {
        Stmt nested;
        nested.column = Column();
        AcceptWord("if");
        absl::StatusOr<Stmt> inner = ParseIf(std::move(nested));
        if (!inner.ok()) return inner.status();
        stmt.else_block.push_back(*std::move(inner));
      } else {
        absl::StatusOr<Block> else_block = ParseBlock();
        if (!else_block.ok()) return else_block.status();
        stmt.else_block = *std::move(else_block);
      }
    }
    return stmt;
  }

  // ---- expressions ----
  absl::StatusOr<ExprPtr> ParseExpr() {
    absl::StatusOr<ExprPtr> cond = ParseBinary(0);
    if (!cond.ok()) return cond;
    const int column = Column();
    if (!Accept("?")) return cond;
    absl::StatusOr<ExprPtr> yes = ParseExpr();
    if (!yes.ok()) return yes;
    if (absl::Status s = Expect(":", "':' in the ternary a ? b : c"); !s.ok()) return s;
    absl::StatusOr<ExprPtr> no = ParseExpr();
    if (!no.ok()) return no;
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::kTernary;
    e->column = column;
    e->kids.push_back(*std::move(cond));
    e->kids.push_back(*std::move(yes));
    e->kids.push_back(*std::move(no));
    return e;
  }

  // The operator of `level` at the cursor, or nullopt. '|' is not '||', '&'
  // not '&&', '<' not '<<'; in a filter, a '/' followed by '{' closes it.
  std::optional<std::string_view> OperatorAt(int level) {
    Skip();
    for (std::string_view op : kLevels[level]) {
      if (op.empty() || text_.substr(pos_, op.size()) != op) continue;
      const char next = Peek(op.size());
      if ((op == "|" || op == "&" || op == "<" || op == ">") && next == op[0]) continue;
      if (op == "/" && in_filter_) {
        size_t p = pos_ + 1;
        while (p < text_.size() && std::isspace(static_cast<unsigned char>(text_[p]))) ++p;
        if (p >= text_.size() || text_[p] == '{') return std::nullopt;
      }
      return op;
    }
    return std::nullopt;
  }

  absl::StatusOr<ExprPtr> ParseBinary(int level) {
    if (level == kNumLevels) return ParseUnary();
    absl::StatusOr<ExprPtr> left = ParseBinary(level + 1);
    if (!left.ok()) return left;
    while (true) {
      const int column = Column();
      std::optional<std::string_view> op = OperatorAt(level);
      if (!op.has_value()) return left;
      pos_ += op->size();
      absl::StatusOr<ExprPtr> right = ParseBinary(level + 1);
      if (!right.ok()) return right;
      auto e = std::make_unique<Expr>();
      e->kind = Expr::Kind::kBinary;
      e->op = std::string(*op);
      e->column = column;
      e->kids.push_back(*std::move(left));
      e->kids.push_back(*std::move(right));
      left = std::move(e);
    }
  }

  absl::StatusOr<ExprPtr> ParseUnary() {
    const int column = Column();
    for (std::string_view op : {"!", "~", "-"}) {
      if (op == "!" && LookingAt("!=")) break;
      if (!Accept(op)) continue;
      absl::StatusOr<ExprPtr> operand = ParseUnary();
      if (!operand.ok()) return operand;
      auto e = std::make_unique<Expr>();
      e->kind = Expr::Kind::kUnary;
      e->op = std::string(op);
      e->column = column;
      e->kids.push_back(*std::move(operand));
      return e;
    }
    return ParsePrimary();
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    auto e = std::make_unique<Expr>();
    e->column = Column();
    if (Accept("(")) {
      absl::StatusOr<ExprPtr> inner = ParseExpr();
      if (!inner.ok()) return inner;
      if (absl::Status s = Expect(")", "')'"); !s.ok()) return s;
      return inner;
    }
    if (std::isdigit(static_cast<unsigned char>(Peek()))) return ParseInt(std::move(e));
    if (Accept("$")) {
      e->kind = Expr::Kind::kVar;
      e->name = Ident();
      if (e->name.empty()) return Error("expected a variable name after '$'");
      return e;
    }
    if (LookingAt("@")) {
      return Error("maps cannot be read in expressions; a map is set by @name = ... and "
                   "printed at the end");
    }
    if (!IsIdentStart(Peek())) {
      return Error(absl::StrCat("expected an expression (a number, a builtin such as tid.x, or "
                                "a $variable), found ", Found()));
    }
    e->kind = Expr::Kind::kBuiltin;
    e->name = Ident();
    if (Peek() == '.') {
      ++pos_;
      const std::string field = Ident();
      if (field != "x" && field != "y" && field != "z") {
        return Error(absl::StrCat("expected x, y or z after '", e->name, ".'"));
      }
      absl::StrAppend(&e->name, ".", field);
    }
    if (LookingAt("(")) {
      pos_ = static_cast<size_t>(e->column);
      return Error(absl::StrCat("'", e->name, "(...)' cannot be used here: map functions such as "
                                "count() and hist(x) go on the right of @map = "));
    }
    return e;
  }

  absl::StatusOr<ExprPtr> ParseInt(ExprPtr e) {
    e->kind = Expr::Kind::kInt;
    const size_t start = pos_;
    int base = 10;
    if (Peek() == '0' && (Peek(1) == 'x' || Peek(1) == 'X')) {
      base = 16;
      pos_ += 2;
    }
    uint64_t v = 0;
    bool overflow = false, any = false;
    while (!AtEnd() && std::isxdigit(static_cast<unsigned char>(Peek()))) {
      const char c = Peek();
      const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                                                                 : std::tolower(c) - 'a' + 10;
      if (d >= base) break;
      if (v > (~uint64_t{0} - static_cast<uint64_t>(d)) / static_cast<uint64_t>(base)) overflow = true;
      v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
      any = true;
      ++pos_;
    }
    if (!any || IsIdentChar(Peek())) {
      pos_ = start;
      return Error("expected a number (decimal, or hex as 0x...)");
    }
    if (overflow) {
      pos_ = start;
      return Error("the number does not fit in 64 bits");
    }
    e->value = static_cast<int64_t>(v);
    return e;
  }

  std::string_view text_;
  size_t pos_ = 0;
  bool in_filter_ = false;
};

}  // namespace

absl::StatusOr<Program> ParseOneliner(std::string_view text) { return Parser(text).Parse(); }

}  // namespace cuprobe::oneliner
