#include "loader/compiler/lower.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "llvm/Analysis/CGSCCPassManager.h"
#include "llvm/Analysis/LoopAnalysisManager.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/PassManager.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "maps/map_desc.h"
#include "support/status_macros.h"

extern "C" void LLVMInitializeNVPTXTargetInfo();
extern "C" void LLVMInitializeNVPTXTarget();
extern "C" void LLVMInitializeNVPTXTargetMC();
extern "C" void LLVMInitializeNVPTXAsmPrinter();

namespace cuprobe {
namespace {

constexpr char kNvptxTriple[] = "nvptx64-nvidia-cuda";
constexpr char kSm[] = "sm_90";
constexpr char kPtxFeatures[] = "+ptx80";
// The context pointer never becomes an address (the context is virtual); r1
// holds this non-NULL stand-in so that comparisons the verifier decided
// ("ctx != NULL") also hold at run time.
constexpr uint64_t kCtxStandIn = 0xc7c70000;
constexpr uint32_t kPrintkRecordSize = 32;

void InitNvptx() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

// CUPROBE_RING_INLINE=0 (read when a probe is compiled): lone-lane ring
// reservations call the helper as other ones do (for comparisons).
bool InlineRingReservations() {
  const char* env = std::getenv("CUPROBE_RING_INLINE");
  return env == nullptr || std::string_view(env) != "0";
}

// CUPROBE_DIAG_RING_COMMIT (read when a probe is compiled; for measuring
// only): "relaxed" commits ring records with a relaxed system-scope store,
// "gpu" with a GPU-scope release. Neither orders the record's bytes before
// its commit for the host, so the consumer may read a torn record: it
// measures what the system-scope release costs and nothing else.
const char* RingCommitStore() {
  const char* env = std::getenv("CUPROBE_DIAG_RING_COMMIT");
  const std::string_view v = env == nullptr ? "" : env;
  if (v == "relaxed") return "st.relaxed.sys.b32 [$0], $1;";
  if (v == "gpu") return "st.release.gpu.b32 [$0], $1;";
  return "st.release.sys.b32 [$0], $1;";
}

// CUPROBE_DIAG_RING_DROP (read when a probe is compiled; for measuring
// only): "nocount" drops a full ring's records without counting them,
// "always" drops every record without reading the SM's hint (nothing is
// ever delivered), "always-nocount" both. Each breaks delivered + dropped =
// produced: it measures what the drop path's parts cost.
std::string_view RingDropDiag() {
  const char* env = std::getenv("CUPROBE_DIAG_RING_DROP");
  return env == nullptr ? "" : env;
}

std::string Sanitize(std::string_view s) {
  std::string out;
  for (char c : s) {
    out += ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) ? c : '_';
  }
  return out;
}

class FunctionLowering {
 public:
  FunctionLowering(llvm::Module& module, const LowerInput& input, const ProgramToLower& prog,
                   LowerTarget target)
      : m_(module),
        ctx_(module.getContext()),
        b_(ctx_),
        input_(input),
        obj_(prog.object != nullptr ? *prog.object : *input.object),
        map_slot_(prog.map_slot != nullptr ? *prog.map_slot : input.map_slot),
        prog_(*prog.program),
        v_(*prog.verified),
        lp_(prog),
        target_(target) {}

  absl::Status Lower();

 private:
  // Lower's steps: the function, its blocks and frame, then the program.
  void CreateFunction();
  std::vector<bool> BlockLeaders() const;
  void AllocateFrame();
  void LoadGlobalData();
  llvm::Value* RodataAddress(const ObjectMap& om);
  void EnterProgram();
  absl::Status LowerInsns(const std::vector<bool>& leader);
  absl::Status LowerInsn(uint32_t pc, const Insn& insn);
  void LowerLdImm64(uint32_t pc, const Insn& insn);
  absl::Status LowerJump(uint32_t pc, const Insn& insn);
  llvm::Type* I8() { return b_.getInt8Ty(); }
  llvm::Type* I32() { return b_.getInt32Ty(); }
  llvm::Type* I64() { return b_.getInt64Ty(); }
  llvm::Value* C64(uint64_t v) { return b_.getInt64(v); }
  llvm::Value* Reg(int r) { return b_.CreateLoad(I64(), regs_[r]); }
  void SetReg(int r, llvm::Value* v) { b_.CreateStore(v, regs_[r]); }
  llvm::Value* Src(const Insn& insn) {
    return insn.UsesSrcReg() ? Reg(insn.src)
                             : C64(static_cast<uint64_t>(static_cast<int64_t>(insn.imm)));
  }
  llvm::Function* Helper(const char* name, int nargs);
  llvm::Value* Sreg(llvm::Intrinsic::ID id, int32_t ctx_offset);
  llvm::Value* CtxField(int32_t offset);
  llvm::Value* ArgValue(llvm::Value* index);
  llvm::Value* NumArgs();
  llvm::Value* MapTableEntry(uint32_t map);
  llvm::Value* TableEntry(int32_t slot);
  llvm::Value* Address(const Insn& insn, int base_reg, int16_t off);
  llvm::Value* GlobalThreadId();
  llvm::Value* BlockLinear();
  llvm::Value* ThreadsPerBlock();
  llvm::Value* ThreadLinear();
  llvm::Value* PerId(uint32_t type);
  // A map as inline code reads its descriptor: `map` is the descriptor's
  // address (from the table), `slot` its table slot when the call site fixes
  // the map (else -1). On the GPU a known slot's fields come from the
  // module's constant copy of the descriptors (abi.h 3.), and `map` is not
  // read at all.
  struct DescRef {
    llvm::Value* map;
    int32_t slot;
  };
  DescRef SlotRef(int32_t slot) { return DescRef{TableEntry(slot), slot}; }
  // The constant copy takes 128 bytes of the module's 64 KiB constant bank
  // per map: bundles of more than 64 maps read through the table.
  bool ConstDesc(const DescRef& m) const {
    return target_ == LowerTarget::kNvptx && m.slot >= 0 && map_slot_.size() <= 64;
  }
  void CountError(const DescRef& map);
  // A relaxed add whose old value nobody reads, as `red` (GPU, global
  // memory at `address`, an i64): the warp does not wait for it.
  void AddNoReturn(llvm::Value* address, llvm::Value* delta);
  // Inline map operations (abi.h 8.): see IndexedValue.
  struct IndexedRef {
    llvm::Value* address;  // i64: the value's address, 0 on failure
    llvm::Value* error;    // i64: 0, -EINVAL or -E2BIG
  };
  IndexedRef IndexedValue(const DescRef& map, llvm::Value* index, uint32_t type, bool for_add);
  llvm::Value* DescPointer(llvm::Value* map, uint32_t offset);
  llvm::Value* DescLoad(const DescRef& map, uint32_t offset, llvm::Type* type);
  llvm::Value* DescHeadOk(const DescRef& map, uint32_t type);
  llvm::Value* RingReserve(uint32_t pc);
  // The values and blocks of one inline ring reservation, which
  // RingReserve's steps fill in turn.
  struct RingSite {
    DescRef ring{nullptr, -1};
    llvm::Value* size = nullptr;  // R2
    llvm::Value* aux = nullptr;   // descriptor fields
    llvm::Value* data = nullptr;
    llvm::Value* ring_host = nullptr;
    llvm::Value* shard = nullptr;          // this SM's counter shard
    llvm::Value* now = nullptr;            // %globaltimer
    llvm::Value* record_bytes = nullptr;   // header and padding included
    llvm::Value* capacity = nullptr;       // slot_mask + 1
    llvm::Value* control = nullptr;        // the map's control block
    llvm::Value* head_at = nullptr;        // the head's address
    llvm::Value* half = nullptr;           // a speculative ring's capacity
    llvm::Value* consumer_tail = nullptr;  // ... and its consumer's tail
    llvm::Value* tail = nullptr;           // the cached tail
    llvm::PHINode* grab_tail = nullptr;    // the tail the grab checks against
    llvm::Value* position = nullptr;       // the head before the grab
    llvm::Value* offset = nullptr;         // ... in the data area
    llvm::Value* body = nullptr;           // R0 when granted
    llvm::Value* finished = nullptr;       // R0 from the helper's finish
    llvm::BasicBlock *check = nullptr, *drop = nullptr, *lead = nullptr, *call = nullptr,
                     *done = nullptr, *fast = nullptr, *cursors = nullptr, *grab = nullptr,
                     *granted = nullptr, *finish = nullptr, *speculative = nullptr,
                     *checked = nullptr, *over_half = nullptr, *window = nullptr,
                     *counted = nullptr;
  };
  llvm::Value* RingReserveCall();
  llvm::Value* RingDescriptorOk(RingSite& r);
  void RingCheckHint(RingSite& r);
  void RingTryInline(RingSite& r);
  void RingLoadCursors(RingSite& r);
  void RingSpeculativeTail(RingSite& r);
  void RingCachedTail(RingSite& r);
  void RingGrab(RingSite& r);
  void RingGrant(RingSite& r);
  void RingFinishAt(RingSite& r);
  void RingDrop(RingSite& r);
  llvm::Value* RingJoin(RingSite& r);
  llvm::Value* RingFinish(bool discard);
  llvm::Value* KeyValue(uint32_t pc, uint32_t bytes);
  const ObjectMap* CallMap(uint32_t pc) const;
  bool LowerMapCall(uint32_t pc, const Insn& insn, llvm::Value** r0);
  void LowerAlu(const Insn& insn);
  llvm::Value* Alu(const Insn& insn, llvm::Value* dst, llvm::Value* src, unsigned bits);
  void LowerLoad(uint32_t pc, const Insn& insn);
  void LowerStore(uint32_t pc, const Insn& insn);
  void LowerAtomic(uint32_t pc, const Insn& insn);
  absl::Status LowerCall(uint32_t pc, const Insn& insn);
  llvm::Value* CallHelper(const char* name, std::initializer_list<int> regs);
  llvm::Value* StoreXyz(int32_t off_x);
  llvm::Value* Membar();
  llvm::Value* GridId();
  llvm::Value* WarpMatch();
  absl::StatusOr<llvm::Value*> Printk(uint32_t pc);
  llvm::Value* Condition(const Insn& insn);

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  const LowerInput& input_;
  const BpfObject& obj_;
  const std::vector<int32_t>& map_slot_;  // obj_'s maps -> table slots
  const BpfProgram& prog_;
  const VerifiedProgram& v_;
  const ProgramToLower& lp_;
  LowerTarget target_;
  llvm::Function* fn_ = nullptr;
  llvm::Value* regs_[kNumRegs] = {};
  llvm::Value* stack_ = nullptr;
  // Bytes of the eBPF stack the program uses (below r10), 8-aligned.
  int64_t stack_depth_ = 8;
  llvm::Value* record_ = nullptr;
  std::map<uint32_t, llvm::Value*> data_base_;  // global-data map -> value address (i64)
  std::map<uint32_t, llvm::BasicBlock*> blocks_;
  llvm::Value* mem_addr_ = nullptr;
  llvm::Value* mem_info_ = nullptr;
  llvm::Value* kernel_id_ = nullptr;
  llvm::Value* site_index_ = nullptr;
  llvm::Value* args_ = nullptr;
};

llvm::Function* FunctionLowering::Helper(const char* name, int nargs) {
  std::vector<llvm::Type*> params(nargs, I64());
  auto* type = llvm::FunctionType::get(I64(), params, false);
  llvm::FunctionCallee callee = m_.getOrInsertFunction(name, type);
  return llvm::cast<llvm::Function>(callee.getCallee());
}

llvm::Value* FunctionLowering::Sreg(llvm::Intrinsic::ID id, int32_t ctx_offset) {
  if (target_ == LowerTarget::kHost) {
    auto* type = llvm::FunctionType::get(I64(), {I32()}, false);
    llvm::FunctionCallee f = m_.getOrInsertFunction("__cuprobe_host_sreg", type);
    return b_.CreateCall(f, {b_.getInt32(ctx_offset)});
  }
  llvm::Value* v = b_.CreateIntrinsic(id, {}, {});
  return b_.CreateZExt(v, I64());
}

llvm::Value* FunctionLowering::NumArgs() {
  // args may be NULL (the rewriter passes 0 when no probe reads arguments).
  llvm::Value* is_null = b_.CreateICmpEQ(args_, llvm::ConstantPointerNull::get(b_.getPtrTy()));
  llvm::BasicBlock* cur = b_.GetInsertBlock();
  llvm::BasicBlock* load_bb = llvm::BasicBlock::Create(ctx_, "args.count", fn_);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "args.count.done", fn_);
  b_.CreateCondBr(is_null, done, load_bb);
  b_.SetInsertPoint(load_bb);
  llvm::Value* count = b_.CreateZExt(b_.CreateAlignedLoad(I32(), args_, llvm::Align(8)), I64());
  llvm::Value* capped = b_.CreateSelect(b_.CreateICmpUGT(count, C64(CUPROBE_MAX_ARGS)),
                                        C64(CUPROBE_MAX_ARGS), count);
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
  llvm::PHINode* phi = b_.CreatePHI(I64(), 2);
  phi->addIncoming(C64(0), cur);
  phi->addIncoming(capped, load_bb);
  return phi;
}

