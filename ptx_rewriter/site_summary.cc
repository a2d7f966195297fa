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

// The program's summary code, decoded, with each map reference's immediate
// set to the bundle's map index. nullopt when the code is malformed, when a
// reference is not to an add-only map of a type summarizable at `attach`, or
// when the code loads a map or global data that the bundle does not resolve.
std::optional<std::vector<Insn>> DecodeSummaryCode(const ProbeProgram& program,
                                                   absl::Span<const MapSpec> maps,
                                                   AttachKind attach) {
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
    if ((spec.flags & CUPROBE_MAP_F_ADD_ONLY) == 0 || !SummarizableType(spec.type, attach)) {
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
  return insns;
}

// One run of summary code at a site: the interpreter's environment answers
// from the site's constants, hands out map handles (kHandleTag | index) and
// records the adds of map_add / hist_add. Whatever the site does not fix
// marks the run as varying. Env() binds `this`: a run neither copies nor
// moves.
class SiteRun {
 public:
  SiteRun(absl::Span<const MapSpec> maps, const SiteConstants& site) : maps_(maps), site_(site) {}
  SiteRun(const SiteRun&) = delete;
  SiteRun& operator=(const SiteRun&) = delete;

  [[nodiscard]] InterpreterEnv Env();
  // The run read or did something a site does not fix.
  [[nodiscard]] bool varies() const { return varies_; }
  [[nodiscard]] std::vector<SiteAdd>& adds() { return adds_; }

 private:
  uint64_t CtxField(int32_t offset);
  uint64_t MapHandle(uint32_t map);
  uint64_t HelperOnStack(int32_t id, const uint64_t* args, const uint8_t* stack,
                         uint64_t stack_address);
  // A helper or an address the run may not use.
  uint64_t Varies() {
    varies_ = true;
    return 0;
  }

  absl::Span<const MapSpec> maps_;
  const SiteConstants& site_;
  bool varies_ = false;
  std::vector<SiteAdd> adds_;
};

InterpreterEnv SiteRun::Env() {
  InterpreterEnv env;
  env.max_steps = kMaxSteps;
  env.confine_memory = true;
  env.ctx_field = [this](int32_t offset) { return CtxField(offset); };
  env.map_handle = [this](uint32_t map) { return MapHandle(map); };
  // Global data: the compiler never leaves it in summary code.
  env.value_address = [this](uint32_t) { return Varies(); };
  env.helper = [this](int32_t, const uint64_t*) { return Varies(); };
  env.helper_on_stack = [this](int32_t id, const uint64_t* args, const uint8_t* stack,
                               uint64_t stack_address) {
    return HelperOnStack(id, args, stack, stack_address);
  };
  return env;
}

uint64_t SiteRun::CtxField(int32_t offset) {
  switch (offset) {
    case 0: return static_cast<uint32_t>(site_.attach);  // kind
    case 4: return site_.kernel_id;
    case 96: return CUPROBE_MEM_INFO_SIZE(site_.mem_info);
    case 100: return CUPROBE_MEM_INFO_SPACE(site_.mem_info);
    case 104: return CUPROBE_MEM_INFO_KIND(site_.mem_info);
    case 108: return site_.site_index_varies ? Varies() : site_.site_index;
    case 116: return 0;  // reserved
    default: return Varies();
  }
}

uint64_t SiteRun::MapHandle(uint32_t map) {
  if (map >= maps_.size()) varies_ = true;
  return kHandleTag | map;
}

uint64_t SiteRun::HelperOnStack(int32_t id, const uint64_t* args, const uint8_t* stack,
                                uint64_t stack_address) {
  const uint64_t handle = args[0];
  if ((handle & ~uint64_t{0xffffffff}) != kHandleTag || (handle & 0xffffffff) >= maps_.size() ||
      adds_.size() >= kMaxAdds) {
    return Varies();
  }
  SiteAdd add;
  add.map = static_cast<uint32_t>(handle & 0xffffffff);
  const MapSpec& spec = maps_[add.map];
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
      return Varies();  // a key that is not on the stack
    }
    add.key.assign(stack + (key - stack_address), stack + (key - stack_address) + size);
  } else {
    return Varies();
  }
  adds_.push_back(std::move(add));
  return 0;
}

}  // namespace

std::optional<std::vector<SiteAdd>> SummarizeSite(const ProbeProgram& program,
                                                  absl::Span<const MapSpec> maps,
                                                  const SiteConstants& site) {
  const std::optional<std::vector<Insn>> insns = DecodeSummaryCode(program, maps, site.attach);
  if (!insns) return std::nullopt;
  SiteRun run(maps, site);
  absl::StatusOr<uint64_t> r = Interpret(*insns, run.Env());
  if (!r.ok() || run.varies()) return std::nullopt;
  return std::move(run.adds());
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
