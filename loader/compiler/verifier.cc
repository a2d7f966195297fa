#include "loader/compiler/verifier.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "loader/compiler/alu.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

constexpr uint64_t kU32Max = 0xffffffffull;
constexpr int64_t kMaxPtrOffset = 1 << 29;  // pointer arithmetic bound
// States kept per pruning point. The vector is reserved to this size once, so
// pointers to its entries (Verifier::incomplete_) stay valid.
constexpr size_t kMaxStatesPerPoint = 64;

// ---- Abstract values --------------------------------------------------------

enum class Type : uint8_t {
  kNotInit,
  kScalar,
  kCtx,           // pointer to the virtual context
  kStack,         // pointer into this program's stack; offsets are from r10
  kMap,           // a map (ld_imm64 pseudo map), only for helpers
  kMapValue,      // pointer into a map value (or global data)
  kMapValueOrNull,
  kMem,           // ring-buffer record
  kMemOrNull,
};

const char* TypeName(Type t) {
  switch (t) {
    case Type::kNotInit: return "uninitialised";
    case Type::kScalar: return "a scalar";
    case Type::kCtx: return "the context pointer";
    case Type::kStack: return "a stack pointer";
    case Type::kMap: return "a map";
    case Type::kMapValue: return "a map value pointer";
    case Type::kMapValueOrNull: return "a map value pointer that may be NULL";
    case Type::kMem: return "a ring-buffer record pointer";
    case Type::kMemOrNull: return "a ring-buffer record pointer that may be NULL";
  }
  return "?";
}

int Ctz(uint64_t v) { return v == 0 ? 64 : __builtin_ctzll(v); }

struct Value {
  Type type = Type::kNotInit;
  // Scalars: unsigned and signed bounds; tz = trailing bits known to be zero.
  // Pointers: bounds of the offset (as signed) and its known trailing zeros.
  uint64_t umin = 0, umax = UINT64_MAX;
  int64_t smin = INT64_MIN, smax = INT64_MAX;
  int tz = 0;
  uint32_t map = 0;       // kMap / kMapValue*
  uint32_t mem_size = 0;  // kMem*
  uint32_t id = 0;        // *OrNull: shared by copies, for the NULL check
  uint32_t ref = 0;       // kMem*: the reservation to release

  static Value Unknown() {
    Value v;
    v.type = Type::kScalar;
    return v;
  }
  static Value Const(uint64_t c) {
    Value v;
    v.type = Type::kScalar;
    v.umin = v.umax = c;
    v.smin = v.smax = static_cast<int64_t>(c);
    v.tz = Ctz(c);
    return v;
  }
  static Value Range(uint64_t lo, uint64_t hi) {
    Value v = Unknown();
    v.umin = lo;
    v.umax = hi;
    v.Sync();
    return v;
  }
  static Value Pointer(Type t, int64_t off) {
    Value v;
    v.type = t;
    v.smin = v.smax = off;
    v.umin = v.umax = static_cast<uint64_t>(off);
    // Bases (stack frame, map values, records) are 8-byte aligned (abi.h).
    v.tz = std::min(3, Ctz(static_cast<uint64_t>(off)));
    return v;
  }

  bool IsConst() const { return type == Type::kScalar && umin == umax; }
  bool IsPointer() const { return type != Type::kScalar && type != Type::kNotInit; }
  bool ConstOffset() const { return smin == smax; }

  // Makes the signed and unsigned bounds agree.
  void Sync() {
    if (umax <= static_cast<uint64_t>(INT64_MAX)) {
      smin = std::max<int64_t>(smin, static_cast<int64_t>(umin));
      smax = std::min<int64_t>(smax, static_cast<int64_t>(umax));
    } else if (umin > static_cast<uint64_t>(INT64_MAX)) {
      smin = std::max<int64_t>(smin, static_cast<int64_t>(umin));
      smax = std::min<int64_t>(smax, static_cast<int64_t>(umax));
    }
    if (smin >= 0) {
      umin = std::max<uint64_t>(umin, static_cast<uint64_t>(smin));
      umax = std::min<uint64_t>(umax, static_cast<uint64_t>(smax));
    } else if (smax < 0) {
      umin = std::max<uint64_t>(umin, static_cast<uint64_t>(smin));
      umax = std::min<uint64_t>(umax, static_cast<uint64_t>(smax));
    }
    if (umin == umax) {
      smin = smax = static_cast<int64_t>(umin);
      tz = Ctz(umin);
    }
  }
  bool Empty() const { return umin > umax || smin > smax; }

  bool operator==(const Value& o) const {
    if (type != o.type) return false;
    if (type == Type::kNotInit) return true;
    return umin == o.umin && umax == o.umax && smin == o.smin && smax == o.smax && tz == o.tz &&
           map == o.map && mem_size == o.mem_size && id == o.id && ref == o.ref;
  }
};

// Is every concrete value of `cur` a value of `old`?
bool Within(const Value& old, const Value& cur) {
  if (old.type == Type::kNotInit) return true;  // never read on the old path
  if (old.type != cur.type) return false;
  if (cur.umin < old.umin || cur.umax > old.umax || cur.smin < old.smin || cur.smax > old.smax ||
      cur.tz < old.tz) {
    return false;
  }
  return old.map == cur.map && old.mem_size == cur.mem_size && old.id == cur.id &&
         old.ref == cur.ref;
}

// ---- Verifier state ----------------------------------------------------------

enum class Slot : uint8_t { kUninit, kMisc, kSpill };

struct State {
  std::array<Value, kNumRegs> regs;
  std::array<Slot, kStackSize> stack{};  // byte i = fp - 512 + i
  std::array<Value, kStackSize / 8> spills;
  std::vector<uint32_t> refs;  // unreleased ring-buffer reservations
  bool in_loop = false;        // a back edge was taken on this path
  uint32_t loop_header = 0;

  bool operator==(const State& o) const {
    return regs == o.regs && stack == o.stack && spills == o.spills && refs == o.refs;
  }
};

bool StateWithin(const State& old, const State& cur) {
  for (int r = 0; r < kNumRegs; ++r) {
    if (!Within(old.regs[r], cur.regs[r])) return false;
  }
  for (int i = 0; i < kStackSize; ++i) {
    if (old.stack[i] == Slot::kUninit) continue;
    if (cur.stack[i] == Slot::kUninit) return false;
    if (old.stack[i] == Slot::kSpill) {
      if (cur.stack[i] != Slot::kSpill) {
        // A spilled unknown scalar accepts plain data.
        const Value& o = old.spills[i / 8];
        if (!(o.type == Type::kScalar && o.umin == 0 && o.umax == UINT64_MAX)) return false;
      } else if (i % 8 == 0 && !Within(old.spills[i / 8], cur.spills[i / 8])) {
        return false;
      }
    } else if (cur.stack[i] == Slot::kSpill && cur.spills[i / 8].type != Type::kScalar) {
      return false;
    }
  }
  return old.refs == cur.refs;
}

// ---- Context fields --------------------------------------------------------

struct CtxField {
  int32_t offset;
  int32_t size;
  const char* name;
};

constexpr CtxField kCtxFields[] = {
    {0, 4, "kind"},           {4, 4, "kernel_id"},      {8, 4, "block_idx[0]"},
    {12, 4, "block_idx[1]"},  {16, 4, "block_idx[2]"},  {20, 4, "thread_idx[0]"},
    {24, 4, "thread_idx[1]"}, {28, 4, "thread_idx[2]"}, {32, 4, "block_dim[0]"},
    {36, 4, "block_dim[1]"},  {40, 4, "block_dim[2]"},  {44, 4, "grid_dim[0]"},
    {48, 4, "grid_dim[1]"},   {52, 4, "grid_dim[2]"},   {56, 4, "sm_id"},
    {60, 4, "warp_id"},       {64, 4, "lane_id"},       {68, 4, "active_mask"},
    {72, 8, "global_timer"},  {80, 8, "clock"},         {88, 8, "mem_addr"},
    {96, 4, "mem_size"},      {100, 4, "mem_space"},    {104, 4, "mem_kind"},
    {108, 4, "site_index"},   {112, 4, "num_args"},     {116, 4, "reserved"},
};
constexpr int32_t kCtxArgsOffset = 120;

const CtxField* FindCtxField(int32_t offset) {
  for (const CtxField& f : kCtxFields) {
    if (offset >= f.offset && offset < f.offset + f.size) return &f;
  }
  return nullptr;
}

// ---- Memory accesses -------------------------------------------------------

// Whether an access of `size` bytes at p + off is naturally aligned on every
// path: the constant part of the offset and the offset's known trailing zeros.
bool AccessAligned(const Value& p, int32_t off, int size) {
  const int need = size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : 3;
  const bool off_ok = (off & (size - 1)) == 0;
  return off_ok && (p.ConstOffset() ? ((p.smin + off) & (size - 1)) == 0 : p.tz >= need);
}

