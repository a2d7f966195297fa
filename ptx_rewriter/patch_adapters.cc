// File: ptx_rewriter/patch_adapters.cc
#include "ptx_rewriter/patch_adapters.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <iterator>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "ptx_rewriter/site_summary.h"

namespace cuprobe {

// The adapters read these fields at fixed offsets.
static_assert(std::is_standard_layout_v<cuprobe_patch_kernel>);
static_assert(sizeof(cuprobe_patch_kernel) == CUPROBE_PATCH_KERNEL_SIZE);
static_assert(offsetof(cuprobe_patch_kernel, map_block) == 0);
static_assert(offsetof(cuprobe_patch_kernel, kernel_id) == 8);
static_assert(offsetof(cuprobe_patch_kernel, programs) == 12);
static_assert(offsetof(cuprobe_patch_kernel, args) == CUPROBE_PATCH_KERNEL_ARGS_OFFSET);
static_assert(offsetof(cuprobe_patch_kernel, site_counters) == CUPROBE_PATCH_SITE_COUNTERS_OFFSET);
static_assert(offsetof(cuprobe_patch_kernel, counter_of) == CUPROBE_PATCH_COUNTER_OF_OFFSET);
// Counter indices are bytes, CUPROBE_PATCH_NO_COUNTER the largest.
static_assert(CUPROBE_PATCH_NO_COUNTER == 255);
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
                      "\t.reg .b32 %r<16>;\n"
                      "\t.reg .b64 %rd<10>;\n");
}

// The access class's space slot of a memory adapter (abi.h, 10.).
std::optional<uint32_t> SpaceSlot(uint32_t instruction) {
  switch (instruction) {
    case kSanitizerGlobalMemoryAccess:
    case kSanitizerMemcpyAsync:
      return 0;
    case kSanitizerSharedMemoryAccess:
      return 1;
    case kSanitizerLocalMemoryAccess:
      return 2;
    default:
      return std::nullopt;
  }
}

// Site counters (abi.h, 10.): with the block's site_counters set and %r3's
// size a power of two up to 128, the warp's lowest active lane adds the
// active lanes to the class's counter in its SM's shard, and no program is
// called; otherwise on to $L__cuprobe_call.
std::string CountingPath(uint32_t slot) {
  return absl::StrCat(
      "\tld.global.nc.u64 %rd5, [%rd1+", CUPROBE_PATCH_SITE_COUNTERS_OFFSET, "];\n"
      "\tsetp.eq.u64 %p1, %rd5, 0;\n"
      "\t@%p1 bra $L__cuprobe_call;\n"
      "\tand.b32 %r8, %r3, 65535;\n"
      "\tbfind.u32 %r9, %r8;\n"
      "\tsetp.gt.u32 %p1, %r9, 7;\n"
      "\t@%p1 bra $L__cuprobe_call;\n"
      "\tmov.u32 %r10, 1;\n"
      "\tshl.b32 %r10, %r10, %r9;\n"
      "\tsetp.ne.u32 %p1, %r10, %r8;\n"
      "\t@%p1 bra $L__cuprobe_call;\n"
      // class - slot * 32 = kind * 8 + log2(size); kind = mem_info bits 20-21.
      "\tshr.u32 %r11, %r3, 17;\n"
      "\tand.b32 %r11, %r11, 24;\n"
      "\tadd.s32 %r11, %r11, %r9;\n"
      "\tcvt.u64.u32 %rd6, %r11;\n"
      "\tadd.s64 %rd6, %rd1, %rd6;\n"
      "\tld.global.nc.u8 %r12, [%rd6+", CUPROBE_PATCH_COUNTER_OF_OFFSET + slot * 32, "];\n"
      "\tsetp.eq.u32 %p1, %r12, ", CUPROBE_PATCH_NO_COUNTER, ";\n"
      "\t@%p1 bra $L__cuprobe_done;\n"
      // base + (c / 16) * GROUP_BYTES + shard * 128 + (c % 16) * 8
      "\tshr.u32 %r13, %r12, 4;\n"
      "\tmul.wide.u32 %rd7, %r13, ", CUPROBE_SITE_COUNTER_GROUP_BYTES, ";\n"
      "\tmov.u32 %r14, %smid;\n"
      "\tand.b32 %r14, %r14, ", CUPROBE_SITE_COUNTER_SHARDS - 1, ";\n"
      "\tshl.b32 %r14, %r14, 7;\n"
      "\tand.b32 %r15, %r12, 15;\n"
      "\tshl.b32 %r15, %r15, 3;\n"
      "\tadd.s32 %r14, %r14, %r15;\n"
      "\tcvt.u64.u32 %rd8, %r14;\n"
      "\tadd.s64 %rd7, %rd7, %rd8;\n"
      "\tadd.s64 %rd7, %rd7, %rd5;\n"
      "\tactivemask.b32 %r8;\n"
      "\tneg.s32 %r9, %r8;\n"
      "\tand.b32 %r9, %r9, %r8;\n"
      "\tmov.u32 %r10, %lanemask_eq;\n"
      "\tsetp.ne.u32 %p1, %r9, %r10;\n"
      "\t@%p1 bra $L__cuprobe_done;\n"
      "\tpopc.b32 %r8, %r8;\n"
      "\tcvt.u64.u32 %rd9, %r8;\n"
      "\tred.global.add.u64 [%rd7], %rd9;\n"
      "\tbra.uni $L__cuprobe_done;\n"
      "$L__cuprobe_call:\n");
}

