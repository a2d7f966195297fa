// File: probe/bundle.h
//
// The probe bundle (.cpb): what the probe compiler (loader/compiler) produces
// and what the rewriter and the hook consume. In memory it is a ProbeBundle;
// on disk and in the session segment it is the versioned, self-describing
// byte format of bundle.cc (WriteBundle / ReadBundle), which rejects bad or
// truncated bytes with a message that says what and where.
//
//   CUPROBE_ASSIGN_OR_RETURN(ProbeBundle bundle, ReadBundle(bytes));
//   for (const ProbeProgram& p : bundle.programs)
//     if (p.Matches(kernel_name)) ...
//
// The probe ABI the programs follow is include/cuprobe/abi.h.
#ifndef CUPROBE_PROBE_BUNDLE_H_
#define CUPROBE_PROBE_BUNDLE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cuprobe/abi.h"

namespace cuprobe {

inline constexpr uint32_t kBundleFormatVersion = 1;

enum class AttachKind : uint32_t {
  kEntry = CUPROBE_ATTACH_ENTRY,
  kExit = CUPROBE_ATTACH_EXIT,
  kMemory = CUPROBE_ATTACH_MEM,
};

// One probe program: a PTX function of the bundle's module, following the
// ABI's probe signature.
struct ProbeProgram {
  std::string name;          // the eBPF program's name
  std::string section;       // its ELF section, as written ("kprobe/foo")
  AttachKind attach = AttachKind::kEntry;
  std::string kernel_glob;   // which kernels (see abi.h, "Attach points")
  std::string ptx_function;  // the .func in ProbeBundle::ptx
  bool reads_args = false;   // reads ctx->args / num_args / GET_ARG
  // Memory probes: which spaces to instrument, a bit per CUPROBE_SPACE_*
  // (1 << space). Default: global and generic.
  uint32_t mem_spaces = (1u << CUPROBE_SPACE_GLOBAL) | (1u << CUPROBE_SPACE_GENERIC);
  // The program's eBPF instructions (8 bytes each), present only when the
  // compiler found that the program may reduce to adds of site constants
  // (abi.h, "Site counters"): it calls no helper but map_add and hist_add,
  // on add-only maps, never uses their results, and reads no argument. The
  // rewriter runs it per site (site_summary.h). Empty: always called.
  std::vector<uint8_t> summary_code;
  // Its ld_imm64 map references: (instruction index, bundle map index).
  std::vector<std::pair<uint32_t, uint32_t>> summary_maps;
};

// Field names and types of a map's key or value, from BTF, so readers can
// print maps with names. Empty when the object had no BTF.
struct TypeField {
  std::string name;
  std::string type;      // "u32", "u64", "char[16]", "struct foo", ...
  uint32_t offset = 0;   // bytes
  uint32_t size = 0;     // bytes
};
struct TypeDescription {
  std::string name;      // "u32", "struct event", ...
  uint32_t size = 0;
  std::vector<TypeField> fields;  // empty for scalars
};

struct MapSpec {
  std::string name;
  uint32_t type = 0;         // CUPROBE_MAP_* (aliases already resolved)
  uint32_t key_size = 0;
  uint32_t value_size = 0;
  uint32_t max_entries = 0;
  uint32_t flags = 0;
  uint64_t map_extra = 0;    // HIST_LINEAR: min (low 32 bits), step (high 32)
  TypeDescription key_type;
  TypeDescription value_type;
  // .rodata / .data / .bss become ARRAY maps of one entry with this image.
  std::vector<uint8_t> initial_value;
};

struct ProbeBundle {
  uint32_t format_version = kBundleFormatVersion;
  uint32_t abi_version = CUPROBE_ABI_VERSION;
  std::string compiler_version;   // "cuprobe 0.1.0 / LLVM 19.1.x"
  uint64_t source_hash = 0;       // of the probe source or object
  std::string source_name;        // "threadhist.bpf.c"
  std::vector<ProbeProgram> programs;
  std::vector<MapSpec> maps;      // index = slot in __cuprobe_map_table
  // One PTX module (.version/.target sm_90) with every program's .func, plus
  // .extern declarations of the helpers and __cuprobe_map_table it uses.
  std::string ptx;
  std::vector<std::string> helpers;         // helper library symbols used
  std::vector<std::string> printk_formats;  // index = format_id
  // The one-liner this bundle was compiled from (`cuprobe compile -e`), so
  // that `cuprobe run -p` of the bundle prints its maps as the one-liner
  // does (loader/oneliner); empty for C probes.
  std::string oneliner;
};

// Site counters (include/cuprobe/abi.h, ptx_rewriter/site_summary.h): one
// constant add that the sites of a counter make each time they run.
struct SiteAdd {
  uint32_t map = 0;          // bundle map index
  bool hist = false;         // hist_add(map, value, delta); else map_add(map, key, delta)
  std::vector<uint8_t> key;  // map_add: the key's bytes; hist_add: the value, 8 bytes LE
  uint64_t delta = 0;
  bool operator==(const SiteAdd&) const = default;
};

// What one execution of the sites that share a counter adds.
struct SiteCounter {
  std::vector<SiteAdd> adds;
  // 0: the counter counts executions. Otherwise a thread-range counter
  // (abi.h): every add targets a PERTHREAD map with this many ids per key,
  // at a site each thread of a launch passes once, and the counter records
  // each launch's thread count.
  uint32_t thread_ids = 0;
  bool operator==(const SiteCounter&) const = default;
};

// Serialization (bundle.cc). ReadBundle validates every size and offset.
[[nodiscard]] std::vector<uint8_t> WriteBundle(const ProbeBundle& bundle);
[[nodiscard]] absl::StatusOr<ProbeBundle> ReadBundle(absl::Span<const uint8_t> bytes);

// Does `glob` select the kernel of mangled name `mangled` (whose demangled
// name without parameters is `demangled_base`, may be empty)?
[[nodiscard]] bool KernelGlobMatches(std::string_view glob, std::string_view mangled,
                                     std::string_view demangled_base);

}  // namespace cuprobe

#endif  // CUPROBE_PROBE_BUNDLE_H_
