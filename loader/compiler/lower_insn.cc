// File: loader/compiler/lower_insn.cc
//
// The lowering of eBPF instructions (ALU, loads, stores, atomics, jump
// conditions) and of the virtual context: a context field is a special
// register, a parameter of the probe ABI or a constant the attach point
// fixes, never memory (lower.h).
#include "loader/compiler/lower_internal.h"

#include <cstdint>

#include "llvm/IR/IntrinsicsNVPTX.h"

namespace cuprobe::lower_internal {

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

// ---- The virtual context ------------------------------------------------------

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

// The ids of probe/map_desc.h (the numbering of CUPROBE_HELPER_GLOBAL_THREAD_ID
// and of the helper library's PER* maps), in 64 bits.
// (z * ny + y) * nx + x for the context fields at these offsets.
// The fields are read in this order (the IR's order stays fixed).
llvm::Value* FunctionLowering::Linear(int32_t x, int32_t y, int32_t z, int32_t nx, int32_t ny) {
  llvm::Value* vx = CtxField(x);
  llvm::Value* vy = CtxField(y);
  llvm::Value* vz = CtxField(z);
  llvm::Value* vnx = CtxField(nx);
  llvm::Value* vny = CtxField(ny);
  return b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(vz, vny), vy), vnx), vx);
}

// blockIdx (8, 12, 16) in gridDim (44, 48).
llvm::Value* FunctionLowering::BlockLinear() { return Linear(8, 12, 16, 44, 48); }

llvm::Value* FunctionLowering::ThreadsPerBlock() {
  return b_.CreateMul(b_.CreateMul(CtxField(32), CtxField(36)), CtxField(40));
}

// threadIdx (20, 24, 28) in blockDim (32, 36).
llvm::Value* FunctionLowering::ThreadLinear() { return Linear(20, 24, 28, 32, 36); }

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

}  // namespace cuprobe::lower_internal
