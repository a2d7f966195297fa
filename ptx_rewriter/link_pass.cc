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

namespace {

// The symbols `main` defines or declares: its functions and variables.
absl::flat_hash_set<std::string_view> SymbolsOf(const Module& main) {
  absl::flat_hash_set<std::string_view> symbols;
  for (const Function& f : main.functions) symbols.insert(f.name);
  for (const ModuleItem& item : main.items) {
    if (!item.is_function && item.statement.kind == StatementKind::kDeclaration) {
      symbols.insert(item.statement.operands);
    }
  }
  return symbols;
}

// Refuses a module that already has the symbols the rewriter defines.
absl::Status CheckNotInstrumented(const Module& main,
                                  const absl::flat_hash_set<std::string_view>& main_symbols) {
  for (const char* ours :
       {CUPROBE_MAP_TABLE_SYMBOL, CUPROBE_MAP_DESCS_SYMBOL, CUPROBE_SITE_COUNTS_SYMBOL}) {
    if (main_symbols.contains(ours)) {
      return absl::FailedPreconditionError(absl::StrCat(
          main.name, ": the module already has ", ours,
          " (was it instrumented by cuprobe before?); instrument the original module"));
    }
  }
  return absl::OkStatus();
}

// Which added module defines which symbol.
using DefinedBy = absl::flat_hash_map<std::string_view, const Module*>;

// Records that `m` defines `name`: one module per name, and never the map
// table, which the rewriter defines.
absl::Status Define(const Module* m, std::string_view name, DefinedBy& defined_by) {
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
}

// The definitions of the added modules, and who defines what, after
// checking each module's header against `main`'s (a newer target only
// warns).
absl::StatusOr<DefinedBy> AddedDefinitions(const Module& main, const std::vector<Module*>& added,
                                           std::vector<std::string>* warnings) {
  DefinedBy defined_by;
  const uint32_t main_sm = TargetSm(main.target);
  for (const Module* m : added) {
    if (m->address_size != main.address_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          m->name, ": .address_size ", m->address_size, " does not match the module's ",
          main.address_size));
    }
    if (const uint32_t sm = TargetSm(m->target); sm > main_sm && main_sm != 0) {
      warnings->push_back(absl::StrCat(m->name, " targets sm_", sm, " but the module targets sm_",
                                       main_sm, "; the module's target is kept"));
    }
    for (const Function& f : m->functions) {
      if (f.has_body) CUPROBE_RETURN_IF_ERROR(Define(m, f.name, defined_by));
    }
    for (const ModuleItem& item : m->items) {
      if (!item.is_function && item.statement.kind == StatementKind::kDeclaration &&
          !IsExternVariable(item.statement)) {
        CUPROBE_RETURN_IF_ERROR(Define(m, item.statement.operands, defined_by));
      }
    }
  }
  return defined_by;
}