llvm::Value* FunctionLowering::ArgValue(llvm::Value* index) {
  llvm::Value* count = NumArgs();
  llvm::BasicBlock* cur = b_.GetInsertBlock();
  llvm::BasicBlock* load_bb = llvm::BasicBlock::Create(ctx_, "arg.load", fn_);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "arg.done", fn_);
  b_.CreateCondBr(b_.CreateICmpULT(index, count), load_bb, done);
  b_.SetInsertPoint(load_bb);
  llvm::Value* addr = b_.CreateGEP(I8(), args_, b_.CreateAdd(C64(8), b_.CreateShl(index, 3)));
  llvm::Value* value = b_.CreateAlignedLoad(I64(), addr, llvm::Align(8));
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
  llvm::PHINode* phi = b_.CreatePHI(I64(), 2);
  phi->addIncoming(C64(0), cur);
  phi->addIncoming(value, load_bb);
  return phi;
}

llvm::Value* FunctionLowering::CtxField(int32_t off) {
  using namespace llvm::Intrinsic;
  const AttachKind kind = v_.attach;
  const bool mem = kind == AttachKind::kMemory;
  switch (off) {
    case 0: return C64(static_cast<uint32_t>(kind));
    case 4: return b_.CreateZExt(kernel_id_, I64());
    case 8: return Sreg(nvvm_read_ptx_sreg_ctaid_x, off);
    case 12: return Sreg(nvvm_read_ptx_sreg_ctaid_y, off);
    case 16: return Sreg(nvvm_read_ptx_sreg_ctaid_z, off);
    case 20: return Sreg(nvvm_read_ptx_sreg_tid_x, off);
    case 24: return Sreg(nvvm_read_ptx_sreg_tid_y, off);
    case 28: return Sreg(nvvm_read_ptx_sreg_tid_z, off);
    case 32: return Sreg(nvvm_read_ptx_sreg_ntid_x, off);
    case 36: return Sreg(nvvm_read_ptx_sreg_ntid_y, off);
    case 40: return Sreg(nvvm_read_ptx_sreg_ntid_z, off);
    case 44: return Sreg(nvvm_read_ptx_sreg_nctaid_x, off);
    case 48: return Sreg(nvvm_read_ptx_sreg_nctaid_y, off);
    case 52: return Sreg(nvvm_read_ptx_sreg_nctaid_z, off);
    case 56: return Sreg(nvvm_read_ptx_sreg_smid, off);
    case 60: return Sreg(nvvm_read_ptx_sreg_warpid, off);
    case 64: return Sreg(nvvm_read_ptx_sreg_laneid, off);
    case 68: return Sreg(nvvm_activemask, off);
    case 72: return Sreg(nvvm_read_ptx_sreg_globaltimer, off);
    case 80: return Sreg(nvvm_read_ptx_sreg_clock64, off);
    case 88: return mem ? mem_addr_ : C64(0);
    case 96:
      return mem ? b_.CreateZExt(b_.CreateAnd(mem_info_, 0xffff), I64()) : C64(0);
    case 100:
      return mem ? b_.CreateZExt(b_.CreateAnd(b_.CreateLShr(mem_info_, 16), 0xf), I64()) : C64(0);
    case 104:
      return mem ? b_.CreateZExt(b_.CreateAnd(b_.CreateLShr(mem_info_, 20), 0xf), I64()) : C64(0);
    case 108: return kind == AttachKind::kEntry ? C64(0) : b_.CreateZExt(site_index_, I64());
    case 112: return NumArgs();
    case 116: return C64(0);
    default:
      return ArgValue(C64(static_cast<uint64_t>(off - 120) / 8));
  }
}

llvm::Value* FunctionLowering::MapTableEntry(uint32_t map) {
  return TableEntry(map_slot_[map]);
}


llvm::Value* FunctionLowering::TableEntry(int32_t slot) {
  const unsigned as = target_ == LowerTarget::kNvptx ? 1 : 0;
  llvm::GlobalVariable* table = m_.getNamedGlobal(CUPROBE_MAP_TABLE_SYMBOL);
  if (table == nullptr) {
    table = new llvm::GlobalVariable(m_, llvm::ArrayType::get(I64(), 0), false,
                                     llvm::GlobalValue::ExternalLinkage, nullptr,
                                     CUPROBE_MAP_TABLE_SYMBOL, nullptr,
                                     llvm::GlobalValue::NotThreadLocal, as);
    table->setAlignment(llvm::Align(8));
  }
  llvm::Value* addr = b_.CreateConstGEP1_64(I64(), table, slot);
  // The hook fills the table before any launch and never changes it after.
  llvm::LoadInst* load = b_.CreateAlignedLoad(I64(), addr, llvm::Align(8));
  load->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx_, {}));
  return load;
}

// The base register as a pointer, then the offset as a byte GEP (not an
// integer add before the cast): accesses off one base are then visibly
// consecutive, and LLVM merges adjacent stores into vector stores where the
// alignment allows (a ring record's fields: one store per 8 bytes, not per
// field, each store to host memory crossing the bus on its own).
llvm::Value* FunctionLowering::Address(const Insn& insn, int base_reg, int16_t off) {
  (void)insn;
  return b_.CreateGEP(I8(), b_.CreateIntToPtr(Reg(base_reg), b_.getPtrTy()),
                      C64(static_cast<uint64_t>(int64_t{off})));
}

llvm::Value* FunctionLowering::Alu(const Insn& insn, llvm::Value* d, llvm::Value* s,
                                   unsigned bits) {
  llvm::Type* t = b_.getIntNTy(bits);
  const bool sign = insn.off == 1;
  llvm::Value* zero = llvm::ConstantInt::get(t, 0);
  llvm::Value* mask = llvm::ConstantInt::get(t, bits - 1);
  switch (insn.Op()) {
    case kAluAdd: return b_.CreateAdd(d, s);
    case kAluSub: return b_.CreateSub(d, s);
    case kAluMul: return b_.CreateMul(d, s);
    case kAluOr: return b_.CreateOr(d, s);
    case kAluAnd: return b_.CreateAnd(d, s);
    case kAluXor: return b_.CreateXor(d, s);
    case kAluLsh: return b_.CreateShl(d, b_.CreateAnd(s, mask));
    case kAluRsh: return b_.CreateLShr(d, b_.CreateAnd(s, mask));
    case kAluArsh: return b_.CreateAShr(d, b_.CreateAnd(s, mask));
    case kAluNeg: return b_.CreateNeg(d);
    case kAluDiv:
    case kAluMod: {
      // eBPF: x / 0 == 0, x % 0 == x; signed MIN / -1 == MIN, MIN % -1 == 0.
      // LLVM's division is undefined there, so the divisor is made safe first.
      llvm::Value* is_zero = b_.CreateICmpEQ(s, zero);
      llvm::Value* bad = is_zero;
      llvm::Value* minus_one = nullptr;
      if (sign) {
        llvm::Value* min = llvm::ConstantInt::get(t, llvm::APInt::getSignedMinValue(bits));
        minus_one = b_.CreateICmpEQ(s, llvm::ConstantInt::getSigned(t, -1));
        bad = b_.CreateOr(is_zero, b_.CreateAnd(minus_one, b_.CreateICmpEQ(d, min)));
      }
      llvm::Value* safe = b_.CreateSelect(bad, llvm::ConstantInt::get(t, 1), s);
      if (insn.Op() == kAluDiv) {
        llvm::Value* q = sign ? b_.CreateSDiv(d, safe) : b_.CreateUDiv(d, safe);
        // zero -> 0; MIN / -1 -> MIN (safe == 1 gives d already).
        return b_.CreateSelect(is_zero, zero, q);
      }
      llvm::Value* r = sign ? b_.CreateSRem(d, safe) : b_.CreateURem(d, safe);
      r = b_.CreateSelect(is_zero, d, r);
      return r;  // MIN % -1: safe == 1, so r == 0 already
    }
    default: return zero;
  }
}

void FunctionLowering::LowerAlu(const Insn& insn) {
  const bool is64 = insn.Class() == kClassAlu64;
  const uint8_t op = insn.Op();
  if (op == kAluEnd) {
    const unsigned w = static_cast<unsigned>(insn.imm);
    llvm::Value* v = b_.CreateTrunc(Reg(insn.dst), b_.getIntNTy(w));
    const bool swap = is64 || insn.UsesSrcReg();  // ALU64: bswap; ALU: be
    if (swap && w > 8) {
      v = b_.CreateIntrinsic(llvm::Intrinsic::bswap, {v->getType()}, {v});
    }
    SetReg(insn.dst, b_.CreateZExt(v, I64()));
    return;
  }
  if (op == kAluMov) {
    llvm::Value* s = Src(insn);
    if (insn.off != 0) {
      llvm::Value* narrow = b_.CreateTrunc(s, b_.getIntNTy(insn.off));
      s = b_.CreateSExt(narrow, is64 ? I64() : I32());
      if (!is64) s = b_.CreateZExt(s, I64());
    } else if (!is64) {
      s = b_.CreateZExt(b_.CreateTrunc(s, I32()), I64());
    }
    SetReg(insn.dst, s);
    return;
  }
  llvm::Value* d = Reg(insn.dst);
  llvm::Value* s = op == kAluNeg ? nullptr : Src(insn);
  if (is64) {
    SetReg(insn.dst, Alu(insn, d, s, 64));
    return;
  }
  d = b_.CreateTrunc(d, I32());
  if (s != nullptr) s = b_.CreateTrunc(s, I32());
  SetReg(insn.dst, b_.CreateZExt(Alu(insn, d, s, 32), I64()));
}

