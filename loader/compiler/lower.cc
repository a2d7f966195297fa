#include "loader/compiler/lower.h"

#include <map>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "llvm/Analysis/CGSCCPassManager.h"
#include "llvm/Analysis/LoopAnalysisManager.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/IR/IRBuilder.h"
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
        obj_(*input.object),
        prog_(*prog.program),
        v_(*prog.verified),
        lp_(prog),
        target_(target) {}

  absl::Status Lower();

 private:
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
  void LowerAlu(const Insn& insn);
  llvm::Value* Alu(const Insn& insn, llvm::Value* dst, llvm::Value* src, unsigned bits);
  void LowerLoad(uint32_t pc, const Insn& insn);
  void LowerStore(uint32_t pc, const Insn& insn);
  void LowerAtomic(uint32_t pc, const Insn& insn);
  absl::Status LowerCall(uint32_t pc, const Insn& insn);
  llvm::Value* Condition(const Insn& insn);

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  const LowerInput& input_;
  const BpfObject& obj_;
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
  llvm::Value* zero_key_ = nullptr;
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
  return TableEntry(input_.map_slot[map]);
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

llvm::Value* FunctionLowering::Address(const Insn& insn, int base_reg, int16_t off) {
  return b_.CreateIntToPtr(b_.CreateAdd(Reg(base_reg), C64(static_cast<uint64_t>(int64_t{off}))),
                           b_.getPtrTy());
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

llvm::Value* FunctionLowering::GlobalThreadId() {
  using namespace llvm::Intrinsic;
  llvm::Value* bx = CtxField(8);
  llvm::Value* by = CtxField(12);
  llvm::Value* bz = CtxField(16);
  llvm::Value* tx = CtxField(20);
  llvm::Value* ty = CtxField(24);
  llvm::Value* tz = CtxField(28);
  llvm::Value* nx = CtxField(32);
  llvm::Value* ny = CtxField(36);
  llvm::Value* nz = CtxField(40);
  llvm::Value* gx = CtxField(44);
  llvm::Value* gy = CtxField(48);
  llvm::Value* block = b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(bz, gy), by), gx), bx);
  llvm::Value* threads = b_.CreateMul(b_.CreateMul(nx, ny), nz);
  llvm::Value* thread = b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(tz, ny), ty), nx), tx);
  return b_.CreateAdd(b_.CreateMul(block, threads), thread);
}

