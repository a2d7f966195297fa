// File: ptx_rewriter/link_pass.cc
#include "ptx_rewriter/link_pass.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "ptx_rewriter/ptx_lexer.h"
#include "ptx_rewriter/ptx_parser.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

bool IsHeaderDirective(const Statement& s) {
  return s.kind == StatementKind::kDirective &&
         (s.opcode == ".version" || s.opcode == ".target" || s.opcode == ".address_size");
}

// Module-level statements of an added module that do not travel.
bool DropsFromAddedModule(const Statement& s) {
  return IsHeaderDirective(s) ||
         (s.kind == StatementKind::kDirective &&
          (s.opcode == ".file" || s.opcode == ".section" || s.opcode == ".loc"));
}

bool IsExternVariable(const Statement& s) {
  return s.kind == StatementKind::kDeclaration && s.linkage == ".extern";
}

// "sm_90a, debug" -> 90; 0 when unreadable.
uint32_t TargetSm(std::string_view target) {
  const size_t p = target.find("sm_");
  if (p == std::string_view::npos) return 0;
  size_t e = p + 3;
  while (e < target.size() && target[e] >= '0' && target[e] <= '9') ++e;
  uint32_t sm = 0;
  return absl::SimpleAtoi(target.substr(p + 3, e - p - 3), &sm) ? sm : 0;
}

// Renames inside one statement and re-derives its parsed fields.
absl::Status RenameStatement(Module& m, Statement& s, bool in_body,
                             const absl::flat_hash_map<std::string, std::string>& renames) {
  std::optional<std::string> renamed = RenameIdentifiers(s.text, renames);
  if (!renamed) return absl::OkStatus();
  std::string_view text = m.Own(std::move(*renamed));
  if (in_body) {
    CUPROBE_ASSIGN_OR_RETURN(std::vector<Statement> parsed, ParseBodyStatements(text, m.name));
    if (parsed.size() != 1) {
      return absl::InternalError(absl::StrCat(m.name, ": renaming split a statement: ", text));
    }
    parsed[0].line = s.line;
    s = parsed[0];
    return absl::OkStatus();
  }
  // Module level: only the text and the declared name change.
  if (auto it = renames.find(s.operands); it != renames.end()) s.operands = m.Own(it->second);
  s.text = text;
  return absl::OkStatus();
}

}  // namespace

std::optional<std::string> RenameIdentifiers(
    std::string_view text, const absl::flat_hash_map<std::string, std::string>& renames) {
  if (renames.empty()) return std::nullopt;
  PtxLexer lex(text);
  std::string out;
  size_t copied = 0;
  bool changed = false;
  for (Token t = lex.Next(); t.kind != TokenKind::kEnd && t.kind != TokenKind::kError;
       t = lex.Next()) {
    if (t.kind != TokenKind::kIdentifier) continue;
    auto it = renames.find(t.text);
    if (it == renames.end()) continue;
    const size_t at = lex.OffsetOf(t);
    out.append(text.substr(copied, at - copied));
    out.append(it->second);
    copied = at + t.text.size();
    changed = true;
  }
  if (!changed) return std::nullopt;
  out.append(text.substr(copied));
  return out;
}

absl::StatusOr<ProbeLinker> ProbeLinker::Create(Module& main, std::vector<Module*> added) {
  ProbeLinker linker(main, std::move(added));
  CUPROBE_RETURN_IF_ERROR(linker.Prepare());
  return linker;
}

std::string_view ProbeLinker::LinkedName(std::string_view name) const {
  auto it = renames_.find(name);
  return it == renames_.end() ? name : std::string_view(it->second);
}

