// One-liner -> C probe. The C is plain enough that the probe compiler's
// fast paths see through it: keys in stack structs, one map per call site,
// adds through cuprobe_map_add. Values are s64 throughout, as in bpftrace;
// arithmetic that C leaves undefined (signed overflow, shifts by 64 or more,
// division by zero) is defined here: it wraps, masks the shift and yields 0.
#include "loader/oneliner/translate.h"

#include <algorithm>
#include <map>
#include <cstring>
#include <optional>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cuprobe/abi.h"
#include "loader/oneliner/ast.h"
#include "loader/oneliner/parser.h"

namespace cuprobe::oneliner {

uint32_t MapPlan::key_size() const {
  if (!keyed()) return 4;
  return 8 * static_cast<uint32_t>(keys.size() + (slots > 0 ? 1 : 0));
}

namespace {

constexpr uint32_t kAttachEntry = 1u << 0, kAttachExit = 1u << 1, kAttachMem = 1u << 2;
constexpr uint32_t kAnywhere = kAttachEntry | kAttachExit | kAttachMem;

struct Builtin {
  std::string_view name;
  std::string_view c;
  KeyKind key = KeyKind::kInt;
  uint32_t where = kAnywhere;
};

constexpr Builtin kBuiltins[] = {
    {"kernel", "(s64)ctx->kernel_id", KeyKind::kKernel},
    {"tid.x", "(s64)ctx->thread_idx[0]"}, {"tid.y", "(s64)ctx->thread_idx[1]"},
    {"tid.z", "(s64)ctx->thread_idx[2]"}, {"bid.x", "(s64)ctx->block_idx[0]"},
    {"bid.y", "(s64)ctx->block_idx[1]"},  {"bid.z", "(s64)ctx->block_idx[2]"},
    {"bdim.x", "(s64)ctx->block_dim[0]"}, {"bdim.y", "(s64)ctx->block_dim[1]"},
    {"bdim.z", "(s64)ctx->block_dim[2]"}, {"gdim.x", "(s64)ctx->grid_dim[0]"},
    {"gdim.y", "(s64)ctx->grid_dim[1]"},  {"gdim.z", "(s64)ctx->grid_dim[2]"},
    {"gtid", "(s64)cuprobe_global_thread_id()"},
    {"sm", "(s64)ctx->sm_id"},
    {"warp", "(s64)ctx->warp_id"},
    {"lane", "(s64)ctx->lane_id"},
    {"nsecs", "(s64)ctx->global_timer"},
    {"clock", "(s64)ctx->clock"},
    {"grid", "(s64)cuprobe_grid_id()"},
    {"addr", "(s64)ctx->mem_addr", KeyKind::kInt, kAttachMem},
    {"size", "(s64)ctx->mem_size", KeyKind::kInt, kAttachMem},
    {"kind", "(s64)ctx->mem_kind", KeyKind::kAccessKind, kAttachMem},
    {"space", "(s64)ctx->mem_space", KeyKind::kSpace, kAttachMem},
    // The words `kind` and `space` compare with.
    {"read", "(s64)1"}, {"write", "(s64)2"}, {"atomic", "(s64)3"},
    {"global", "(s64)1"}, {"shared", "(s64)2"}, {"local", "(s64)3"}, {"generic", "(s64)4"},
};
static_assert(CUPROBE_ACCESS_LOAD == 1 && CUPROBE_ACCESS_STORE == 2 && CUPROBE_ACCESS_ATOMIC == 3);
static_assert(CUPROBE_SPACE_GLOBAL == 1 && CUPROBE_SPACE_SHARED == 2 &&
              CUPROBE_SPACE_LOCAL == 3 && CUPROBE_SPACE_GENERIC == 4);

std::string BuiltinNames() {
  std::vector<std::string> names;
  for (const Builtin& b : kBuiltins) {
    if (b.name == "read") break;
    names.emplace_back(b.name);
  }
  names.push_back("arg0..arg15");
  return absl::StrJoin(names, ", ");
}

std::string_view PointName(AttachPoint p) {
  switch (p) {
    case AttachPoint::kEntry: return "entry";
    case AttachPoint::kExit: return "exit";
    case AttachPoint::kMem: return "mem";
  }
  return "?";
}

uint32_t PointBit(AttachPoint p) {
  return p == AttachPoint::kEntry ? kAttachEntry : p == AttachPoint::kExit ? kAttachExit
                                                                           : kAttachMem;
}

struct FunctionInfo {
  std::string_view name;
  Aggregation aggregation;
  int args;
};
constexpr FunctionInfo kFunctions[] = {
    {"count", Aggregation::kCount, 0}, {"sum", Aggregation::kSum, 1},
    {"min", Aggregation::kMin, 1},     {"max", Aggregation::kMax, 1},
    {"avg", Aggregation::kAvg, 1},     {"stats", Aggregation::kStats, 1},
    {"hist", Aggregation::kHist, 1},   {"lhist", Aggregation::kLhist, 4},
};

std::string_view AggregationName(Aggregation a) {
  for (const FunctionInfo& f : kFunctions) {
    if (f.aggregation == a) return f.name;
  }
  return "a plain value";
}

// Words a map may not be named after: C's keywords and what the probe's C
// already defines.
bool ReservedName(std::string_view name) {
  static const std::set<std::string_view> kReserved = {
      "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
      "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
      "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch",
      "typedef", "union", "unsigned", "void", "volatile", "while", "ctx", "u8", "u16", "u32",
      "u64", "s8", "s16", "s32", "s64", "bool", "true", "false", "NULL", "main"};
  return kReserved.contains(name) || absl::StartsWith(name, "cuprobe") ||
         absl::StartsWith(name, "bpf_") || absl::StartsWith(name, "__") ||
         absl::StartsWith(name, "ol_") || absl::StartsWith(name, "v_");
}

// The constant value of an expression of integers and unary minus.
std::optional<int64_t> ConstantOf(const Expr& e) {
  if (e.kind == Expr::Kind::kInt) return e.value;
  if (e.kind == Expr::Kind::kUnary && e.op == "-") {
    std::optional<int64_t> v = ConstantOf(*e.kids[0]);
    if (v.has_value()) return static_cast<int64_t>(0ull - static_cast<uint64_t>(*v));
  }
  return std::nullopt;
}

// What C sees before the maps and programs: s64 arithmetic without undefined
// behaviour, and the histogram slots.
constexpr std::string_view kPrelude = R"(#include "cuprobe/probe.h"

static __always_inline s64 ol_div(s64 a, s64 b) { return b ? (s64)((u64)a / (u64)b) : 0; }
static __always_inline s64 ol_mod(s64 a, s64 b) { return b ? (s64)((u64)a % (u64)b) : 0; }
/* hist: 0 below zero, 1 for 0, 2 + floor(log2(v)) above. */
static __always_inline s64 ol_log2_slot(s64 v) {
  return v < 0 ? 0 : (s64)(65 - cuprobe_clz((u64)v));
}
/* lhist: 0 below min, 1 + (v - min) / step inside, buckets + 1 from max. */
static __always_inline s64 ol_linear_slot(s64 v, s64 min, s64 max, s64 step, s64 buckets) {
  if (v < min) return 0;
  if (v >= max) return buckets + 1;
  return 1 + (s64)((u64)(v - min) / (u64)step);
}
/* min and max keep an order-preserving code of the value in which 0 means
 * "nothing yet": max stores v ^ 2^63, min its complement; both then keep the
 * larger code, with a compare-and-swap that only loses to a larger one. */
static __always_inline void ol_keep_larger(u64 *slot, u64 code) {
  for (int i = 0; i < 1024; i++) {
    u64 old = *slot;
    if (code <= old) return;
    if (__sync_val_compare_and_swap(slot, old, code) == old) return;
  }
}

)";

class Translator {
 public:
  explicit Translator(std::string_view text) : text_(text) {}