// What a load of `size` bytes gives when nothing is known of the memory.
Value LoadedValue(int size, bool sign_extend) {
  if (sign_extend) {
    const int64_t lim = int64_t{1} << (8 * size - 1);
    Value v = Value::Unknown();
    v.smin = -lim;
    v.smax = lim - 1;
    v.Sync();
    return v;
  }
  return size == 8 ? Value::Unknown() : Value::Range(0, (uint64_t{1} << (8 * size)) - 1);
}

// The context field that holds byte `offset` (below CUPROBE_CTX_SIZE): a
// named field, or an 8-byte slot of args[].
struct CtxFieldRef {
  int32_t offset;
  int32_t size;
  std::string name;
};

CtxFieldRef CtxFieldAt(int64_t offset) {
  if (offset >= kCtxArgsOffset) {
    const int32_t field_off =
        kCtxArgsOffset + static_cast<int32_t>((offset - kCtxArgsOffset) / 8) * 8;
    return CtxFieldRef{field_off, 8, absl::StrCat("args[", (field_off - kCtxArgsOffset) / 8, "]")};
  }
  const CtxField* f = FindCtxField(static_cast<int32_t>(offset));
  return CtxFieldRef{f->offset, f->size, f->name};
}

// A load of the context field at `field_off`: what the verifier knows of it
// from the attach point (`kind`), else what any load of its size gives.
Value CtxFieldValue(AttachKind kind, int32_t field_off, int size, bool sign_extend) {
  if (field_off == 0) return Value::Const(static_cast<uint32_t>(kind));
  if (field_off == 116) return Value::Const(0);
  if (field_off == 112) return Value::Range(0, CUPROBE_MAX_ARGS);
  if (kind != AttachKind::kMemory && field_off >= 88 && field_off <= 104) return Value::Const(0);
  if (kind == AttachKind::kEntry && field_off == 108) return Value::Const(0);
  if (field_off == 100) return Value::Range(0, 15);
  if (field_off == 104) return Value::Range(0, 15);
  if (field_off == 96) return Value::Range(0, 0xffff);
  if (field_off == 64) return Value::Range(0, 31);
  return LoadedValue(size, sign_extend);
}

// Stores `size` bytes at stack byte `at` (kStackSize + offset from r10).
// A whole aligned 8-byte store of a register (`spilled`, else null) is a
// spill that keeps the register's value; any other store is plain data, as
// are then all the bytes of a spill it partly overwrites.
void WriteStack(State& st, int64_t at, int size, const Value* spilled) {
  const int64_t slot = at / 8;
  for (int64_t s = at / 8; s <= (at + size - 1) / 8; ++s) {
    if (st.stack[s * 8] == Slot::kSpill) {
      for (int i = 0; i < 8; ++i) st.stack[s * 8 + i] = Slot::kMisc;
      st.spills[s] = Value();
    }
  }
  if (size == 8 && spilled != nullptr) {
    for (int i = 0; i < 8; ++i) st.stack[at + i] = Slot::kSpill;
    st.spills[slot] = *spilled;
  } else {
    for (int i = 0; i < size; ++i) st.stack[at + i] = Slot::kMisc;
  }
}

// ---- Helpers ----------------------------------------------------------------

enum class Arg : uint8_t {
  kNone,
  kAnything,     // any initialised value
  kScalar,
  kCtx,
  kMap,
  kKey,          // readable, key_size bytes of the map in r1
  kValue,        // readable, value_size bytes of the map in r1
  kMemRead,      // readable memory, size in the next argument
  kSize,         // a bounded scalar: the size of the previous argument
  kConstSize,    // a constant scalar
  kOut64,        // writable 8 bytes
  kRecord,       // a ring-buffer record from reserve (released)
  kFormat,       // printk format: constant string in read-only global data
  kString,       // puts: same, NUL-terminated
};

struct HelperSpec {
  int32_t id;
  const char* name;
  std::array<Arg, 5> args;
  enum class Ret : uint8_t { kScalar, kU32, kMapValueOrNull, kMemOrNull, kVoid } ret;
};

constexpr HelperSpec kHelpers[] = {
    {CUPROBE_HELPER_MAP_LOOKUP_ELEM, "map_lookup_elem", {Arg::kMap, Arg::kKey}, HelperSpec::Ret::kMapValueOrNull},
    {CUPROBE_HELPER_MAP_UPDATE_ELEM, "map_update_elem", {Arg::kMap, Arg::kKey, Arg::kValue, Arg::kScalar}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_MAP_DELETE_ELEM, "map_delete_elem", {Arg::kMap, Arg::kKey}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_KTIME_GET_NS, "ktime_get_ns", {}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_TRACE_PRINTK, "trace_printk", {Arg::kFormat, Arg::kConstSize}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_GET_SMP_PROCESSOR_ID, "get_smp_processor_id", {}, HelperSpec::Ret::kU32},
    {CUPROBE_HELPER_GET_CURRENT_PID_TGID, "get_current_pid_tgid", {}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_PERF_EVENT_OUTPUT, "perf_event_output", {Arg::kCtx, Arg::kMap, Arg::kScalar, Arg::kMemRead, Arg::kSize}, HelperSpec::Ret::kScalar},
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
    {CUPROBE_HELPER_MAP_ADD, "map_add", {Arg::kMap, Arg::kKey, Arg::kScalar}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_HIST_ADD, "hist_add", {Arg::kMap, Arg::kScalar, Arg::kScalar}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_GET_ARG, "get_arg", {Arg::kCtx, Arg::kScalar}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_GRID_DIM, "grid_dim", {Arg::kOut64, Arg::kOut64, Arg::kOut64}, HelperSpec::Ret::kVoid},
    {CUPROBE_HELPER_GLOBAL_THREAD_ID, "global_thread_id", {}, HelperSpec::Ret::kScalar},
    {CUPROBE_HELPER_WARP_MATCH, "warp_match", {Arg::kScalar}, HelperSpec::Ret::kU32},
    {CUPROBE_HELPER_GRID_ID, "grid_id", {}, HelperSpec::Ret::kScalar},
};

const HelperSpec* FindHelper(int32_t id) {
  for (const HelperSpec& h : kHelpers) {
    if (h.id == id) return &h;
  }
  return nullptr;
}

const char* MapTypeName(uint32_t type) {
  switch (type) {
    case CUPROBE_MAP_HASH: return "HASH";
    case CUPROBE_MAP_ARRAY: return "ARRAY";
    case CUPROBE_MAP_RINGBUF: return "RINGBUF";
    case CUPROBE_MAP_PERTHREAD: return "PERTHREAD";
    case CUPROBE_MAP_PERWARP: return "PERWARP";
    case CUPROBE_MAP_PERSM: return "PERSM";
    case CUPROBE_MAP_HIST_LOG2: return "HIST_LOG2";
    case CUPROBE_MAP_HIST_LINEAR: return "HIST_LINEAR";
    default: return "?";
  }
}

bool IsHistMap(uint32_t t) { return t == CUPROBE_MAP_HIST_LOG2 || t == CUPROBE_MAP_HIST_LINEAR; }

// What the arguments of one helper call established, for its result.
struct CallFacts {
  const ObjectMap* map = nullptr;  // the map argument
  uint32_t map_index = 0;          // ... as a BpfObject::maps index
  uint32_t release_ref = 0;        // the reservation a submit / discard releases
  uint64_t reserve_size = 0;       // ringbuf_reserve's constant size
  std::string format;              // trace_printk / puts
  bool has_format = false;
};

// ---- Scalar arithmetic on bounds -----------------------------------------------

bool AddOverflowsU(uint64_t a, uint64_t b) { return a + b < a; }

// Bounds of the bitwise operations and shifts (into `r`, an unknown scalar).
void BitwiseBounds(const Insn& insn, const Value& d, const Value& s, Value& r) {
  switch (insn.Op()) {
    case kAluAnd:
      r.umin = 0;
      r.umax = std::min(d.umax, s.umax);
      r.tz = std::max(d.tz, s.tz);
      break;
    case kAluOr:
    case kAluXor: {
      // Bounded by the next power of two of the larger operand.
      const uint64_t m = std::max(d.umax, s.umax);
      const int bits = m == 0 ? 0 : 64 - __builtin_clzll(m);
      r.umin = insn.Op() == kAluOr ? std::max(d.umin, s.umin) : 0;
      r.umax = bits >= 64 ? UINT64_MAX : ((uint64_t{1} << bits) - 1);
      r.tz = std::min(d.tz, s.tz);
      break;
    }
    case kAluLsh:
      if (s.IsConst() && s.umin < 64) {
        const int k = static_cast<int>(s.umin);
        if (k == 0 || (d.umax >> (64 - k)) == 0) {
          r.umin = d.umin << k;
          r.umax = d.umax << k;
        }
        r.tz = std::min(64, d.tz + k);
      }
      break;
    case kAluRsh:
      if (s.IsConst()) {
        const int k = static_cast<int>(s.umin & 63);
        r.umin = d.umin >> k;
        r.umax = d.umax >> k;
      } else {
        r.umin = 0;
        r.umax = d.umax;
      }
      break;
    default:
      break;
  }
}