void FunctionLowering::LowerLoad(uint32_t pc, const Insn& insn) {
  const InsnInfo& info = v_.insns[pc];
  if (info.mem == InsnInfo::Mem::kCtx) {
    llvm::Value* v = CtxField(info.ctx_offset);
    SetReg(insn.dst, v);
    return;
  }
  const int size = SizeBytes(insn.Size());
  llvm::Type* t = b_.getIntNTy(8 * size);
  llvm::Value* addr;
  if (info.mem == InsnInfo::Mem::kStack && info.stack_offset_known) {
    addr = b_.CreateConstGEP1_64(I8(), stack_, stack_depth_ + info.stack_offset);
  } else {
    addr = Address(insn, insn.src, insn.off);
  }
  llvm::Value* v = b_.CreateAlignedLoad(t, addr, llvm::Align(info.aligned ? size : 1));
  v = insn.Mode() == kModeMemsx ? b_.CreateSExt(v, I64()) : b_.CreateZExt(v, I64());
  SetReg(insn.dst, v);
}

void FunctionLowering::LowerStore(uint32_t pc, const Insn& insn) {
  const InsnInfo& info = v_.insns[pc];
  const int size = SizeBytes(insn.Size());
  llvm::Type* t = b_.getIntNTy(8 * size);
  llvm::Value* addr;
  if (info.mem == InsnInfo::Mem::kStack && info.stack_offset_known) {
    addr = b_.CreateConstGEP1_64(I8(), stack_, stack_depth_ + info.stack_offset);
  } else {
    addr = Address(insn, insn.dst, insn.off);
  }
  llvm::Value* value = insn.Class() == kClassStx
                           ? Reg(insn.src)
                           : C64(static_cast<uint64_t>(static_cast<int64_t>(insn.imm)));
  b_.CreateAlignedStore(b_.CreateTrunc(value, t), addr, llvm::Align(info.aligned ? size : 1));
}

void FunctionLowering::LowerAtomic(uint32_t pc, const Insn& insn) {
  const InsnInfo& info = v_.insns[pc];
  const int size = SizeBytes(insn.Size());
  llvm::Type* t = b_.getIntNTy(8 * size);
  const bool on_stack = info.mem == InsnInfo::Mem::kStack;
  llvm::Value* addr = on_stack && info.stack_offset_known
                          ? b_.CreateConstGEP1_64(I8(), stack_, stack_depth_ + info.stack_offset)
                          : Address(insn, insn.dst, insn.off);
  const llvm::Align align(size);
  llvm::Value* src = b_.CreateTrunc(Reg(insn.src), t);
  const int32_t op = insn.imm;
  if (op == kAtomicCmpxchg) {
    llvm::Value* expected = b_.CreateTrunc(Reg(0), t);
    llvm::Value* old;
    if (on_stack) {
      // The stack is private to the thread, and PTX atomics on local memory
      // are undefined: a plain compare-and-store is exact.
      old = b_.CreateAlignedLoad(t, addr, align);
      b_.CreateAlignedStore(b_.CreateSelect(b_.CreateICmpEQ(old, expected), src, old), addr,
                            align);
    } else {
      auto* cx = b_.CreateAtomicCmpXchg(addr, expected, src, align,
                                        llvm::AtomicOrdering::SequentiallyConsistent,
                                        llvm::AtomicOrdering::SequentiallyConsistent);
      old = b_.CreateExtractValue(cx, 0);
    }
    SetReg(0, b_.CreateZExt(old, I64()));
    return;
  }
  llvm::AtomicRMWInst::BinOp rmw;
  llvm::Instruction::BinaryOps bin = llvm::Instruction::Add;
  switch (op & ~kAtomicFetch) {
    case kAluAdd: rmw = llvm::AtomicRMWInst::Add; bin = llvm::Instruction::Add; break;
    case kAluOr: rmw = llvm::AtomicRMWInst::Or; bin = llvm::Instruction::Or; break;
    case kAluAnd: rmw = llvm::AtomicRMWInst::And; bin = llvm::Instruction::And; break;
    case kAluXor: rmw = llvm::AtomicRMWInst::Xor; bin = llvm::Instruction::Xor; break;
    default: rmw = llvm::AtomicRMWInst::Xchg; break;  // kAtomicXchg
  }
  const bool fetch = (op & kAtomicFetch) != 0;
  llvm::Value* old;
  if (on_stack) {
    old = b_.CreateAlignedLoad(t, addr, align);
    llvm::Value* updated = rmw == llvm::AtomicRMWInst::Xchg ? src : b_.CreateBinOp(bin, old, src);
    b_.CreateAlignedStore(updated, addr, align);
  } else {
    // Plain add/or/and/xor are relaxed; fetch, xchg and cmpxchg are fully
    // ordered (the eBPF memory model).
    old = b_.CreateAtomicRMW(rmw, addr, src, align,
                             fetch ? llvm::AtomicOrdering::SequentiallyConsistent
                                   : llvm::AtomicOrdering::Monotonic);
  }
  if (fetch) SetReg(insn.src, b_.CreateZExt(old, I64()));
}

// The ids of maps/map_desc.h (the numbering of CUPROBE_HELPER_GLOBAL_THREAD_ID
// and of the helper library's PER* maps), in 64 bits.
llvm::Value* FunctionLowering::BlockLinear() {
  llvm::Value* bx = CtxField(8);
  llvm::Value* by = CtxField(12);
  llvm::Value* bz = CtxField(16);
  llvm::Value* gx = CtxField(44);
  llvm::Value* gy = CtxField(48);
  return b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(bz, gy), by), gx), bx);
}

llvm::Value* FunctionLowering::ThreadsPerBlock() {
  return b_.CreateMul(b_.CreateMul(CtxField(32), CtxField(36)), CtxField(40));
}

llvm::Value* FunctionLowering::ThreadLinear() {
  llvm::Value* tx = CtxField(20);
  llvm::Value* ty = CtxField(24);
  llvm::Value* tz = CtxField(28);
  llvm::Value* nx = CtxField(32);
  llvm::Value* ny = CtxField(36);
  return b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(tz, ny), ty), nx), tx);
}

llvm::Value* FunctionLowering::GlobalThreadId() {
  return b_.CreateAdd(b_.CreateMul(BlockLinear(), ThreadsPerBlock()), ThreadLinear());
}

llvm::Value* FunctionLowering::PerId(uint32_t type) {
  switch (type) {
    case CUPROBE_MAP_PERTHREAD:
      return GlobalThreadId();
    case CUPROBE_MAP_PERWARP: {
      llvm::Value* warps = b_.CreateLShr(b_.CreateAdd(ThreadsPerBlock(), C64(31)), 5);
      return b_.CreateAdd(b_.CreateMul(BlockLinear(), warps), b_.CreateLShr(ThreadLinear(), 5));
    }
    case CUPROBE_MAP_PERSM:
      return CtxField(56);
    default:
      return C64(0);
  }
}

// The address of descriptor field `offset` of the map whose descriptor
// address is `map` (global memory on the GPU).
llvm::Value* FunctionLowering::DescPointer(llvm::Value* map, uint32_t offset) {
  const unsigned as = target_ == LowerTarget::kNvptx ? 1 : 0;
  llvm::Value* base = b_.CreateIntToPtr(map, llvm::PointerType::get(ctx_, as));
  return b_.CreateConstGEP1_64(I8(), base, offset);
}

// A descriptor field: written once before any kernel of the module runs and
// never changed while one runs (map_desc.h, abi.h 7.), so an invariant load
// (ld.global.nc on the GPU).
// With a known slot on the GPU, the field of the module's constant copy
// (ld.const: the constant cache, which the kernel's own loads never evict).
llvm::Value* FunctionLowering::DescLoad(const DescRef& map, uint32_t offset, llvm::Type* type) {
  llvm::Value* address;
  if (ConstDesc(map)) {
    llvm::GlobalVariable* descs = m_.getNamedGlobal(CUPROBE_MAP_DESCS_SYMBOL);
    if (descs == nullptr) {
      descs = new llvm::GlobalVariable(m_, llvm::ArrayType::get(I8(), 0), true,
                                       llvm::GlobalValue::ExternalLinkage, nullptr,
                                       CUPROBE_MAP_DESCS_SYMBOL, nullptr,
                                       llvm::GlobalValue::NotThreadLocal, 4);
      descs->setAlignment(llvm::Align(8));
    }
    address = b_.CreateConstGEP1_64(
        I8(), descs, uint64_t{CUPROBE_MAP_DESC_SIZE} * static_cast<uint64_t>(map.slot) + offset);
  } else {
    address = DescPointer(map.map, offset);
  }
  llvm::LoadInst* load =
      b_.CreateAlignedLoad(type, address, llvm::Align(type->getPrimitiveSizeInBits() / 8));
  load->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx_, {}));
  return load;
}

// Whether the descriptor has our magic and version and is of `type`.
llvm::Value* FunctionLowering::DescHeadOk(const DescRef& map, uint32_t type) {
  // magic (u32) | version (u16) << 32 in one load; the size field above is
  // not checked (the helpers do not either).
  llvm::Value* head = b_.CreateAnd(DescLoad(map, 0, I64()), C64(0xffffffffffffull));
  llvm::Value* good = b_.CreateICmpEQ(
      head, C64(CUPROBE_MAP_DESC_MAGIC | (uint64_t{CUPROBE_MAP_DESC_VERSION} << 32)));
  return b_.CreateAnd(good, b_.CreateICmpEQ(DescLoad(map, offsetof(cuprobe_map_desc, type), I32()),
                                            b_.getInt32(type)));
}