  absl::StatusOr<Translation> Run() {
    absl::StatusOr<Program> program = ParseOneliner(text_);
    if (!program.ok()) return program.status();
    program_ = *std::move(program);
    for (const Probe& probe : program_.probes) {
      if (absl::Status s = PlanBlock(probe, probe.body); !s.ok()) return s;
      if (probe.filter) {
        if (absl::Status s = CheckExpr(probe, *probe.filter); !s.ok()) return s;
      }
    }
    Translation t;
    t.c_source = std::string(kPrelude);
    for (const MapPlan& m : maps_) t.c_source += MapDeclaration(m);
    std::map<std::string, int> per_point;
    for (const Probe& probe : program_.probes) {
      for (const Attach& a : probe.attaches) {
        const std::string name =
            absl::StrCat(PointName(a.point), "_", per_point[std::string(PointName(a.point))]++);
        t.c_source += ProgramSource(probe, a, name);
        if (a.point == AttachPoint::kMem && ReadsSpace(probe)) {
          t.mem_spaces.emplace_back(name, (1u << CUPROBE_SPACE_GLOBAL) |
                                              (1u << CUPROBE_SPACE_SHARED) |
                                              (1u << CUPROBE_SPACE_LOCAL) |
                                              (1u << CUPROBE_SPACE_GENERIC));
        }
      }
    }
    t.maps = maps_;
    return t;
  }

