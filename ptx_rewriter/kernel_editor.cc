// File: ptx_rewriter/kernel_editor.cc
#include "ptx_rewriter/kernel_editor.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ptx_rewriter/ptx_parser.h"
#include "support/status_macros.h"

namespace cuprobe {

bool KernelProbes::NeedsArgs() const {
  for (const auto* list : {&entry, &exit, &memory}) {
    for (const ProbeRef& p : *list) {
      if (p.reads_args) return true;
    }
  }
  return false;
}

std::string ProbeCallText(const ProbeCall& c) {
  std::string guard;
  if (!c.guard.empty()) guard = absl::StrCat("@", c.guard_negated ? "!" : "", c.guard, " ");
  std::string out = absl::StrCat(
      "{\n"
      ".param .b64 __cp_a0;\n"
      ".param .b32 __cp_a1;\n"
      ".param .b32 __cp_a2;\n"
      ".param .b32 __cp_a3;\n"
      ".param .b64 __cp_a4;\n"
      ".param .b32 __cp_ret;\n"
      "st.param.b64 [__cp_a0], ", c.mem_addr, ";\n",
      "st.param.b32 [__cp_a1], ", c.mem_info, ";\n",
      "st.param.b32 [__cp_a2], ", c.kernel_id, ";\n",
      "st.param.b32 [__cp_a3], ", c.site_index, ";\n",
      "st.param.b64 [__cp_a4], ", c.args, ";\n");
  if (c.indirect) {
    absl::StrAppend(&out, ".reg .b64 %__cp_fn;\n", "mov.u64 %__cp_fn, ", c.function, ";\n",
                    "__cp_proto : .callprototype (.param .b32 _) _ (.param .b64 _, .param .b32 _, "
                    ".param .b32 _, .param .b32 _, .param .b64 _);\n",
                    guard, "call (__cp_ret), %__cp_fn, (__cp_a0, __cp_a1, __cp_a2, __cp_a3, __cp_a4), "
                    "__cp_proto;\n}\n");
  } else {
    absl::StrAppend(&out, guard, "call (__cp_ret), ", c.function,
                    ", (__cp_a0, __cp_a1, __cp_a2, __cp_a3, __cp_a4);\n}\n");
  }
  return out;
}

namespace {

uint32_t TypeBits(std::string_view type) {
  if (type == ".pred") return 1;
  return PtxTypeSize(type) * 8;
}

}  // namespace

KernelEditor::KernelEditor(Module& module, Function& kernel) : module_(module), kernel_(kernel) {
  for (const Statement& s : kernel_.body) {
    if (s.kind != StatementKind::kDeclaration || s.opcode != ".reg") continue;
    absl::StatusOr<Declaration> d = ParseDeclaration(s);
    if (!d.ok()) continue;
    const uint32_t bits = TypeBits(d->type);
    for (std::string_view n : d->names) regs_[n] = RegInfo{bits, d->count > 0};
  }
  // Register parameters of a .func-like kernel are rare but legal.
  for (const Param& p : kernel_.params) {
    if (p.space == ".reg") regs_[p.name] = RegInfo{TypeBits(p.type), false};
  }
  prefix_ = "%__cp";
  for (int attempt = 1;; ++attempt) {
    bool taken = false;
    for (const auto& [name, info] : regs_) {
      if (absl::StartsWith(name, prefix_)) {
        taken = true;
        break;
      }
    }
    if (!taken) break;
    prefix_ = absl::StrCat("%__cp", attempt, "x");
  }
}

std::string KernelEditor::ScratchRegister(std::string_view type, uint32_t slot) {
  const char letter = type == ".pred" ? 'p' : type == ".b64" ? 'd' : type == ".b16" ? 'h' : 'w';
  std::string name = absl::StrCat(prefix_, "_", std::string(1, letter), slot);
  if (added_regs_.emplace(name, std::string(type)).second) added_order_.push_back(name);
  return name;
}

std::string KernelEditor::KernelRegister(std::string_view name, std::string_view type) {
  std::string reg = absl::StrCat(prefix_, "_", name);
  if (added_regs_.emplace(reg, std::string(type)).second) added_order_.push_back(reg);
  return reg;
}

uint32_t KernelEditor::RegisterBits(std::string_view reg) const {
  if (auto it = regs_.find(reg); it != regs_.end() && !it->second.parameterized) {
    return it->second.bits;
  }
  if (auto it = added_regs_.find(std::string(reg)); it != added_regs_.end()) {
    return TypeBits(it->second);
  }
  // `%rd12` -> parameterized `%rd<N>`.
  size_t end = reg.size();
  while (end > 0 && absl::ascii_isdigit(static_cast<unsigned char>(reg[end - 1]))) --end;
  if (end == reg.size() || end == 0) return 0;
  if (auto it = regs_.find(reg.substr(0, end)); it != regs_.end() && it->second.parameterized) {
    return it->second.bits;
  }
  return 0;
}

size_t KernelEditor::EntryPoint() const {
  size_t i = 0;
  while (i < kernel_.body.size() && (kernel_.body[i].kind == StatementKind::kDeclaration ||
                                     kernel_.body[i].kind == StatementKind::kDirective)) {
    ++i;
  }
  return i;
}

absl::Status KernelEditor::InsertBefore(size_t index, std::string ptx) {
  if (index > kernel_.body.size()) {
    return absl::InternalError(absl::StrCat("insertion point ", index, " past the body of ",
                                            kernel_.name));
  }
  std::string_view text = module_.Own(std::move(ptx));
  CUPROBE_ASSIGN_OR_RETURN(std::vector<Statement> statements,
                           ParseBodyStatements(text, absl::StrCat("<rewrite of ", kernel_.name, ">")));
  for (Statement& s : statements) s.line = 0;
  inserts_.emplace_back(index, std::move(statements));
  return absl::OkStatus();
}

absl::Status KernelEditor::InsertAtEntryFront(std::string ptx) {
  std::string_view text = module_.Own(std::move(ptx));
  CUPROBE_ASSIGN_OR_RETURN(std::vector<Statement> statements,
                           ParseBodyStatements(text, absl::StrCat("<rewrite of ", kernel_.name, ">")));
  for (Statement& s : statements) s.line = 0;
  inserts_.insert(inserts_.begin(), {EntryPoint(), std::move(statements)});
  return absl::OkStatus();
}

absl::Status KernelEditor::Declare(std::string ptx) {
  std::string_view text = module_.Own(std::move(ptx));
  CUPROBE_ASSIGN_OR_RETURN(std::vector<Statement> statements,
                           ParseBodyStatements(text, absl::StrCat("<rewrite of ", kernel_.name, ">")));
  for (Statement& s : statements) {
    if (s.kind != StatementKind::kDeclaration) {
      return absl::InternalError(absl::StrCat("not a declaration: ", s.text));
    }
    s.line = 0;
    declarations_.push_back(s);
  }
  return absl::OkStatus();
}

std::string KernelEditor::FreshVariableName(std::string_view base) const {
  absl::flat_hash_set<std::string_view> taken;
  for (const ModuleItem& item : module_.items) {
    if (!item.is_function && item.statement.kind == StatementKind::kDeclaration) {
      taken.insert(item.statement.operands);
    }
  }
  for (const Function& f : module_.functions) taken.insert(f.name);
  for (const Statement& s : kernel_.body) {
    if (s.kind != StatementKind::kDeclaration) continue;
    absl::StatusOr<Declaration> d = ParseDeclaration(s);
    if (!d.ok()) continue;
    for (std::string_view n : d->names) taken.insert(n);
  }
  for (const Statement& s : declarations_) {
    absl::StatusOr<Declaration> d = ParseDeclaration(s);
    if (!d.ok()) continue;
    for (std::string_view n : d->names) taken.insert(n);
  }
  std::string name(base);
  for (int i = 1; taken.contains(name); ++i) name = absl::StrCat(base, "_", i);
  return name;
}

absl::Status KernelEditor::Finish() {
  if (!HasEdits()) return absl::OkStatus();
  std::stable_sort(inserts_.begin(), inserts_.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string decls;
  for (const std::string& name : added_order_) {
    absl::StrAppend(&decls, ".reg ", added_regs_[name], " ", name, ";\n");
  }
  std::vector<Statement> reg_decls;
  if (!decls.empty()) {
    std::string_view text = module_.Own(std::move(decls));
    CUPROBE_ASSIGN_OR_RETURN(reg_decls, ParseBodyStatements(text, "<registers>"));
  }
  size_t added = reg_decls.size() + declarations_.size();
  for (const auto& [index, statements] : inserts_) added += statements.size();

  std::vector<Statement> body;
  body.reserve(kernel_.body.size() + added);
  for (Statement& s : reg_decls) {
    s.line = 0;
    body.push_back(s);
  }
  body.insert(body.end(), declarations_.begin(), declarations_.end());
  size_t next = 0;
  for (size_t i = 0; i <= kernel_.body.size(); ++i) {
    while (next < inserts_.size() && inserts_[next].first == i) {
      body.insert(body.end(), inserts_[next].second.begin(), inserts_[next].second.end());
      ++next;
    }
    if (i < kernel_.body.size()) body.push_back(kernel_.body[i]);
  }
  kernel_.body = std::move(body);
  inserts_.clear();
  declarations_.clear();
  added_regs_.clear();
  added_order_.clear();
  return absl::OkStatus();
}

}  // namespace cuprobe