// The value of `index` in the indexed map (ARRAY, HIST_*, PER*) of `type`
// whose descriptor address is `map`, computed inline exactly as the helper
// library does it (maps/map_algorithms.h, IndexedLookup / IndexedAddTarget):
//   - a null descriptor, a bad magic or version, or another type: -EINVAL
//     (a lookup gets 0); with for_add, a value under 8 bytes too;
//   - index >= max_entries: -E2BIG, counted in control.errors for an add;
//   - PER*: id >= id_slots: -E2BIG, counted.
// This is the whole ARRAY / PER* lookup: a probe like
// `v = lookup(&per_thread, &zero); if (v) *v += 1;` needs no helper call.
FunctionLowering::IndexedRef FunctionLowering::IndexedValue(const DescRef& map, llvm::Value* index,
                                                            uint32_t type, bool for_add) {
  const bool per_id = type == CUPROBE_MAP_PERTHREAD || type == CUPROBE_MAP_PERWARP ||
                      type == CUPROBE_MAP_PERSM;
  const auto einval = static_cast<uint64_t>(int64_t{-22});
  const auto e2big = static_cast<uint64_t>(int64_t{-7});
  llvm::BasicBlock* start = b_.GetInsertBlock();
  llvm::BasicBlock* check = llvm::BasicBlock::Create(ctx_, "map.desc", fn_);
  llvm::BasicBlock* in_range = llvm::BasicBlock::Create(ctx_, "map.index", fn_);
  // Paths that count an error: an id out of range, or an index out of range
  // of an add (a lookup does not count one, as the helpers).
  const bool counts_errors = per_id || for_add;
  llvm::BasicBlock* count_error =
      counts_errors ? llvm::BasicBlock::Create(ctx_, "map.error", fn_) : nullptr;
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "map.done", fn_);
  llvm::PHINode* address = nullptr;
  llvm::PHINode* error = nullptr;

  // A null table entry (never filled) is a bad map; the constant copy of a
  // descriptor never filled is zeros, which the magic check refuses.
  b_.CreateCondBr(ConstDesc(map) ? b_.getFalse() : b_.CreateICmpEQ(map.map, C64(0)), done, check);

  b_.SetInsertPoint(check);
  llvm::Value* good = DescHeadOk(map, type);
  if (for_add) {
    good = b_.CreateAnd(good, b_.CreateICmpUGE(DescLoad(map, offsetof(cuprobe_map_desc,
                                                                       value_size), I32()),
                                               b_.getInt32(8)));
  }
  llvm::Value* max = DescLoad(map, offsetof(cuprobe_map_desc, max_entries), I32());
  llvm::BasicBlock* check_index = llvm::BasicBlock::Create(ctx_, "map.check_index", fn_);
  b_.CreateCondBr(good, check_index, done);
  llvm::BasicBlock* check_end = check;

  b_.SetInsertPoint(check_index);
  llvm::Value* index_ok = b_.CreateICmpULT(index, max);
  // Out of range: an add counts it; a lookup does not (as the helpers).
  b_.CreateCondBr(index_ok, in_range, for_add ? count_error : done);

  b_.SetInsertPoint(in_range);
  llvm::Value* slot = b_.CreateZExt(index, I64());
  llvm::BasicBlock* value_block = in_range;
  llvm::Value* stride = b_.CreateZExt(
      DescLoad(map, offsetof(cuprobe_map_desc, value_stride), I32()), I64());
  llvm::Value* values = DescLoad(map, offsetof(cuprobe_map_desc, values), I64());
  if (per_id) {
    llvm::Value* ids =
        b_.CreateZExt(DescLoad(map, offsetof(cuprobe_map_desc, id_slots), I32()), I64());
    llvm::Value* id = PerId(type);
    value_block = llvm::BasicBlock::Create(ctx_, "map.value", fn_);
    b_.CreateCondBr(b_.CreateICmpULT(id, ids), value_block, count_error);
    b_.SetInsertPoint(value_block);
    slot = b_.CreateAdd(b_.CreateMul(slot, ids), id);
  }
  llvm::Value* value = b_.CreateAdd(values, b_.CreateMul(slot, stride));
  b_.CreateBr(done);

  llvm::BasicBlock* count_error_end = nullptr;
  if (counts_errors) {
    b_.SetInsertPoint(count_error);
    CountError(map);
    count_error_end = b_.GetInsertBlock();
    b_.CreateBr(done);
  }

  b_.SetInsertPoint(done);
  address = b_.CreatePHI(I64(), 5);
  error = b_.CreatePHI(I64(), 5);
  address->addIncoming(C64(0), start);
  error->addIncoming(C64(einval), start);
  address->addIncoming(C64(0), check_end);
  error->addIncoming(C64(einval), check_end);
  if (!for_add) {
    address->addIncoming(C64(0), check_index);
    error->addIncoming(C64(e2big), check_index);
  }
  address->addIncoming(value, value_block);
  error->addIncoming(C64(0), value_block);
  if (counts_errors) {
    address->addIncoming(C64(0), count_error_end);
    error->addIncoming(C64(e2big), count_error_end);
  }
  return IndexedRef{address, error};
}

void FunctionLowering::AddNoReturn(llvm::Value* address, llvm::Value* delta) {
  b_.CreateCall(llvm::InlineAsm::get(llvm::FunctionType::get(b_.getVoidTy(), {I64(), I64()}, false),
                                     "red.relaxed.gpu.global.add.u64 [$0], $1;", "l,l,~{memory}",
                                     /*hasSideEffects=*/true),
                {address, delta});
}

// Counts one error of `map` (maps/map_desc.h): on the GPU, the first lane of
// the warp's lanes here adds for all of them (every lane at this site has
// the same map) to its SM's error shard; on the host, one add to
// control.errors.
void FunctionLowering::CountError(const DescRef& map) {
  llvm::Value* control = DescLoad(map, offsetof(cuprobe_map_desc, control), I64());
  llvm::Value* total =
      b_.CreateAdd(control, C64(offsetof(cuprobe_map_control, errors)));
  if (target_ != LowerTarget::kNvptx) {
    b_.CreateAtomicRMW(llvm::AtomicRMWInst::Add, b_.CreateIntToPtr(total, b_.getPtrTy()), C64(1),
                       llvm::Align(8), llvm::AtomicOrdering::Monotonic);
    return;
  }
  llvm::Value* active = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_activemask, {}, {});
  llvm::Value* lane = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_laneid, {}, {});
  llvm::Value* first = b_.CreateBinaryIntrinsic(llvm::Intrinsic::cttz, active, b_.getTrue());
  llvm::BasicBlock* lead = llvm::BasicBlock::Create(ctx_, "map.error.lead", fn_);
  llvm::BasicBlock* after = llvm::BasicBlock::Create(ctx_, "map.error.done", fn_);
  b_.CreateCondBr(b_.CreateICmpEQ(lane, first), lead, after);
  b_.SetInsertPoint(lead);
  llvm::Value* aux = DescLoad(map, offsetof(cuprobe_map_desc, aux), I64());
  llvm::Value* sm = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_smid, {}, {});
  llvm::Value* shard = b_.CreateAdd(
      aux, b_.CreateMul(b_.CreateZExt(b_.CreateAnd(sm, b_.getInt32(CUPROBE_MAP_COUNTER_SHARDS - 1)),
                                      I64()),
                        C64(CUPROBE_MAP_COUNTER_SHARD_STRIDE)));
  llvm::Value* counter = b_.CreateSelect(b_.CreateICmpEQ(aux, C64(0)), total, shard);
  llvm::Value* lanes =
      b_.CreateZExt(b_.CreateUnaryIntrinsic(llvm::Intrinsic::ctpop, active), I64());
  AddNoReturn(counter, lanes);
  b_.CreateBr(after);
  b_.SetInsertPoint(after);
}

// bpf_ringbuf_reserve. On the GPU, when the call site fixes the ring: if its
// SM's producers were told that the ring is full (maps/map_algorithms.h,
// RingFullHinted), the lanes here are dropped and counted inline as the
// helper would count them (records: the lanes; bytes: the sum of their
// record sizes, which the verifier lets differ between paths), reading the
// descriptor from the module's constant copy. A block leader of a full ring
// then waits on one load at most, where the helper's path waits on the
// table, the descriptor and the hint one after another. Any other case
// (the hint unset or expired; a bad map or arguments; a record over 64 KiB)
// calls the helper, which decides as before. The hint is read through L1:
// a copy there may be stale (another SM shares the shard line when there
// are more than 128, and a shorter span can follow a longer one), so an SM
// may drop while its hint has in fact moved back: at most for the longest
// span (128 us), and every drop is counted either way.
llvm::Value* FunctionLowering::RingReserve(uint32_t pc) {
  if (target_ != LowerTarget::kNvptx || CallMap(pc) == nullptr) return RingReserveCall();
  RingSite r;
  r.ring = DescRef{nullptr, map_slot_[static_cast<size_t>(v_.insns[pc].call_map)]};
  if (!ConstDesc(r.ring)) return RingReserveCall();
  llvm::Value* ok = RingDescriptorOk(r);
  r.check = llvm::BasicBlock::Create(ctx_, "ring.hint", fn_);
  r.drop = llvm::BasicBlock::Create(ctx_, "ring.drop", fn_);
  r.lead = llvm::BasicBlock::Create(ctx_, "ring.drop.lead", fn_);
  r.call = llvm::BasicBlock::Create(ctx_, "ring.reserve", fn_);
  r.done = llvm::BasicBlock::Create(ctx_, "ring.done", fn_);
  b_.CreateCondBr(ok, r.check, r.call);
  // Each step fills its blocks and creates the ones it branches to first:
  // the blocks' order (LLVM's starting layout) is that of the steps.
  RingCheckHint(r);
  RingTryInline(r);
  RingLoadCursors(r);
  RingSpeculativeTail(r);
  RingCachedTail(r);
  RingGrab(r);
  RingGrant(r);
  RingFinishAt(r);
  RingDrop(r);
  return RingJoin(r);
}

llvm::Value* FunctionLowering::RingReserveCall() {
  return b_.CreateCall(Helper(CUPROBE_HELPER_SYMBOL_RINGBUF_RESERVE, 3), {Reg(1), Reg(2), Reg(3)});
}

// Whether the inline paths apply: a good RINGBUF descriptor (in the
// module's constant copy) whose ring is set up, no flags, and a record of
// at most 64 KiB.
llvm::Value* FunctionLowering::RingDescriptorOk(RingSite& r) {
  r.size = Reg(2);
  r.aux = DescLoad(r.ring, offsetof(cuprobe_map_desc, aux), I64());
  r.data = DescLoad(r.ring, offsetof(cuprobe_map_desc, ring_data), I64());
  r.ring_host = DescLoad(r.ring, offsetof(cuprobe_map_desc, ring_host), I64());
  llvm::Value* ok = DescHeadOk(r.ring, CUPROBE_MAP_RINGBUF);
  ok = b_.CreateAnd(ok, b_.CreateICmpNE(r.data, C64(0)));
  ok = b_.CreateAnd(ok, b_.CreateICmpNE(r.ring_host, C64(0)));
  ok = b_.CreateAnd(ok, b_.CreateICmpNE(r.aux, C64(0)));
  ok = b_.CreateAnd(ok, b_.CreateICmpEQ(Reg(3), C64(0)));
  // At most 64 KiB, so that 32 lanes' record sizes sum in 32 bits.
  return b_.CreateAnd(ok, b_.CreateICmpULE(r.size, C64(uint64_t{1} << 16)));
}

// ring.hint: this SM's full-ring hint; while it holds, the lanes drop.
void FunctionLowering::RingCheckHint(RingSite& r) {
  b_.SetInsertPoint(r.check);
  // %smid read here and only here (a side-effecting read LLVM does not merge
  // with the probe's own ctx->sm_id): a merged one would live across the
  // helper call and cost the kernel a register.
  llvm::Value* sm = b_.CreateCall(
      llvm::InlineAsm::get(llvm::FunctionType::get(I32(), false), "mov.u32 $0, %smid;", "=r",
                           /*hasSideEffects=*/true));
  r.shard = b_.CreateAdd(
      r.aux,
      b_.CreateMul(
          b_.CreateZExt(b_.CreateAnd(sm, b_.getInt32(CUPROBE_MAP_COUNTER_SHARDS - 1)), I64()),
          C64(CUPROBE_MAP_COUNTER_SHARD_STRIDE)));
  llvm::PointerType* global = llvm::PointerType::get(ctx_, 1);
  // A plain load (cached in L1): the hint is this SM's own line.
  llvm::Value* until = b_.CreateAlignedLoad(
      I64(),
      b_.CreateIntToPtr(b_.CreateAdd(r.shard, C64(CUPROBE_MAP_SHARD_RING_FULL_UNTIL)), global),
      llvm::Align(8));
  r.now = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_globaltimer, {}, {});
  // The record's bytes (header and padding included), for both paths below.
  r.record_bytes = b_.CreateAnd(b_.CreateAdd(r.size, C64(CUPROBE_RING_HEADER_SIZE + 7)),
                                C64(~uint64_t{7}));
  r.fast = llvm::BasicBlock::Create(ctx_, "ring.fast", fn_);
  if (RingDropDiag().starts_with("always")) {
    b_.CreateBr(r.drop);
  } else {
    b_.CreateCondBr(b_.CreateICmpULT(r.now, until), r.drop, r.fast);
  }
}

