// File: loader/compiler/verifier_call.cc
//
// The verifier's helper calls: the GPU helpers it knows (kHelpers: each
// argument's kind, the result's type), the checks of each argument against
// its kind and of the map's type against the helper, printk formats, and a
// call's effect on the state (released reservations, clobbered R1-R5, R0).
#include "loader/compiler/verifier_internal.h"
#include "loader/compiler/bpf_helper_names.h"
#include "probe/map_layout.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace cuprobe::verifier_internal {

// ---- Helpers ----------------------------------------------------------------

enum class Arg : uint8_t {
  kNone,
  kAnything,     // any initialised value
  kScalar,
  kCtx,
  kCtxOrNull,    // the context or NULL (perf_event_output ignores it on the GPU)
  kMap,
  kKey,          // readable, key_size bytes of the map in r1
  kValue,        // readable, value_size bytes of the map in r1
  kMemRead,      // readable memory, size in the next argument
  kSize,         // a bounded scalar: the size of the previous argument
  kConstSize,    // a constant scalar
  kOut64,        // writable 8 bytes
  kRecord,       // a ring-buffer record from reserve (released)
  kFormat,       // printk format: a constant string in .rodata or on the stack
  kString,       // puts: same, NUL-terminated
};

struct HelperSpec {
  int32_t id;
  const char* name;
  std::array<Arg, 5> args;
  enum class Ret : uint8_t { kScalar, kU32, kMapValueOrNull, kMemOrNull, kVoid } ret;
};

// What the arguments of one helper call established, for its result.
struct CallFacts {
  const ObjectMap* map = nullptr;  // the map argument
  uint32_t map_index = 0;          // ... as a BpfObject::maps index
  uint32_t release_ref = 0;        // the reservation a submit / discard releases
  uint64_t reserve_size = 0;       // ringbuf_reserve's constant size
  std::string format;              // trace_printk / puts
  bool has_format = false;
};

namespace {

constexpr HelperSpec kHelpers[] = {
    {CUPROBE_HELPER_MAP_LOOKUP_ELEM, "map_lookup_elem", {Arg::kMap, Arg::kKey}, HelperSpec::Ret::kMapValueOrNull},
    {CUPROBE_HELPER_MAP_UPDATE_ELEM, "map_update_elem", {Arg::kMap, Arg::kKey, Arg::kValue, Arg::kScalar}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_MAP_DELETE_ELEM, "map_delete_elem", {Arg::kMap, Arg::kKey}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_KTIME_GET_NS, "ktime_get_ns", {}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_TRACE_PRINTK, "trace_printk", {Arg::kFormat, Arg::kConstSize}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_GET_SMP_PROCESSOR_ID, "get_smp_processor_id", {}, HelperSpec::Ret::kU32},
    {CUPROBE_HELPER_GET_CURRENT_PID_TGID, "get_current_pid_tgid", {}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_PERF_EVENT_OUTPUT, "perf_event_output", {Arg::kCtxOrNull, Arg::kMap, Arg::kScalar, Arg::kMemRead, Arg::kSize}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_RINGBUF_OUTPUT, "ringbuf_output", {Arg::kMap, Arg::kMemRead, Arg::kSize, Arg::kScalar}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_RINGBUF_RESERVE, "ringbuf_reserve", {Arg::kMap, Arg::kConstSize, Arg::kScalar}, HelperSpec::Ret::kMemOrNull},
    {CUPROBE_HELPER_RINGBUF_SUBMIT, "ringbuf_submit", {Arg::kRecord, Arg::kScalar}, HelperSpec::Ret::kVoid},
    {CUPROBE_HELPER_RINGBUF_DISCARD, "ringbuf_discard", {Arg::kRecord, Arg::kScalar}, HelperSpec::Ret::kVoid},
    {CUPROBE_HELPER_BPFTIME_PUTS, "puts", {Arg::kString}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_BPFTIME_GLOBALTIMER, "get_globaltimer", {}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_BPFTIME_BLOCK_IDX, "get_block_idx", {Arg::kOut64, Arg::kOut64, Arg::kOut64}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_BPFTIME_BLOCK_DIM, "get_block_dim", {Arg::kOut64, Arg::kOut64, Arg::kOut64}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_BPFTIME_THREAD_IDX, "get_thread_idx", {Arg::kOut64, Arg::kOut64, Arg::kOut64}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_BPFTIME_MEMBAR, "membar", {}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_BPFTIME_EXIT, "cuda_exit", {}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_BPFTIME_GRID_DIM, "get_grid_dim", {Arg::kOut64, Arg::kOut64, Arg::kOut64}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_BPFTIME_SM_ID, "get_sm_id", {}, HelperSpec::Ret::kU32},
    {CUPROBE_HELPER_BPFTIME_WARP_ID, "get_warp_id", {}, HelperSpec::Ret::kU32},
    {CUPROBE_HELPER_BPFTIME_LANE_ID, "get_lane_id", {}, HelperSpec::Ret::kU32},
    {CUPROBE_HELPER_MAP_ADD, "map_add", {Arg::kMap, Arg::kKey, Arg::kScalar}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_HIST_ADD, "hist_add", {Arg::kMap, Arg::kScalar, Arg::kScalar}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_GET_ARG, "get_arg", {Arg::kCtx, Arg::kScalar}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_GRID_DIM, "grid_dim", {Arg::kOut64, Arg::kOut64, Arg::kOut64}, HelperSpec::Ret::kVoid},
    {CUPROBE_HELPER_GLOBAL_THREAD_ID, "global_thread_id", {}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_WARP_MATCH, "warp_match", {Arg::kScalar}, HelperSpec::Ret::kU32},
    {CUPROBE_HELPER_GRID_ID, "grid_id", {}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_CLZ, "clz", {Arg::kScalar}, HelperSpec::Ret::kU32},
};

const HelperSpec* FindHelper(int32_t id) {
  for (const HelperSpec& h : kHelpers) {
    if (h.id == id) return &h;
  }
  return nullptr;
}

bool IsHistMap(uint32_t t) { return t == CUPROBE_MAP_HIST_LOG2 || t == CUPROBE_MAP_HIST_LINEAR; }

// Formats one printk call site may print (on different paths).
constexpr size_t kMaxFormatsPerCall = 16;

}  // namespace

