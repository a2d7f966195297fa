// File: ptx_rewriter/inline_pass.cc
#include "ptx_rewriter/inline_pass.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "ptx_rewriter/link_pass.h"
#include "ptx_rewriter/ptx_parser.h"

namespace cuprobe {
namespace {

constexpr int kArgs = 5;

// A probe call site of the kernel editor: statements [open, close] of the
// kernel body.
struct Site {
  size_t open = 0;
  size_t close = 0;
  std::string_view function;
  std::string_view guard;
  bool guard_negated = false;
  std::string args[kArgs];
};

// The site whose `{` is at body[i], if the block is exactly what
// ProbeCallText emits with a direct call.
std::optional<Site> MatchSite(const std::vector<Statement>& body, size_t i) {
  if (body[i].kind != StatementKind::kBlockOpen) return std::nullopt;
  Site site;
  site.open = i;
  bool have[kArgs] = {};
  for (size_t j = i + 1; j < body.size(); ++j) {
    const Statement& s = body[j];
    if (s.kind == StatementKind::kBlockClose) {
      if (site.function.empty()) return std::nullopt;
      for (bool h : have) {
        if (!h) return std::nullopt;
      }
      site.close = j;
      return site;
    }
    if (s.kind == StatementKind::kDeclaration && s.opcode == ".param" &&
        absl::StrContains(s.text, "__cp_")) {
      continue;
    }
    if (!s.IsInstruction()) return std::nullopt;
    const std::vector<std::string_view> ops = SplitOperands(s.operands);
    if (s.Op() == "st" && s.HasModifier("param") && ops.size() == 2 && s.guard.empty()) {
      std::string_view slot = ops[0];
      if (!absl::ConsumePrefix(&slot, "[__cp_a") || !absl::ConsumeSuffix(&slot, "]")) {
        return std::nullopt;
      }
      int k = -1;
      if (!absl::SimpleAtoi(slot, &k) || k < 0 || k >= kArgs) return std::nullopt;
      site.args[k] = std::string(ops[1]);
      have[k] = true;
      continue;
    }
    if (s.Op() == "call" && site.function.empty() && ops.size() == 3 && ops[0] == "(__cp_ret)") {
      site.function = ops[1];
      site.guard = s.guard;
      site.guard_negated = s.guard_negated;
      continue;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

// A load of a parameter: `ld.param.T d, [name]` or `ld.param.T d,
// [name+K]`, scalar, unguarded or not.
struct ParamLoad {
  size_t param = 0;
  uint32_t offset = 0;  // bytes into the parameter
  uint32_t bits = 0;    // T's width
  bool is_signed = false;
};

// The width of a scalar PTX type (u8..u64, s*, b*, f*); 0 for others.
uint32_t TypeBits(std::string_view type) {
  if (type.size() < 2 || (type[0] != 'u' && type[0] != 's' && type[0] != 'b' && type[0] != 'f')) {
    return 0;
  }
  uint32_t bits = 0;
  if (!absl::SimpleAtoi(type.substr(1), &bits)) return 0;
  return bits == 8 || bits == 16 || bits == 32 || bits == 64 ? bits : 0;
}

std::optional<ParamLoad> MatchParamLoad(const Statement& s, const std::vector<std::string_view>& ops,
                                        const std::vector<std::string>& names) {
  if (s.Op() != "ld" || !s.HasModifier("param") || ops.size() != 2 || s.HasModifier("v2") ||
      s.HasModifier("v4")) {
    return std::nullopt;
  }
  std::string_view where = ops[1];
  if (!absl::ConsumePrefix(&where, "[") || !absl::ConsumeSuffix(&where, "]")) return std::nullopt;
  ParamLoad load;
  const size_t plus = where.find('+');
  if (plus != std::string_view::npos) {
    if (!absl::SimpleAtoi(where.substr(plus + 1), &load.offset)) return std::nullopt;
    where = absl::StripAsciiWhitespace(where.substr(0, plus));
  }
  const size_t dot = s.opcode.rfind('.');
  const std::string_view type = s.opcode.substr(dot + 1);
  load.bits = TypeBits(type);
  load.is_signed = !type.empty() && type[0] == 's';
  if (load.bits == 0) return std::nullopt;
  for (size_t k = 0; k < names.size(); ++k) {
    if (where != names[k]) continue;
    load.param = k;
    return load;
  }
  return std::nullopt;
}

// What inlining a function needs, computed once per function.
struct Callee {
  bool ok = false;
  // Parameters read in part (`ld.param.u16 %rs, [p+2]`): a site must pass
  // an immediate for them, whose part is folded into a move.
  bool needs_immediate[kArgs] = {};
  // Identifier renames, with "@" standing for the site's prefix.
  std::vector<std::pair<std::string, std::string>> renames;
  std::vector<std::string> param_names;  // index = argument
  std::vector<uint32_t> param_bits;
  std::string retval;  // the return parameter's name, or empty
  absl::flat_hash_map<std::string, uint32_t> reg_bits;  // declared registers' widths
};

uint32_t RegBits(std::string_view type) {
  if (type == ".pred") return 1;
  if (absl::EndsWith(type, "64")) return 64;
  if (absl::EndsWith(type, "32")) return 32;
  if (absl::EndsWith(type, "16")) return 16;
  if (absl::EndsWith(type, "8")) return 8;
  return 0;
}

bool IsImmediate(std::string_view operand) {
  return !operand.empty() && (absl::ascii_isdigit(operand[0]) || operand[0] == '-');
}

// The value of an immediate operand as the kernel editor writes them
// (decimal, 0x hex, optionally negative).
std::optional<uint64_t> ImmediateValue(std::string_view text) {
  bool negative = absl::ConsumePrefix(&text, "-");
  uint64_t v = 0;
  if (absl::ConsumePrefix(&text, "0x") || absl::ConsumePrefix(&text, "0X")) {
    if (!absl::SimpleHexAtoi(text, &v)) return std::nullopt;
  } else if (!absl::SimpleAtoi(text, &v)) {
    return std::nullopt;
  }
  return negative ? ~v + 1 : v;
}

// The bytes [offset, offset + bits/8) of a little-endian `param_bits`
// value, extended (by sign when `is_signed`) to `dst_bits`, as PTX text.
std::string FoldedPart(uint64_t value, const ParamLoad& load, uint32_t dst_bits) {
  uint64_t part = value >> (8 * load.offset);
  if (load.bits < 64) {
    const uint64_t mask = (uint64_t{1} << load.bits) - 1;
    part &= mask;
    if (load.is_signed && (part >> (load.bits - 1)) != 0) part |= ~mask;
  }
  if (dst_bits < 64) part &= (uint64_t{1} << dst_bits) - 1;
  return absl::StrCat(part);
}

Callee Analyze(const Function& f) {
  Callee c;
  if (!f.has_body || f.params.size() != kArgs || f.returns.size() > 1) return c;
  for (const Param& p : f.params) {
    if (p.space != ".param" || p.array_count != 0 || (p.size != 4 && p.size != 8)) return c;
    c.param_names.emplace_back(p.name);
    c.param_bits.push_back(p.size * 8);
  }
  if (!f.returns.empty()) c.retval = std::string(f.returns[0].name);
  for (const Statement& s : f.body) {
    switch (s.kind) {
      case StatementKind::kDeclaration: {
        absl::StatusOr<Declaration> d = ParseDeclaration(s);
        if (!d.ok()) return c;
        if (d->space == ".param") break;  // inside a helper call's block
        if (d->space != ".reg" && d->space != ".local") return c;
        for (std::string_view name : d->names) {
          const std::string base(name);
          if (d->space == ".reg") {
            const uint32_t bits = RegBits(d->type);
            c.reg_bits[base] = bits;
            for (uint32_t k = 0; k < d->count; ++k) c.reg_bits[absl::StrCat(base, k)] = bits;
          }
          std::string renamed = absl::StrCat(
              absl::StartsWith(base, "%") ? "%" : "", "__ci@_", absl::StripPrefix(base, "%"));
          if (d->count > 0) {
            for (uint32_t k = 0; k < d->count; ++k) {
              c.renames.emplace_back(absl::StrCat(base, k), absl::StrCat(renamed, k));
            }
          }
          c.renames.emplace_back(base, std::move(renamed));
        }
        break;
      }
      case StatementKind::kLabel:
        c.renames.emplace_back(std::string(s.operands),
                               absl::StrCat("$__ci@_", absl::StripPrefix(s.operands, "$")));
        break;
      case StatementKind::kPrototype:
        return c;
      case StatementKind::kInstruction: {
        // A parameter may only be read by ld.param: whole, or in part
        // (then sites must pass it as an immediate).
        for (size_t k = 0; k < c.param_names.size(); ++k) {
          if (!absl::StrContains(s.operands, c.param_names[k])) continue;
          const std::vector<std::string_view> ops = SplitOperands(s.operands);
          const std::optional<ParamLoad> load = MatchParamLoad(s, ops, c.param_names);
          if (!load.has_value() || load->param != k || !s.guard.empty() ||
              8 * load->offset + load->bits > c.param_bits[k]) {
            return c;
          }
          if (load->offset != 0 || load->bits != c.param_bits[k]) c.needs_immediate[k] = true;
        }
        break;
      }
      default:
        break;
    }
  }
  c.ok = true;
  return c;
}

// The statements that replace `site` (with its braces), or nullopt.
std::optional<std::vector<Statement>> Expand(Module& m, const Function& f, const Callee& callee,
                                             const Site& site, size_t index) {
  const std::string tag = absl::StrCat(index);
  absl::flat_hash_map<std::string, std::string> renames;
  for (const auto& [from, to] : callee.renames) {
    std::string t = to;
    t.replace(t.find('@'), 1, tag);
    renames[from] = std::move(t);
  }
  const std::string end = absl::StrCat("$__ci", tag, "_end");
  const std::string nop = absl::StrCat("%__ci", tag, "_nop");
  std::string text = absl::StrCat("{\n.reg .b32 ", nop, ";\n");
  if (!site.guard.empty()) {
    absl::StrAppend(&text, "@", site.guard_negated ? "" : "!", site.guard, " bra ", end, ";\n");
  }
  for (const Statement& s : f.body) {
    if (s.kind == StatementKind::kDirective) continue;  // .loc, .pragma of the callee
    if (s.IsInstruction()) {
      const std::vector<std::string_view> ops = SplitOperands(s.operands);
      if (std::optional<ParamLoad> load = MatchParamLoad(s, ops, callee.param_names)) {
        const size_t k = load->param;
        const std::string original(ops[0]);
        const auto width = callee.reg_bits.find(original);
        if (!s.guard.empty() || width == callee.reg_bits.end()) return std::nullopt;
        std::string dst = original;
        if (std::optional<std::string> r = RenameIdentifiers(dst, renames)) dst = *r;
        const uint32_t bits = callee.param_bits[k];
        const std::string& arg = site.args[k];
        if (load->offset != 0 || load->bits != bits) {
          // A part of the argument: folded when the site passes a constant.
          const std::optional<uint64_t> value =
              IsImmediate(arg) ? ImmediateValue(arg) : std::nullopt;
          if (!value.has_value()) return std::nullopt;
          absl::StrAppend(&text, "mov.b", width->second, " ", dst, ", ",
                          FoldedPart(*value, *load, width->second), ";\n");
          continue;
        }
        if (width->second == bits || (width->second == 64 && IsImmediate(arg))) {
          // An immediate argument (kernel id, site index, 0) is small and
          // not negative: the same value at either width.
          absl::StrAppend(&text, "mov.b", width->second, " ", dst, ", ", arg, ";\n");
        } else if (width->second == 64 && bits == 32) {
          // ld.param.u32 / .s32 into a 64-bit register extends.
          absl::StrAppend(&text, "cvt.", s.HasModifier("s32") ? "s64.s32 " : "u64.u32 ", dst,
                          ", ", arg, ";\n");
        } else {
          return std::nullopt;
        }
        continue;
      }
      if (!callee.retval.empty() && s.Op() == "st" && s.HasModifier("param") &&
          !ops.empty() && absl::StartsWith(ops[0], absl::StrCat("[", callee.retval))) {
        continue;  // the probe's return value is unused
      }
      if (s.Op() == "ret") {
        std::string guard;
        if (!s.guard.empty()) guard = absl::StrCat("@", s.guard_negated ? "!" : "", s.guard, " ");
        if (std::optional<std::string> r = RenameIdentifiers(guard, renames)) guard = *r;
        absl::StrAppend(&text, guard, "bra ", end, ";\n");
        continue;
      }
    }
    std::string line(s.text);
    if (std::optional<std::string> r = RenameIdentifiers(line, renames)) line = *r;
    if (s.kind == StatementKind::kLabel && !absl::EndsWith(line, ":")) absl::StrAppend(&line, ":");
    absl::StrAppend(&text, line, "\n");
  }
  absl::StrAppend(&text, end, ":\nmov.u32 ", nop, ", 0;\n}\n");
  absl::StatusOr<std::vector<Statement>> parsed = ParseBodyStatements(m.Own(std::move(text)));
  if (!parsed.ok()) return std::nullopt;
  return *std::move(parsed);
}

}  // namespace

size_t InlineProbeCalls(Module& module) {
  absl::flat_hash_map<std::string_view, Callee> callees;
  size_t inlined = 0;
  for (Function& kernel : module.functions) {
    if (!kernel.is_kernel || !kernel.has_body) continue;
    // The names this pass gives must be new in the kernel.
    bool clash = false;
    for (const Statement& s : kernel.body) clash |= absl::StrContains(s.text, "__ci");
    if (clash) continue;
    std::vector<Statement> body;
    body.reserve(kernel.body.size());
    bool changed = false;
    for (size_t i = 0; i < kernel.body.size(); ++i) {
      std::optional<Site> site = MatchSite(kernel.body, i);
      const Function* f = site ? module.FindFunction(site->function) : nullptr;
      if (f != nullptr && f != &kernel && !f->is_kernel) {
        auto it = callees.find(f->name);
        if (it == callees.end()) it = callees.emplace(f->name, Analyze(*f)).first;
        if (it->second.ok) {
          std::optional<std::vector<Statement>> expanded =
              Expand(module, *f, it->second, *site, inlined);
          if (expanded) {
            for (Statement& s : *expanded) body.push_back(std::move(s));
            i = site->close;
            ++inlined;
            changed = true;
            continue;
          }
        }
      }
      body.push_back(kernel.body[i]);
    }
    if (changed) kernel.body = std::move(body);
  }
  return inlined;
}

}  // namespace cuprobe