// Whether the memory adapters get the counting path: a memory program has
// summary code.
bool AnyMemorySummary(const ProbeBundle& bundle) {
  for (const ProbeProgram& p : bundle.programs) {
    if (p.attach == AttachKind::kMemory && !p.summary_code.empty()) return true;
  }
  return false;
}

// Sets the call's operands: %rd3 mem_addr, %r3 mem_info, %r4 site_index,
// %r1 kernel_id, %rd2 args; %r2 the program mask. A memory access that is
// only a prefetch returns.
std::string AdapterPrologue(const AdapterSpec& a, bool count) {
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
  if (std::optional<uint32_t> slot = SpaceSlot(a.instruction); slot.has_value() && count) {
    absl::StrAppend(&out, CountingPath(*slot));
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
  const bool count = AnyMemorySummary(bundle);
  for (const AdapterSpec& a : kAdapters) {
    std::string calls;
    for (size_t i = 0; i < bundle.programs.size(); ++i) {
      if (RunsIn(bundle.programs[i], a)) absl::StrAppend(&calls, ProgramCall(i, functions[i]));
    }
    if (calls.empty()) continue;
    absl::StrAppend(&out.ptx, AdapterHeader(a), AdapterPrologue(a, count), calls,
                    "$L__cuprobe_done:\n"
                    "\tst.param.b32 [__cuprobe_ret], 0;\n"
                    "\tret;\n"
                    "}\n\n");
    out.callbacks.push_back(PatchCallback{a.instruction, a.name});
  }
  return out;
}

std::optional<uint32_t> PatchAccessClass(uint32_t instruction, uint32_t kind, uint32_t size) {
  std::optional<uint32_t> slot = SpaceSlot(instruction);
  if (!slot.has_value() || kind > 3 || size == 0 || size > 128 || (size & (size - 1)) != 0) {
    return std::nullopt;
  }
  return *slot * 32 + kind * 8 + static_cast<uint32_t>(std::countr_zero(size));
}

std::optional<PatchKernelCounters> PatchSiteCounters(const ProbeBundle& bundle,
                                                     uint32_t programs, uint32_t kernel_id) {
  constexpr uint32_t kMemoryAdapters[] = {kSanitizerGlobalMemoryAccess,
                                          kSanitizerSharedMemoryAccess,
                                          kSanitizerLocalMemoryAccess};
  constexpr uint32_t kKinds[] = {CUPROBE_ACCESS_LOAD, CUPROBE_ACCESS_STORE, CUPROBE_ACCESS_ATOMIC};
  const size_t n = std::min<size_t>(bundle.programs.size(), CUPROBE_PATCH_MAX_PROGRAMS);
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    any |= (programs >> i & 1) != 0 && bundle.programs[i].attach == AttachKind::kMemory;
  }
  if (!any) return std::nullopt;
  PatchKernelCounters out;
  out.counter_of.fill(CUPROBE_PATCH_NO_COUNTER);
  SiteCounterTable table;
  for (uint32_t instruction : kMemoryAdapters) {
    const AdapterSpec& a = *std::find_if(std::begin(kAdapters), std::end(kAdapters),
                                         [&](const AdapterSpec& s) {
                                           return s.instruction == instruction;
                                         });
    for (uint32_t kind : kKinds) {
      for (uint32_t size = 1; size <= 128; size *= 2) {
        SiteConstants site;
        site.attach = AttachKind::kMemory;
        site.kernel_id = kernel_id;
        site.mem_info = CUPROBE_MEM_INFO(size, a.space, kind);
        site.site_index_varies = true;
        std::vector<SiteAdd> adds;
        for (size_t i = 0; i < n; ++i) {
          if ((programs >> i & 1) == 0 || !RunsIn(bundle.programs[i], a)) continue;
          std::optional<std::vector<SiteAdd>> more =
              SummarizeSite(bundle.programs[i], bundle.maps, site);
          if (!more.has_value()) return std::nullopt;
          adds.insert(adds.end(), more->begin(), more->end());
        }
        if (adds.empty()) continue;
        const uint32_t counter = table.IndexOf(std::move(adds));
        if (counter >= CUPROBE_PATCH_NO_COUNTER) return std::nullopt;
        out.counter_of[*PatchAccessClass(instruction, kind, size)] = static_cast<uint8_t>(counter);
      }
    }
  }
  out.counters = table.counters();
  return out;
}

}  // namespace cuprobe