Value ScalarAlu64(const Insn& insn, const Value& d, const Value& s) {
  if (d.IsConst() && s.IsConst()) return Value::Const(EvalAlu(insn, d.umin, s.umin));
  Value r = Value::Unknown();
  switch (insn.Op()) {
    case kAluAdd:
      if (!AddOverflowsU(d.umax, s.umax)) {
        r.umin = d.umin + s.umin;
        r.umax = d.umax + s.umax;
      }
      if (!__builtin_add_overflow(d.smin, s.smin, &r.smin) &&
          !__builtin_add_overflow(d.smax, s.smax, &r.smax)) {
      } else {
        r.smin = INT64_MIN;
        r.smax = INT64_MAX;
      }
      r.tz = std::min(d.tz, s.tz);
      break;
    case kAluSub:
      if (d.umin >= s.umax) {
        r.umin = d.umin - s.umax;
        r.umax = d.umax - s.umin;
      }
      if (__builtin_sub_overflow(d.smin, s.smax, &r.smin) ||
          __builtin_sub_overflow(d.smax, s.smin, &r.smax)) {
        r.smin = INT64_MIN;
        r.smax = INT64_MAX;
      }
      r.tz = std::min(d.tz, s.tz);
      break;
    case kAluMul: {
      unsigned __int128 hi = static_cast<unsigned __int128>(d.umax) * s.umax;
      if (hi <= UINT64_MAX) {
        r.umin = d.umin * s.umin;
        r.umax = static_cast<uint64_t>(hi);
      }
      r.tz = std::min(64, d.tz + s.tz);
      break;
    }
    case kAluAnd:
    case kAluOr:
    case kAluXor:
    case kAluLsh:
    case kAluRsh:
      BitwiseBounds(insn, d, s, r);
      break;
    case kAluDiv:
      if (insn.off == 0 && s.umin > 0) {
        r.umin = d.umin / s.umax;
        r.umax = d.umax / s.umin;
      } else if (insn.off == 0) {
        r.umin = 0;
        r.umax = d.umax;
      }
      break;
    case kAluMod:
      if (insn.off == 0) {
        r.umin = 0;
        r.umax = s.umin > 0 ? std::min(d.umax, s.umax - 1) : d.umax;
      }
      break;
    case kAluMov:
      if (insn.off == 0) return s;
      break;
    default:
      break;
  }
  r.Sync();
  if (r.Empty()) return Value::Unknown();
  return r;
}

Value ScalarAlu(const Insn& insn, const Value& d, const Value& s) {
  if (insn.Class() == kClassAlu64) return ScalarAlu64(insn, d, s);
  if (d.IsConst() && s.IsConst()) return Value::Const(EvalAlu(insn, d.umin, s.umin));
  if (insn.Op() == kAluMov && insn.off == 0) {
    if (s.umax <= kU32Max) return s;
    return Value::Range(0, kU32Max);
  }
  // Operands below 2^32 and a result below 2^32: the 64-bit bounds hold.
  if (d.umax <= kU32Max && s.umax <= kU32Max && insn.Op() != kAluArsh && insn.Op() != kAluNeg &&
      insn.Op() != kAluEnd && insn.off == 0) {
    Insn wide = insn;
    wide.code = static_cast<uint8_t>((insn.code & ~0x07) | kClassAlu64);
    Value r = ScalarAlu64(wide, d, s);
    if (r.umax <= kU32Max) return r;
  }
  return Value::Range(0, kU32Max);
}

// The comparison that holds when "a OP b" does not (none for kJmpJset, whose
// negation "a & b == 0" is no jump opcode, or for a non-comparison).
std::optional<uint8_t> NegatedJmp(uint8_t op) {
  switch (op) {
    case kJmpJeq: return kJmpJne;
    case kJmpJne: return kJmpJeq;
    case kJmpJgt: return kJmpJle;
    case kJmpJge: return kJmpJlt;
    case kJmpJlt: return kJmpJge;
    case kJmpJle: return kJmpJgt;
    case kJmpJsgt: return kJmpJsle;
    case kJmpJsge: return kJmpJslt;
    case kJmpJslt: return kJmpJsge;
    case kJmpJsle: return kJmpJsgt;
    default: return std::nullopt;
  }
}

// Refines `a` and `b` (scalars) under "a OP b" being `taken`. Returns false
// if that is impossible.
bool Refine(uint8_t op, bool taken, Value& a, Value& b) {
  if (!taken) {
    if (op == kJmpJset) {
      // Not taken: a & b == 0. With b constant, a's known bits stay unknown.
      if (a.IsConst() && b.IsConst()) return (a.umin & b.umin) == 0;
      return true;
    }
    const std::optional<uint8_t> negated = NegatedJmp(op);
    if (!negated) return true;
    op = *negated;
  }
  switch (op) {
    case kJmpJeq: {
      const uint64_t lo = std::max(a.umin, b.umin), hi = std::min(a.umax, b.umax);
      const int64_t slo = std::max(a.smin, b.smin), shi = std::min(a.smax, b.smax);
      a.umin = b.umin = lo;
      a.umax = b.umax = hi;
      a.smin = b.smin = slo;
      a.smax = b.smax = shi;
      a.tz = b.tz = std::max(a.tz, b.tz);
      break;
    }
    case kJmpJne:
      if (a.IsConst() && b.IsConst()) return a.umin != b.umin;
      if (b.IsConst()) {
        if (a.umin == b.umin) ++a.umin;
        if (a.umax == b.umin) --a.umax;
      }
      if (a.IsConst()) {
        if (b.umin == a.umin) ++b.umin;
        if (b.umax == a.umin) --b.umax;
      }
      break;
    case kJmpJgt:  // a > b
      if (b.umin == UINT64_MAX || a.umax == 0) return false;
      a.umin = std::max(a.umin, b.umin + 1);
      b.umax = std::min(b.umax, a.umax - 1);
      break;
    case kJmpJge:
      a.umin = std::max(a.umin, b.umin);
      b.umax = std::min(b.umax, a.umax);
      break;
    case kJmpJlt:
      if (a.umin == UINT64_MAX || b.umax == 0) return false;
      a.umax = std::min(a.umax, b.umax - 1);
      b.umin = std::max(b.umin, a.umin + 1);
      break;
    case kJmpJle:
      a.umax = std::min(a.umax, b.umax);
      b.umin = std::max(b.umin, a.umin);
      break;
    case kJmpJsgt:
      if (b.smin == INT64_MAX || a.smax == INT64_MIN) return false;
      a.smin = std::max(a.smin, b.smin + 1);
      b.smax = std::min(b.smax, a.smax - 1);
      break;
    case kJmpJsge:
      a.smin = std::max(a.smin, b.smin);
      b.smax = std::min(b.smax, a.smax);
      break;
    case kJmpJslt:
      if (a.smin == INT64_MAX || b.smax == INT64_MIN) return false;
      a.smax = std::min(a.smax, b.smax - 1);
      b.smin = std::max(b.smin, a.smin + 1);
      break;
    case kJmpJsle:
      a.smax = std::min(a.smax, b.smax);
      b.smin = std::max(b.smin, a.smin);
      break;
    case kJmpJset:
      if (a.IsConst() && b.IsConst()) return (a.umin & b.umin) != 0;
      if (a.umax == 0 || b.umax == 0) return false;
      break;
    default:
      break;
  }
  if (a.Empty() || b.Empty()) return false;
  a.Sync();
  b.Sync();
  return !a.Empty() && !b.Empty();
}

// ---- The verifier ------------------------------------------------------------

struct Rejection {
  uint32_t pc;
  std::string message;
  std::string hint;
};

struct PendingBranch {
  uint32_t pc;
  std::shared_ptr<State> state;
};

struct StoredState {
  std::shared_ptr<const State> state;
  size_t stack_size = 0;  // pending branches when stored
  bool complete = false;
};

class Verifier {
 public:
  Verifier(const BpfObject& object, const BpfProgram& program, const VerifierOptions& options)
      : obj_(object), prog_(program), options_(options) {}

  absl::StatusOr<VerifiedProgram> Run();

 private:
  using Result = std::optional<Rejection>;

  Result Reject(uint32_t pc, std::string message, std::string hint = "") {
    return Rejection{pc, std::move(message), std::move(hint)};
  }
  absl::Status Format(const Rejection& r) const;