 private:
  absl::Status Error(int column, std::string_view message) const {
    return OnelinerError(text_, column, message);
  }

  // ---- checking and planning ----
  absl::Status PlanBlock(const Probe& probe, const Block& block) {
    for (const Stmt& s : block) {
      for (const ExprPtr& k : s.map.keys) {
        if (absl::Status st = CheckExpr(probe, *k); !st.ok()) return st;
      }
      for (const ExprPtr& a : s.args) {
        if (absl::Status st = CheckExpr(probe, *a); !st.ok()) return st;
      }
      switch (s.kind) {
        case Stmt::Kind::kMapAssign:
          if (absl::Status st = PlanMap(s); !st.ok()) return st;
          break;
        case Stmt::Kind::kVarAssign:
          break;
        case Stmt::Kind::kPrintf:
          if (absl::Status st = CheckPrintf(s); !st.ok()) return st;
          break;
        case Stmt::Kind::kIf:
          if (absl::Status st = PlanBlock(probe, s.then_block); !st.ok()) return st;
          if (absl::Status st = PlanBlock(probe, s.else_block); !st.ok()) return st;
          break;
      }
    }
    return absl::OkStatus();
  }

  static void CollectVars(const Block& block, std::set<std::string>& vars) {
    for (const Stmt& s : block) {
      if (s.kind == Stmt::Kind::kVarAssign) vars.insert(s.var);
      CollectVars(s.then_block, vars);
      CollectVars(s.else_block, vars);
    }
  }

  absl::Status CheckExpr(const Probe& probe, const Expr& e) const {
    for (const ExprPtr& k : e.kids) {
      if (absl::Status s = CheckExpr(probe, *k); !s.ok()) return s;
    }
    if (e.kind == Expr::Kind::kVar) {
      std::set<std::string> vars;
      CollectVars(probe.body, vars);
      if (!vars.contains(e.name)) {
        return Error(e.column, absl::StrCat("$", e.name, " is never assigned in this probe "
                                            "(assign it first: $", e.name, " = ...;)"));
      }
    }
    if (e.kind != Expr::Kind::kBuiltin || ArgIndex(e.name).has_value()) return absl::OkStatus();
    const Builtin* b = FindBuiltin(e.name);
    if (b == nullptr) {
      if (e.name == "tid" || e.name == "bid" || e.name == "bdim" || e.name == "gdim") {
        return Error(e.column, absl::StrCat(e.name, " has three parts: use ", e.name, ".x, ",
                                            e.name, ".y or ", e.name, ".z"));
      }
      return Error(e.column, absl::StrCat("unknown builtin '", e.name, "'; expected one of ",
                                          BuiltinNames(), ", or a number"));
    }
    for (const Attach& a : probe.attaches) {
      if ((b->where & PointBit(a.point)) == 0) {
        return Error(e.column, absl::StrCat(e.name, " exists only in mem: probes (this probe "
                                            "attaches at ", PointName(a.point), ":", a.glob, ")"));
      }
    }
    return absl::OkStatus();
  }