// An added module that declares a symbol the application defines would
// call into the application: not something a probe may do.
absl::Status CheckNoCallIntoApplication(const Module& main, const std::vector<Module*>& added,
                                        const DefinedBy& defined_by) {
  for (const Module* m : added) {
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
  return absl::OkStatus();
}

// New names for the added definitions the application also uses:
// `name_cuprobe`, or `name_cuprobeN` when that is taken too.
absl::flat_hash_map<std::string, std::string> ClashRenames(
    const absl::flat_hash_set<std::string_view>& main_symbols, const DefinedBy& defined_by) {
  absl::flat_hash_map<std::string, std::string> renames;
  absl::flat_hash_set<std::string> taken(main_symbols.begin(), main_symbols.end());
  for (const auto& [name, m] : defined_by) taken.insert(std::string(name));
  for (const auto& [name, m] : defined_by) {
    if (!main_symbols.contains(name)) continue;
    std::string fresh = absl::StrCat(name, "_cuprobe");
    for (int i = 2; taken.contains(fresh); ++i) fresh = absl::StrCat(name, "_cuprobe", i);
    taken.insert(fresh);
    renames.emplace(std::string(name), std::move(fresh));
  }
  return renames;
}

// Applies `renames` everywhere in the added modules: module-level
// statements, function headers, names, parameters and bodies.
absl::Status RenameInAddedModules(const std::vector<Module*>& added,
                                  const absl::flat_hash_map<std::string, std::string>& renames) {
  for (Module* m : added) {
    for (ModuleItem& item : m->items) {
      if (!item.is_function) {
        CUPROBE_RETURN_IF_ERROR(RenameStatement(*m, item.statement, false, renames));
      }
    }
    for (Function& f : m->functions) {
      if (std::optional<std::string> h = RenameIdentifiers(f.header, renames)) {
        f.header = m->Own(std::move(*h));
      }
      if (auto it = renames.find(f.name); it != renames.end()) f.name = m->Own(it->second);
      for (Param& p : f.params) {
        if (auto it = renames.find(p.name); it != renames.end()) p.name = m->Own(it->second);
      }
      for (Statement& s : f.body) CUPROBE_RETURN_IF_ERROR(RenameStatement(*m, s, true, renames));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ProbeLinker::Prepare() {
  const absl::flat_hash_set<std::string_view> main_symbols = SymbolsOf(*main_);
  CUPROBE_RETURN_IF_ERROR(CheckNotInstrumented(*main_, main_symbols));
  CUPROBE_ASSIGN_OR_RETURN(const DefinedBy defined_by,
                           AddedDefinitions(*main_, added_, &warnings_));
  CUPROBE_RETURN_IF_ERROR(CheckNoCallIntoApplication(*main_, added_, defined_by));
  // Rename added definitions the application also uses.
  renames_ = ClashRenames(main_symbols, defined_by);
  if (renames_.empty()) return absl::OkStatus();
  return RenameInAddedModules(added_, renames_);
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

// Link's steps, in the order of the linked module's items: the
// application's leading directives, the rewriter's symbols, the added
// modules' items, the application's other items.

// What Link keeps of the added modules' items.
struct AddedItemFilter {
  const Module* root;  // the last added module: all of it is kept
  // Library symbols the root reaches; the others stay out (ptxas would
  // compile them).
  absl::flat_hash_set<std::string> reachable;
  // What the added modules define, after renaming.
  absl::flat_hash_set<std::string_view> defined;
  // Declarations kept so far (by name), to drop duplicates.
  absl::flat_hash_set<std::string_view> declared;

  [[nodiscard]] bool Unused(const Module* m, std::string_view name) const {
    return m != root && !reachable.contains(name);
  }
};

absl::flat_hash_set<std::string_view> AddedDefinitionNames(const std::vector<Module*>& added) {
  absl::flat_hash_set<std::string_view> defined;
  for (const Module* m : added) {
    for (const Function& f : m->functions) {
      if (f.has_body) defined.insert(f.name);
    }
    for (const ModuleItem& item : m->items) {
      if (!item.is_function && item.statement.kind == StatementKind::kDeclaration &&
          !IsExternVariable(item.statement)) {
        defined.insert(item.statement.operands);
      }
    }
  }
  return defined;
}

// Copies the directives that open `main` (.version, .target, ... up to the
// first variable, function or debug section) to `items`; returns the index
// of the first item not copied.
size_t CopyLeadingDirectives(const Module& main, std::vector<ModuleItem>* items) {
  size_t p = 0;
  while (p < main.items.size() && !main.items[p].is_function &&
         main.items[p].statement.kind == StatementKind::kDirective &&
         main.items[p].statement.opcode != ".section") {
    items->push_back(main.items[p]);
    ++p;
  }
  return p;
}

// .version: the highest of all modules.
void RaiseVersion(Module& main, const std::vector<Module*>& added,
                  std::vector<ModuleItem>& items) {
  PtxVersion version = main.version;
  for (const Module* m : added) {
    if (version < m->version) version = m->version;
  }
  if (version == main.version) return;
  for (ModuleItem& item : items) {
    if (!item.is_function && item.statement.opcode == ".version") {
      item.statement.text = main.Own(absl::StrCat(".version ", version.major, ".", version.minor));
    }
  }
  main.version = version;
}

// The symbols the rewriter defines: the map table; the descriptors'
// constant copy (abi.h 3.), when a probe reads it; the site counters'
// address, with `site_counts`.
void DefineRewriterSymbols(Module& main, const std::vector<Module*>& added, uint32_t map_count,
                           bool site_counts, std::vector<ModuleItem>* items) {
  ModuleItem table;
  table.statement.kind = StatementKind::kDeclaration;
  table.statement.opcode = ".global";
  table.statement.linkage = ".visible";
  table.statement.operands = CUPROBE_MAP_TABLE_SYMBOL;
  table.statement.text = main.Own(absl::StrCat(".visible .global .align 8 .u64 ",
                                               CUPROBE_MAP_TABLE_SYMBOL, "[",
                                               map_count == 0 ? 1 : map_count, "];"));
  items->push_back(table);
  bool descs_used = false;
  for (const Module* m : added) {
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
    items->push_back(descs);
  }
  if (site_counts) {
    ModuleItem counts = table;
    counts.statement.operands = CUPROBE_SITE_COUNTS_SYMBOL;
    counts.statement.text = main.Own(
        absl::StrCat(".visible .global .align 8 .u64 ", CUPROBE_SITE_COUNTS_SYMBOL, ";"));
    items->push_back(counts);
  }
}

// Whether a module-level statement of added module `m` goes into the
// linked module: not its header or debug directives, not an unreached
// library variable, not an .extern declaration of our tables, of what an
// added module defines, or of what is declared already.
bool KeepAddedStatement(const Module* m, const Statement& s, AddedItemFilter& filter) {
  if (DropsFromAddedModule(s)) return false;
  if (s.kind == StatementKind::kDeclaration && filter.Unused(m, s.operands)) return false;
  if (s.kind == StatementKind::kDeclaration && IsExternVariable(s)) {
    if (s.operands == CUPROBE_MAP_TABLE_SYMBOL || s.operands == CUPROBE_MAP_DESCS_SYMBOL ||
        filter.defined.contains(s.operands) || !filter.declared.insert(s.operands).second) {
      return false;
    }
  }
  return true;
}

// Whether function `f` of added module `m` goes into the linked module.
bool KeepAddedFunction(const Module* m, const Function& f, AddedItemFilter& filter) {
  if (filter.Unused(m, f.name)) return false;
  // A prototype without linkage (nvcc writes one before a forward call)
  // must stay where it is, ahead of its callers; an .extern declaration
  // of a function some added module defines goes, as do repeats.
  return f.has_body || !((f.linkage == Linkage::kExtern && filter.defined.contains(f.name)) ||
                         !filter.declared.insert(f.name).second);
}

// Moves the added modules' items that Link keeps into `main`'s `items`, in
// module order (a callee comes before its callers).
void MoveAddedItems(Module& main, const std::vector<Module*>& added, AddedItemFilter& filter,
                    std::vector<ModuleItem>* items) {
  for (Module* m : added) {
    for (const ModuleItem& item : m->items) {
      if (!item.is_function) {
        if (KeepAddedStatement(m, item.statement, filter)) items->push_back(item);
        continue;
      }
      Function& f = m->functions[item.function_index];
      if (!KeepAddedFunction(m, f, filter)) continue;
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
      items->push_back(fi);
    }
  }
}

// The application's own items from `from` on; its extern declarations of
// symbols that an added module already declared are dropped (ours come
// first).
void CopyApplicationItems(const Module& main, size_t from,
                          const absl::flat_hash_set<std::string_view>& declared,
                          std::vector<ModuleItem>* items) {
  for (size_t p = from; p < main.items.size(); ++p) {
    const ModuleItem& item = main.items[p];
    if (item.is_function) {
      const Function& f = main.functions[item.function_index];
      if (!f.has_body && f.linkage == Linkage::kExtern && declared.contains(f.name)) continue;
    } else if (IsExternVariable(item.statement) && declared.contains(item.statement.operands)) {
      continue;
    }
    items->push_back(item);
  }
}

}  // namespace

absl::Status ProbeLinker::Link(uint32_t map_count, bool site_counts) {
  if (linked_) return absl::FailedPreconditionError("ProbeLinker::Link called twice");
  linked_ = true;
  Module& main = *main_;
  if (added_.empty()) return absl::InvalidArgumentError("nothing to link");
  AddedItemFilter filter{added_.back(), Reachable(added_), AddedDefinitionNames(added_), {}};
  std::vector<ModuleItem> items;
  items.reserve(main.items.size() + 16);
  const size_t rest = CopyLeadingDirectives(main, &items);
  RaiseVersion(main, added_, items);
  DefineRewriterSymbols(main, added_, map_count, site_counts, &items);
  MoveAddedItems(main, added_, filter, &items);
  CopyApplicationItems(main, rest, filter.declared, &items);
  main.items = std::move(items);
  return absl::OkStatus();
}

}  // namespace cuprobe