  Result CheckStructure();
  Result Explore();
  // Executes the instruction at pc on `st`; sets *next (and, for a branch,
  // pushes the other side). *done: the path ended (exit or infeasible).
  Result Step(uint32_t pc, State& st, uint32_t* next, bool* done);
  Result ReadReg(uint32_t pc, const State& st, int reg) {
    if (st.regs[reg].type == Type::kNotInit) {
      return Reject(pc, absl::StrCat("R", reg, " is read before it is initialised"),
                    reg >= 1 && reg <= 5
                        ? "R1-R5 are clobbered by every helper call; keep values in R6-R9 "
                          "or on the stack across calls"
                        : "initialise the variable before using it");
    }
    return std::nullopt;
  }
  Result DoAlu(uint32_t pc, const Insn& insn, State& st);
  Result CheckAluEncoding(uint32_t pc, const Insn& insn);
  Result DoMov(uint32_t pc, const Insn& insn, const Value& src, Value& dst);
  Result DoPointerAlu(uint32_t pc, const Insn& insn, const Value& src, Value& dst);
  Result DoLoad(uint32_t pc, const Insn& insn, State& st);
  Result DoStore(uint32_t pc, const Insn& insn, State& st);
  Result DoAtomic(uint32_t pc, const Insn& insn, State& st);
  Result DoCall(uint32_t pc, const Insn& insn, State& st);
  Result DoExit(uint32_t pc, State& st);
  Result DoBranch(uint32_t pc, const Insn& insn, State& st, uint32_t* next, bool* done);
  Result BranchOnPointer(uint32_t pc, const Insn& insn, const Value& src, State& st,
                         State& taken, bool* can_take, bool* can_fall);
  void BranchOnScalars(const Insn& insn, const Value& src, int src_reg, State& st, State& taken,
                       bool* can_take, bool* can_fall);
  // Checks an access of `size` bytes at reg + off. For the stack, marks or
  // reads bytes. `out` receives the loaded value (loads).
  enum class Access { kRead, kWrite, kAtomic };
  Result CheckAccess(uint32_t pc, State& st, int reg, int32_t off, int size, Access access,
                     const Value* stored, Value* out, bool sign_extend);
  // CheckAccess by the base pointer's type (`base` is the register).
  Result CheckCtxAccess(uint32_t pc, const Value& base, int32_t off, int size, Access access,
                        Value* out, bool sign_extend);
  Result CheckStackAccess(uint32_t pc, State& st, const Value& base, int32_t off, int size,
                          Access access, const Value* stored, Value* out, bool sign_extend);
  Result CheckValueAccess(uint32_t pc, const Value& base, int32_t off, int size, Access access,
                          const Value* stored, Value* out, bool sign_extend);
  Result CheckStackRange(uint32_t pc, const State& st, int64_t lo, int64_t hi, bool write,
                         const char* what);
  Result CheckMemArg(uint32_t pc, State& st, int reg, uint64_t size, bool write, const char* what);
  void RecordCallMap(uint32_t pc, uint32_t map);
  void RecordCallKey(uint32_t pc, const Value& key);
  void RecordMem(uint32_t pc, InsnInfo::Mem kind, int32_t ctx_offset, const Value* stack_ptr,
                 int32_t insn_off, bool aligned);
  // DoCall's steps: the helper, its arguments, a printk's format, the effect.
  Result ResolveHelper(uint32_t pc, const Insn& insn, const HelperSpec** h);
  Result CheckHelperArg(uint32_t pc, State& st, const HelperSpec& h, int a, CallFacts& call);
  Result WrongArg(uint32_t pc, const HelperSpec& h, int a, const Value& v, const char* expected);
  Result CheckMapArg(uint32_t pc, const HelperSpec& h, int a, const Value& v, CallFacts& call);
  Result CheckMapType(uint32_t pc, const HelperSpec& h, const ObjectMap& map);
  Result CheckSizedMemArg(uint32_t pc, State& st, const HelperSpec& h, int a);
  Result CheckConstSizeArg(uint32_t pc, const HelperSpec& h, int a, const Value& v,
                           CallFacts& call);
  Result CheckPrintk(uint32_t pc, const State& st, const HelperSpec& h, const std::string& format);
  void ReleaseRecord(State& st, uint32_t ref);
  void SetCallResult(State& st, const HelperSpec& h, const CallFacts& call);
  void MarkNull(State& st, uint32_t id, bool is_null);
  Result FormatString(uint32_t pc, const Value& v, uint64_t size_limit, std::string* out);

  const BpfObject& obj_;
  const BpfProgram& prog_;
  const VerifierOptions& options_;
  VerifiedProgram out_;
  std::vector<bool> prune_point_;
  std::vector<std::vector<StoredState>> stored_;
  std::vector<std::pair<uint32_t, StoredState*>> incomplete_;  // (pc, entry) on current path
  std::vector<PendingBranch> pending_;
  uint32_t next_id_ = 1;
  std::map<uint32_t, std::string> printk_at_;  // pc -> format
  std::set<uint32_t> call_key_seen_;           // helper calls whose key was recorded
};

absl::Status Verifier::Format(const Rejection& r) const {
  std::string where;
  const LineInfo* line = obj_.LineOf(prog_, r.pc);
  if (line != nullptr) {
    std::string file = line->file;
    if (size_t slash = file.rfind('/'); slash != std::string::npos) file = file.substr(slash + 1);
    where = absl::StrCat(file, ":", line->line, ":", line->column, ": ");
  } else {
    where = absl::StrCat(obj_.name, ": ");
  }
  const Insn* next = r.pc + 1 < prog_.insns.size() ? &prog_.insns[r.pc + 1] : nullptr;
  std::string text = r.pc < prog_.insns.size() ? Disassemble(prog_.insns[r.pc], next) : "";
  std::string msg = absl::StrCat(where, "error: program '", prog_.name, "' (", prog_.section,
                                 ") insn ", r.pc, " '", text, "': ", r.message);
  if (line != nullptr && !line->line_text.empty()) {
    std::string_view src = line->line_text;
    while (!src.empty() && (src.front() == ' ' || src.front() == '\t')) src.remove_prefix(1);
    absl::StrAppend(&msg, "\n    ", src);
  }
  if (!r.hint.empty()) absl::StrAppend(&msg, "\n  hint: ", r.hint);
  return absl::InvalidArgumentError(msg);
}

Verifier::Result Verifier::CheckStructure() {
  const uint32_t n = static_cast<uint32_t>(prog_.insns.size());
  if (n > options_.max_insns) {
    return Reject(0, absl::StrCat("program has ", n, " instructions, over the budget of ",
                                  options_.max_insns),
                  "split the probe, or raise the instruction budget (--max-insns)");
  }
  prune_point_.assign(n + 1, false);
  for (uint32_t pc = 0; pc < n; ++pc) {
    const Insn& insn = prog_.insns[pc];
    const uint8_t cls = insn.Class();
    if (insn.dst > 10 || insn.src > 10) {
      return Reject(pc, "register number out of range (r0..r10)");
    }
    if (cls == kClassLd) {
      if (insn.code != kLdImm64) {
        return Reject(pc, absl::StrCat("legacy packet load (opcode 0x", absl::Hex(insn.code),
                                       ") is not supported"));
      }
      if (pc + 1 >= n || prog_.insns[pc + 1].code != 0) {
        return Reject(pc, "ld_imm64 is missing its second half");
      }
      if (insn.src > kPseudoMapValue) {
        return Reject(pc, absl::StrCat("ld_imm64 with source ", int{insn.src},
                                       " (BTF ids, functions) is not supported"));
      }
      if (insn.src != 0 && !prog_.map_refs.contains(pc)) {
        return Reject(pc, "map reference without a relocation");
      }
      ++pc;
      continue;
    }
    if (cls == kClassJmp || cls == kClassJmp32) {
      const uint8_t op = insn.Op();
      if (op == kJmpCall || op == kJmpExit) {
        if (cls == kClassJmp32) return Reject(pc, "invalid 32-bit call or exit");
        continue;
      }
      if (op == kJmpJa && cls == kClassJmp32 && insn.imm == 0 && insn.off == 0) continue;
      if (op > kJmpJsle) {
        return Reject(pc, absl::StrCat("unknown jump opcode 0x", absl::Hex(insn.code)));
      }
      const int64_t delta = (op == kJmpJa && cls == kClassJmp32) ? insn.imm : insn.off;
      const int64_t target = int64_t{pc} + 1 + delta;
      if (target < 0 || target >= n) {
        return Reject(pc, absl::StrCat("jump to ", target, " is outside the program [0, ", n, ")"));
      }
      if (target > 0 && prog_.insns[target - 1].code == kLdImm64 &&
          (target < 2 || prog_.insns[target - 2].code != kLdImm64)) {
        return Reject(pc, "jump into the middle of an ld_imm64");
      }
      prune_point_[target] = true;
      if (op != kJmpJa) prune_point_[pc + 1] = true;
      continue;
    }
  }
  if (n == 0) return Reject(0, "empty program");
  return std::nullopt;
}

void Verifier::RecordCallMap(uint32_t pc, uint32_t map) {
  InsnInfo& info = out_.insns[pc];
  if (info.call_map == InsnInfo::kCallMapNone) {
    info.call_map = static_cast<int32_t>(map);
  } else if (info.call_map != static_cast<int32_t>(map)) {
    info.call_map = InsnInfo::kCallMapMixed;
  }
}

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