  static const Builtin* FindBuiltin(std::string_view name) {
    for (const Builtin& b : kBuiltins) {
      if (b.name == name) return &b;
    }
    return nullptr;
  }

  static std::optional<int> ArgIndex(std::string_view name) {
    int i = 0;
    if (!absl::ConsumePrefix(&name, "arg") || name.empty() || name.size() > 2 ||
        !absl::SimpleAtoi(name, &i) || i < 0 || i >= CUPROBE_MAX_ARGS ||
        (name.size() == 2 && name[0] == '0')) {
      return std::nullopt;
    }
    return i;
  }

  static KeyKind KeyKindOf(const Expr& e) {
    if (e.kind != Expr::Kind::kBuiltin) return KeyKind::kInt;
    const Builtin* b = FindBuiltin(e.name);
    return b == nullptr ? KeyKind::kInt : b->key;
  }

  absl::Status PlanMap(const Stmt& s) {
    if (ReservedName(s.map.name) && !s.map.name.empty()) {
      return Error(s.map.column, absl::StrCat("@", s.map.name, " cannot be a map's name (it is "
                                              "a C keyword or a name cuprobe uses); pick another"));
    }
    MapPlan plan;
    plan.name = s.map.name;
    plan.c_name = s.map.name.empty() ? "_" : s.map.name;
    for (const ExprPtr& k : s.map.keys) plan.keys.push_back(KeyKindOf(*k));
    if (s.func.empty()) {
      plan.aggregation = Aggregation::kValue;
    } else {
      const FunctionInfo* f = nullptr;
      for (const FunctionInfo& fi : kFunctions) {
        if (fi.name == s.func) f = &fi;
      }
      if (f == nullptr) {
        return Error(s.func_column, absl::StrCat("unknown map function '", s.func, "'; expected "
                                                 "count(), sum(x), min(x), max(x), avg(x), "
                                                 "stats(x), hist(x) or lhist(x, min, max, step)"));
      }
      if (static_cast<int>(s.args.size()) != f->args) {
        return Error(s.func_column,
                     absl::StrCat(s.func, "() takes ", f->args, f->args == 1 ? " argument" : " arguments",
                                  f->name == "lhist" ? " (x, min, max, step)" : "", ", not ",
                                  s.args.size()));
      }
      plan.aggregation = f->aggregation;
      if (absl::Status st = PlanSlots(s, plan); !st.ok()) return st;
    }
    if (plan.aggregation == Aggregation::kAvg || plan.aggregation == Aggregation::kStats) {
      plan.slots = 2;
    } else if (plan.aggregation == Aggregation::kHist) {
      plan.slots = 66;
    }
    if (plan.keyed()) {
      plan.max_entries = std::min<uint32_t>(4096 * std::max<uint32_t>(plan.slots, 1) , 1u << 18);
      plan.max_entries = std::max<uint32_t>(plan.max_entries, 10240);
    } else {
      plan.max_entries = std::max<uint32_t>(plan.slots, 1);
    }
    for (MapPlan& seen : maps_) {
      if (seen.c_name != plan.c_name) continue;
      if (seen.aggregation != plan.aggregation) {
        return Error(s.func.empty() ? s.map.column : s.func_column,
                     absl::StrCat("@", plan.name, " already holds ", AggregationName(seen.aggregation),
                                  seen.aggregation == Aggregation::kValue ? "" : "()",
                                  "; a map keeps one kind of value"));
      }
      if (seen.keys.size() != plan.keys.size()) {
        return Error(s.map.column, absl::StrCat("@", plan.name, " has ", seen.keys.size(),
                                                " key", seen.keys.size() == 1 ? "" : "s",
                                                " elsewhere, ", plan.keys.size(), " here"));
      }
      if (seen.aggregation == Aggregation::kLhist &&
          (seen.lhist_min != plan.lhist_min || seen.lhist_max != plan.lhist_max ||
           seen.lhist_step != plan.lhist_step)) {
        return Error(s.func_column, absl::StrCat("@", plan.name, " has other lhist bounds "
                                                 "elsewhere"));
      }
      for (size_t i = 0; i < seen.keys.size(); ++i) {
        if (seen.keys[i] != plan.keys[i]) seen.keys[i] = KeyKind::kInt;
      }
      return absl::OkStatus();
    }
    maps_.push_back(std::move(plan));
    return absl::OkStatus();
  }

