// File: ptx_rewriter/memory_pass.cc
#include "ptx_rewriter/memory_pass.h"

#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "ptx_rewriter/ptx_lexer.h"
#include "ptx_rewriter/site_counter_pass.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

// "8", "-8", "0x10", "-0x10" (PTX integer literals, maybe with a U suffix).
bool IsIntegerLiteral(std::string_view s) {
  if (!s.empty() && s[0] == '-') s.remove_prefix(1);
  if (s.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The PTX that puts the effective address of `address` (the text inside the
// brackets) into a .b64 operand; `*operand` is either `scratch` or the base
// register itself. False when the form is not understood.
bool FormAddress(const KernelEditor& editor, std::string_view address, const std::string& scratch,
                 std::string* ptx, std::string* operand) {
  address = absl::StripAsciiWhitespace(address);
  if (address.empty()) return false;
  // Split "base+off", "base+-off", "base-off"; the base is a register, a
  // symbol or a number and never contains '+' or '-' itself.
  size_t split = std::string_view::npos;
  for (size_t i = 1; i < address.size(); ++i) {
    if (address[i] == '+' || address[i] == '-') {
      split = i;
      break;
    }
  }
  std::string_view base = absl::StripAsciiWhitespace(address.substr(0, split));
  std::string offset;
  if (split != std::string_view::npos) {
    std::string_view rest = absl::StripAsciiWhitespace(address.substr(split + 1));
    offset = address[split] == '-' ? absl::StrCat("-", rest) : std::string(rest);
    if (offset.size() > 1 && offset[0] == '-' && offset[1] == '-') offset = offset.substr(2);
    if (!IsIntegerLiteral(offset)) return false;
  }
  if (base.empty()) return false;
  if (base[0] == '%') {
    const uint32_t bits = editor.RegisterBits(base);
    if (bits == 64) {
      if (offset.empty()) {
        *operand = std::string(base);
        return true;
      }
      absl::StrAppend(ptx, "add.s64 ", scratch, ", ", base, ", ", offset, ";\n");
    } else if (bits == 32) {
      absl::StrAppend(ptx, "cvt.u64.u32 ", scratch, ", ", base, ";\n");
      if (!offset.empty()) absl::StrAppend(ptx, "add.s64 ", scratch, ", ", scratch, ", ", offset, ";\n");
    } else {
      return false;
    }
  } else if (IsPtxIdentStart(base[0])) {
    for (char c : base) {
      if (!IsPtxIdentChar(c)) return false;
    }
    absl::StrAppend(ptx, "mov.u64 ", scratch, ", ", base, ";\n");
    if (!offset.empty()) absl::StrAppend(ptx, "add.s64 ", scratch, ", ", scratch, ", ", offset, ";\n");
  } else if (IsIntegerLiteral(base)) {
    absl::StrAppend(ptx, "mov.u64 ", scratch, ", ", base, ";\n");
    if (!offset.empty()) absl::StrAppend(ptx, "add.s64 ", scratch, ", ", scratch, ", ", offset, ";\n");
  } else {
    return false;
  }
  *operand = scratch;
  return true;
}

}  // namespace

std::optional<MemoryAccess> ClassifyMemoryAccess(const Statement& s) {
  if (!s.IsInstruction()) return std::nullopt;
  const std::string_view op = s.Op();
  MemoryAccess a;
  if (op == "ld" || op == "ldu") {
    a.kind = CUPROBE_ACCESS_LOAD;
  } else if (op == "st") {
    a.kind = CUPROBE_ACCESS_STORE;
  } else if (op == "atom" || op == "red") {
    a.kind = CUPROBE_ACCESS_ATOMIC;
  } else {
    return std::nullopt;
  }
  if (s.HasModifier("param")) return std::nullopt;
  if (s.HasModifier("global")) {
    a.space = CUPROBE_SPACE_GLOBAL;
  } else if (s.HasModifier("shared")) {
    a.space = CUPROBE_SPACE_SHARED;
  } else if (s.HasModifier("local")) {
    a.space = CUPROBE_SPACE_LOCAL;
  } else if (s.HasModifier("const")) {
    a.space = CUPROBE_SPACE_CONST;
  } else {
    a.space = CUPROBE_SPACE_GENERIC;
  }
  // Element type: the last type modifier (`atom.global.v4.f32.add` -> f32);
  // vector count from .v2/.v4/.v8.
  uint32_t elem = 0, lanes = 1;
  std::string_view mods = s.opcode.substr(op.size());
  while (!mods.empty()) {
    mods.remove_prefix(1);  // the '.'
    const size_t next = mods.find('.');
    std::string_view part = mods.substr(0, next);
    if (part == "v2") lanes = 2;
    if (part == "v4") lanes = 4;
    if (part == "v8") lanes = 8;
    if (part.size() >= 2 && part.size() <= 7) {
      char buf[8] = {'.'};
      for (size_t i = 0; i < part.size(); ++i) buf[i + 1] = part[i];
      if (uint32_t size = PtxTypeSize(std::string_view(buf, part.size() + 1)); size != 0) elem = size;
    }
    if (next == std::string_view::npos) break;
    mods = mods.substr(next);
  }
  a.size = elem * lanes;
  for (std::string_view operand : SplitOperands(s.operands)) {
    if (operand.size() >= 2 && operand.front() == '[' && operand.back() == ']') {
      a.address = operand.substr(1, operand.size() - 2);
      return a;
    }
  }
  return std::nullopt;
}

absl::Status RunMemoryPass(KernelEditor& editor, const KernelProbes& probes,
                           std::string_view args, PassStats* stats, bool after) {
  if (probes.memory.empty()) return absl::OkStatus();
  const std::vector<Statement>& body = editor.kernel().body;
  const std::string scratch = editor.ScratchRegister(".b64", 0);
  uint32_t site = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const Statement& s = body[i];
    if (!s.IsInstruction()) continue;
    std::optional<MemoryAccess> access = ClassifyMemoryAccess(s);
    if (!access) continue;
    const uint32_t this_site = site++;
    bool wanted = false;
    for (const ProbeRef& p : probes.memory) wanted |= (p.mem_spaces >> access->space) & 1u;
    if (!wanted) continue;
    std::string ptx, addr;
    if (!FormAddress(editor, access->address, scratch, &ptx, &addr)) {
      ++stats->memory_sites_skipped;
      continue;
    }
    // After the access: the address is kept in the scratch register, which
    // the access does not write.
    std::string address_ptx;
    if (after) {
      if (addr != scratch) absl::StrAppend(&ptx, "mov.b64 ", scratch, ", ", addr, ";\n");
      addr = scratch;
      address_ptx = std::exchange(ptx, std::string());
    }
    const uint32_t info = CUPROBE_MEM_INFO(access->size > 0xffff ? 0xffff : access->size,
                                           access->space, access->kind);
    for (const ProbeRef& p : probes.memory) {
      if (((p.mem_spaces >> access->space) & 1u) == 0) continue;
      ProbeCall call;
      call.function = p.function;
      call.mem_addr = addr;
      call.mem_info = info;
      call.kernel_id = probes.kernel_id;
      call.indirect = probes.indirect_calls;
      call.site_index = this_site;
      call.args = p.reads_args ? args : "0";
      call.guard = s.guard;
      call.guard_negated = s.guard_negated;
      if (std::optional<std::string> counted =
              SiteCounterIncrement(editor, probes, p, AttachKind::kMemory, call)) {
        ptx += *counted;
        ++stats->counted_calls;
        continue;
      }
      ptx += ProbeCallText(call);
    }
    if (after) {
      CUPROBE_RETURN_IF_ERROR(editor.InsertBefore(i, std::move(address_ptx)));
      CUPROBE_RETURN_IF_ERROR(editor.InsertBefore(i + 1, std::move(ptx)));
    } else {
      CUPROBE_RETURN_IF_ERROR(editor.InsertBefore(i, std::move(ptx)));
    }
    ++stats->memory_sites;
  }
  return absl::OkStatus();
}

}  // namespace cuprobe