void Verifier::RecordMem(uint32_t pc, InsnInfo::Mem kind, int32_t ctx_offset,
                         const Value* stack_ptr, int32_t insn_off, bool aligned) {
  InsnInfo& info = out_.insns[pc];
  if (!aligned) info.aligned = false;
  if (info.mem == InsnInfo::Mem::kNone) {
    info.mem = kind;
    info.ctx_offset = ctx_offset;
    if (kind == InsnInfo::Mem::kStack && stack_ptr->ConstOffset()) {
      info.stack_offset = static_cast<int32_t>(stack_ptr->smin) + insn_off;
      info.stack_offset_known = true;
    }
    return;
  }
  if (info.mem != kind) {
    info.mem = InsnInfo::Mem::kMixed;
    return;
  }
  if (kind == InsnInfo::Mem::kStack) {
    if (!stack_ptr->ConstOffset() ||
        info.stack_offset != static_cast<int32_t>(stack_ptr->smin) + insn_off) {
      info.stack_offset_known = false;
    }
  }
}

Verifier::Result Verifier::CheckStackRange(uint32_t pc, const State& st, int64_t lo, int64_t hi,
                                           bool write, const char* what) {
  if (lo < -kStackSize || hi > 0 || lo >= hi) {
    return Reject(pc,
                  absl::StrCat(what, " [fp", lo, ", fp", hi < 0 ? "" : "+", hi,
                               ") is outside the stack [fp-512, fp)"),
                  "the stack holds 512 bytes below r10; keep large data in a map");
  }
  out_.min_stack_offset = std::min<int32_t>(out_.min_stack_offset, static_cast<int32_t>(lo));
  if (!write) {
    for (int64_t i = lo; i < hi; ++i) {
      if (st.stack[kStackSize + i] == Slot::kUninit) {
        return Reject(pc, absl::StrCat(what, " reads uninitialised stack at fp", i),
                      "initialise the variable (e.g. = {} or memset) before reading it");
      }
    }
  }
  return std::nullopt;
}

Verifier::Result Verifier::CheckAccess(uint32_t pc, State& st, int reg, int32_t off, int size,
                                       Access access, const Value* stored, Value* out,
                                       bool sign_extend) {
  const Value& base = st.regs[reg];
  const char* verb = access == Access::kRead ? "read" : "write";
  switch (base.type) {
    case Type::kNotInit:
      return Reject(pc, absl::StrCat("R", reg, " is read before it is initialised"));
    case Type::kScalar:
      return Reject(pc,
                    absl::StrCat("invalid memory ", verb, ": R", reg,
                                 " is a scalar, not a pointer"),
                    "probes may dereference only the context, the stack, map values and "
                    "ring-buffer records");
    case Type::kMap:
      return Reject(pc, absl::StrCat("invalid memory ", verb, ": R", reg, " is a map"),
                    "pass maps to helpers (bpf_map_lookup_elem) instead of reading them");
    case Type::kMapValueOrNull:
    case Type::kMemOrNull:
      return Reject(pc,
                    absl::StrCat("R", reg, " may be NULL (", TypeName(base.type), ")"),
                    "check the pointer against NULL before using it");
    case Type::kCtx:
      return CheckCtxAccess(pc, base, off, size, access, out, sign_extend);
    case Type::kStack:
      return CheckStackAccess(pc, st, base, off, size, access, stored, out, sign_extend);
    case Type::kMapValue:
    case Type::kMem:
      return CheckValueAccess(pc, base, off, size, access, stored, out, sign_extend);
  }
  return Reject(pc, "invalid memory access");
}

// The context is virtual and read-only: a load reads one whole field at a
// constant offset, which the lowering turns into a special register or a
// parameter (lower.h), so it must be the same field on every path.
Verifier::Result Verifier::CheckCtxAccess(uint32_t pc, const Value& base, int32_t off, int size,
                                          Access access, Value* out, bool sign_extend) {
  if (access == Access::kAtomic) {
    return Reject(pc, "atomic operation on the context",
                  "the context is read-only; copy the field to a variable");
  }
  if (access != Access::kRead) {
    return Reject(pc, "write to the context (struct cuprobe_ctx is read-only)",
                  "copy the field into a local variable and change that");
  }
  if (!base.ConstOffset()) {
    return Reject(pc, "context access at a variable offset",
                  "read ctx->args[i] with a constant i, or use cuprobe_get_arg(ctx, i)");
  }
  const int64_t o = base.smin + off;
  if (o < 0 || o + size > CUPROBE_CTX_SIZE) {
    return Reject(pc, absl::StrCat("context access at offset ", o, " size ", size,
                                   " is outside struct cuprobe_ctx (", CUPROBE_CTX_SIZE,
                                   " bytes)"));
  }
  const CtxFieldRef field = CtxFieldAt(o);
  if (field.offset >= kCtxArgsOffset || field.offset == 112) out_.reads_args = true;
  if (field.offset != o || field.size != size) {
    return Reject(pc,
                  absl::StrCat("partial or misaligned read of context field ", field.name,
                               " (", field.size, " bytes at offset ", field.offset,
                               "): read ", size, " bytes at offset ", o),
                  "read whole fields of struct cuprobe_ctx");
  }
  InsnInfo& info = out_.insns[pc];
  if (info.mem == InsnInfo::Mem::kCtx && info.ctx_offset != field.offset) {
    return Reject(pc, "the same load reads different context fields on different paths",
                  "read each field with its own statement");
  }
  if (info.mem != InsnInfo::Mem::kNone && info.mem != InsnInfo::Mem::kCtx) {
    return Reject(pc, "the same load reads the context on one path and memory on another");
  }
  info.mem = InsnInfo::Mem::kCtx;
  info.ctx_offset = field.offset;
  *out = CtxFieldValue(out_.attach, field.offset, size, sign_extend);
  return std::nullopt;
}

// The stack tracks every byte (uninitialised, data, or part of a spilled
// register): reads must find initialised bytes, and an 8-byte load of a
// spill at a constant offset gets the spilled value back, pointers included.
Verifier::Result Verifier::CheckStackAccess(uint32_t pc, State& st, const Value& base,
                                            int32_t off, int size, Access access,
                                            const Value* stored, Value* out, bool sign_extend) {
  const bool write = access != Access::kRead;
  if (!base.ConstOffset() && write) {
    return Reject(pc, "stack write at a variable offset",
                  "index arrays on the stack with constants, or keep them in a map");
  }
  const int64_t lo = base.smin + off, hi = base.smax + off + size;
  if (auto r = CheckStackRange(pc, st, lo, hi, write, "stack access"); r) return r;
  if (!AccessAligned(base, off, size)) {
    return Reject(pc, absl::StrCat("misaligned stack access at fp", lo, " (", size,
                                   " bytes)"),
                  "GPU memory accesses must be naturally aligned");
  }
  RecordMem(pc, InsnInfo::Mem::kStack, -1, &base, off, true);
  const int64_t at = kStackSize + lo;
  if (access == Access::kRead) {
    if (size == 8 && st.stack[at] == Slot::kSpill && base.ConstOffset()) {
      *out = st.spills[at / 8];
      if (out->IsPointer() && sign_extend) *out = LoadedValue(size, sign_extend);
    } else {
      *out = LoadedValue(size, sign_extend);
    }
    return std::nullopt;
  }
  if (access == Access::kAtomic) {
    if (auto r = CheckStackRange(pc, st, lo, hi, false, "atomic operation"); r) return r;
  }
  WriteStack(st, at, size, access == Access::kWrite ? stored : nullptr);
  if (access == Access::kAtomic) *out = LoadedValue(size, sign_extend);
  return std::nullopt;
}

// Map values and ring-buffer records: within the value (or record) size on
// every path, and never receiving an address (the host reads them).
Verifier::Result Verifier::CheckValueAccess(uint32_t pc, const Value& base, int32_t off, int size,
                                            Access access, const Value* stored, Value* out,
                                            bool sign_extend) {
  const bool write = access != Access::kRead;
  const char* verb = access == Access::kRead ? "read" : "write";
  const ObjectMap* map = base.type == Type::kMapValue ? &obj_.maps[base.map] : nullptr;
  const uint64_t limit = map != nullptr ? map->spec.value_size : base.mem_size;
  const char* what = map != nullptr ? "map value" : "ring-buffer record";
  if (write && map != nullptr && map->read_only()) {
    return Reject(pc, absl::StrCat("write into read-only ", map->spec.name, " (", what, ")"),
                  "const globals live in .rodata; drop the const to make them writable");
  }
  if (access == Access::kWrite && stored != nullptr && stored->IsPointer()) {
    return Reject(pc,
                  absl::StrCat("storing ", TypeName(stored->type), " into a ", what,
                               " would leak an address"),
                  "store scalar values only");
  }
  const int64_t lo = base.smin + off, hi = base.smax + off + size;
  if (lo < 0 || hi > static_cast<int64_t>(limit)) {
    return Reject(pc,
                  absl::StrCat(verb, " of ", size, " bytes at offset [", base.smin + off,
                               ", ", base.smax + off, "] is out of bounds of the ", what,
                               map != nullptr ? absl::StrCat(" of ", map->spec.name) : "",
                               " (", limit, " bytes)"),
                  base.ConstOffset() ? "access only the fields of the value"
                                     : "bound the index with an if (i < N) check first");
  }
  const bool is_aligned = AccessAligned(base, off, size);
  if (!is_aligned && (base.ConstOffset() || access == Access::kAtomic)) {
    return Reject(pc, absl::StrCat("misaligned ", what, " access at offset ", lo, " (",
                                   size, " bytes)"),
                  "GPU memory accesses must be naturally aligned");
  }
  RecordMem(pc, InsnInfo::Mem::kOther, -1, nullptr, off, is_aligned);
  if (out != nullptr) *out = LoadedValue(size, sign_extend);
  return std::nullopt;
}