  absl::Status PlanSlots(const Stmt& s, MapPlan& plan) const {
    if (plan.aggregation != Aggregation::kLhist) return absl::OkStatus();
    int64_t bounds[3];
    for (int i = 0; i < 3; ++i) {
      std::optional<int64_t> v = ConstantOf(*s.args[i + 1]);
      if (!v.has_value()) {
        return Error(s.args[i + 1]->column, "lhist's min, max and step must be numbers");
      }
      bounds[i] = *v;
    }
    const auto [min, max, step] = std::tuple(bounds[0], bounds[1], bounds[2]);
    if (step <= 0) return Error(s.args[3]->column, "lhist's step must be positive");
    if (max <= min) return Error(s.args[2]->column, "lhist's max must be above its min");
    const __int128 buckets = (static_cast<__int128>(max) - min + step - 1) / step;
    if (buckets > kMaxLhistBuckets) {
      return Error(s.func_column, absl::StrCat("lhist(x, ", min, ", ", max, ", ", step, ") has ",
                                               static_cast<int64_t>(buckets), " buckets; at most ",
                                               kMaxLhistBuckets));
    }
    plan.lhist_min = min;
    plan.lhist_max = max;
    plan.lhist_step = step;
    plan.slots = static_cast<uint32_t>(buckets) + 2;
    return absl::OkStatus();
  }

  absl::Status CheckPrintf(const Stmt& s) const {
    size_t conversions = 0;
    for (size_t i = 0; i < s.format.size(); ++i) {
      if (s.format[i] != '%') continue;
      if (i + 1 < s.format.size() && s.format[i + 1] == '%') {
        ++i;
        continue;
      }
      size_t j = i + 1;
      while (j < s.format.size() && std::strchr("-+ #0123456789.lhzjt", s.format[j]) != nullptr) ++j;
      if (j >= s.format.size() || std::strchr("diuxXocp", s.format[j]) == nullptr) {
        return Error(s.column, absl::StrCat("printf: '", s.format.substr(i, j - i + 1),
                                            "' is not an integer conversion (%d, %u, %x, %o, "
                                            "%c, %p; one-liners print numbers only)"));
      }
      ++conversions;
      i = j;
    }
    if (conversions != s.args.size()) {
      return Error(s.column, absl::StrCat("printf: the format has ", conversions,
                                          " conversions and ", s.args.size(), " arguments follow"));
    }
    if (s.args.size() > 3) {
      return Error(s.args[3]->column, "printf takes at most 3 arguments after the format");
    }
    return absl::OkStatus();
  }