absl::Status ProbeLinker::Prepare() {
  Module& main = *main_;
  absl::flat_hash_set<std::string_view> main_symbols;
  for (const Function& f : main.functions) main_symbols.insert(f.name);
  for (const ModuleItem& item : main.items) {
    if (!item.is_function && item.statement.kind == StatementKind::kDeclaration) {
      main_symbols.insert(item.statement.operands);
    }
  }
  for (const char* ours :
       {CUPROBE_MAP_TABLE_SYMBOL, CUPROBE_MAP_DESCS_SYMBOL, CUPROBE_SITE_COUNTS_SYMBOL}) {
    if (main_symbols.contains(ours)) {
      return absl::FailedPreconditionError(absl::StrCat(
          main.name, ": the module already has ", ours,
          " (was it instrumented by cuprobe before?); instrument the original module"));
    }
  }

  // Definitions of the added modules, and who defines what.
  absl::flat_hash_map<std::string_view, const Module*> defined_by;
  const uint32_t main_sm = TargetSm(main.target);
  for (const Module* m : added_) {
    if (m->address_size != main.address_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          m->name, ": .address_size ", m->address_size, " does not match the module's ",
          main.address_size));
    }
    if (const uint32_t sm = TargetSm(m->target); sm > main_sm && main_sm != 0) {
      warnings_.push_back(absl::StrCat(m->name, " targets sm_", sm, " but the module targets sm_",
                                       main_sm, "; the module's target is kept"));
    }
    auto define = [&](std::string_view name) -> absl::Status {
      if (name == CUPROBE_MAP_TABLE_SYMBOL || name == CUPROBE_MAP_DESCS_SYMBOL) {
        return absl::InvalidArgumentError(absl::StrCat(
            m->name, " defines ", name,
            "; it must only declare it (.extern): the rewriter defines the map table"));
      }
      auto [it, inserted] = defined_by.emplace(name, m);
      if (!inserted && it->second != m) {
        return absl::InvalidArgumentError(absl::StrCat("both ", it->second->name, " and ", m->name,
                                                       " define '", name, "'"));
      }
      return absl::OkStatus();
    };
    for (const Function& f : m->functions) {
      if (f.has_body) CUPROBE_RETURN_IF_ERROR(define(f.name));
    }
    for (const ModuleItem& item : m->items) {
      if (!item.is_function && item.statement.kind == StatementKind::kDeclaration &&
          !IsExternVariable(item.statement)) {
        CUPROBE_RETURN_IF_ERROR(define(item.statement.operands));
      }
    }
  }
  // An added module that declares a symbol the application defines would
  // call into the application: not something a probe may do.
  for (const Module* m : added_) {
    for (const Function& f : m->functions) {
      if (!f.has_body && !defined_by.contains(f.name)) {
        const Function* mf = main.FindFunction(f.name);
        if (mf != nullptr && mf->has_body) {
          return absl::InvalidArgumentError(absl::StrCat(
              m->name, " declares '", f.name, "', which the module ", main.name,
              " defines; probes may only call helper functions"));
        }
      }
    }
  }

  // Rename added definitions the application also uses.
  absl::flat_hash_set<std::string> taken(main_symbols.begin(), main_symbols.end());
  for (const auto& [name, m] : defined_by) taken.insert(std::string(name));
  for (const auto& [name, m] : defined_by) {
    if (!main_symbols.contains(name)) continue;
    std::string fresh = absl::StrCat(name, "_cuprobe");
    for (int i = 2; taken.contains(fresh); ++i) fresh = absl::StrCat(name, "_cuprobe", i);
    taken.insert(fresh);
    renames_.emplace(std::string(name), std::move(fresh));
  }
  if (renames_.empty()) return absl::OkStatus();
  for (Module* m : added_) {
    for (ModuleItem& item : m->items) {
      if (!item.is_function) {
        CUPROBE_RETURN_IF_ERROR(RenameStatement(*m, item.statement, false, renames_));
      }
    }
    for (Function& f : m->functions) {
      if (std::optional<std::string> h = RenameIdentifiers(f.header, renames_)) {
        f.header = m->Own(std::move(*h));
      }
      if (auto it = renames_.find(f.name); it != renames_.end()) f.name = m->Own(it->second);
      for (Param& p : f.params) {
        if (auto it = renames_.find(p.name); it != renames_.end()) p.name = m->Own(it->second);
      }
      for (Statement& s : f.body) CUPROBE_RETURN_IF_ERROR(RenameStatement(*m, s, true, renames_));
    }
  }
  return absl::OkStatus();
}