// ring.fast: a lone lane (a block leader) whose record fits by the cached
// tail, with no refresh of that tail due: the reservation inline (abi.h 9.),
// its cursors' address and the capacity from the constant copy. Anything
// else takes the helper.
void FunctionLowering::RingTryInline(RingSite& r) {
  b_.SetInsertPoint(r.fast);
  r.cursors = llvm::BasicBlock::Create(ctx_, "ring.cursors", fn_);
  r.grab = llvm::BasicBlock::Create(ctx_, "ring.grab", fn_);
  r.granted = llvm::BasicBlock::Create(ctx_, "ring.granted", fn_);
  r.finish = llvm::BasicBlock::Create(ctx_, "ring.finish", fn_);
  llvm::Value* alone = b_.CreateICmpEQ(
      b_.CreateUnaryIntrinsic(llvm::Intrinsic::ctpop,
                              b_.CreateIntrinsic(llvm::Intrinsic::nvvm_activemask, {}, {})),
      b_.getInt32(1));
  r.capacity =
      b_.CreateAdd(DescLoad(r.ring, offsetof(cuprobe_map_desc, slot_mask), I64()), C64(1));
  // At most 3/8 of the capacity (so that the room check below cannot wrap).
  llvm::Value* small = b_.CreateICmpULE(b_.CreateMul(r.record_bytes, C64(8)),
                                        b_.CreateMul(r.capacity, C64(3)));
  b_.CreateCondBr(InlineRingReservations() ? b_.CreateAnd(alone, small) : b_.getFalse(),
                  r.cursors, r.call);
}

// ring.cursors: the head's address, and which reservation the ring takes.
void FunctionLowering::RingLoadCursors(RingSite& r) {
  b_.SetInsertPoint(r.cursors);
  r.control = DescLoad(r.ring, offsetof(cuprobe_map_desc, control), I64());
  r.head_at = b_.CreateAdd(r.control, C64(offsetof(cuprobe_map_control, ring_head)));
  r.speculative = llvm::BasicBlock::Create(ctx_, "ring.speculative", fn_);
  r.checked = llvm::BasicBlock::Create(ctx_, "ring.checked", fn_);
  b_.CreateCondBr(
      b_.CreateICmpNE(b_.CreateAnd(DescLoad(r.ring, offsetof(cuprobe_map_desc, flags), I32()),
                                   b_.getInt32(CUPROBE_MAP_F_RING_SPECULATIVE)),
                      b_.getInt32(0)),
      r.speculative, r.checked);
}

// ring.speculative: a ring that reserves first (map_desc.h,
// CUPROBE_MAP_F_RING_SPECULATIVE): the consumer's tail (device memory, a
// line only the pump writes; a relaxed load, which the fetch-and-add need
// not wait for: the record's stores wait on the check of both) and the
// fetch-and-add, unless this SM found the ring full last time (its span is
// set: the helper checks the head first, RingReserveSpeculative). Its
// capacity is half its data area (slot_mask + 1).
void FunctionLowering::RingSpeculativeTail(RingSite& r) {
  b_.SetInsertPoint(r.speculative);
  llvm::PointerType* global = llvm::PointerType::get(ctx_, 1);
  r.half = b_.CreateLShr(r.capacity, C64(1));
  r.consumer_tail = b_.CreateCall(
      llvm::InlineAsm::get(llvm::FunctionType::get(I64(), {I64()}, false),
                           "ld.relaxed.gpu.global.b64 $0, [$1];", "=l,l,~{memory}",
                           /*hasSideEffects=*/true),
      {b_.CreateAdd(r.ring_host, C64(offsetof(cuprobe_ring_host, tail)))});
  llvm::Value* span = b_.CreateAlignedLoad(
      I64(),
      b_.CreateIntToPtr(b_.CreateAdd(r.shard, C64(CUPROBE_MAP_SHARD_RING_FULL_SPAN)), global),
      llvm::Align(8));
  b_.CreateCondBr(b_.CreateICmpEQ(span, C64(0)), r.grab, r.call);
}

// ring.checked (a ring that checks first): RingReserveFast's checks, the
// record fits with the slack to spare, and over half full only while
// another producer's refresh of the cached tail is recent (its window not
// over; loaded only then); otherwise the helper refreshes.
void FunctionLowering::RingCachedTail(RingSite& r) {
  b_.SetInsertPoint(r.checked);
  // The head and the cached tail are neighbours (control +16, +24): one
  // 16-byte load of the line that every reservation's atomic keeps busy.
  static_assert(offsetof(cuprobe_map_control, ring_tail_cache) ==
                offsetof(cuprobe_map_control, ring_head) + 8);
  llvm::Type* pair_type = llvm::StructType::get(ctx_, {I64(), I64()});
  llvm::Value* pair = b_.CreateCall(
      llvm::InlineAsm::get(llvm::FunctionType::get(pair_type, {I64()}, false),
                           "ld.relaxed.gpu.global.v2.b64 {$0, $1}, [$2];", "=l,=l,l,~{memory}",
                           /*hasSideEffects=*/true),
      {r.head_at});
  llvm::Value* head = b_.CreateExtractValue(pair, 0);
  r.tail = b_.CreateExtractValue(pair, 1);
  llvm::Value* used = b_.CreateSub(head, r.tail);
  llvm::Value* room = b_.CreateSub(r.capacity, b_.CreateLShr(r.capacity, C64(3)));
  llvm::Value* fits_room = b_.CreateICmpULE(used, b_.CreateSub(room, r.record_bytes));
  r.over_half = llvm::BasicBlock::Create(ctx_, "ring.over_half", fn_);
  r.window = llvm::BasicBlock::Create(ctx_, "ring.window", fn_);
  b_.CreateCondBr(fits_room, r.over_half, r.call);
  b_.SetInsertPoint(r.over_half);
  b_.CreateCondBr(b_.CreateICmpULE(used, b_.CreateLShr(r.capacity, C64(1))), r.grab, r.window);
  b_.SetInsertPoint(r.window);
  llvm::Value* refresh_until = b_.CreateCall(
      llvm::InlineAsm::get(llvm::FunctionType::get(I64(), {I64()}, false),
                           "ld.relaxed.gpu.global.b64 $0, [$1];", "=l,l,~{memory}",
                           /*hasSideEffects=*/true),
      {b_.CreateAdd(r.control, C64(offsetof(cuprobe_map_control, ring_refresh_ns)))});
  b_.CreateCondBr(b_.CreateICmpULT(r.now, refresh_until), r.grab, r.call);
}

// ring.grab: the fetch-and-add of the head, then whether the record fits
// (else the helper finishes what the grab started, ring.finish).
void FunctionLowering::RingGrab(RingSite& r) {
  b_.SetInsertPoint(r.grab);
  llvm::PointerType* global = llvm::PointerType::get(ctx_, 1);
  r.grab_tail = b_.CreatePHI(I64(), 3);
  r.grab_tail->addIncoming(r.tail, r.over_half);
  r.grab_tail->addIncoming(r.tail, r.window);
  r.grab_tail->addIncoming(r.consumer_tail, r.speculative);
  // Whether the SM's span may be set (it was not loaded): a speculative
  // grab came here only with the span at 0, and skips storing 0 again (a
  // store to the hint line for every record).
  llvm::PHINode* may_have_span = b_.CreatePHI(b_.getInt1Ty(), 3);
  may_have_span->addIncoming(b_.getTrue(), r.over_half);
  may_have_span->addIncoming(b_.getTrue(), r.window);
  may_have_span->addIncoming(b_.getFalse(), r.speculative);
  llvm::PHINode* limit = b_.CreatePHI(I64(), 3);  // the bytes the ring holds
  limit->addIncoming(r.capacity, r.over_half);
  limit->addIncoming(r.capacity, r.window);
  limit->addIncoming(r.half, r.speculative);
  r.position =
      b_.CreateAtomicRMW(llvm::AtomicRMWInst::Add, b_.CreateIntToPtr(r.head_at, global),
                         r.record_bytes, llvm::Align(8), llvm::AtomicOrdering::Monotonic);
  r.offset = b_.CreateAnd(r.position, b_.CreateSub(r.capacity, C64(1)));
  llvm::Value* fits = b_.CreateAnd(
      b_.CreateICmpULE(b_.CreateSub(b_.CreateAdd(r.position, r.record_bytes), r.grab_tail), limit),
      b_.CreateICmpULE(b_.CreateAdd(r.offset, r.record_bytes), r.capacity));
  llvm::BasicBlock* reset = llvm::BasicBlock::Create(ctx_, "ring.span_reset", fn_);
  llvm::BasicBlock* fitted = llvm::BasicBlock::Create(ctx_, "ring.fits", fn_);
  b_.CreateCondBr(fits, fitted, r.finish);
  b_.SetInsertPoint(fitted);
  b_.CreateCondBr(may_have_span, reset, r.granted);
  b_.SetInsertPoint(reset);
  b_.CreateCall(llvm::InlineAsm::get(llvm::FunctionType::get(b_.getVoidTy(), {I64()}, false),
                                     "st.relaxed.gpu.global.b64 [$0], 0;", "l,~{memory}",
                                     /*hasSideEffects=*/true),
                {b_.CreateAdd(r.shard, C64(CUPROBE_MAP_SHARD_RING_FULL_SPAN))});
  b_.CreateBr(r.granted);
}

// ring.granted: RingCountGroup and RingBeginRecord (maps/map_algorithms.h):
// the SM's full-ring span reset (in RingGrab, unless known to be 0), the
// record counted in the SM's shard, the length written into header word 0.
void FunctionLowering::RingGrant(RingSite& r) {
  b_.SetInsertPoint(r.granted);
  llvm::PointerType* global = llvm::PointerType::get(ctx_, 1);
  AddNoReturn(b_.CreateAdd(r.shard, C64(CUPROBE_MAP_SHARD_RING_RESERVED)), C64(1));
  llvm::Value* header = b_.CreateAdd(r.data, r.offset);
  b_.CreateAlignedStore(b_.CreateTrunc(r.size, I32()), b_.CreateIntToPtr(header, global),
                        llvm::Align(8));
  r.body = b_.CreateAdd(header, C64(CUPROBE_RING_HEADER_SIZE));
  b_.CreateBr(r.done);
}

// ring.finish: a grab whose record does not fit; the helper decides.
void FunctionLowering::RingFinishAt(RingSite& r) {
  b_.SetInsertPoint(r.finish);
  r.finished = b_.CreateCall(Helper(CUPROBE_HELPER_SYMBOL_RINGBUF_RESERVE_AT, 4),
                             {Reg(1), r.size, r.position, r.grab_tail});
  b_.CreateBr(r.done);
}