  static bool ExprReads(const Expr& e, std::string_view name) {
    if (e.kind == Expr::Kind::kBuiltin && e.name == name) return true;
    for (const ExprPtr& k : e.kids) {
      if (ExprReads(*k, name)) return true;
    }
    return false;
  }
  static bool BlockReads(const Block& block, std::string_view name) {
    for (const Stmt& s : block) {
      for (const ExprPtr& a : s.args) {
        if (ExprReads(*a, name)) return true;
      }
      for (const ExprPtr& k : s.map.keys) {
        if (ExprReads(*k, name)) return true;
      }
      if (BlockReads(s.then_block, name) || BlockReads(s.else_block, name)) return true;
    }
    return false;
  }
  static bool ReadsSpace(const Probe& probe) {
    return (probe.filter && ExprReads(*probe.filter, "space")) || BlockReads(probe.body, "space");
  }

  // ---- emitting ----
  static std::string MapDeclaration(const MapPlan& m) {
    std::string out;
    std::string key_type = "u32";
    if (m.keyed()) {
      key_type = absl::StrCat("struct ol_key_", m.c_name);
      out += absl::StrCat(key_type, " {");
      for (size_t i = 0; i < m.keys.size(); ++i) absl::StrAppend(&out, " s64 k", i, ";");
      if (m.slots > 0) out += " s64 slot;";
      out += " };\n";
    }
    absl::StrAppend(&out, "struct {\n  __uint(type, ",
                    m.keyed() ? "BPF_MAP_TYPE_HASH" : "BPF_MAP_TYPE_ARRAY",
                    ");\n  __type(key, ", key_type, ");\n  __type(value, u64);\n",
                    "  __uint(max_entries, ", m.max_entries, ");\n} ", m.c_name,
                    " SEC(\".maps\");\n\n");
    return out;
  }

  std::string ProgramSource(const Probe& probe, const Attach& a, const std::string& name) {
    std::string out = absl::StrCat("SEC(\"cuprobe/", PointName(a.point), "/", a.glob, "\")\nint ",
                                   name, "(struct cuprobe_ctx *ctx) {\n");
    std::set<std::string> vars;
    CollectVars(probe.body, vars);
    for (const std::string& v : vars) absl::StrAppend(&out, "  s64 v_", v, " = 0;\n");
    if (probe.filter) absl::StrAppend(&out, "  if (!(", ExprC(*probe.filter), ")) return 0;\n");
    EmitBlock(probe.body, 1, out);
    out += "  return 0;\n}\n\n";
    return out;
  }

  void EmitBlock(const Block& block, int depth, std::string& out) {
    const std::string pad(2 * depth, ' ');
    for (const Stmt& s : block) {
      switch (s.kind) {
        case Stmt::Kind::kVarAssign:
          absl::StrAppend(&out, pad, "v_", s.var, " = ", ExprC(*s.args[0]), ";\n");
          break;
        case Stmt::Kind::kPrintf:
          absl::StrAppend(&out, pad, PrintfC(s), "\n");
          break;
        case Stmt::Kind::kIf:
          absl::StrAppend(&out, pad, "if (", ExprC(*s.args[0]), ") {\n");
          EmitBlock(s.then_block, depth + 1, out);
          if (!s.else_block.empty()) {
            absl::StrAppend(&out, pad, "} else {\n");
            EmitBlock(s.else_block, depth + 1, out);
          }
          absl::StrAppend(&out, pad, "}\n");
          break;
        case Stmt::Kind::kMapAssign:
          absl::StrAppend(&out, pad, "{\n");
          EmitMapUpdate(s, pad + "  ", out);
          absl::StrAppend(&out, pad, "}\n");
          break;
      }
    }
  }

  const MapPlan& PlanOf(const std::string& name) const {
    const std::string c_name = name.empty() ? "_" : name;
    for (const MapPlan& m : maps_) {
      if (m.c_name == c_name) return m;
    }
    return maps_.front();  // PlanMap saw every map
  }