// A helper call: the helper, each argument against its kind (in order: a
// key's or value's size comes from the map argument before it), a printk's
// format and arguments, then the call's effect on the state.
Verifier::Result Verifier::DoCall(uint32_t pc, const Insn& insn, State& st) {
  const HelperSpec* h = nullptr;
  if (auto r = ResolveHelper(pc, insn, &h); r) return r;
  out_.helpers_used.insert(h->id);
  CallFacts call;
  for (int a = 0; a < 5; ++a) {
    if (h->args[a] == Arg::kNone) break;
    if (auto r = CheckHelperArg(pc, st, *h, a, call); r) return r;
  }
  if (call.has_format) {
    if (auto r = CheckPrintk(pc, st, *h, call.format); r) return r;
  }
  if (h->id == CUPROBE_HELPER_GET_ARG) out_.reads_args = true;
  if (call.release_ref != 0) ReleaseRecord(st, call.release_ref);
  SetCallResult(st, *h, call);
  return std::nullopt;
}

Verifier::Result Verifier::ResolveHelper(uint32_t pc, const Insn& insn, const HelperSpec** h) {
  if (insn.src == kPseudoCall) {
    return Reject(pc, "call of another function of the program",
                  "probes cannot call functions: mark them static __always_inline");
  }
  *h = FindHelper(insn.imm);
  if (*h != nullptr) return std::nullopt;
  const std::string_view kernel_name = KernelHelperName(insn.imm);
  if (!kernel_name.empty()) {
    return Reject(pc,
                  absl::StrCat("helper ", insn.imm, " (", kernel_name,
                               ") exists only in the Linux kernel: it is not available on the GPU"),
                  "the GPU helpers are listed in include/cuprobe/abi.h and docs/PROBES.md");
  }
  if (insn.imm > 500 && insn.imm < 600) {
    return Reject(pc,
                  absl::StrCat("bpftime GPU helper ", insn.imm,
                               " is not one cuprobe knows (it has bpftime's 501-511)"),
                  "the GPU helpers are listed in include/cuprobe/abi.h and docs/PROBES.md");
  }
  return Reject(pc, absl::StrCat("unknown helper ", insn.imm, " (not available on the GPU)"),
                "the GPU helpers are listed in include/cuprobe/abi.h and docs/PROBES.md");
}

