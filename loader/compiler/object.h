// File: loader/compiler/object.h
//
// Reads an eBPF ELF object (clang -target bpf -O2 -g output) into what the
// verifier and the lowering need: programs by section, map definitions
// (BTF-defined .maps and legacy "maps"), global data (.rodata*, .data*,
// .bss*) as one-entry ARRAY maps with their initial image, the map
// references of ld_imm64 instructions (from relocations), BTF descriptions
// of keys and values, and line info. Nothing is loaded anywhere: this is a
// parser of untrusted bytes, and every size and offset is checked.
//
//   CUPROBE_ASSIGN_OR_RETURN(BpfObject obj, ReadBpfObject(bytes, "probe.o"));
//   for (const BpfProgram& p : obj.programs) ...
#ifndef CUPROBE_LOADER_COMPILER_OBJECT_H_
#define CUPROBE_LOADER_COMPILER_OBJECT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "loader/compiler/btf.h"
#include "probe/ebpf.h"
#include "probe/bundle.h"

namespace cuprobe {

// What an ld_imm64 refers to, resolved from its relocation.
struct MapRef {
  uint32_t map = 0;          // index into BpfObject::maps
  bool value = false;        // true: address of the value + offset (global data)
  uint32_t offset = 0;       // value: byte offset into the value
};

enum class MapOrigin : uint8_t {
  kBtfMaps,  // SEC(".maps")
  kLegacy,   // SEC("maps"), struct bpf_map_def
  kData,     // .data*
  kBss,      // .bss*
  kRodata,   // .rodata*: read-only for probes
};

struct ObjectMap {
  MapSpec spec;
  MapOrigin origin = MapOrigin::kBtfMaps;
  bool read_only() const { return origin == MapOrigin::kRodata; }
  bool global_data() const {
    return origin == MapOrigin::kData || origin == MapOrigin::kBss || origin == MapOrigin::kRodata;
  }
};

struct BpfProgram {
  std::string name;     // the function's symbol
  std::string section;  // its ELF section
  uint32_t section_offset = 0;  // bytes: where the program starts in the section
  std::vector<Insn> insns;
  std::map<uint32_t, MapRef> map_refs;  // insn index (of an ld_imm64) -> reference
  std::vector<LineInfo> lines;          // insn_offset relative to the program, sorted
};

// A program of the object that cuprobe does not attach (NotAttachedReason):
// read no further than its name and section.
struct SkippedProgram {
  std::string name;
  std::string section;
  std::string reason;  // why, for the warning
};

struct BpfObject {
  std::string name;  // for messages
  std::vector<BpfProgram> programs;
  std::vector<SkippedProgram> skipped;
  std::vector<ObjectMap> maps;
  bool has_btf = false;

  // The source line of instruction `insn` of `program` (nullptr if unknown).
  [[nodiscard]] const LineInfo* LineOf(const BpfProgram& program, uint32_t insn) const;
};

// Reads the object. `name` only appears in messages.
[[nodiscard]] absl::StatusOr<BpfObject> ReadBpfObject(absl::Span<const uint8_t> bytes,
                                                      std::string_view name);

// Resolves bpftime's and BPF's aliases to a CUPROBE_MAP_* type, or returns
// nullopt for a type cuprobe does not support.
[[nodiscard]] std::optional<uint32_t> ResolveMapType(uint32_t type);

// Why the programs of `section` are not attached, or nullopt for a section
// that names a GPU attach point (or none cuprobe knows, which the verifier
// rejects). Host programs of bpftime's examples ("uprobe/...",
// "uretprobe/...", tracepoints, ...) run on the CPU under bpftime or the
// kernel, and "kprobe/__directly_run" is bpftime's program launched as a
// kernel of its own; cuprobe runs neither.
[[nodiscard]] std::optional<std::string> NotAttachedReason(std::string_view section);

// The RINGBUF bytes for bpftime's GPU ring buffer (1527), whose max_entries
// counts records of value_size bytes (in each thread's ring): room for that
// many records with their headers, at least 1 MiB, a power of two.
[[nodiscard]] uint32_t BpftimeRingBytes(uint32_t max_entries, uint32_t value_size);

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_COMPILER_OBJECT_H_
