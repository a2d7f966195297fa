// File: loader/compiler/verifier_access.cc
//
// The verifier's memory checks: loads, stores and atomics through the
// context (read-only, whole fields at constant offsets, which the lowering
// turns into special registers), the stack (every byte tracked, spilled
// registers kept), map values and ring-buffer records (in bounds on every
// path, aligned), and the memory that helpers read or write.
#include "loader/compiler/verifier_internal.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"

namespace cuprobe::verifier_internal {
namespace {

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

// Marks stack byte `at` plain data: `value` when a constant was stored
// there, else unknown.
void SetMiscByte(State& st, int64_t at, std::optional<uint8_t> value) {
  st.stack[at] = Slot::kMisc;
  st.byte_known[at] = value.has_value();
  st.byte_value[at] = value.value_or(0);
}

// Turns the spill in slot `s` into plain data; the bytes of a spilled
// constant stay known.
void UnspillSlot(State& st, int64_t s) {
  for (int i = 0; i < 8; ++i) {
    SetMiscByte(st, s * 8 + i, KnownStackByte(st, static_cast<int>(s * 8 + i)));
  }
  st.spills[s] = Value();
}

// Stores `size` bytes at stack byte `at` (kStackSize + offset from r10).
// A whole aligned 8-byte store of a register or constant (`stored`; null
// for atomics) is a spill that keeps the value; any other store is plain
// data, as are then all the bytes of a spill it partly overwrites. The
// bytes of a stored constant stay known (KnownStackByte).
void WriteStack(State& st, int64_t at, int size, const Value* stored) {
  const int64_t slot = at / 8;
  for (int64_t s = at / 8; s <= (at + size - 1) / 8; ++s) {
    if (st.stack[s * 8] == Slot::kSpill) UnspillSlot(st, s);
  }
  if (size == 8 && stored != nullptr) {
    for (int i = 0; i < 8; ++i) {
      st.stack[at + i] = Slot::kSpill;
      st.byte_known[at + i] = false;
      st.byte_value[at + i] = 0;
    }
    st.spills[slot] = *stored;
  } else {
    const bool constant = stored != nullptr && stored->IsConst();
    for (int i = 0; i < size; ++i) {
      SetMiscByte(st, at + i,
                  constant ? std::optional<uint8_t>(static_cast<uint8_t>(stored->umin >> (8 * i)))
                           : std::nullopt);
    }
  }
}

}  // namespace

std::optional<uint8_t> KnownStackByte(const State& st, int i) {
  if (st.stack[i] == Slot::kSpill) {
    const Value& v = st.spills[i / 8];
    if (!v.IsConst()) return std::nullopt;
    return static_cast<uint8_t>(v.umin >> (8 * (i % 8)));
  }
  if (st.stack[i] == Slot::kMisc && st.byte_known[i]) return st.byte_value[i];
  return std::nullopt;
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
        if (st.stack[at + i] == Slot::kSpill) UnspillSlot(st, (at + i) / 8);
        SetMiscByte(st, at + i, std::nullopt);  // the helper's output
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

}  // namespace cuprobe::verifier_internal