absl::Status FunctionLowering::LowerCall(uint32_t pc, const Insn& insn) {
  auto call = [&](const char* name, std::initializer_list<int> regs) {
    std::vector<llvm::Value*> args;
    for (int r : regs) args.push_back(Reg(r));
    return b_.CreateCall(Helper(name, static_cast<int>(args.size())), args);
  };
  auto store_xyz = [&](int32_t off_x) {
    for (int i = 0; i < 3; ++i) {
      llvm::Value* v = CtxField(off_x + 4 * i);
      b_.CreateAlignedStore(v, b_.CreateIntToPtr(Reg(1 + i), b_.getPtrTy()), llvm::Align(8));
    }
    return C64(0);
  };
  llvm::Value* r0 = nullptr;
  switch (insn.imm) {
    case CUPROBE_HELPER_MAP_LOOKUP_ELEM: r0 = call(CUPROBE_HELPER_SYMBOL_MAP_LOOKUP, {1, 2}); break;
    case CUPROBE_HELPER_MAP_UPDATE_ELEM:
      r0 = call(CUPROBE_HELPER_SYMBOL_MAP_UPDATE, {1, 2, 3, 4});
      break;
    case CUPROBE_HELPER_MAP_DELETE_ELEM: r0 = call(CUPROBE_HELPER_SYMBOL_MAP_DELETE, {1, 2}); break;
    case CUPROBE_HELPER_MAP_ADD: r0 = call(CUPROBE_HELPER_SYMBOL_MAP_ADD, {1, 2, 3}); break;
    case CUPROBE_HELPER_HIST_ADD: r0 = call(CUPROBE_HELPER_SYMBOL_HIST_ADD, {1, 2, 3}); break;
    case CUPROBE_HELPER_RINGBUF_OUTPUT:
      r0 = call(CUPROBE_HELPER_SYMBOL_RINGBUF_OUTPUT, {1, 2, 3, 4});
      break;
    case CUPROBE_HELPER_PERF_EVENT_OUTPUT:
      r0 = b_.CreateCall(Helper(CUPROBE_HELPER_SYMBOL_RINGBUF_OUTPUT, 4),
                         {Reg(2), Reg(4), Reg(5), C64(0)});
      break;
    case CUPROBE_HELPER_RINGBUF_RESERVE:
      r0 = call(CUPROBE_HELPER_SYMBOL_RINGBUF_RESERVE, {1, 2, 3});
      break;
    case CUPROBE_HELPER_RINGBUF_SUBMIT: r0 = call(CUPROBE_HELPER_SYMBOL_RINGBUF_SUBMIT, {1, 2}); break;
    case CUPROBE_HELPER_RINGBUF_DISCARD:
      r0 = call(CUPROBE_HELPER_SYMBOL_RINGBUF_DISCARD, {1, 2});
      break;
    case CUPROBE_HELPER_GET_CURRENT_PID_TGID: r0 = call(CUPROBE_HELPER_SYMBOL_PID_TGID, {}); break;
    case CUPROBE_HELPER_KTIME_GET_NS:
    case CUPROBE_HELPER_BPFTIME_GLOBALTIMER:
      r0 = CtxField(72);
      break;
    case CUPROBE_HELPER_GET_SMP_PROCESSOR_ID: r0 = CtxField(56); break;
    case CUPROBE_HELPER_BPFTIME_BLOCK_IDX: r0 = store_xyz(8); break;
    case CUPROBE_HELPER_BPFTIME_THREAD_IDX: r0 = store_xyz(20); break;
    case CUPROBE_HELPER_BPFTIME_BLOCK_DIM: r0 = store_xyz(32); break;
    case CUPROBE_HELPER_GRID_DIM: r0 = store_xyz(44); break;
    case CUPROBE_HELPER_BPFTIME_MEMBAR:
      if (target_ == LowerTarget::kNvptx) {
        b_.CreateIntrinsic(llvm::Intrinsic::nvvm_membar_sys, {}, {});
      } else {
        b_.CreateFence(llvm::AtomicOrdering::SequentiallyConsistent);
      }
      r0 = C64(0);
      break;
    case CUPROBE_HELPER_GET_ARG: r0 = ArgValue(Reg(2)); break;
    case CUPROBE_HELPER_GLOBAL_THREAD_ID: r0 = GlobalThreadId(); break;
    case CUPROBE_HELPER_TRACE_PRINTK:
    case CUPROBE_HELPER_BPFTIME_PUTS: {
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
      r0 = b_.CreateCall(Helper(CUPROBE_HELPER_SYMBOL_RINGBUF_OUTPUT, 4),
                         {map, b_.CreatePtrToInt(record_, I64()), C64(kPrintkRecordSize), C64(0)});
      break;
    }
    default:
      return absl::InternalError(absl::StrCat("helper ", insn.imm, " has no lowering"));
  }
  SetReg(0, r0);
  return absl::OkStatus();
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
  const std::vector<Insn>& insns = prog_.insns;
  const uint32_t n = static_cast<uint32_t>(insns.size());
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

  // Blocks: the entry, every jump target and every instruction after a jump.
  llvm::BasicBlock* entry = llvm::BasicBlock::Create(ctx_, "entry", fn_);
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
  for (uint32_t pc = 0; pc < n; ++pc) {
    if (leader[pc]) blocks_[pc] = llvm::BasicBlock::Create(ctx_, absl::StrCat("insn", pc), fn_);
  }

  b_.SetInsertPoint(entry);
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
  // Global data (.data / .bss): the value address of each used map, once.
  for (uint32_t map : v_.maps_used) {
    const ObjectMap& om = obj_.maps[map];
    if (!om.global_data()) continue;
    if (om.read_only()) {
      // .rodata is compiled in as a constant.
      const std::string name = absl::StrCat("__cuprobe_ro_", Sanitize(om.spec.name));
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
      data_base_[map] = b_.CreatePtrToInt(generic, I64());
      continue;
    }
    if (zero_key_ == nullptr) {
      zero_key_ = b_.CreateAlloca(I32(), nullptr, "zero_key");
      b_.CreateStore(b_.getInt32(0), zero_key_);
    }
    data_base_[map] = b_.CreateCall(Helper(CUPROBE_HELPER_SYMBOL_MAP_LOOKUP, 2),
                                    {MapTableEntry(map), b_.CreatePtrToInt(zero_key_, I64())},
                                    absl::StrCat("data_", Sanitize(om.spec.name)));
  }
  b_.CreateBr(blocks_.at(0));

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
    switch (insn.Class()) {
      case kClassAlu:
      case kClassAlu64:
        LowerAlu(insn);
        break;
      case kClassLdx:
        LowerLoad(pc, insn);
        break;
      case kClassSt:
        LowerStore(pc, insn);
        break;
      case kClassStx:
        if (insn.Mode() == kModeAtomic) {
          LowerAtomic(pc, insn);
        } else {
          LowerStore(pc, insn);
        }
        break;
      case kClassLd: {
        const Insn& hi = insns[pc + 1];
        if (insn.src == 0) {
          SetReg(insn.dst, C64((static_cast<uint64_t>(static_cast<uint32_t>(hi.imm)) << 32) |
                               static_cast<uint32_t>(insn.imm)));
        } else {
          const MapRef& ref = prog_.map_refs.at(pc);
          if (ref.value) {
            SetReg(insn.dst, b_.CreateAdd(data_base_.at(ref.map), C64(ref.offset)));
          } else {
            SetReg(insn.dst, MapTableEntry(ref.map));
          }
        }
        ++pc;
        break;
      }
      case kClassJmp:
      case kClassJmp32: {
        const uint8_t op = insn.Op();
        if (op == kJmpCall) {
          CUPROBE_RETURN_IF_ERROR(LowerCall(pc, insn));
          break;
        }
        if (op == kJmpExit) {
          b_.CreateRet(b_.CreateTrunc(Reg(0), I32()));
          break;
        }
        const int64_t delta =
            (op == kJmpJa && insn.Class() == kClassJmp32) ? insn.imm : insn.off;
        llvm::BasicBlock* target = blocks_.at(static_cast<uint32_t>(pc + 1 + delta));
        if (op == kJmpJa) {
          b_.CreateBr(target);
        } else {
          b_.CreateCondBr(Condition(insn), target, blocks_.at(pc + 1));
        }
        break;
      }
      default:
        return absl::InternalError(absl::StrCat("insn ", pc, ": no lowering"));
    }
  }
  if (b_.GetInsertBlock()->getTerminator() == nullptr) b_.CreateUnreachable();
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyFunction(*fn_, &os)) {
    return absl::InternalError(absl::StrCat("lowering of '", prog_.name,
                                            "' produced invalid IR: ", os.str()));
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