Verifier::Result Verifier::DoLoad(uint32_t pc, const Insn& insn, State& st) {
  if (insn.Mode() != kModeMem && insn.Mode() != kModeMemsx) {
    return Reject(pc, absl::StrCat("unknown load mode 0x", absl::Hex(insn.Mode())));
  }
  if (insn.dst == 10) return Reject(pc, "r10 (the frame pointer) is read-only");
  if (insn.Mode() == kModeMemsx && insn.Size() == kSizeDw) {
    return Reject(pc, "sign-extending load of 64 bits");
  }
  if (auto r = ReadReg(pc, st, insn.src); r) return r;
  Value v;
  if (auto r = CheckAccess(pc, st, insn.src, insn.off, SizeBytes(insn.Size()), Access::kRead,
                           nullptr, &v, insn.Mode() == kModeMemsx);
      r) {
    return r;
  }
  st.regs[insn.dst] = v;
  return std::nullopt;
}

Verifier::Result Verifier::DoStore(uint32_t pc, const Insn& insn, State& st) {
  if (insn.Mode() != kModeMem) return Reject(pc, "unknown store mode");
  if (auto r = ReadReg(pc, st, insn.dst); r) return r;
  Value stored;
  if (insn.Class() == kClassStx) {
    if (auto r = ReadReg(pc, st, insn.src); r) return r;
    stored = st.regs[insn.src];
  } else {
    stored = Value::Const(static_cast<uint64_t>(static_cast<int64_t>(insn.imm)));
  }
  return CheckAccess(pc, st, insn.dst, insn.off, SizeBytes(insn.Size()), Access::kWrite, &stored,
                     nullptr, false);
}

Verifier::Result Verifier::DoAtomic(uint32_t pc, const Insn& insn, State& st) {
  const int size = SizeBytes(insn.Size());
  if (size != 4 && size != 8) return Reject(pc, "atomic operations are 32 or 64 bits wide");
  const int32_t op = insn.imm;
  const int32_t base_op = op & ~kAtomicFetch;
  const bool valid = op == kAtomicXchg || op == kAtomicCmpxchg ||
                     ((base_op == kAluAdd || base_op == kAluOr || base_op == kAluAnd ||
                       base_op == kAluXor) && (op & ~(0xf0 | kAtomicFetch)) == 0);
  if (!valid) return Reject(pc, absl::StrCat("unknown atomic operation 0x", absl::Hex(op)));
  if (auto r = ReadReg(pc, st, insn.dst); r) return r;
  if (auto r = ReadReg(pc, st, insn.src); r) return r;
  if (st.regs[insn.src].type != Type::kScalar) {
    return Reject(pc, absl::StrCat("atomic operand R", insn.src, " is ",
                                   TypeName(st.regs[insn.src].type), ", not a scalar"));
  }
  if (op == kAtomicCmpxchg) {
    if (auto r = ReadReg(pc, st, 0); r) return r;
    if (st.regs[0].type != Type::kScalar) return Reject(pc, "cmpxchg compares R0, a pointer");
  }
  const Type base = st.regs[insn.dst].type;
  if (out_.insns[pc].mem != InsnInfo::Mem::kNone &&
      (out_.insns[pc].mem == InsnInfo::Mem::kStack) != (base == Type::kStack)) {
    return Reject(pc, "atomic operation on the stack on one path and on memory on another",
                  "use separate statements");
  }
  Value old;
  if (auto r = CheckAccess(pc, st, insn.dst, insn.off, size, Access::kAtomic, nullptr, &old, false);
      r) {
    return r;
  }
  if (op == kAtomicCmpxchg) {
    st.regs[0] = size == 8 ? Value::Unknown() : Value::Range(0, kU32Max);
  } else if (op & kAtomicFetch) {
    st.regs[insn.src] = size == 8 ? Value::Unknown() : Value::Range(0, kU32Max);
  }
  return std::nullopt;
}

Verifier::Result Verifier::DoAlu(uint32_t pc, const Insn& insn, State& st) {
  const uint8_t op = insn.Op();
  if (auto r = CheckAluEncoding(pc, insn); r) return r;
  Value src;
  if (op != kAluNeg && op != kAluEnd) {
    if (insn.UsesSrcReg()) {
      if (auto r = ReadReg(pc, st, insn.src); r) return r;
      src = st.regs[insn.src];
    } else {
      src = Value::Const(static_cast<uint64_t>(static_cast<int64_t>(insn.imm)));
    }
  }
  Value& dst = st.regs[insn.dst];
  if (op == kAluMov) return DoMov(pc, insn, src, dst);
  if (auto r = ReadReg(pc, st, insn.dst); r) return r;
  if (dst.IsPointer() || src.IsPointer()) return DoPointerAlu(pc, insn, src, dst);
  dst = ScalarAlu(insn, dst, src);
  return std::nullopt;
}

// The fields of an ALU instruction that the opcode does not fix.
Verifier::Result Verifier::CheckAluEncoding(uint32_t pc, const Insn& insn) {
  const uint8_t op = insn.Op();
  const bool is64 = insn.Class() == kClassAlu64;
  if (insn.dst == 10) return Reject(pc, "r10 (the frame pointer) is read-only");
  if (op > kAluEnd) return Reject(pc, absl::StrCat("unknown ALU opcode 0x", absl::Hex(insn.code)));
  if (op == kAluEnd) {
    if (insn.imm != 16 && insn.imm != 32 && insn.imm != 64) {
      return Reject(pc, absl::StrCat("byte swap of ", insn.imm, " bits"));
    }
  }
  if ((op == kAluDiv || op == kAluMod) && insn.off != 0 && insn.off != 1) {
    return Reject(pc, "invalid offset on a division");
  }
  if (op == kAluMov && insn.off != 0 &&
      !(insn.off == 8 || insn.off == 16 || (insn.off == 32 && is64))) {
    return Reject(pc, "invalid sign-extension width on a move");
  }
  return std::nullopt;
}

// A move: a 64-bit one copies pointers too; a narrowing or sign-extending
// one makes a number of a pointer.
Verifier::Result Verifier::DoMov(uint32_t pc, const Insn& insn, const Value& src, Value& dst) {
  const bool is64 = insn.Class() == kClassAlu64;
  if (insn.off == 0 && is64) {
    dst = src;
    return std::nullopt;
  }
  if (src.IsPointer()) {
    // Truncating or sign-extending a pointer makes a number of it; for
    // the virtual context there is no address at all.
    if (src.type == Type::kCtx) {
      return Reject(pc, "the context pointer cannot be converted to a number",
                    "the context is virtual: read its fields instead");
    }
    dst = is64 ? Value::Unknown() : Value::Range(0, kU32Max);
    return std::nullopt;
  }
  dst = ScalarAlu(insn, Value::Const(0), src);
  return std::nullopt;
}

