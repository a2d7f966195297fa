// File: loader/compiler/lower_ring.cc
//
// The lowering of ring-buffer reservations and of submit / discard. On the
// GPU, when the call site fixes the ring, both are inline code of the
// helper library's algorithms (maps/map_algorithms.h): a lone lane reserves
// with one fetch-and-add, lanes of a full ring are dropped and counted
// without a call, and a record is committed with one release store.
#include "loader/compiler/lower_internal.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "probe/map_desc.h"

namespace cuprobe::lower_internal {
namespace {

// The record's commit: a system-scope release, unless a measuring switch
// asks for a cheaper store (RingLowering::commit).
const char* RingCommitStore(std::string_view commit) {
  if (commit == "relaxed") return "st.relaxed.sys.b32 [$0], $1;";
  if (commit == "gpu") return "st.release.gpu.b32 [$0], $1;";
  return "st.release.sys.b32 [$0], $1;";
}

}  // namespace

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
  if (input_.ring.drop.starts_with("always")) {
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
  b_.CreateCondBr(input_.ring.inline_reservations ? b_.CreateAnd(alone, small) : b_.getFalse(),
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
  b_.CreateCondBr(input_.ring.drop.ends_with("nocount") ? b_.getFalse()
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
                           RingCommitStore(input_.ring.commit), "l,r,~{memory}",
                           /*hasSideEffects=*/true),
      {b_.CreateSub(body, C64(CUPROBE_RING_HEADER_SIZE - 4)), b_.getInt32(word)});
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
  llvm::PHINode* r0 = b_.CreatePHI(I64(), 2);
  r0->addIncoming(C64(0), commit);
  r0->addIncoming(C64(static_cast<uint64_t>(int64_t{-22})), entry);  // -EINVAL
  return r0;
}

}  // namespace cuprobe::lower_internal
