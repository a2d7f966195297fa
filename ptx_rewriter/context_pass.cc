// File: ptx_rewriter/context_pass.cc
#include "ptx_rewriter/context_pass.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

static_assert(sizeof(cuprobe_args) == 8 + 8 * CUPROBE_MAX_ARGS);
constexpr uint32_t kArgsValueOffset = 8;  // offsetof(cuprobe_args, value)

// PTX that leaves parameter `p`, zero-extended or truncated to its first 8
// bytes, in the .b64 register `dst` (`tmp` is a second .b64 scratch).
std::string LoadParam(const Param& p, const std::string& dst, const std::string& tmp) {
  const uint32_t bytes = std::min<uint32_t>(p.size, 8);
  if (bytes == 0) return absl::StrCat("mov.u64 ", dst, ", 0;\n");  // .texref and friends
  if (p.array_count == 0) {
    // A scalar: the ld zero-extends into the 64-bit register.
    const char* width = bytes == 1 ? "u8" : bytes == 2 ? "u16" : bytes == 4 ? "u32" : "u64";
    return absl::StrCat("ld.param.", width, " ", dst, ", [", p.name, "];\n");
  }
  // A by-value aggregate: its first 8 bytes (or fewer), little-endian, with
  // the widest loads its alignment allows.
  uint32_t chunk = 1;
  const uint32_t align = p.align == 0 ? PtxTypeSize(p.type) : p.align;
  while (chunk < 8 && chunk * 2 <= align && chunk * 2 <= bytes) chunk *= 2;
  if (bytes % chunk != 0) chunk = 1;
  const char* width = chunk == 1 ? "u8" : chunk == 2 ? "u16" : chunk == 4 ? "u32" : "u64";
  std::string out;
  for (uint32_t off = 0; off < bytes; off += chunk) {
    if (off == 0) {
      absl::StrAppend(&out, "ld.param.", width, " ", dst, ", [", p.name, "];\n");
    } else {
      absl::StrAppend(&out, "ld.param.", width, " ", tmp, ", [", p.name, "+", off, "];\n",
                      "shl.b64 ", tmp, ", ", tmp, ", ", off * 8, ";\n",
                      "or.b64 ", dst, ", ", dst, ", ", tmp, ";\n");
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> RunContextPass(KernelEditor& editor, const KernelProbes& probes,
                                           PassStats* stats) {
  if (!probes.NeedsArgs()) return std::string("0");
  const Function& k = editor.kernel();
  const std::string buffer = editor.FreshVariableName("__cuprobe_args");
  CUPROBE_RETURN_IF_ERROR(editor.Declare(
      absl::StrCat(".local .align 8 .b8 ", buffer, "[", sizeof(cuprobe_args), "];\n")));
  const std::string args = editor.KernelRegister("args", ".b64");
  const std::string value = editor.ScratchRegister(".b64", 0);
  const std::string tmp = editor.ScratchRegister(".b64", 1);

  const uint32_t count = std::min<uint32_t>(static_cast<uint32_t>(k.params.size()),
                                            CUPROBE_MAX_ARGS);
  std::string ptx = absl::StrCat("st.local.u32 [", buffer, "], ", count, ";\n", "st.local.u32 [",
                                 buffer, "+4], 0;\n");
  for (uint32_t i = 0; i < count; ++i) {
    absl::StrAppend(&ptx, LoadParam(k.params[i], value, tmp), "st.local.u64 [", buffer, "+",
                    kArgsValueOffset + 8 * i, "], ", value, ";\n");
  }
  absl::StrAppend(&ptx, "cvta.local.u64 ", args, ", ", buffer, ";\n");
  CUPROBE_RETURN_IF_ERROR(editor.InsertBefore(editor.EntryPoint(), std::move(ptx)));
  stats->args_copied = true;
  return args;
}

}  // namespace cuprobe
