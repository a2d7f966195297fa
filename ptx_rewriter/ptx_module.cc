// File: ptx_rewriter/ptx_module.cc
#include "ptx_rewriter/ptx_module.h"

#include <utility>

#include "absl/strings/ascii.h"

namespace cuprobe {

std::string_view Statement::Op() const {
  const size_t dot = opcode.find('.');
  return dot == std::string_view::npos ? opcode : opcode.substr(0, dot);
}

bool Statement::HasModifier(std::string_view m) const {
  size_t pos = opcode.find('.');
  while (pos != std::string_view::npos) {
    const size_t next = opcode.find('.', pos + 1);
    std::string_view part = opcode.substr(pos + 1, next == std::string_view::npos
                                                       ? std::string_view::npos
                                                       : next - pos - 1);
    if (part == m) return true;
    if (const size_t colons = part.find("::"); colons != std::string_view::npos &&
                                               part.substr(0, colons) == m) {
      return true;
    }
    pos = next;
  }
  return false;
}

std::string_view Module::Own(std::string text) {
  owned_.push_back(std::move(text));
  return owned_.back();
}

Function* Module::FindFunction(std::string_view name) {
  for (Function& f : functions) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

const Function* Module::FindFunction(std::string_view name) const {
  for (const Function& f : functions) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

namespace {

size_t PrintedSize(const Module& m) {
  size_t n = 0;
  for (const ModuleItem& item : m.items) {
    if (!item.is_function) {
      n += item.statement.text.size() + 1;
      continue;
    }
    const Function& f = m.functions[item.function_index];
    n += f.header.size() + 8;
    for (const Statement& s : f.body) n += s.text.size() + 2;
  }
  return n;
}

}  // namespace

std::string PrintPtx(const Module& m) {
  std::string out;
  out.reserve(PrintedSize(m));
  for (const ModuleItem& item : m.items) {
    if (!item.is_function) {
      out.append(item.statement.text);
      out.push_back('\n');
      continue;
    }
    const Function& f = m.functions[item.function_index];
    out.append(f.header);
    if (!f.has_body) {
      out.append(";\n\n");
      continue;
    }
    out.append("\n{\n");
    for (const Statement& s : f.body) {
      if (s.kind != StatementKind::kLabel) out.push_back('\t');
      out.append(s.text);
      out.push_back('\n');
    }
    out.append("}\n\n");
  }
  return out;
}

std::vector<std::string_view> SplitOperands(std::string_view operands) {
  std::vector<std::string_view> out;
  if (absl::StripAsciiWhitespace(operands).empty()) return out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < operands.size(); ++i) {
    const char c = operands[i];
    if (c == '[' || c == '{' || c == '(') {
      ++depth;
    } else if (c == ']' || c == '}' || c == ')') {
      --depth;
    } else if (c == ',' && depth == 0) {
      out.push_back(absl::StripAsciiWhitespace(operands.substr(start, i - start)));
      start = i + 1;
    }
  }
  out.push_back(absl::StripAsciiWhitespace(operands.substr(start)));
  return out;
}

uint32_t PtxTypeSize(std::string_view t) {
  if (t.size() < 3 || t[0] != '.') return 0;
  t.remove_prefix(1);
  const char k = t[0];
  std::string_view rest = t.substr(1);
  if (k == 'b' || k == 'u' || k == 's' || k == 'f') {
    if (rest == "8") return 1;
    if (rest == "16") return 2;
    if (rest == "32") return 4;
    if (rest == "64") return 8;
    if (k == 'b' && rest == "128") return 16;
    if (k == 'f' && rest == "16x2") return 4;
    if ((k == 'u' || k == 's') && rest == "16x2") return 4;
  }
  if (t == "bf16") return 2;
  if (t == "bf16x2" || t == "tf32") return 4;
  if (t == "e4m3" || t == "e5m2") return 1;
  if (t == "e4m3x2" || t == "e5m2x2") return 2;
  if (t == "e4m3x4" || t == "e5m2x4") return 4;
  return 0;
}

}  // namespace cuprobe
