// File: ptx_rewriter/redux_pass.cc
#include "ptx_rewriter/redux_pass.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ptx_rewriter/ptx_parser.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

absl::Status Unknown(const Module& m, const Statement& s, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(m.name, ":", s.line, ": cannot lower '", s.text,
                                                 "' for a tools patch module: ", why));
}

// The instruction that combines two values for `redux.sync.<op>.<type>`
// ("add.u32"), or empty when the pass does not know the form.
std::string CombineOpcode(std::string_view opcode) {
  std::vector<std::string_view> parts = absl::StrSplit(opcode, '.');
  if (parts.size() != 4 || parts[0] != "redux" || parts[1] != "sync") return "";
  const std::string_view op = parts[2], type = parts[3];
  const bool arith = op == "add" || op == "min" || op == "max";
  const bool logic = op == "and" || op == "or" || op == "xor";
  if ((arith && (type == "u32" || type == "s32")) || (logic && type == "b32")) {
    return absl::StrCat(op, ".", type);
  }
  return "";
}

// The shfl.sync sequence that computes `d = redux(a, mask)` (see the file
// comment); labels numbered `n`.
std::string LoweredRedux(std::string_view combine, std::string_view d, std::string_view a,
                         std::string_view mask, int n) {
  const std::string label = absl::StrCat("$L__cprx", n);
  std::string out = absl::StrCat(
      "{\n"
      ".reg .b32 %__cprx_m, %__cprx_acc, %__cprx_v, %__cprx_l;\n"
      ".reg .pred %__cprx_p;\n"
      "mov.b32 %__cprx_m, ", mask, ";\n"
      "setp.ne.b32 %__cprx_p, %__cprx_m, -1;\n"
      "@%__cprx_p bra ", label, "_part;\n"
      "mov.b32 %__cprx_acc, ", a, ";\n");
  for (int lanes = 16; lanes >= 1; lanes /= 2) {
    absl::StrAppend(&out, "shfl.sync.bfly.b32 %__cprx_v, %__cprx_acc, ", lanes, ", 31, -1;\n",
                    combine, " %__cprx_acc, %__cprx_acc, %__cprx_v;\n");
  }
  // Members one at a time, highest lane first: every member runs the same
  // iterations with the same lane, so the shuffles pair up.
  absl::StrAppend(&out, "bra ", label, "_done;\n",
                  label, "_part:\n"
                  "bfind.u32 %__cprx_l, %__cprx_m;\n"
                  "shfl.sync.idx.b32 %__cprx_acc, ", a, ", %__cprx_l, 31, ", mask, ";\n",
                  label, "_loop:\n"
                  "mov.b32 %__cprx_v, 1;\n"
                  "shl.b32 %__cprx_v, %__cprx_v, %__cprx_l;\n"
                  "xor.b32 %__cprx_m, %__cprx_m, %__cprx_v;\n"
                  "setp.eq.b32 %__cprx_p, %__cprx_m, 0;\n"
                  "@%__cprx_p bra ", label, "_done;\n"
                  "bfind.u32 %__cprx_l, %__cprx_m;\n"
                  "shfl.sync.idx.b32 %__cprx_v, ", a, ", %__cprx_l, 31, ", mask, ";\n",
                  combine, " %__cprx_acc, %__cprx_acc, %__cprx_v;\n"
                  "bra ", label, "_loop;\n",
                  label, "_done:\n"
                  "mov.b32 ", d, ", %__cprx_acc;\n"
                  "}\n");
  return out;
}

// The replacement of one redux statement, its guard turned into a branch.
absl::StatusOr<std::string> Replacement(const Module& m, const Statement& s, int n) {
  const std::string combine = CombineOpcode(s.opcode);
  if (combine.empty()) return Unknown(m, s, "unknown redux operation or type");
  std::vector<std::string_view> ops = SplitOperands(s.operands);
  if (ops.size() != 3) return Unknown(m, s, "expected three operands");
  std::string text = LoweredRedux(combine, ops[0], ops[1], ops[2], n);
  if (s.guard.empty()) return text;
  // `@%p redux ...` runs when %p holds: skip the sequence when it does not.
  const std::string skip = absl::StrCat("$L__cprx", n, "_skip");
  return absl::StrCat("@", s.guard_negated ? "" : "!", s.guard, " bra ", skip, ";\n", text, skip,
                      ":\n");
}

}  // namespace

absl::StatusOr<int> LowerRedux(Module& module) {
  int lowered = 0;
  for (Function& f : module.functions) {
    bool has_redux = false;
    for (const Statement& s : f.body) {
      if (absl::StrContains(s.text, "%__cprx")) {
        return Unknown(module, s, "the function already uses the pass's register names");
      }
      has_redux |= s.IsInstruction() && s.Op() == "redux";
    }
    if (!has_redux) continue;
    std::vector<Statement> body;
    body.reserve(f.body.size() + 64);
    for (const Statement& s : f.body) {
      if (!s.IsInstruction() || s.Op() != "redux") {
        body.push_back(s);
        continue;
      }
      CUPROBE_ASSIGN_OR_RETURN(std::string text, Replacement(module, s, lowered));
      CUPROBE_ASSIGN_OR_RETURN(std::vector<Statement> added,
                               ParseBodyStatements(module.Own(std::move(text)), module.name));
      for (Statement& a : added) a.line = s.line;
      body.insert(body.end(), added.begin(), added.end());
      ++lowered;
    }
    f.body = std::move(body);
  }
  return lowered;
}

}  // namespace cuprobe