Verifier::Result Verifier::WrongArg(uint32_t pc, const HelperSpec& h, int a, const Value& v,
                                    const char* expected) {
  return Reject(pc, absl::StrCat("argument ", a + 1, " of ", h.name, " (R", a + 1, ") is ",
                                 TypeName(v.type), "; expected ", expected));
}

// Argument `a` (in R<a+1>) of a call of `h`.
Verifier::Result Verifier::CheckHelperArg(uint32_t pc, State& st, const HelperSpec& h, int a,
                                          CallFacts& call) {
  const int reg = a + 1;
  if (auto r = ReadReg(pc, st, reg); r) {
    r->message = absl::StrCat("argument ", a + 1, " of ", h.name, ": ", r->message);
    return r;
  }
  const Value& v = st.regs[reg];
  switch (h.args[a]) {
    case Arg::kNone:
    case Arg::kAnything:
    case Arg::kSize:  // checked with the pointer before it
      return std::nullopt;
    case Arg::kScalar:
      if (v.type != Type::kScalar) return WrongArg(pc, h, a, v, "a number");
      return std::nullopt;
    case Arg::kCtx:
      if (v.type != Type::kCtx || v.smin != 0) return WrongArg(pc, h, a, v, "the context (ctx)");
      return std::nullopt;
    case Arg::kCtxOrNull:
      if ((v.type == Type::kCtx && v.smin == 0 && v.smax == 0) ||
          (v.IsConst() && v.umin == 0)) {
        return std::nullopt;
      }
      return WrongArg(pc, h, a, v, "the context (ctx) or NULL");
    case Arg::kMap:
      return CheckMapArg(pc, h, a, v, call);
    case Arg::kKey:
      if (auto r = CheckMemArg(pc, st, reg, call.map->spec.key_size, false, "the key"); r) {
        return r;
      }
      RecordCallKey(pc, v);
      return std::nullopt;
    case Arg::kValue:
      return CheckMemArg(pc, st, reg, call.map->spec.value_size, false, "the value");
    case Arg::kMemRead:
      return CheckSizedMemArg(pc, st, h, a);
    case Arg::kConstSize:
      return CheckConstSizeArg(pc, h, a, v, call);
    case Arg::kOut64:
      return CheckMemArg(pc, st, reg, 8, true, "the output pointer");
    case Arg::kRecord:
      if (v.type == Type::kMemOrNull) return WrongArg(pc, h, a, v, "a record checked against NULL");
      if (v.type != Type::kMem || v.smin != 0 || v.smax != 0 || v.ref == 0) {
        return WrongArg(pc, h, a, v, "the pointer returned by bpf_ringbuf_reserve");
      }
      call.release_ref = v.ref;
      return std::nullopt;
    case Arg::kFormat:
      if (auto r = FormatString(pc, st, v, st.regs[2].IsConst() ? st.regs[2].umin : UINT64_MAX,
                                &call.format);
          r) {
        return r;
      }
      call.has_format = true;
      return std::nullopt;
    case Arg::kString:
      if (auto r = FormatString(pc, st, v, UINT64_MAX, &call.format); r) return r;
      call.has_format = true;
      return std::nullopt;
  }
  return std::nullopt;
}

Verifier::Result Verifier::CheckMapArg(uint32_t pc, const HelperSpec& h, int a, const Value& v,
                                       CallFacts& call) {
  if (v.type != Type::kMap) return WrongArg(pc, h, a, v, "a map (&name)");
  call.map = &obj_.maps[v.map];
  call.map_index = v.map;
  out_.maps_used.insert(v.map);
  if (auto r = CheckMapType(pc, h, *call.map); r) return r;
  RecordCallMap(pc, v.map);
  return std::nullopt;
}

