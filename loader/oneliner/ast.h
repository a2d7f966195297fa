// File: loader/oneliner/ast.h
//
// The syntax tree of a one-liner (`cuprobe run -e 'PROGRAM'`), the small
// bpftrace-like language of docs/ONELINERS.md:
//
//   exit:vec_add* { @exits[kernel] = count(); }
//   mem:*gemm* /kind == write/ { @bytes[kernel] = sum(size); }
//
// ParseOneliner (parser.h) builds it; TranslateOneliner (translate.h) turns
// it into a C probe. Every node keeps the column it starts at, for errors.
#ifndef CUPROBE_LOADER_ONELINER_AST_H_
#define CUPROBE_LOADER_ONELINER_AST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cuprobe::oneliner {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kInt,       // value
    kBuiltin,   // name: "kernel", "tid.x", "arg3", "read", ...
    kVar,       // name: a $variable, without the '$'
    kUnary,     // op: "!", "~", "-"; kids[0]
    kBinary,    // op: "+", "&&", "==", ...; kids[0], kids[1]
    kTernary,   // kids[0] ? kids[1] : kids[2]
  };
  Kind kind = Kind::kInt;
  int64_t value = 0;
  std::string name;
  std::string op;
  std::vector<ExprPtr> kids;
  int column = 0;  // 0-based, in the program text
};

// `@name[key, ...]` (keys empty for `@name`).
struct MapRef {
  std::string name;  // without the '@'
  std::vector<ExprPtr> keys;
  int column = 0;
};

struct Stmt;
using Block = std::vector<Stmt>;

struct Stmt {
  enum class Kind {
    kMapAssign,  // map = func(args) or map = args[0] (func empty)
    kVarAssign,  // $var = args[0]
    kPrintf,     // printf(format, args...)
    kIf,         // if (args[0]) then_block else else_block
  };
  Kind kind = Kind::kMapAssign;
  MapRef map;
  std::string var;     // kVarAssign
  std::string func;    // kMapAssign: "count", "sum", ..., or "" for a value
  int func_column = 0;
  std::string format;  // kPrintf, unescaped
  std::vector<ExprPtr> args;
  Block then_block, else_block;
  int column = 0;
};

enum class AttachPoint { kEntry, kExit, kMem };

struct Attach {
  AttachPoint point = AttachPoint::kEntry;
  std::string glob;
  int column = 0;
};

// One probe: attach points, an optional /filter/ and a block.
struct Probe {
  std::vector<Attach> attaches;
  ExprPtr filter;  // may be null
  Block body;
  int column = 0;
};

struct Program {
  std::vector<Probe> probes;
};

}  // namespace cuprobe::oneliner

#endif  // CUPROBE_LOADER_ONELINER_AST_H_