  void EmitMapUpdate(const Stmt& s, const std::string& pad, std::string& out) {
    const MapPlan& m = PlanOf(s.map.name);
    const std::string map = absl::StrCat("&", m.c_name);
    // The key, with `slot` (unkeyed: the ARRAY index) set by SetSlot.
    if (m.keyed()) {
      absl::StrAppend(&out, pad, "struct ol_key_", m.c_name, " ol_k = {};\n");
      for (size_t i = 0; i < s.map.keys.size(); ++i) {
        absl::StrAppend(&out, pad, "ol_k.k", i, " = ", ExprC(*s.map.keys[i]), ";\n");
      }
    } else {
      absl::StrAppend(&out, pad, "u32 ol_k = 0;\n");
    }
    auto set_slot = [&](const std::string& slot) {
      absl::StrAppend(&out, pad, m.keyed() ? "ol_k.slot = " : "ol_k = ", m.keyed() ? "" : "(u32)",
                      slot, ";\n");
    };
    const std::string x = s.args.empty() ? "" : ExprC(*s.args[0]);
    switch (m.aggregation) {
      case Aggregation::kCount:
        absl::StrAppend(&out, pad, "cuprobe_map_add(", map, ", &ol_k, 1);\n");
        break;
      case Aggregation::kSum:
        absl::StrAppend(&out, pad, "cuprobe_map_add(", map, ", &ol_k, (u64)(", x, "));\n");
        break;
      case Aggregation::kAvg:
      case Aggregation::kStats:
        absl::StrAppend(&out, pad, "s64 ol_x = ", x, ";\n");
        set_slot("0");
        absl::StrAppend(&out, pad, "cuprobe_map_add(", map, ", &ol_k, 1);\n");
        set_slot("1");
        absl::StrAppend(&out, pad, "cuprobe_map_add(", map, ", &ol_k, (u64)ol_x);\n");
        break;
      case Aggregation::kHist:
        set_slot(absl::StrCat("ol_log2_slot(", x, ")"));
        absl::StrAppend(&out, pad, "cuprobe_map_add(", map, ", &ol_k, 1);\n");
        break;
      case Aggregation::kLhist:
        set_slot(absl::StrFormat("ol_linear_slot(%s, %dLL, %dLL, %dLL, %dLL)", x, m.lhist_min,
                                 m.lhist_max, m.lhist_step, m.slots - 2));
        absl::StrAppend(&out, pad, "cuprobe_map_add(", map, ", &ol_k, 1);\n");
        break;
      case Aggregation::kValue:
        absl::StrAppend(&out, pad, "u64 ol_v = (u64)(", x, ");\n", pad,
                        "cuprobe_map_update_elem(", map, ", &ol_k, &ol_v, BPF_ANY);\n");
        break;
      case Aggregation::kMin:
      case Aggregation::kMax: {
        const bool is_min = m.aggregation == Aggregation::kMin;
        absl::StrAppend(&out, pad, "u64 ol_code = ", is_min ? "~" : "", "((u64)(", x,
                        ") ^ 0x8000000000000000ULL);\n");
        absl::StrAppend(&out, pad, "u64 *ol_slot = cuprobe_map_lookup_elem(", map, ", &ol_k);\n");
        absl::StrAppend(&out, pad, "if (!ol_slot) {\n", pad, "  u64 ol_zero = 0;\n", pad,
                        "  cuprobe_map_update_elem(", map, ", &ol_k, &ol_zero, BPF_NOEXIST);\n", pad,
                        "  ol_slot = cuprobe_map_lookup_elem(", map, ", &ol_k);\n", pad, "}\n");
        absl::StrAppend(&out, pad, "if (ol_slot) ol_keep_larger(ol_slot, ol_code);\n");
        break;
      }
    }
  }

