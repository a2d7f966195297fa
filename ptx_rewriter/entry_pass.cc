// File: ptx_rewriter/entry_pass.cc
#include "ptx_rewriter/entry_pass.h"

#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "ptx_rewriter/site_counter_pass.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

// At most this many guarded branches are crossed (each one costs a copy of
// the probe calls).
constexpr int kMaxCrossedBranches = 2;

// Instructions the probe calls may move past: they neither write memory nor
// synchronize, and change no control flow.
bool Crossable(const Statement& s) {
  if (s.kind == StatementKind::kDirective) return s.opcode == ".loc";
  if (!s.IsInstruction()) return false;
  static const absl::flat_hash_set<std::string_view> kOps = {
      "ld",  "ldu", "mov", "cvt", "cvta", "add", "sub", "mul", "mad", "mul24", "mad24",
      "neg", "abs", "min", "max", "and", "or",  "xor", "not", "shl",  "shr",   "setp",
      "selp", "fma", "rcp", "div", "rem"};
  if (!kOps.contains(s.Op())) return false;
  if (s.Op() == "ld" || s.Op() == "ldu") {
    // Plain loads only: no acquire semantics the probe could be ordered by.
    return !s.HasModifier("acquire") && !s.HasModifier("volatile");
  }
  return true;
}

// A load whose value takes long to arrive: global or generic memory.
bool LongLoad(const Statement& s) {
  if (!s.IsInstruction() || (s.Op() != "ld" && s.Op() != "ldu")) return false;
  return !s.HasModifier("param") && !s.HasModifier("const") && !s.HasModifier("shared") &&
         !s.HasModifier("local");
}

// The registers named in `text` (`%rd4`, `%f1`; special registers too).
std::vector<std::string_view> Registers(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') continue;
    size_t j = i + 1;
    while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) ||
                               text[j] == '_' || text[j] == '$')) {
      ++j;
    }
    if (j > i + 1) out.push_back(text.substr(i, j - i));
    i = j - 1;
  }
  return out;
}

// Splits an instruction's operands into the first (the destination of
// every Crossable instruction, `{%f1, %f2}` included) and the rest.
std::pair<std::string_view, std::string_view> FirstOperand(std::string_view operands) {
  int depth = 0;
  for (size_t i = 0; i < operands.size(); ++i) {
    const char c = operands[i];
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') --depth;
    if (c == ',' && depth == 0) return {operands.substr(0, i), operands.substr(i + 1)};
  }
  return {operands, {}};
}

}  // namespace

bool EntrySinkingEnabled() {
  const char* env = std::getenv("CUPROBE_SINK_ENTRY");
  return env == nullptr || std::string_view(env) != "0";
}

EntrySink FindEntrySink(const Function& kernel, size_t entry) {
  EntrySink sink;
  sink.index = entry;
  const std::vector<Statement>& body = kernel.body;
  absl::flat_hash_set<std::string_view> pending;  // registers long loads define
  std::vector<size_t> branches;
  size_t i = entry;
  for (; i < body.size(); ++i) {
    const Statement& s = body[i];
    if (s.IsInstruction() && (s.Op() == "bra") && !s.guard.empty() &&
        static_cast<int>(branches.size()) < kMaxCrossedBranches) {
      branches.push_back(i);
      continue;
    }
    if (!Crossable(s)) break;
    if (!s.IsInstruction()) continue;
    const auto [first, rest] = FirstOperand(s.operands);
    bool uses_pending = false;
    for (std::string_view r : Registers(rest)) uses_pending |= pending.contains(r);
    if (uses_pending) break;
    if (LongLoad(s)) {
      for (std::string_view r : Registers(first)) pending.insert(r);
    }
  }
  if (pending.empty()) return sink;  // nothing would be in flight: stay at entry
  sink.index = i;
  sink.branches = std::move(branches);
  return sink;
}

absl::Status RunEntryPass(KernelEditor& editor, const KernelProbes& probes,
                          std::string_view args, PassStats* stats) {
  if (probes.entry.empty()) return absl::OkStatus();
  std::string counted_ptx;
  std::vector<const ProbeRef*> called;
  for (const ProbeRef& p : probes.entry) {
    ProbeCall call;
    call.function = p.function;
    call.kernel_id = probes.kernel_id;
    call.indirect = probes.indirect_calls;
    call.site_index = 0;
    call.args = p.reads_args ? args : "0";
    if (std::optional<std::string> counted =
            SiteCounterIncrement(editor, probes, p, AttachKind::kEntry, call)) {
      counted_ptx += *counted;
      ++stats->counted_calls;
      continue;
    }
    called.push_back(&p);
  }
  // The calls, under `guard` (empty: unguarded).
  auto calls = [&](std::string_view guard, bool negated) {
    std::string ptx;
    for (const ProbeRef* p : called) {
      ProbeCall call;
      call.function = p->function;
      call.kernel_id = probes.kernel_id;
      call.indirect = probes.indirect_calls;
      call.site_index = 0;
      call.args = p->reads_args ? args : "0";
      call.guard = guard;
      call.guard_negated = negated;
      ptx += ProbeCallText(call);
    }
    return ptx;
  };
  EntrySink sink;
  sink.index = editor.EntryPoint();
  // Memory probes keep entry first: their sites are the loads sinking passes.
  if (probes.sink_entry && probes.memory.empty() && !called.empty()) {
    sink = FindEntrySink(editor.kernel(), editor.EntryPoint());
  }
  if (!counted_ptx.empty()) {
    CUPROBE_RETURN_IF_ERROR(editor.InsertBefore(editor.EntryPoint(), std::move(counted_ptx)));
  }
  for (size_t b : sink.branches) {
    // Threads that take the branch leave the straight line: they call the
    // probes here, under the branch's own guard.
    const Statement& s = editor.kernel().body[b];
    CUPROBE_RETURN_IF_ERROR(editor.InsertBefore(b, calls(s.guard, s.guard_negated)));
  }
  if (!called.empty()) CUPROBE_RETURN_IF_ERROR(editor.InsertBefore(sink.index, calls({}, false)));
  stats->entry_sites = 1;
  stats->entry_sunk = sink.index != editor.EntryPoint();
  return absl::OkStatus();
}

}  // namespace cuprobe
