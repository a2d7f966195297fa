// File: ptx_rewriter/site_summary.cc
#include "ptx_rewriter/site_summary.h"

#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "probe/interpreter.h"
#include "probe/map_desc.h"

namespace cuprobe {
namespace {

// A summary run is short: the probes it can summarize are a few dozen
// instructions. A program that loops longer is called instead.
constexpr uint64_t kMaxSteps = 100'000;
constexpr size_t kMaxAdds = 64;
// Map handles the run sees: a tag above any address, plus the map index.
constexpr uint64_t kHandleTag = 0xC0DE'0000'0000'0000ull;

// PERTHREAD adds go to the calling thread's own slot: they reduce only at
// entry and exit, which each thread passes once per launch (thread-range
// counters, site_counter_pass.h).
bool SummarizableType(uint32_t type, AttachKind attach) {
  return type == CUPROBE_MAP_HASH || type == CUPROBE_MAP_ARRAY ||
         type == CUPROBE_MAP_HIST_LOG2 || type == CUPROBE_MAP_HIST_LINEAR ||
         (type == CUPROBE_MAP_PERTHREAD && attach != AttachKind::kMemory);
}

}  // namespace

std::optional<std::vector<SiteAdd>> SummarizeSite(const ProbeProgram& program,
                                                  absl::Span<const MapSpec> maps,
                                                  const SiteConstants& site) {
  if (program.summary_code.empty() || program.summary_code.size() % 8 != 0) return std::nullopt;
  const size_t n = program.summary_code.size() / 8;
  std::vector<Insn> insns;
  insns.reserve(n);
  for (size_t i = 0; i < n; ++i) insns.push_back(DecodeInsn(&program.summary_code[i * 8]));
  absl::flat_hash_set<uint32_t> map_refs;  // instructions that load a map
  // A map reference's immediate is whatever the object said (its own map
  // numbering); the bundle's map index comes from summary_maps.
  for (const auto& [insn, map] : program.summary_maps) {
    if (map >= maps.size() || insn >= n || insns[insn].code != kLdImm64 ||
        insns[insn].src != kPseudoMapFd) {
      return std::nullopt;
    }
    const MapSpec& spec = maps[map];
    if ((spec.flags & CUPROBE_MAP_F_ADD_ONLY) == 0 || !SummarizableType(spec.type, site.attach)) {
      return std::nullopt;
    }
    insns[insn].imm = static_cast<int32_t>(map);
    map_refs.insert(insn);
  }
  for (size_t i = 0; i < n; ++i) {
    const Insn& insn = insns[i];
    if (insn.code == kLdImm64 && insn.src != 0 && !map_refs.contains(static_cast<uint32_t>(i))) {
      return std::nullopt;  // a map or global-data reference the bundle does not resolve
    }
  }

  bool varies = false;  // the run read or did something a site does not fix
  std::vector<SiteAdd> adds;
  InterpreterEnv env;
  env.max_steps = kMaxSteps;
  env.confine_memory = true;
  env.ctx_field = [&](int32_t offset) -> uint64_t {
    switch (offset) {
      case 0: return static_cast<uint32_t>(site.attach);                    // kind
      case 4: return site.kernel_id;
      case 96: return CUPROBE_MEM_INFO_SIZE(site.mem_info);
      case 100: return CUPROBE_MEM_INFO_SPACE(site.mem_info);
      case 104: return CUPROBE_MEM_INFO_KIND(site.mem_info);
      case 108: return site.site_index;
      case 116: return 0;                                                    // reserved
      default: varies = true; return 0;
    }
  };
  env.map_handle = [&](uint32_t map) -> uint64_t {
    if (map >= maps.size()) varies = true;
    return kHandleTag | map;
  };
  env.value_address = [&](uint32_t) -> uint64_t {
    varies = true;  // global data (the compiler never leaves it in summary code)
    return 0;
  };
  env.helper = [&](int32_t, const uint64_t*) -> uint64_t {
    varies = true;
    return 0;
  };
  env.helper_on_stack = [&](int32_t id, const uint64_t* args, const uint8_t* stack,
                            uint64_t stack_address) -> uint64_t {
    const uint64_t handle = args[0];
    if ((handle & ~uint64_t{0xffffffff}) != kHandleTag || (handle & 0xffffffff) >= maps.size() ||
        adds.size() >= kMaxAdds) {
      varies = true;
      return 0;
    }
    SiteAdd add;
    add.map = static_cast<uint32_t>(handle & 0xffffffff);
    const MapSpec& spec = maps[add.map];
    add.delta = args[2];
    if (id == CUPROBE_HELPER_HIST_ADD) {
      add.hist = true;
      add.key.resize(8);
      std::memcpy(add.key.data(), &args[1], 8);
    } else if (id == CUPROBE_HELPER_MAP_ADD) {
      const uint64_t key = args[1];
      const uint64_t size = spec.key_size;
      if (size == 0 || key < stack_address || key - stack_address > kStackSize ||
          size > kStackSize - (key - stack_address)) {
        varies = true;  // a key that is not on the stack
        return 0;
      }
      add.key.assign(stack + (key - stack_address), stack + (key - stack_address) + size);
    } else {
      varies = true;
      return 0;
    }
    adds.push_back(std::move(add));
    return 0;
  };
  absl::StatusOr<uint64_t> r = Interpret(insns, env);
  if (!r.ok() || varies) return std::nullopt;
  return adds;
}

uint32_t SiteCounterTable::IndexOf(std::vector<SiteAdd> adds, uint32_t thread_ids) {
  std::string key = absl::StrCat(thread_ids, "t");
  for (const SiteAdd& a : adds) {
    absl::StrAppend(&key, a.map, a.hist ? "h" : "m", a.delta, ",", a.key.size(), ":");
    key.append(reinterpret_cast<const char*>(a.key.data()), a.key.size());
  }
  auto [it, inserted] = index_.try_emplace(std::move(key), static_cast<uint32_t>(counters_.size()));
  if (inserted) counters_.push_back(SiteCounter{std::move(adds), thread_ids});
  return it->second;
}

}  // namespace cuprobe