// ring.drop: the lanes dropped and counted in the SM's shard by the first
// of them (records: the lanes; bytes: the sum of their record sizes).
void FunctionLowering::RingDrop(RingSite& r) {
  b_.SetInsertPoint(r.drop);
  llvm::Value* active = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_activemask, {}, {});
  llvm::Value* lane = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_laneid, {}, {});
  llvm::Value* first = b_.CreateBinaryIntrinsic(llvm::Intrinsic::cttz, active, b_.getTrue());
  llvm::Value* lanes =
      b_.CreateZExt(b_.CreateUnaryIntrinsic(llvm::Intrinsic::ctpop, active), I64());
  // A record size the program fixes (the usual case: sizeof an event) is
  // the same in every lane: the bytes are lanes x size, and the redux.sync
  // that the dropping lanes would wait on folds away (llvm.is.constant is
  // decided after the optimizer has propagated the size).
  llvm::BasicBlock* uniform = llvm::BasicBlock::Create(ctx_, "ring.drop.uniform", fn_);
  llvm::BasicBlock* summed = llvm::BasicBlock::Create(ctx_, "ring.drop.redux", fn_);
  r.counted = llvm::BasicBlock::Create(ctx_, "ring.drop.bytes", fn_);
  b_.CreateCondBr(b_.CreateIntrinsic(llvm::Intrinsic::is_constant, {I64()}, {r.record_bytes}),
                  uniform, summed);
  b_.SetInsertPoint(uniform);
  llvm::Value* uniform_bytes = b_.CreateMul(lanes, r.record_bytes);
  b_.CreateBr(r.counted);
  b_.SetInsertPoint(summed);
  llvm::Value* summed_bytes =
      b_.CreateZExt(b_.CreateIntrinsic(llvm::Intrinsic::nvvm_redux_sync_add, {},
                                       {b_.CreateTrunc(r.record_bytes, I32()), active}),
                    I64());
  b_.CreateBr(r.counted);
  b_.SetInsertPoint(r.counted);
  llvm::PHINode* bytes = b_.CreatePHI(I64(), 2);
  bytes->addIncoming(uniform_bytes, uniform);
  bytes->addIncoming(summed_bytes, summed);
  b_.CreateCondBr(RingDropDiag().ends_with("nocount") ? b_.getFalse()
                                                       : b_.CreateICmpEQ(lane, first),
                  r.lead, r.done);

  b_.SetInsertPoint(r.lead);
  AddNoReturn(b_.CreateAdd(r.shard, C64(CUPROBE_MAP_SHARD_RING_DROPPED)), lanes);
  AddNoReturn(b_.CreateAdd(r.shard, C64(CUPROBE_MAP_SHARD_RING_DROPPED_BYTES)), bytes);
  b_.CreateBr(r.done);
}

// ring.reserve (the helper) and ring.done: R0 from every path.
llvm::Value* FunctionLowering::RingJoin(RingSite& r) {
  b_.SetInsertPoint(r.call);
  llvm::Value* reserved = RingReserveCall();
  llvm::BasicBlock* call_end = b_.GetInsertBlock();
  b_.CreateBr(r.done);

  b_.SetInsertPoint(r.done);
  llvm::PHINode* r0 = b_.CreatePHI(I64(), 5);
  r0->addIncoming(C64(0), r.counted);
  r0->addIncoming(C64(0), r.lead);
  r0->addIncoming(reserved, call_end);
  r0->addIncoming(r.body, r.granted);
  r0->addIncoming(r.finished, r.finish);
  // Record bodies are 8-byte aligned (map_desc.h): the mask tells LLVM so,
  // and it merges adjacent field stores into vector stores.
  return b_.CreateAnd(r0, C64(~uint64_t{7}));
}

// bpf_ringbuf_submit / discard on the GPU, inline: what the helper does
// (maps/map_algorithms.h, RingFinishRecord), without the call: header word 1
// of the record at R1 gets the commit (and discard) bit with a system-scope
// release store; a null record is -EINVAL (the verifier lets no such call
// through; the check keeps the helper's result).
llvm::Value* FunctionLowering::RingFinish(bool discard) {
  llvm::Value* body = Reg(1);
  llvm::BasicBlock* entry = b_.GetInsertBlock();
  llvm::BasicBlock* commit = llvm::BasicBlock::Create(ctx_, "ring.commit", fn_);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "ring.committed", fn_);
  b_.CreateCondBr(b_.CreateICmpNE(body, C64(0)), commit, done);
  b_.SetInsertPoint(commit);
  const uint32_t word = CUPROBE_RING_COMMIT | (discard ? CUPROBE_RING_DISCARD : 0u);
  b_.CreateCall(
      llvm::InlineAsm::get(llvm::FunctionType::get(b_.getVoidTy(), {I64(), I32()}, false),
                           RingCommitStore(), "l,r,~{memory}",
                           /*hasSideEffects=*/true),
      {b_.CreateSub(body, C64(CUPROBE_RING_HEADER_SIZE - 4)), b_.getInt32(word)});
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
  llvm::PHINode* r0 = b_.CreatePHI(I64(), 2);
  r0->addIncoming(C64(0), commit);
  r0->addIncoming(C64(static_cast<uint64_t>(int64_t{-22})), entry);  // -EINVAL
  return r0;
}

// The key of the map helper call at `pc` (R2 points to it) as an integer of
// `bytes` (1..8) bytes, zero-extended: read from the stack's alloca when the
// verifier saw it at one constant stack offset (so the stack is never
// addressed by a helper and stays in registers), else through R2.
llvm::Value* FunctionLowering::KeyValue(uint32_t pc, uint32_t bytes) {
  const InsnInfo& info = v_.insns[pc];
  llvm::Type* type = b_.getIntNTy(8 * bytes);
  llvm::Value* address;
  llvm::Align align(1);
  if (info.call_key_on_stack) {
    const int64_t at = stack_depth_ + info.call_key_stack_offset;
    address = b_.CreateConstGEP1_64(I8(), stack_, at);
    align = llvm::commonAlignment(llvm::Align(8), static_cast<uint64_t>(at));
  } else {
    address = b_.CreateIntToPtr(Reg(2), b_.getPtrTy());
  }
  return b_.CreateZExt(b_.CreateAlignedLoad(type, address, align), I64());
}

// The map of the helper call at `pc` when every path passes the same one and
// it has a table slot, else null (the generic helper serves the call).
const ObjectMap* FunctionLowering::CallMap(uint32_t pc) const {
  const int32_t map = v_.insns[pc].call_map;
  if (map < 0 || static_cast<size_t>(map) >= map_slot_.size() || map_slot_[map] < 0) {
    return nullptr;
  }
  return &obj_.maps[map];
}

// lookup / map_add / hist_add on a map whose type the call site fixes: inline
// for ARRAY / HIST_* / PER* lookups and PERTHREAD adds, else a call of the
// type's specialized entry point (abi.h 8.). False: the generic helper.
bool FunctionLowering::LowerMapCall(uint32_t pc, const Insn& insn, llvm::Value** r0) {
  const ObjectMap* map = CallMap(pc);
  if (map == nullptr) return false;
  const uint32_t type = map->spec.type;
  const uint32_t key_size = map->spec.key_size;
  const bool indexed = type == CUPROBE_MAP_ARRAY || type == CUPROBE_MAP_HIST_LOG2 ||
                       type == CUPROBE_MAP_HIST_LINEAR || type == CUPROBE_MAP_PERTHREAD ||
                       type == CUPROBE_MAP_PERWARP || type == CUPROBE_MAP_PERSM;
  auto call = [&](const char* name, std::vector<llvm::Value*> args) {
    return b_.CreateCall(Helper(name, static_cast<int>(args.size())), args);
  };
  auto index = [&] { return b_.CreateTrunc(KeyValue(pc, 4), I32()); };
  const DescRef ref{Reg(1), map_slot_[static_cast<size_t>(v_.insns[pc].call_map)]};
  switch (insn.imm) {
    case CUPROBE_HELPER_MAP_LOOKUP_ELEM:
      if (indexed) {
        *r0 = IndexedValue(ref, index(), type, /*for_add=*/false).address;
        return true;
      }
      if (type == CUPROBE_MAP_HASH) {
        *r0 = key_size <= 8
                  ? call(CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_HASH_WORD, {Reg(1), KeyValue(pc, key_size)})
                  : call(CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_HASH, {Reg(1), Reg(2)});
        return true;
      }
      return false;
    case CUPROBE_HELPER_MAP_ADD:
      switch (type) {
        case CUPROBE_MAP_PERTHREAD: {
          // Each thread owns its slot: a relaxed atomic add, no grouping
          // (the atomic only guards against a concurrent launch of another
          // kernel of the same map, whose threads share ids).
          IndexedRef value = IndexedValue(ref, index(), type, /*for_add=*/true);
          llvm::Value* delta = Reg(3);
          llvm::BasicBlock* add = llvm::BasicBlock::Create(ctx_, "map.add", fn_);
          llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "map.add.done", fn_);
          b_.CreateCondBr(b_.CreateICmpEQ(value.error, C64(0)), add, done);
          b_.SetInsertPoint(add);
          if (target_ == LowerTarget::kNvptx) {
            AddNoReturn(value.address, delta);
          } else {
            b_.CreateAtomicRMW(llvm::AtomicRMWInst::Add,
                               b_.CreateIntToPtr(value.address, b_.getPtrTy()), delta,
                               llvm::Align(8), llvm::AtomicOrdering::Monotonic);
          }
          b_.CreateBr(done);
          b_.SetInsertPoint(done);
          *r0 = value.error;
          return true;
        }
        case CUPROBE_MAP_ARRAY:
          *r0 = call(CUPROBE_HELPER_SYMBOL_MAP_ADD_ARRAY, {Reg(1), KeyValue(pc, 4), Reg(3)});
          return true;
        case CUPROBE_MAP_PERWARP:
          *r0 = call(CUPROBE_HELPER_SYMBOL_MAP_ADD_PERWARP, {Reg(1), KeyValue(pc, 4), Reg(3)});
          return true;
        case CUPROBE_MAP_PERSM:
          *r0 = call(CUPROBE_HELPER_SYMBOL_MAP_ADD_PERSM, {Reg(1), KeyValue(pc, 4), Reg(3)});
          return true;
        case CUPROBE_MAP_HASH:
          *r0 = key_size <= 8 ? call(CUPROBE_HELPER_SYMBOL_MAP_ADD_HASH_WORD,
                                     {Reg(1), KeyValue(pc, key_size), Reg(3)})
                              : call(CUPROBE_HELPER_SYMBOL_MAP_ADD_HASH, {Reg(1), Reg(2), Reg(3)});
          return true;
        default:
          return false;
      }
    case CUPROBE_HELPER_HIST_ADD:
      if (type == CUPROBE_MAP_HIST_LOG2) {
        *r0 = call(CUPROBE_HELPER_SYMBOL_HIST_ADD_LOG2, {Reg(1), Reg(2), Reg(3)});
        return true;
      }
      if (type == CUPROBE_MAP_HIST_LINEAR) {
        *r0 = call(CUPROBE_HELPER_SYMBOL_HIST_ADD_LINEAR, {Reg(1), Reg(2), Reg(3)});
        return true;
      }
      return false;
    default:
      return false;
  }
}