// Pointer arithmetic: only a bounded offset added to or subtracted from a
// checked pointer (or the difference of two pointers into the same stack
// or map value, a number).
Verifier::Result Verifier::DoPointerAlu(uint32_t pc, const Insn& insn, const Value& src,
                                        Value& dst) {
  const uint8_t op = insn.Op();
  const bool is64 = insn.Class() == kClassAlu64;
  if (!is64) {
    return Reject(pc, "32-bit arithmetic on a pointer", "use 64-bit arithmetic on pointers");
  }
  if (op == kAluSub && dst.IsPointer() && src.IsPointer()) {
    if (dst.type == src.type && dst.map == src.map &&
        (dst.type == Type::kStack || dst.type == Type::kMapValue)) {
      dst = Value::Unknown();
      return std::nullopt;
    }
    return Reject(pc, "subtraction of unrelated pointers");
  }
  if (op != kAluAdd && op != kAluSub) {
    return Reject(pc,
                  absl::StrCat("arithmetic (", Disassemble(insn, nullptr), ") on ",
                               TypeName(dst.IsPointer() ? dst.type : src.type),
                               " is not allowed"),
                  "only adding or subtracting an offset to a pointer is allowed");
  }
  if (dst.IsPointer() && src.IsPointer()) return Reject(pc, "addition of two pointers");
  Value ptr = dst.IsPointer() ? dst : src;
  const Value scalar = dst.IsPointer() ? src : dst;
  if (op == kAluSub && !dst.IsPointer()) return Reject(pc, "subtracting a pointer from a scalar");
  if (ptr.type == Type::kMap) {
    return Reject(pc, "arithmetic on a map pointer", "pass the map to a helper as it is");
  }
  if (ptr.type == Type::kMapValueOrNull || ptr.type == Type::kMemOrNull) {
    return Reject(pc, absl::StrCat("arithmetic on ", TypeName(ptr.type)),
                  "check the pointer against NULL first");
  }
  if (ptr.type == Type::kCtx && !scalar.IsConst()) {
    return Reject(pc, "variable offset added to the context pointer",
                  "read ctx->args[i] with a constant i, or use cuprobe_get_arg(ctx, i)");
  }
  if (scalar.smin < -kMaxPtrOffset || scalar.smax > kMaxPtrOffset) {
    return Reject(pc,
                  absl::StrCat("offset added to ", TypeName(ptr.type), " is unbounded [",
                               scalar.smin, ", ", scalar.smax, "]"),
                  "bound the index with an if (i < N) check before using it");
  }
  int64_t lo = scalar.smin, hi = scalar.smax;
  if (op == kAluSub) {
    lo = -scalar.smax;
    hi = -scalar.smin;
  }
  ptr.smin += lo;
  ptr.smax += hi;
  ptr.tz = std::min(ptr.tz, scalar.tz);
  if (ptr.smin < -kMaxPtrOffset || ptr.smax > kMaxPtrOffset) {
    return Reject(pc, "pointer offset out of range");
  }
  ptr.umin = static_cast<uint64_t>(ptr.smin);
  ptr.umax = static_cast<uint64_t>(ptr.smax);
  if (ptr.ConstOffset()) ptr.tz = std::min(3, Ctz(static_cast<uint64_t>(ptr.smin)));
  dst = ptr;
  return std::nullopt;
}

void Verifier::MarkNull(State& st, uint32_t id, bool is_null) {
  auto mark = [&](Value& v) {
    if (v.id != id || (v.type != Type::kMapValueOrNull && v.type != Type::kMemOrNull)) return;
    if (is_null) {
      if (v.ref != 0) st.refs.erase(std::remove(st.refs.begin(), st.refs.end(), v.ref),
                                    st.refs.end());
      v = Value::Const(0);
    } else {
      v.type = v.type == Type::kMapValueOrNull ? Type::kMapValue : Type::kMem;
      v.id = 0;
    }
  };
  for (Value& r : st.regs) mark(r);
  for (Value& s : st.spills) mark(s);
}

Verifier::Result Verifier::DoBranch(uint32_t pc, const Insn& insn, State& st, uint32_t* next,
                                    bool* done) {
  const uint8_t op = insn.Op();
  if (op == kJmpJa) {
    *next = pc + 1 + (insn.Class() == kClassJmp32 ? insn.imm : insn.off);
    return std::nullopt;
  }
  if (auto r = ReadReg(pc, st, insn.dst); r) return r;
  Value src;
  int src_reg = -1;
  if (insn.UsesSrcReg()) {
    if (auto r = ReadReg(pc, st, insn.src); r) return r;
    src = st.regs[insn.src];
    src_reg = insn.src;
  } else {
    src = Value::Const(static_cast<uint64_t>(static_cast<int64_t>(insn.imm)));
  }
  const uint32_t target = pc + 1 + insn.off;
  const Value& dst = st.regs[insn.dst];
  bool can_take = true, can_fall = true;
  auto taken_state = std::make_shared<State>(st);
  if (dst.IsPointer() || src.IsPointer()) {
    if (auto r = BranchOnPointer(pc, insn, src, st, *taken_state, &can_take, &can_fall); r) {
      return r;
    }
  } else {
    BranchOnScalars(insn, src, src_reg, st, *taken_state, &can_take, &can_fall);
  }
  if (!can_take && !can_fall) {
    *done = true;
    return std::nullopt;
  }
  if (can_take && can_fall) {
    if (target <= pc) {  // a back edge, taken when the branch is resumed
      taken_state->in_loop = true;
      taken_state->loop_header = target;
    }
    pending_.push_back(PendingBranch{target, std::move(taken_state)});
    *next = pc + 1;
  } else if (can_take) {
    st = *taken_state;
    *next = target;
  } else {
    *next = pc + 1;
  }
  return std::nullopt;
}

// A comparison with a pointer: only against NULL, which splits a lookup's
// or reservation's result into NULL (a number) and a checked pointer.
Verifier::Result Verifier::BranchOnPointer(uint32_t pc, const Insn& insn, const Value& src,
                                           State& st, State& taken, bool* can_take,
                                           bool* can_fall) {
  const uint8_t op = insn.Op();
  const Value& dst = st.regs[insn.dst];
  const Value& ptr = dst.IsPointer() ? dst : src;
  const Value& other = dst.IsPointer() ? src : dst;
  const bool null_cmp = other.IsConst() && other.umin == 0 && insn.Class() == kClassJmp &&
                        (op == kJmpJeq || op == kJmpJne);
  if (!null_cmp || (dst.IsPointer() && src.IsPointer())) {
    return Reject(pc, absl::StrCat("comparison of ", TypeName(ptr.type),
                                   " other than == NULL / != NULL"),
                  "compare the values, not their addresses");
  }
  if (ptr.type == Type::kMapValueOrNull || ptr.type == Type::kMemOrNull) {
    const uint32_t id = ptr.id;
    // "== 0" taken: NULL on the target side.
    MarkNull(taken, id, op == kJmpJeq);
    MarkNull(st, id, op != kJmpJeq);
  } else {
    // A valid pointer is never NULL.
    *can_take = op == kJmpJne;
    *can_fall = op == kJmpJeq;
  }
  return std::nullopt;
}

// A comparison of scalars: each side refines the bounds of both operands,
// and a side they cannot satisfy is not explored.
void Verifier::BranchOnScalars(const Insn& insn, const Value& src, int src_reg, State& st,
                               State& taken, bool* can_take, bool* can_fall) {
  const uint8_t op = insn.Op();
  const Value& dst = st.regs[insn.dst];
  bool wide = insn.Class() == kClassJmp;
  if (!wide) {
    // 32-bit compare: refine only when both sides are known to fit.
    const bool is_signed = op == kJmpJsgt || op == kJmpJsge || op == kJmpJslt || op == kJmpJsle;
    const uint64_t lim = is_signed ? 0x7fffffffull : kU32Max;
    wide = dst.umax <= lim && src.umax <= lim;
  }
  if (dst.IsConst() && src.IsConst()) {
    const bool t = EvalJmp(insn, dst.umin, src.umin);
    *can_take = t;
    *can_fall = !t;
  } else if (wide) {
    Value a = dst, b = src;
    *can_take = Refine(op, true, a, b);
    if (*can_take) {
      taken.regs[insn.dst] = a;
      if (src_reg >= 0) taken.regs[src_reg] = b;
    }
    Value fa = dst, fb = src;
    *can_fall = Refine(op, false, fa, fb);
    if (*can_fall) {
      st.regs[insn.dst] = fa;
      if (src_reg >= 0) st.regs[src_reg] = fb;
    }
  }
}