// Whether `h` works on maps of `map`'s type (and writability, value size).
Verifier::Result Verifier::CheckMapType(uint32_t pc, const HelperSpec& h, const ObjectMap& map) {
  const uint32_t t = map.spec.type;
  const bool ringbuf_helper = h.id == CUPROBE_HELPER_RINGBUF_OUTPUT ||
                              h.id == CUPROBE_HELPER_RINGBUF_RESERVE ||
                              h.id == CUPROBE_HELPER_PERF_EVENT_OUTPUT;
  std::string expected;
  if (ringbuf_helper && t != CUPROBE_MAP_RINGBUF) expected = "a RINGBUF map";
  if (!ringbuf_helper && t == CUPROBE_MAP_RINGBUF) expected = "a map with keys (not a RINGBUF)";
  if (h.id == CUPROBE_HELPER_HIST_ADD && !IsHistMap(t)) expected = "a HIST_LOG2/HIST_LINEAR map";
  if (h.id != CUPROBE_HELPER_HIST_ADD && IsHistMap(t) && !ringbuf_helper &&
      h.id != CUPROBE_HELPER_MAP_LOOKUP_ELEM) {
    expected = "a map other than a histogram (use cuprobe_hist_add)";
  }
  if (h.id == CUPROBE_HELPER_MAP_ADD && map.spec.value_size != 8) {
    expected = "a map with u64 values";
  }
  if ((h.id == CUPROBE_HELPER_MAP_UPDATE_ELEM || h.id == CUPROBE_HELPER_MAP_DELETE_ELEM ||
       h.id == CUPROBE_HELPER_MAP_ADD) &&
      map.read_only()) {
    expected = "a writable map";
  }
  if (!expected.empty()) {
    return Reject(pc, absl::StrCat(h.name, " on map '", map.spec.name, "' of type ",
                                   MapTypeName(t), ": expected ", expected));
  }
  return std::nullopt;
}

// Memory read by the helper (argument `a`), its size in the next argument:
// a number bounded to [1, 1 MiB], and the whole bound readable.
Verifier::Result Verifier::CheckSizedMemArg(uint32_t pc, State& st, const HelperSpec& h, int a) {
  const int reg = a + 1;
  const Value& size = st.regs[reg + 1];
  if (size.type != Type::kScalar) {
    return Reject(pc, absl::StrCat("argument ", a + 2, " of ", h.name,
                                   " (the size) is not a number"));
  }
  if (size.umax > (1u << 20) || size.umin == 0) {
    return Reject(pc,
                  absl::StrCat("the size passed to ", h.name, " is not bounded to [1, ",
                               1u << 20, "]: [", size.umin, ", ", size.umax, "]"),
                  "pass sizeof(record) or bound the size with a check");
  }
  return CheckMemArg(pc, st, reg, size.umax, false, "the data");
}

Verifier::Result Verifier::CheckConstSizeArg(uint32_t pc, const HelperSpec& h, int a,
                                             const Value& v, CallFacts& call) {
  if (!v.IsConst()) {
    return Reject(pc, absl::StrCat("argument ", a + 1, " of ", h.name,
                                   " must be a constant size"),
                  "use sizeof(...)");
  }
  if (h.id == CUPROBE_HELPER_RINGBUF_RESERVE) {
    if (v.umin == 0 || v.umin > (1u << 20)) {
      return Reject(pc, absl::StrCat("ring-buffer reservation of ", v.umin,
                                     " bytes (expected 1 .. 1 MiB)"));
    }
    call.reserve_size = v.umin;
  }
  return std::nullopt;
}