namespace {

// Adds every identifier of `text` to `out`.
void CollectIdentifiers(std::string_view text, absl::flat_hash_set<std::string>* out) {
  PtxLexer lex(text);
  for (Token t = lex.Next(); t.kind != TokenKind::kEnd && t.kind != TokenKind::kError;
       t = lex.Next()) {
    if (t.kind == TokenKind::kIdentifier && t.text[0] != '%') out->emplace(t.text);
  }
}

void CollectIdentifiers(const Function& f, absl::flat_hash_set<std::string>* out) {
  CollectIdentifiers(f.header, out);
  for (const Statement& s : f.body) {
    if (s.IsInstruction()) CollectIdentifiers(s.operands, out);
  }
}

// The symbols of the library modules (all but the last added module) that
// the last module reaches, directly or through other library symbols.
absl::flat_hash_set<std::string> Reachable(const std::vector<Module*>& added) {
  absl::flat_hash_set<std::string> needed;
  const Module& root = *added.back();
  for (const Function& f : root.functions) CollectIdentifiers(f, &needed);
  for (const ModuleItem& item : root.items) {
    if (!item.is_function) CollectIdentifiers(item.statement.text, &needed);
  }
  // Library definitions by name.
  absl::flat_hash_map<std::string_view, const Function*> functions;
  absl::flat_hash_map<std::string_view, const Statement*> variables;
  for (size_t i = 0; i + 1 < added.size(); ++i) {
    for (const Function& f : added[i]->functions) {
      if (f.has_body) functions.emplace(f.name, &f);
    }
    for (const ModuleItem& item : added[i]->items) {
      if (!item.is_function && item.statement.kind == StatementKind::kDeclaration) {
        variables.emplace(item.statement.operands, &item.statement);
      }
    }
  }
  std::vector<std::string> work(needed.begin(), needed.end());
  absl::flat_hash_set<std::string_view> expanded;
  while (!work.empty()) {
    const std::string name = std::move(work.back());
    work.pop_back();
    absl::flat_hash_set<std::string> more;
    if (auto f = functions.find(name); f != functions.end() && expanded.insert(f->first).second) {
      CollectIdentifiers(*f->second, &more);
    } else if (auto v = variables.find(name);
               v != variables.end() && expanded.insert(v->first).second) {
      CollectIdentifiers(v->second->text, &more);
    }
    for (const std::string& m : more) {
      if (needed.insert(m).second) work.push_back(m);
    }
  }
  return needed;
}

}  // namespace