  std::string PrintfC(const Stmt& s) const {
    // Conversions without a length read 64 bits: every value is an s64.
    std::string format;
    for (size_t i = 0; i < s.format.size(); ++i) {
      const char c = s.format[i];
      if (c != '%') {
        format += c;
        continue;
      }
      if (i + 1 < s.format.size() && s.format[i + 1] == '%') {
        format += "%%";
        ++i;
        continue;
      }
      size_t j = i + 1;
      while (j < s.format.size() && std::strchr("-+ #0123456789.", s.format[j]) != nullptr) ++j;
      size_t k = j;
      while (k < s.format.size() && std::strchr("lhzjt", s.format[k]) != nullptr) ++k;
      format += s.format.substr(i, j - i);
      const char conv = s.format[k];
      format += (conv == 'c' || conv == 'p') ? "" : "ll";
      format += conv;
      i = k;
    }
    std::string out = absl::StrCat("bpf_printk(\"", CString(format), "\"");
    for (const ExprPtr& a : s.args) absl::StrAppend(&out, ", (s64)(", ExprC(*a), ")");
    return out + ");";
  }

  static std::string CString(std::string_view s) {
    std::string out;
    for (char c : s) {
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        absl::StrAppendFormat(&out, "\\%03o", static_cast<unsigned char>(c));
      } else {
        out += c;
      }
    }
    return out;
  }

  std::string ExprC(const Expr& e) const {
    switch (e.kind) {
      case Expr::Kind::kInt:
        return absl::StrCat("((s64)", static_cast<uint64_t>(e.value), "ULL)");
      case Expr::Kind::kVar:
        return absl::StrCat("v_", e.name);
      case Expr::Kind::kBuiltin: {
        if (std::optional<int> i = ArgIndex(e.name)) return absl::StrCat("(s64)ctx->args[", *i, "]");
        const Builtin* b = FindBuiltin(e.name);
        return b == nullptr ? "0" : std::string(b->c);
      }
      case Expr::Kind::kUnary:
        if (e.op == "!") return absl::StrCat("((s64)!(", ExprC(*e.kids[0]), "))");
        if (e.op == "-") return absl::StrCat("((s64)(0ULL - (u64)(", ExprC(*e.kids[0]), ")))");
        return absl::StrCat("(~(", ExprC(*e.kids[0]), "))");
      case Expr::Kind::kTernary:
        return absl::StrCat("((", ExprC(*e.kids[0]), ") ? (", ExprC(*e.kids[1]), ") : (",
                            ExprC(*e.kids[2]), "))");
      case Expr::Kind::kBinary:
        return BinaryC(e.op, ExprC(*e.kids[0]), ExprC(*e.kids[1]));
    }
    return "0";
  }

  static std::string BinaryC(std::string_view op, const std::string& a, const std::string& b) {
    if (op == "+" || op == "-" || op == "*") {
      return absl::StrCat("((s64)((u64)(", a, ") ", op, " (u64)(", b, ")))");
    }
    if (op == "/") return absl::StrCat("ol_div(", a, ", ", b, ")");
    if (op == "%") return absl::StrCat("ol_mod(", a, ", ", b, ")");
    if (op == "<<") return absl::StrCat("((s64)((u64)(", a, ") << ((", b, ") & 63)))");
    if (op == ">>") return absl::StrCat("((s64)((u64)(", a, ") >> ((", b, ") & 63)))");
    if (op == "&" || op == "|" || op == "^") return absl::StrCat("((", a, ") ", op, " (", b, "))");
    // Comparisons and logic: 0 or 1.
    return absl::StrCat("((s64)((", a, ") ", op, " (", b, ")))");
  }

  std::string_view text_;
  Program program_;
  std::vector<MapPlan> maps_;
};

}  // namespace

absl::StatusOr<Translation> TranslateOneliner(std::string_view text) {
  return Translator(text).Run();
}

}  // namespace cuprobe::oneliner
