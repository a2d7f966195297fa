// File: ptx_rewriter/patch_adapters.cc
#include "ptx_rewriter/patch_adapters.h"

#include <cstddef>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"

namespace cuprobe {

// The adapters read these fields at fixed offsets.
static_assert(std::is_standard_layout_v<cuprobe_patch_kernel>);
static_assert(sizeof(cuprobe_patch_kernel) == CUPROBE_PATCH_KERNEL_SIZE);
static_assert(offsetof(cuprobe_patch_kernel, map_block) == 0);
static_assert(offsetof(cuprobe_patch_kernel, kernel_id) == 8);
static_assert(offsetof(cuprobe_patch_kernel, programs) == 12);
static_assert(offsetof(cuprobe_patch_kernel, args) == CUPROBE_PATCH_KERNEL_ARGS_OFFSET);
// The flags table holds a kind in 2 bits.
static_assert(CUPROBE_ACCESS_LOAD <= 3 && CUPROBE_ACCESS_STORE <= 3 && CUPROBE_ACCESS_ATOMIC <= 3);

namespace {

struct AdapterSpec {
  uint32_t instruction;
  const char* name;
  AttachKind attach;
  uint32_t space;  // CUPROBE_SPACE_* reported by a memory adapter; 0 for blocks
};

constexpr AdapterSpec kAdapters[] = {
    {kSanitizerBlockEnter, CUPROBE_PATCH_SYMBOL_BLOCK_ENTER, AttachKind::kEntry, 0},
    {kSanitizerBlockExit, CUPROBE_PATCH_SYMBOL_BLOCK_EXIT, AttachKind::kExit, 0},
    {kSanitizerGlobalMemoryAccess, CUPROBE_PATCH_SYMBOL_GLOBAL_ACCESS, AttachKind::kMemory,
     CUPROBE_SPACE_GLOBAL},
    {kSanitizerSharedMemoryAccess, CUPROBE_PATCH_SYMBOL_SHARED_ACCESS, AttachKind::kMemory,
     CUPROBE_SPACE_SHARED},
    {kSanitizerLocalMemoryAccess, CUPROBE_PATCH_SYMBOL_LOCAL_ACCESS, AttachKind::kMemory,
     CUPROBE_SPACE_LOCAL},
    {kSanitizerMemcpyAsync, CUPROBE_PATCH_SYMBOL_ASYNC_COPY, AttachKind::kMemory,
     CUPROBE_SPACE_GLOBAL},
};

bool RunsIn(const ProbeProgram& p, const AdapterSpec& a) {
  if (p.attach != a.attach) return false;
  return a.space == 0 || (p.mem_spaces & PatchAdapterSpaces(a.instruction)) != 0;
}

// PatchAccessKind of every value of the low four flag bits, 2 bits each.
uint32_t AccessKindTable() {
  uint32_t table = 0;
  for (uint32_t flags = 0; flags < 16; ++flags) table |= PatchAccessKind(flags) << (2 * flags);
  return table;
}

std::string AdapterHeader(const AdapterSpec& a) {
  std::string params = "\t.param .b64 __cuprobe_userdata,\n\t.param .b64 __cuprobe_pc";
  if (a.instruction == kSanitizerMemcpyAsync) {
    absl::StrAppend(&params,
                    ",\n\t.param .b64 __cuprobe_ptr,\n\t.param .b32 __cuprobe_dst,\n"
                    "\t.param .b32 __cuprobe_size");
  } else if (a.space != 0) {
    absl::StrAppend(&params,
                    ",\n\t.param .b64 __cuprobe_ptr,\n\t.param .b32 __cuprobe_size,\n"
                    "\t.param .b32 __cuprobe_flags,\n\t.param .b64 __cuprobe_data");
  }
  return absl::StrCat(".visible .func (.param .b32 __cuprobe_ret) ", a.name, "(\n", params,
                      "\n)\n{\n"
                      "\t.reg .pred %p<3>;\n"
                      "\t.reg .b32 %r<8>;\n"
                      "\t.reg .b64 %rd<5>;\n");
}

// Sets the call's operands: %rd3 mem_addr, %r3 mem_info, %r4 site_index,
// %r1 kernel_id, %rd2 args; %r2 the program mask. A memory access that is
// only a prefetch returns.
std::string AdapterPrologue(const AdapterSpec& a) {
  std::string out =
      "\tld.param.u64 %rd1, [__cuprobe_userdata];\n"
      "\tsetp.eq.u64 %p1, %rd1, 0;\n"
      "\t@%p1 bra $L__cuprobe_done;\n";
  if (a.instruction == kSanitizerMemcpyAsync) {
    // A global load of the copy's source: mem_info = size | space << 16 | LOAD << 20.
    absl::StrAppend(&out,
                    "\tld.param.u32 %r3, [__cuprobe_size];\n"
                    "\tand.b32 %r3, %r3, 65535;\n"
                    "\tor.b32 %r3, %r3, ", CUPROBE_MEM_INFO(0, a.space, CUPROBE_ACCESS_LOAD), ";\n"
                    "\tld.param.u64 %rd3, [__cuprobe_ptr];\n");
  } else if (a.space != 0) {
    // kind = (table >> 2 * (flags & 15)) & 3; mem_info = size | space << 16 | kind << 20.
    absl::StrAppend(&out,
                    "\tld.param.u32 %r6, [__cuprobe_flags];\n"
                    "\tand.b32 %r6, %r6, 15;\n"
                    "\tshl.b32 %r6, %r6, 1;\n"
                    "\tmov.u32 %r7, ", AccessKindTable(), ";\n"
                    "\tshr.u32 %r7, %r7, %r6;\n"
                    "\tand.b32 %r7, %r7, 3;\n"
                    "\tsetp.eq.u32 %p1, %r7, 0;\n"
                    "\t@%p1 bra $L__cuprobe_done;\n"
                    "\tld.param.u32 %r3, [__cuprobe_size];\n"
                    "\tand.b32 %r3, %r3, 65535;\n"
                    "\tshl.b32 %r7, %r7, 20;\n"
                    "\tor.b32 %r3, %r3, %r7;\n"
                    "\tor.b32 %r3, %r3, ", uint32_t{a.space} << 16, ";\n"
                    "\tld.param.u64 %rd3, [__cuprobe_ptr];\n");
  } else {
    absl::StrAppend(&out, "\tmov.u64 %rd3, 0;\n\tmov.u32 %r3, 0;\n");
  }
  if (a.instruction == kSanitizerBlockEnter) {
    absl::StrAppend(&out, "\tmov.u32 %r4, 0;\n");
  } else {
    absl::StrAppend(&out, "\tld.param.u64 %rd4, [__cuprobe_pc];\n\tcvt.u32.u64 %r4, %rd4;\n");
  }
  absl::StrAppend(&out, "\tld.global.nc.u32 %r1, [%rd1+", offsetof(cuprobe_patch_kernel, kernel_id),
                  "];\n\tld.global.nc.u32 %r2, [%rd1+", offsetof(cuprobe_patch_kernel, programs),
                  "];\n\tadd.s64 %rd2, %rd1, ", CUPROBE_PATCH_KERNEL_ARGS_OFFSET, ";\n");
  return out;
}

// Calls program `index` (function `function`) when its bit is set.
std::string ProgramCall(size_t index, std::string_view function) {
  return absl::StrCat(
      "\tand.b32 %r5, %r2, ", uint32_t{1} << index, ";\n"
      "\tsetp.eq.u32 %p2, %r5, 0;\n"
      "\t@%p2 bra $L__cuprobe_skip", index, ";\n"
      "\t{\n"
      "\t.param .b64 __cp_a0;\n"
      "\t.param .b32 __cp_a1;\n"
      "\t.param .b32 __cp_a2;\n"
      "\t.param .b32 __cp_a3;\n"
      "\t.param .b64 __cp_a4;\n"
      "\t.param .b32 __cp_ret;\n"
      "\tst.param.b64 [__cp_a0], %rd3;\n"
      "\tst.param.b32 [__cp_a1], %r3;\n"
      "\tst.param.b32 [__cp_a2], %r1;\n"
      "\tst.param.b32 [__cp_a3], %r4;\n"
      "\tst.param.b64 [__cp_a4], %rd2;\n"
      "\tcall.uni (__cp_ret), ", function, ", (__cp_a0, __cp_a1, __cp_a2, __cp_a3, __cp_a4);\n"
      "\t}\n"
      "$L__cuprobe_skip", index, ":\n");
}

}  // namespace

uint32_t PatchAccessKind(uint32_t flags) {
  const bool read = (flags & kSanitizerMemoryRead) != 0;
  const bool write = (flags & kSanitizerMemoryWrite) != 0;
  const bool atomic = (flags & kSanitizerMemoryAtomSys) != 0;
  if (atomic || (read && write)) return CUPROBE_ACCESS_ATOMIC;
  if (write) return CUPROBE_ACCESS_STORE;
  if (!read && (flags & kSanitizerMemoryPrefetch) != 0) return 0;
  return CUPROBE_ACCESS_LOAD;
}

uint32_t PatchAdapterSpaces(uint32_t instruction) {
  switch (instruction) {
    case kSanitizerGlobalMemoryAccess:
    case kSanitizerMemcpyAsync:
      return (1u << CUPROBE_SPACE_GLOBAL) | (1u << CUPROBE_SPACE_GENERIC);
    case kSanitizerSharedMemoryAccess:
      return 1u << CUPROBE_SPACE_SHARED;
    case kSanitizerLocalMemoryAccess:
      return 1u << CUPROBE_SPACE_LOCAL;
    default:
      return 0;
  }
}

absl::StatusOr<PatchAdapters> GeneratePatchAdapters(const ProbeBundle& bundle,
                                                    absl::Span<const std::string> functions) {
  if (bundle.programs.size() > CUPROBE_PATCH_MAX_PROGRAMS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the patch backend takes at most ", CUPROBE_PATCH_MAX_PROGRAMS, " programs; ",
        bundle.source_name, " has ", bundle.programs.size()));
  }
  if (functions.size() != bundle.programs.size()) {
    return absl::InternalError("GeneratePatchAdapters: one function per program expected");
  }
  PatchAdapters out;
  for (const AdapterSpec& a : kAdapters) {
    std::string calls;
    for (size_t i = 0; i < bundle.programs.size(); ++i) {
      if (RunsIn(bundle.programs[i], a)) absl::StrAppend(&calls, ProgramCall(i, functions[i]));
    }
    if (calls.empty()) continue;
    absl::StrAppend(&out.ptx, AdapterHeader(a), AdapterPrologue(a), calls,
                    "$L__cuprobe_done:\n"
                    "\tst.param.b32 [__cuprobe_ret], 0;\n"
                    "\tret;\n"
                    "}\n\n");
    out.callbacks.push_back(PatchCallback{a.instruction, a.name});
  }
  return out;
}

}  // namespace cuprobe