absl::Status ProbeLinker::Link(uint32_t map_count, bool site_counts) {
  if (linked_) return absl::FailedPreconditionError("ProbeLinker::Link called twice");
  linked_ = true;
  Module& main = *main_;
  if (added_.empty()) return absl::InvalidArgumentError("nothing to link");
  // Library symbols no probe reaches stay out (ptxas would compile them).
  const absl::flat_hash_set<std::string> reachable = Reachable(added_);
  auto unused = [&](const Module* m, std::string_view name) {
    return m != added_.back() && !reachable.contains(name);
  };

  // What the added modules define, after renaming.
  absl::flat_hash_set<std::string_view> added_defs;
  for (const Module* m : added_) {
    for (const Function& f : m->functions) {
      if (f.has_body) added_defs.insert(f.name);
    }
    for (const ModuleItem& item : m->items) {
      if (!item.is_function && item.statement.kind == StatementKind::kDeclaration &&
          !IsExternVariable(item.statement)) {
        added_defs.insert(item.statement.operands);
      }
    }
  }

  std::vector<ModuleItem> items;
  items.reserve(main.items.size() + 16);
  size_t p = 0;
  while (p < main.items.size() && !main.items[p].is_function &&
         main.items[p].statement.kind == StatementKind::kDirective &&
         main.items[p].statement.opcode != ".section") {
    items.push_back(main.items[p]);
    ++p;
  }

  // .version: the highest.
  PtxVersion version = main.version;
  for (const Module* m : added_) {
    if (version < m->version) version = m->version;
  }
  if (!(version == main.version)) {
    for (ModuleItem& item : items) {
      if (!item.is_function && item.statement.opcode == ".version") {
        item.statement.text = main.Own(absl::StrCat(".version ", version.major, ".", version.minor));
      }
    }
    main.version = version;
  }

  ModuleItem table;
  table.statement.kind = StatementKind::kDeclaration;
  table.statement.opcode = ".global";
  table.statement.linkage = ".visible";
  table.statement.operands = CUPROBE_MAP_TABLE_SYMBOL;
  table.statement.text = main.Own(absl::StrCat(".visible .global .align 8 .u64 ",
                                               CUPROBE_MAP_TABLE_SYMBOL, "[",
                                               map_count == 0 ? 1 : map_count, "];"));
  items.push_back(table);
  // The descriptors' constant copy (abi.h 3.), when a probe reads it.
  bool descs_used = false;
  for (const Module* m : added_) {
    for (const ModuleItem& item : m->items) {
      descs_used |= !item.is_function && IsExternVariable(item.statement) &&
                    item.statement.operands == CUPROBE_MAP_DESCS_SYMBOL;
    }
  }
  if (descs_used) {
    ModuleItem descs = table;
    descs.statement.opcode = ".const";
    descs.statement.operands = CUPROBE_MAP_DESCS_SYMBOL;
    descs.statement.text = main.Own(absl::StrCat(
        ".visible .const .align 8 .b8 ", CUPROBE_MAP_DESCS_SYMBOL, "[",
        uint64_t{CUPROBE_MAP_DESCS_ENTRY_SIZE} * (map_count == 0 ? 1 : map_count), "];"));
    items.push_back(descs);
  }
  if (site_counts) {
    ModuleItem counts = table;
    counts.statement.operands = CUPROBE_SITE_COUNTS_SYMBOL;
    counts.statement.text = main.Own(
        absl::StrCat(".visible .global .align 8 .u64 ", CUPROBE_SITE_COUNTS_SYMBOL, ";"));
    items.push_back(counts);
  }

  // Declarations kept so far (by name), to drop duplicates.
  absl::flat_hash_set<std::string_view> declared;
  for (Module* m : added_) {
    for (const ModuleItem& item : m->items) {
      if (!item.is_function) {
        const Statement& s = item.statement;
        if (DropsFromAddedModule(s)) continue;
        if (s.kind == StatementKind::kDeclaration && unused(m, s.operands)) continue;
        if (s.kind == StatementKind::kDeclaration && IsExternVariable(s)) {
          if (s.operands == CUPROBE_MAP_TABLE_SYMBOL || s.operands == CUPROBE_MAP_DESCS_SYMBOL ||
              added_defs.contains(s.operands) ||
              !declared.insert(s.operands).second) {
            continue;
          }
        }
        items.push_back(item);
        continue;
      }
      Function& f = m->functions[item.function_index];
      if (unused(m, f.name)) continue;
      // A prototype without linkage (nvcc writes one before a forward call)
      // must stay where it is, ahead of its callers; an .extern declaration
      // of a function some added module defines goes, as do repeats.
      if (!f.has_body && ((f.linkage == Linkage::kExtern && added_defs.contains(f.name)) ||
                          !declared.insert(f.name).second)) {
        continue;
      }
      // .loc lines name files of the added module's .file table, which is
      // not carried over.
      std::erase_if(f.body, [](const Statement& s) {
        return s.kind == StatementKind::kDirective && s.opcode == ".loc";
      });
      ModuleItem fi;
      fi.is_function = true;
      fi.function_index = main.functions.size();
      fi.statement.line = item.statement.line;
      main.functions.push_back(std::move(f));
      items.push_back(fi);
    }
  }
  // The application's own items; its extern declarations of symbols that
  // an added module already declared are dropped (ours come first).
  for (; p < main.items.size(); ++p) {
    const ModuleItem& item = main.items[p];
    if (item.is_function) {
      const Function& f = main.functions[item.function_index];
      if (!f.has_body && f.linkage == Linkage::kExtern && declared.contains(f.name)) continue;
    } else if (IsExternVariable(item.statement) && declared.contains(item.statement.operands)) {
      continue;
    }
    items.push_back(item);
  }
  main.items = std::move(items);
  return absl::OkStatus();
}

}  // namespace cuprobe