// A trace_printk / puts format: at most 3 conversions (none for puts), each
// with a scalar in R3.., and one format per call site on every path (the
// lowering writes the format's id into the record).
Verifier::Result Verifier::CheckPrintk(uint32_t pc, const State& st, const HelperSpec& h,
                                       const std::string& format) {
  const int n = CountPrintkConversions(format);
  if (n < 0 || n > 3) {
    return Reject(pc, absl::StrCat("printk format \"", format, "\" has ",
                                   n < 0 ? "an invalid conversion" : "more than 3 conversions"),
                  "at most 3 arguments: %d %u %x %ld %lu %lx %lld %llu %llx %p %c");
  }
  if (h.id == CUPROBE_HELPER_BPFTIME_PUTS && n != 0) {
    return Reject(pc, "bpf_puts takes no arguments: the string may not contain conversions");
  }
  for (int a = 0; a < n; ++a) {
    const int reg = 3 + a;
    if (auto r = ReadReg(pc, st, reg); r) {
      r->message = absl::StrCat("printk argument ", a + 1, ": ", r->message);
      return r;
    }
    if (st.regs[reg].type != Type::kScalar) {
      return Reject(pc, absl::StrCat("printk argument ", a + 1, " (R", reg, ") is ",
                                     TypeName(st.regs[reg].type)),
                    "print values, not pointers");
    }
  }
  std::vector<int32_t>& formats = printk_at_[pc];
  for (int32_t k : formats) {
    if (out_.printk_formats[k] == format) return std::nullopt;
  }
  if (formats.size() >= kMaxFormatsPerCall) {
    return Reject(pc, absl::StrCat("one printk call prints more than ", kMaxFormatsPerCall,
                                   " different formats on different paths"),
                  "give each format its own bpf_printk call");
  }
  formats.push_back(static_cast<int32_t>(out_.printk_formats.size()));
  out_.printk_formats.push_back(format);
  InsnInfo& info = out_.insns[pc];
  if (info.printk_format < 0) {
    info.printk_format = formats[0];
    info.printk_nargs = static_cast<uint32_t>(n);
  }
  if (formats.size() > 1) info.printk_choices = formats;
  return std::nullopt;
}

// Submit / discard: the reservation is released, and copies of the record's
// pointer (registers, spills) keep their number, not their pointer.
void Verifier::ReleaseRecord(State& st, uint32_t ref) {
  st.refs.erase(std::remove(st.refs.begin(), st.refs.end(), ref), st.refs.end());
  auto invalidate = [&](Value& v) {
    if ((v.type == Type::kMem || v.type == Type::kMemOrNull) && v.ref == ref) {
      v = Value::Unknown();
    }
  };
  for (Value& r : st.regs) invalidate(r);
  for (int s = 0; s < kStackSize / 8; ++s) {
    if (st.stack[s * 8] == Slot::kSpill &&
        (st.spills[s].type == Type::kMem || st.spills[s].type == Type::kMemOrNull) &&
        st.spills[s].ref == ref) {
      st.spills[s] = Value::Unknown();  // the address stays, as a number
    }
  }
}

// R1-R5 are clobbered by the call; R0 gets the helper's result (a lookup's
// or reservation's pointer may be NULL, with a fresh id for its check).
void Verifier::SetCallResult(State& st, const HelperSpec& h, const CallFacts& call) {
  for (int r = 1; r <= 5; ++r) st.regs[r] = Value();
  Value ret = Value::Unknown();
  switch (h.ret) {
    case HelperSpec::Ret::kScalar: break;
    case HelperSpec::Ret::kVoid: break;
    case HelperSpec::Ret::kU32: ret = Value::Range(0, kU32Max); break;
    case HelperSpec::Ret::kMapValueOrNull:
      ret = Value::Pointer(Type::kMapValueOrNull, 0);
      ret.map = call.map_index;
      ret.id = next_id_++;
      ret.tz = 3;  // values are 8-byte aligned (abi.h)
      break;
    case HelperSpec::Ret::kMemOrNull:
      ret = Value::Pointer(Type::kMemOrNull, 0);
      ret.mem_size = static_cast<uint32_t>(call.reserve_size);
      ret.id = next_id_++;
      ret.ref = ret.id;
      st.refs.push_back(ret.ref);
      break;
  }
  if (h.id == CUPROBE_HELPER_GLOBAL_THREAD_ID) ret = Value::Unknown();
  if (h.id == CUPROBE_HELPER_BPFTIME_LANE_ID) ret = Value::Range(0, 31);
  st.regs[0] = ret;
}

// The map a map helper's call site passes, or kCallMapMixed once paths
// disagree: the lowering picks the map type's entry point by it.
void Verifier::RecordCallMap(uint32_t pc, uint32_t map) {
  InsnInfo& info = out_.insns[pc];
  if (info.call_map == InsnInfo::kCallMapNone) {
    info.call_map = static_cast<int32_t>(map);
  } else if (info.call_map != static_cast<int32_t>(map)) {
    info.call_map = InsnInfo::kCallMapMixed;
  }
}