absl::Status FunctionLowering::LowerCall(uint32_t pc, const Insn& insn) {
  llvm::Value* r0 = nullptr;
  if (LowerMapCall(pc, insn, &r0)) {
    SetReg(0, r0);
    return absl::OkStatus();
  }
  switch (insn.imm) {
    case CUPROBE_HELPER_MAP_LOOKUP_ELEM:
      r0 = CallHelper(CUPROBE_HELPER_SYMBOL_MAP_LOOKUP, {1, 2});
      break;
    case CUPROBE_HELPER_MAP_UPDATE_ELEM:
      r0 = CallHelper(CUPROBE_HELPER_SYMBOL_MAP_UPDATE, {1, 2, 3, 4});
      break;
    case CUPROBE_HELPER_MAP_DELETE_ELEM:
      r0 = CallHelper(CUPROBE_HELPER_SYMBOL_MAP_DELETE, {1, 2});
      break;
    case CUPROBE_HELPER_MAP_ADD: r0 = CallHelper(CUPROBE_HELPER_SYMBOL_MAP_ADD, {1, 2, 3}); break;
    case CUPROBE_HELPER_HIST_ADD: r0 = CallHelper(CUPROBE_HELPER_SYMBOL_HIST_ADD, {1, 2, 3}); break;
    case CUPROBE_HELPER_RINGBUF_OUTPUT:
      r0 = CallHelper(CUPROBE_HELPER_SYMBOL_RINGBUF_OUTPUT, {1, 2, 3, 4});
      break;
    case CUPROBE_HELPER_PERF_EVENT_OUTPUT:
      r0 = b_.CreateCall(Helper(CUPROBE_HELPER_SYMBOL_RINGBUF_OUTPUT, 4),
                         {Reg(2), Reg(4), Reg(5), C64(0)});
      break;
    case CUPROBE_HELPER_RINGBUF_RESERVE:
      r0 = RingReserve(pc);
      break;
    case CUPROBE_HELPER_RINGBUF_SUBMIT:
      r0 = target_ == LowerTarget::kNvptx
               ? RingFinish(/*discard=*/false)
               : CallHelper(CUPROBE_HELPER_SYMBOL_RINGBUF_SUBMIT, {1, 2});
      break;
    case CUPROBE_HELPER_RINGBUF_DISCARD:
      r0 = target_ == LowerTarget::kNvptx
               ? RingFinish(/*discard=*/true)
               : CallHelper(CUPROBE_HELPER_SYMBOL_RINGBUF_DISCARD, {1, 2});
      break;
    case CUPROBE_HELPER_GET_CURRENT_PID_TGID:
      r0 = CallHelper(CUPROBE_HELPER_SYMBOL_PID_TGID, {});
      break;
    case CUPROBE_HELPER_KTIME_GET_NS:
    case CUPROBE_HELPER_BPFTIME_GLOBALTIMER:
      r0 = CtxField(72);
      break;
    case CUPROBE_HELPER_GET_SMP_PROCESSOR_ID: r0 = CtxField(56); break;
    case CUPROBE_HELPER_BPFTIME_BLOCK_IDX: r0 = StoreXyz(8); break;
    case CUPROBE_HELPER_BPFTIME_THREAD_IDX: r0 = StoreXyz(20); break;
    case CUPROBE_HELPER_BPFTIME_BLOCK_DIM: r0 = StoreXyz(32); break;
    case CUPROBE_HELPER_GRID_DIM: r0 = StoreXyz(44); break;
    case CUPROBE_HELPER_BPFTIME_MEMBAR: r0 = Membar(); break;
    case CUPROBE_HELPER_GET_ARG: r0 = ArgValue(Reg(2)); break;
    case CUPROBE_HELPER_GLOBAL_THREAD_ID: r0 = GlobalThreadId(); break;
    case CUPROBE_HELPER_GRID_ID: r0 = GridId(); break;
    case CUPROBE_HELPER_WARP_MATCH: r0 = WarpMatch(); break;
    case CUPROBE_HELPER_TRACE_PRINTK:
    case CUPROBE_HELPER_BPFTIME_PUTS: {
      CUPROBE_ASSIGN_OR_RETURN(r0, Printk(pc));
      break;
    }
    default:
      return absl::InternalError(absl::StrCat("helper ", insn.imm, " has no lowering"));
  }
  SetReg(0, r0);
  return absl::OkStatus();
}

// A call of helper library function `name` with registers `regs`.
llvm::Value* FunctionLowering::CallHelper(const char* name, std::initializer_list<int> regs) {
  std::vector<llvm::Value*> args;
  for (int r : regs) args.push_back(Reg(r));
  return b_.CreateCall(Helper(name, static_cast<int>(args.size())), args);
}

// get_block_idx and the like: the x, y, z context fields from `off_x` on,
// stored through the u64 pointers in R1-R3.
llvm::Value* FunctionLowering::StoreXyz(int32_t off_x) {
  for (int i = 0; i < 3; ++i) {
    llvm::Value* v = CtxField(off_x + 4 * i);
    b_.CreateAlignedStore(v, b_.CreateIntToPtr(Reg(1 + i), b_.getPtrTy()), llvm::Align(8));
  }
  return C64(0);
}

llvm::Value* FunctionLowering::Membar() {
  if (target_ == LowerTarget::kNvptx) {
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_membar_sys, {}, {});
  } else {
    b_.CreateFence(llvm::AtomicOrdering::SequentiallyConsistent);
  }
  return C64(0);
}

llvm::Value* FunctionLowering::GridId() {
  if (target_ != LowerTarget::kNvptx) return Sreg(llvm::Intrinsic::not_intrinsic, kHostGridIdSreg);
  // Not llvm.nvvm.read.ptx.sreg.gridid: LLVM 19's NVPTX backend reads
  // it with mov.u32, dropping the 64-bit register's high half
  // (Lowering.GridIdIsReadInlineAndKeysAMap checks the mov.u64).
  return b_.CreateCall(llvm::InlineAsm::get(llvm::FunctionType::get(I64(), false),
                                            "mov.u64 $0, %gridid;", "=l",
                                            /*hasSideEffects=*/false));
}

// The lanes of the warp here whose R1 equals this lane's.
llvm::Value* FunctionLowering::WarpMatch() {
  if (target_ != LowerTarget::kNvptx) return C64(1);  // the host runs one lane
  llvm::Value* active = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_activemask, {}, {});
  return b_.CreateZExt(
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_match_any_sync_i64, {}, {active, Reg(1)}), I64());
}

// trace_printk / puts: the record (format id, argument count, R3-R5) built
// in the function's printk_record and written to the printk RINGBUF.
absl::StatusOr<llvm::Value*> FunctionLowering::Printk(uint32_t pc) {
  const InsnInfo& info = v_.insns[pc];
  if (info.printk_format < 0 || input_.printk_slot < 0) {
    return absl::InternalError(absl::StrCat("printk at insn ", pc, " without a format"));
  }
  const uint32_t id = lp_.printk_ids[info.printk_format];
  // struct { u32 format_id; u32 nargs; u64 args[3]; } (abi.h)
  b_.CreateAlignedStore(b_.getInt32(id), record_, llvm::Align(8));
  b_.CreateAlignedStore(b_.getInt32(info.printk_nargs), b_.CreateConstGEP1_64(I8(), record_, 4),
                        llvm::Align(4));
  for (uint32_t a = 0; a < 3; ++a) {
    llvm::Value* v = a < info.printk_nargs ? Reg(3 + static_cast<int>(a)) : C64(0);
    b_.CreateAlignedStore(v, b_.CreateConstGEP1_64(I8(), record_, 8 + 8 * a), llvm::Align(8));
  }
  llvm::Value* map = TableEntry(input_.printk_slot);
  return b_.CreateCall(Helper(CUPROBE_HELPER_SYMBOL_RINGBUF_OUTPUT, 4),
                       {map, b_.CreatePtrToInt(record_, I64()), C64(kPrintkRecordSize), C64(0)});
}

llvm::Value* FunctionLowering::Condition(const Insn& insn) {
  llvm::Value* d = Reg(insn.dst);
  llvm::Value* s = Src(insn);
  if (insn.Class() == kClassJmp32) {
    d = b_.CreateTrunc(d, I32());
    s = b_.CreateTrunc(s, I32());
  }
  switch (insn.Op()) {
    case kJmpJeq: return b_.CreateICmpEQ(d, s);
    case kJmpJne: return b_.CreateICmpNE(d, s);
    case kJmpJgt: return b_.CreateICmpUGT(d, s);
    case kJmpJge: return b_.CreateICmpUGE(d, s);
    case kJmpJlt: return b_.CreateICmpULT(d, s);
    case kJmpJle: return b_.CreateICmpULE(d, s);
    case kJmpJsgt: return b_.CreateICmpSGT(d, s);
    case kJmpJsge: return b_.CreateICmpSGE(d, s);
    case kJmpJslt: return b_.CreateICmpSLT(d, s);
    case kJmpJsle: return b_.CreateICmpSLE(d, s);
    case kJmpJset:
      return b_.CreateICmpNE(b_.CreateAnd(d, s), llvm::ConstantInt::get(d->getType(), 0));
    default: return b_.getFalse();
  }
}

absl::Status FunctionLowering::Lower() {
  CreateFunction();
  llvm::BasicBlock* entry = llvm::BasicBlock::Create(ctx_, "entry", fn_);
  const std::vector<bool> leader = BlockLeaders();
  for (uint32_t pc = 0; pc < prog_.insns.size(); ++pc) {
    if (leader[pc]) blocks_[pc] = llvm::BasicBlock::Create(ctx_, absl::StrCat("insn", pc), fn_);
  }
  b_.SetInsertPoint(entry);
  AllocateFrame();
  LoadGlobalData();
  EnterProgram();
  CUPROBE_RETURN_IF_ERROR(LowerInsns(leader));
  if (b_.GetInsertBlock()->getTerminator() == nullptr) b_.CreateUnreachable();
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyFunction(*fn_, &os)) {
    return absl::InternalError(absl::StrCat("lowering of '", prog_.name,
                                            "' produced invalid IR: ", os.str()));
  }
  return absl::OkStatus();
}

// The probe function (the probe ABI, lower.h) and its named parameters.
void FunctionLowering::CreateFunction() {
  auto* type = llvm::FunctionType::get(I32(), {I64(), I32(), I32(), I32(), b_.getPtrTy()}, false);
  fn_ = llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage, lp_.function_name, m_);
  fn_->addFnAttr(llvm::Attribute::NoUnwind);
  fn_->addFnAttr(llvm::Attribute::NoRecurse);
  auto arg = fn_->arg_begin();
  mem_addr_ = &*arg++;
  mem_info_ = &*arg++;
  kernel_id_ = &*arg++;
  site_index_ = &*arg++;
  args_ = &*arg;
  mem_addr_->setName("mem_addr");
  mem_info_->setName("mem_info");
  kernel_id_->setName("kernel_id");
  site_index_->setName("site_index");
  args_->setName("args");
}