Verifier::Result Verifier::FormatString(uint32_t pc, const Value& v, uint64_t size_limit,
                                        std::string* out) {
  if (v.type != Type::kMapValue || !obj_.maps[v.map].read_only() || !v.ConstOffset()) {
    return Reject(pc, "the format must be a constant string (in .rodata)",
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

Verifier::Result Verifier::CheckMemArg(uint32_t pc, State& st, int reg, uint64_t size, bool write,
                                       const char* what) {
  const Value& v = st.regs[reg];
  if (v.type == Type::kStack) {
    if (!v.ConstOffset()) {
      return Reject(pc, absl::StrCat(what, " (R", reg, ") points to the stack at a variable offset"));
    }
    if (auto r = CheckStackRange(pc, st, v.smin, v.smin + static_cast<int64_t>(size), write, what);
        r) {
      return r;
    }
    if (write) {
      const int64_t at = kStackSize + v.smin;
      for (uint64_t i = 0; i < size; ++i) {
        if (st.stack[at + i] == Slot::kSpill) {
          const int64_t s = (at + i) / 8;
          for (int k = 0; k < 8; ++k) st.stack[s * 8 + k] = Slot::kMisc;
          st.spills[s] = Value();
        }
        st.stack[at + i] = Slot::kMisc;
      }
      if (size % 8 != 0 || v.smin % 8 != 0) {
        return Reject(pc, absl::StrCat(what, " must be an aligned u64 on the stack"));
      }
    }
    return std::nullopt;
  }
  if (v.type == Type::kMapValue || v.type == Type::kMem) {
    const ObjectMap* map = v.type == Type::kMapValue ? &obj_.maps[v.map] : nullptr;
    const uint64_t limit = map != nullptr ? map->spec.value_size : v.mem_size;
    if (write && map != nullptr && map->read_only()) {
      return Reject(pc, absl::StrCat(what, " points into read-only ", map->spec.name));
    }
    if (v.smin < 0 || static_cast<uint64_t>(v.smax) + size > limit) {
      return Reject(pc, absl::StrCat(what, " (R", reg, ", ", size, " bytes at offset [", v.smin,
                                     ", ", v.smax, "]) is out of bounds (", limit, " bytes)"));
    }
    if (write && (v.tz < 3 || !v.ConstOffset() || v.smin % 8 != 0)) {
      return Reject(pc, absl::StrCat(what, " must be an aligned u64"));
    }
    return std::nullopt;
  }
  return Reject(pc, absl::StrCat(what, " (R", reg, ") is ", TypeName(v.type),
                                 "; expected a pointer to the stack or a map value"));
}

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
  if (*h == nullptr) {
    return Reject(pc, absl::StrCat("unknown helper ", insn.imm, " (not available on the GPU)"),
                  "the GPU helpers are listed in include/cuprobe/abi.h and docs/PROBES.md");
  }
  return std::nullopt;
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
      if (auto r = FormatString(pc, v, st.regs[2].IsConst() ? st.regs[2].umin : UINT64_MAX,
                                &call.format);
          r) {
        return r;
      }
      call.has_format = true;
      return std::nullopt;
    case Arg::kString:
      if (auto r = FormatString(pc, v, UINT64_MAX, &call.format); r) return r;
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
  auto it = printk_at_.find(pc);
  if (it != printk_at_.end() && it->second != format) {
    return Reject(pc, "one printk call uses different formats on different paths");
  }
  printk_at_[pc] = format;
  InsnInfo& info = out_.insns[pc];
  if (info.printk_format < 0) {
    info.printk_format = static_cast<int32_t>(out_.printk_formats.size());
    out_.printk_formats.push_back(format);
  }
  info.printk_nargs = static_cast<uint32_t>(n);
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
  st.regs[0] = ret;
}

Verifier::Result Verifier::DoExit(uint32_t pc, State& st) {
  if (st.regs[0].type == Type::kNotInit) {
    return Reject(pc, "R0 (the return value) is not set at exit", "return 0 from the probe");
  }
  if (!st.refs.empty()) {
    return Reject(pc, "a ring-buffer reservation is neither submitted nor discarded at exit",
                  "call bpf_ringbuf_submit or bpf_ringbuf_discard on every path");
  }
  return std::nullopt;
}

Verifier::Result Verifier::Step(uint32_t pc, State& st, uint32_t* next, bool* done) {
  const Insn& insn = prog_.insns[pc];
  *next = pc + 1;
  switch (insn.Class()) {
    case kClassAlu:
    case kClassAlu64:
      return DoAlu(pc, insn, st);
    case kClassLdx:
      return DoLoad(pc, insn, st);
    case kClassSt:
      if (auto r = ReadReg(pc, st, insn.dst); r) return r;
      return DoStore(pc, insn, st);
    case kClassStx:
      if (insn.Mode() == kModeAtomic) return DoAtomic(pc, insn, st);
      return DoStore(pc, insn, st);
    case kClassLd: {
      if (insn.dst == 10) return Reject(pc, "r10 (the frame pointer) is read-only");
      const Insn& hi = prog_.insns[pc + 1];
      *next = pc + 2;
      if (insn.src == 0) {
        st.regs[insn.dst] = Value::Const((static_cast<uint64_t>(static_cast<uint32_t>(hi.imm))
                                          << 32) |
                                         static_cast<uint32_t>(insn.imm));
        return std::nullopt;
      }
      const MapRef& ref = prog_.map_refs.at(pc);
      if (ref.value) {
        Value v = Value::Pointer(Type::kMapValue, ref.offset);
        v.map = ref.map;
        st.regs[insn.dst] = v;
      } else {
        Value v = Value::Pointer(Type::kMap, 0);
        v.map = ref.map;
        st.regs[insn.dst] = v;
      }
      out_.maps_used.insert(ref.map);
      return std::nullopt;
    }
    case kClassJmp:
    case kClassJmp32:
      if (insn.Op() == kJmpCall) return DoCall(pc, insn, st);
      if (insn.Op() == kJmpExit) {
        *done = true;
        return DoExit(pc, st);
      }
      return DoBranch(pc, insn, st, next, done);
  }
  return Reject(pc, "unknown instruction class");
}

Verifier::Result Verifier::Explore() {
  const uint32_t n = static_cast<uint32_t>(prog_.insns.size());
  stored_.assign(n, {});
  auto initial = std::make_shared<State>();
  initial->regs[1] = Value::Pointer(Type::kCtx, 0);
  initial->regs[10] = Value::Pointer(Type::kStack, 0);
  pending_.push_back(PendingBranch{0, std::move(initial)});
  uint64_t steps = 0;
  while (!pending_.empty()) {
    PendingBranch item = std::move(pending_.back());
    pending_.pop_back();
    // Everything stored while this branch was pending has now been explored.
    const size_t depth = pending_.size();
    while (!incomplete_.empty() && incomplete_.back().second->stack_size > depth) {
      incomplete_.back().second->complete = true;
      incomplete_.pop_back();
    }
    State& st = *item.state;
    uint32_t pc = item.pc;
    uint32_t prev_pc = UINT32_MAX;
    while (true) {
      if (pc >= n) {
        return Reject(prev_pc == UINT32_MAX ? n - 1 : prev_pc,
                      "execution falls off the end of the program", "end the probe with return");
      }
      if (prev_pc != UINT32_MAX && pc <= prev_pc) {
        st.in_loop = true;  // a back edge
        st.loop_header = pc;
      }
      if (prune_point_[pc]) {
        bool pruned = false;
        for (StoredState& s : stored_[pc]) {
          if (!StateWithin(*s.state, st)) continue;
          if (s.complete) {
            pruned = true;
            break;
          }
          return Reject(pc, "infinite loop: this point is reached again in the same state",
                        "give the loop a constant bound, e.g. for (int i = 0; i < 16; i++)");
        }
        if (pruned) break;
        if (stored_[pc].capacity() == 0) stored_[pc].reserve(kMaxStatesPerPoint);
        if (stored_[pc].size() < kMaxStatesPerPoint) {
          StoredState entry{std::make_shared<const State>(st), pending_.size(), false};
          stored_[pc].push_back(std::move(entry));
          incomplete_.emplace_back(pc, &stored_[pc].back());
        }
      }
      if (++steps > options_.max_steps) {
        if (st.in_loop) {
          return Reject(st.loop_header,
                        absl::StrCat("loop without a provable bound: the verifier gave up after ",
                                     options_.max_steps, " instructions"),
                        "bound the loop by a constant (for (int i = 0; i < N; i++)) and check "
                        "variable limits against it");
        }
        return Reject(pc, absl::StrCat("program too complex: more than ", options_.max_steps,
                                       " instructions processed over all paths"),
                      "simplify the probe or raise the budget");
      }
      out_.insns[pc].reached = true;
      uint32_t next = 0;
      bool done = false;
      if (auto r = Step(pc, st, &next, &done); r) return r;
      if (done) break;
      prev_pc = pc;
      pc = next;
    }
  }
  out_.steps = steps;
  return std::nullopt;
}

absl::StatusOr<VerifiedProgram> Verifier::Run() {
  CUPROBE_RETURN_IF_ERROR(ParseAttachPoint(prog_.section, &out_.attach, &out_.kernel_glob));
  out_.insns.assign(prog_.insns.size(), InsnInfo{});
  if (auto r = CheckStructure(); r) return Format(*r);
  if (auto r = Explore(); r) return Format(*r);
  return std::move(out_);
}

}  // namespace

absl::Status ParseAttachPoint(std::string_view section, AttachKind* kind, std::string* glob) {
  struct Prefix {
    std::string_view prefix;
    AttachKind kind;
  };
  constexpr Prefix kPrefixes[] = {
      {"cuprobe/entry/", AttachKind::kEntry},
      {"cuprobe/exit/", AttachKind::kExit},
      {"cuprobe/mem/", AttachKind::kMemory},
      {"kretprobe/", AttachKind::kExit},
      {"kprobe/", AttachKind::kEntry},
  };
  if (section == "kprobe/__memcapture") {
    *kind = AttachKind::kMemory;
    glob->assign(1, '*');
    return absl::OkStatus();
  }
  for (const Prefix& p : kPrefixes) {
    if (absl::StartsWith(section, p.prefix)) {
      *kind = p.kind;
      *glob = std::string(section.substr(p.prefix.size()));
      if (glob->empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "section '", section, "': no kernel after '", p.prefix,
            "'; write e.g. SEC(\"", p.prefix, "*\") for every kernel"));
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "section '", section,
      "' is not an attach point: use cuprobe/entry/<glob>, cuprobe/exit/<glob>, "
      "cuprobe/mem/<glob> (or bpftime's kprobe/<kernel>, kretprobe/<kernel>, "
      "kprobe/__memcapture)"));
}

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

absl::StatusOr<VerifiedProgram> Verify(const BpfObject& object, const BpfProgram& program,
                                       const VerifierOptions& options) {
  Verifier v(object, program, options);
  return v.Run();
}

}  // namespace cuprobe