// Whether the key is at the same constant stack offset on every path: the
// lowering then reads it from the stack's alloca.
void Verifier::RecordCallKey(uint32_t pc, const Value& key) {
  InsnInfo& info = out_.insns[pc];
  const bool on_stack = key.type == Type::kStack && key.ConstOffset();
  const int32_t offset = on_stack ? static_cast<int32_t>(key.smin) : 0;
  if (call_key_seen_.insert(pc).second) {
    info.call_key_on_stack = on_stack;
    info.call_key_stack_offset = offset;
  } else if (!on_stack || offset != info.call_key_stack_offset) {
    info.call_key_on_stack = false;
  }
}

// The string at `v`, which must be a constant offset into .rodata, or into
// the stack where constants were stored (StackString), and end (NUL) within
// `size_limit` bytes.
Verifier::Result Verifier::FormatString(uint32_t pc, const State& st, const Value& v,
                                        uint64_t size_limit, std::string* out) {
  if (v.type == Type::kStack && v.ConstOffset()) return StackString(pc, st, v, size_limit, out);
  if (v.type != Type::kMapValue || !obj_.maps[v.map].read_only() || !v.ConstOffset()) {
    return Reject(pc, "the format must be a constant string (in .rodata or built on the stack)",
                  "pass a string literal: bpf_printk(\"x=%d\\n\", x)");
  }
  const std::vector<uint8_t>& image = obj_.maps[v.map].spec.initial_value;
  const uint64_t start = static_cast<uint64_t>(v.smin);
  const uint64_t end = std::min<uint64_t>(image.size(), start + size_limit);
  for (uint64_t i = start; i < end; ++i) {
    if (image[i] == 0) {
      out->assign(image.begin() + static_cast<int64_t>(start), image.begin() + static_cast<int64_t>(i));
      return std::nullopt;
    }
  }
  return Reject(pc, "the format string is not NUL-terminated within its size");
}

// A string on the stack (libbpf's bpf_printk under BPF_NO_GLOBAL_DATA, or
// char msg[] = "..." passed to bpf_trace_printk): every byte up to the NUL
// must hold a constant that a store put there, the same on every path (the
// lowering writes only the format's id), and a size in R2 must be readable.
Verifier::Result Verifier::StackString(uint32_t pc, const State& st, const Value& v,
                                       uint64_t size_limit, std::string* out) {
  const int64_t start = v.smin;
  if (size_limit != UINT64_MAX) {
    if (auto r = CheckStackRange(pc, st, start, start + static_cast<int64_t>(size_limit), false,
                                 "the format");
        r) {
      return r;
    }
  }
  const int64_t end = std::min<int64_t>(0, start + static_cast<int64_t>(std::min<uint64_t>(
                                                       size_limit, kStackSize)));
  std::string text;
  for (int64_t off = start; off < end; ++off) {
    const std::optional<uint8_t> byte = KnownStackByte(st, static_cast<int>(kStackSize + off));
    if (!byte) {
      return Reject(pc,
                    absl::StrCat("the format on the stack at fp", start,
                                 " is not a constant string: byte fp", off, " is not known"),
                    "build it from a string literal (char fmt[] = \"...\") or pass the literal");
    }
    if (*byte == 0) {
      *out = std::move(text);
      if (start < out_.min_stack_offset) out_.min_stack_offset = static_cast<int32_t>(start);
      return std::nullopt;
    }
    text.push_back(static_cast<char>(*byte));
  }
  return Reject(pc, "the format string is not NUL-terminated within its size");
}

}  // namespace cuprobe::verifier_internal

namespace cuprobe {

int CountPrintkConversions(std::string_view f) {
  int n = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') continue;
    ++i;
    if (i < f.size() && f[i] == '%') continue;
    while (i < f.size() && (f[i] == '-' || f[i] == '+' || f[i] == ' ' || f[i] == '#' ||
                            f[i] == '0' || (f[i] >= '1' && f[i] <= '9'))) {
      ++i;
    }
    while (i < f.size() && (f[i] == 'l' || f[i] == 'h' || f[i] == 'z')) ++i;
    if (i >= f.size()) return -1;
    switch (f[i]) {
      case 'd': case 'i': case 'u': case 'x': case 'X': case 'p': case 'c': case 'o':
        ++n;
        break;
      default:
        return -1;
    }
  }
  return n;
}

}  // namespace cuprobe