// The instructions that start a basic block: the entry, every jump target
// and every instruction after a jump.
std::vector<bool> FunctionLowering::BlockLeaders() const {
  const std::vector<Insn>& insns = prog_.insns;
  const uint32_t n = static_cast<uint32_t>(insns.size());
  std::vector<bool> leader(n + 1, false);
  leader[0] = true;
  for (uint32_t pc = 0; pc < n; ++pc) {
    const Insn& insn = insns[pc];
    if (insn.code == kLdImm64) {
      ++pc;
      continue;
    }
    const uint8_t cls = insn.Class();
    if ((cls == kClassJmp || cls == kClassJmp32) && insn.Op() != kJmpCall) {
      if (insn.Op() != kJmpExit) {
        const int64_t delta =
            (insn.Op() == kJmpJa && cls == kClassJmp32) ? insn.imm : insn.off;
        leader[pc + 1 + delta] = true;
      }
      leader[pc + 1] = true;
    }
  }
  return leader;
}

// The entry block's allocas: the registers, the part of the stack the
// program uses, the printk record; r1 and r10 set.
void FunctionLowering::AllocateFrame() {
  for (int r = 0; r < kNumRegs; ++r) {
    regs_[r] = b_.CreateAlloca(I64(), nullptr, absl::StrCat("r", r));
  }
  // Only the part of the 512-byte eBPF stack the verifier saw in use: on the
  // GPU the stack is local memory of every thread that runs the probe.
  stack_depth_ = std::max<int64_t>(8, (int64_t{-v_.min_stack_offset} + 7) / 8 * 8);
  auto* stack_type = llvm::ArrayType::get(I8(), static_cast<uint64_t>(stack_depth_));
  auto* stack = b_.CreateAlloca(stack_type, nullptr, "stack");
  stack->setAlignment(llvm::Align(8));
  stack_ = stack;
  auto* record = b_.CreateAlloca(llvm::ArrayType::get(I64(), kPrintkRecordSize / 8), nullptr,
                                 "printk_record");
  record->setAlignment(llvm::Align(8));
  record_ = record;
  SetReg(1, C64(kCtxStandIn));
  SetReg(10, b_.CreatePtrToInt(b_.CreateConstGEP1_64(I8(), stack_, stack_depth_), I64()));
}

// Global data (.data / .bss): the value address of each used map, once.
void FunctionLowering::LoadGlobalData() {
  for (uint32_t map : v_.maps_used) {
    const ObjectMap& om = obj_.maps[map];
    if (!om.global_data()) continue;
    if (om.read_only()) {
      data_base_[map] = RodataAddress(om);
      continue;
    }
    // The value of key 0 of a one-entry ARRAY (abi.h 5.), inline.
    data_base_[map] =
        IndexedValue(SlotRef(map_slot_[map]), b_.getInt32(0), CUPROBE_MAP_ARRAY,
                     /*for_add=*/false)
            .address;
    data_base_[map]->setName(absl::StrCat("data_", Sanitize(om.spec.name)));
  }
}

// .rodata is compiled in as a constant (in the constant bank on the GPU),
// one per object and map; its generic address as an i64.
llvm::Value* FunctionLowering::RodataAddress(const ObjectMap& om) {
  const std::string name = absl::StrCat(lp_.rodata_prefix, Sanitize(om.spec.name));
  llvm::GlobalVariable* g = m_.getNamedGlobal(name);
  if (g == nullptr) {
    llvm::Constant* init = llvm::ConstantDataArray::get(
        ctx_, llvm::ArrayRef<uint8_t>(om.spec.initial_value));
    g = new llvm::GlobalVariable(m_, init->getType(), true,
                                 llvm::GlobalValue::InternalLinkage, init, name, nullptr,
                                 llvm::GlobalValue::NotThreadLocal,
                                 target_ == LowerTarget::kNvptx ? 4 : 0);
    g->setAlignment(llvm::Align(8));
  }
  llvm::Value* generic = g->getType()->getPointerAddressSpace() == 0
                             ? static_cast<llvm::Value*>(g)
                             : b_.CreateAddrSpaceCast(g, b_.getPtrTy());
  return b_.CreatePtrToInt(generic, I64());
}

// From the entry block to the first instruction's. A global-data map that
// cannot be reached (its table entry or descriptor copy never filled: the
// hook said so once) makes the probe return at once rather than address
// its variables from 0.
void FunctionLowering::EnterProgram() {
  llvm::Value* unreachable_data = b_.getFalse();
  for (const auto& [map, base] : data_base_) {
    if (!obj_.maps[map].read_only()) {
      unreachable_data = b_.CreateOr(unreachable_data, b_.CreateICmpEQ(base, C64(0)));
    }
  }
  if (unreachable_data != b_.getFalse()) {
    llvm::BasicBlock* give_up = llvm::BasicBlock::Create(ctx_, "data.unreachable", fn_);
    b_.CreateCondBr(unreachable_data, give_up, blocks_.at(0));
    b_.SetInsertPoint(give_up);
    b_.CreateRet(b_.getInt32(0));
  } else {
    b_.CreateBr(blocks_.at(0));
  }
}

// Every instruction in order, each block ended by a branch to the next
// where the program falls through; instructions the verifier never reached
// are `unreachable`, and so is the rest of their block.
absl::Status FunctionLowering::LowerInsns(const std::vector<bool>& leader) {
  const std::vector<Insn>& insns = prog_.insns;
  const uint32_t n = static_cast<uint32_t>(insns.size());
  llvm::BasicBlock* current = nullptr;
  for (uint32_t pc = 0; pc < n; ++pc) {
    if (leader[pc]) {
      if (current != nullptr && b_.GetInsertBlock()->getTerminator() == nullptr) {
        b_.CreateBr(blocks_.at(pc));
      }
      current = blocks_.at(pc);
      b_.SetInsertPoint(current);
    } else if (b_.GetInsertBlock()->getTerminator() != nullptr) {
      if (insns[pc].code == kLdImm64) ++pc;
      continue;  // the rest of a block after unreachable
    }
    const Insn& insn = insns[pc];
    if (!v_.insns[pc].reached) {
      b_.CreateUnreachable();
      if (insn.code == kLdImm64) ++pc;
      continue;
    }
    CUPROBE_RETURN_IF_ERROR(LowerInsn(pc, insn));
    if (insn.Class() == kClassLd) ++pc;  // ld_imm64's second half
  }
  return absl::OkStatus();
}

absl::Status FunctionLowering::LowerInsn(uint32_t pc, const Insn& insn) {
  switch (insn.Class()) {
    case kClassAlu:
    case kClassAlu64:
      LowerAlu(insn);
      return absl::OkStatus();
    case kClassLdx:
      LowerLoad(pc, insn);
      return absl::OkStatus();
    case kClassSt:
      LowerStore(pc, insn);
      return absl::OkStatus();
    case kClassStx:
      if (insn.Mode() == kModeAtomic) {
        LowerAtomic(pc, insn);
      } else {
        LowerStore(pc, insn);
      }
      return absl::OkStatus();
    case kClassLd:
      LowerLdImm64(pc, insn);
      return absl::OkStatus();
    case kClassJmp:
    case kClassJmp32:
      return LowerJump(pc, insn);
    default:
      return absl::InternalError(absl::StrCat("insn ", pc, ": no lowering"));
  }
}

// ld_imm64: a constant, a map (its table entry) or a global variable's
// address (its map's value address plus the offset).
void FunctionLowering::LowerLdImm64(uint32_t pc, const Insn& insn) {
  const Insn& hi = prog_.insns[pc + 1];
  if (insn.src == 0) {
    SetReg(insn.dst, C64((static_cast<uint64_t>(static_cast<uint32_t>(hi.imm)) << 32) |
                         static_cast<uint32_t>(insn.imm)));
    return;
  }
  const MapRef& ref = prog_.map_refs.at(pc);
  if (ref.value) {
    SetReg(insn.dst, b_.CreateAdd(data_base_.at(ref.map), C64(ref.offset)));
  } else {
    SetReg(insn.dst, MapTableEntry(ref.map));
  }
}

// Calls, exits and jumps; a conditional jump falls through to the block of
// the next instruction.
absl::Status FunctionLowering::LowerJump(uint32_t pc, const Insn& insn) {
  const uint8_t op = insn.Op();
  if (op == kJmpCall) return LowerCall(pc, insn);
  if (op == kJmpExit) {
    b_.CreateRet(b_.CreateTrunc(Reg(0), I32()));
    return absl::OkStatus();
  }
  const int64_t delta = (op == kJmpJa && insn.Class() == kClassJmp32) ? insn.imm : insn.off;
  llvm::BasicBlock* target = blocks_.at(static_cast<uint32_t>(pc + 1 + delta));
  if (op == kJmpJa) {
    b_.CreateBr(target);
  } else {
    b_.CreateCondBr(Condition(insn), target, blocks_.at(pc + 1));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> HelperSymbolsUsed(const llvm::Module& module) {
  std::vector<std::string> out;
  for (const llvm::Function& f : module) {
    if (f.isDeclaration() && !f.isIntrinsic() && f.getName().starts_with("__cuprobe_") &&
        !f.use_empty() && f.getName() != "__cuprobe_host_sreg") {
      out.push_back(f.getName().str());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> CreateNvptxMachine() {
  InitNvptx();
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kNvptxTriple, error);
  if (target == nullptr) return absl::InternalError(absl::StrCat("NVPTX target: ", error));
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      kNvptxTriple, kSm, kPtxFeatures, options, std::nullopt, std::nullopt,
      llvm::CodeGenOptLevel::Default));
  if (machine == nullptr) return absl::InternalError("cannot create the NVPTX target machine");
  return machine;
}

absl::StatusOr<std::unique_ptr<llvm::Module>> LowerToLlvm(llvm::LLVMContext& context,
                                                          const LowerInput& input,
                                                          LowerTarget target) {
  auto module = std::make_unique<llvm::Module>("cuprobe_probes", context);
  if (target == LowerTarget::kNvptx) {
    CUPROBE_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> machine, CreateNvptxMachine());
    module->setTargetTriple(kNvptxTriple);
    module->setDataLayout(machine->createDataLayout());
  }
  for (const ProgramToLower& p : input.programs) {
    FunctionLowering f(*module, input, p, target);
    CUPROBE_RETURN_IF_ERROR(f.Lower());
  }
  return module;
}

absl::Status OptimizeModule(llvm::Module& module, llvm::TargetMachine* machine) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(machine);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
  mpm.run(module, mam);
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyModule(module, &os)) {
    return absl::InternalError(absl::StrCat("optimized IR is invalid: ", os.str()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> EmitPtx(llvm::Module& module) {
  CUPROBE_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> machine, CreateNvptxMachine());
  CUPROBE_RETURN_IF_ERROR(OptimizeModule(module, machine.get()));
  llvm::SmallString<16384> text;
  llvm::raw_svector_ostream os(text);
  llvm::legacy::PassManager pm;
  if (machine->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
    return absl::InternalError("the NVPTX target cannot emit PTX");
  }
  pm.run(module);
  return std::string(text.str());
}

std::string ModuleText(const llvm::Module& module) {
  std::string s;
  llvm::raw_string_ostream os(s);
  module.print(os, nullptr);
  return os.str();
}

std::string LlvmVersion() { return LLVM_VERSION_STRING; }

}  // namespace cuprobe
