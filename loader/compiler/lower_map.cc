// File: loader/compiler/lower_map.cc
//
// The lowering of maps: table entries and descriptor fields (from the
// module's constant copy where the call site fixes the map), the inline
// value lookup of indexed maps (ARRAY, HIST_*, PER*) exactly as the helper
// library computes it, error counting, and the map helpers' calls
// specialized by map type (abi.h 8.).
#include "loader/compiler/lower_internal.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "probe/map_desc.h"

namespace cuprobe::lower_internal {

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

// Counts one error of `map` (probe/map_desc.h): on the GPU, the first lane of
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

llvm::Value* FunctionLowering::Shfl64(llvm::Value* mask, llvm::Value* v, llvm::Value* lane) {
  auto shfl = [&](llvm::Value* word) {
    return b_.CreateZExt(b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_idx_i32, {},
                                            {mask, word, lane, b_.getInt32(31)}),
                         I64());
  };
  llvm::Value* lo = shfl(b_.CreateTrunc(v, I32()));
  llvm::Value* hi = shfl(b_.CreateTrunc(b_.CreateLShr(v, 32), I32()));
  return b_.CreateOr(lo, b_.CreateShl(hi, 32));
}

// HIST_LINEAR's min (s32, map_extra's low half) and step (u32, its high
// half), each loaded on its own: splitting one 64-bit load makes LLVM emit
// a scoped temporary register, which the inline pass does not rename.
// With the rest of HistBucketOf's arithmetic for `value` and the last
// bucket `last` (max_entries - 1): below min (or step 0), the offset from
// min, and where the last bucket starts.
FunctionLowering::LinearBucket FunctionLowering::LinearBucketOf(const DescRef& map,
                                                                llvm::Value* value,
                                                                llvm::Value* last) {
  LinearBucket l;
  llvm::Value* min =
      b_.CreateSExt(DescLoad(map, offsetof(cuprobe_map_desc, map_extra), I32()), I64());
  l.step = DescLoad(map, offsetof(cuprobe_map_desc, map_extra) + 4, I32());
  l.below = b_.CreateOr(b_.CreateICmpSLT(value, min), b_.CreateICmpEQ(l.step, b_.getInt32(0)));
  l.diff = b_.CreateSub(value, min);
  l.last_start = b_.CreateSelect(
      b_.CreateICmpEQ(last, b_.getInt32(0)), C64(0),
      b_.CreateMul(b_.CreateZExt(b_.CreateSub(last, b_.getInt32(1)), I64()),
                   b_.CreateZExt(l.step, I64())));
  return l;
}

// diff / step for a linear histogram's bucket. A step that
// is a power of two (pages, cache lines, 1) is a shift; any other a
// division (about 20 instructions), behind a branch on the step, which is
// the same in every lane.
llvm::Value* FunctionLowering::LinearQuotient(llvm::Value* diff, llvm::Value* step) {
  llvm::Value* pow2 =
      b_.CreateICmpEQ(b_.CreateAnd(step, b_.CreateSub(step, b_.getInt32(1))), b_.getInt32(0));
  llvm::BasicBlock* before = b_.GetInsertBlock();
  llvm::BasicBlock* divide = llvm::BasicBlock::Create(ctx_, "hist.divide", fn_);
  llvm::BasicBlock* joined = llvm::BasicBlock::Create(ctx_, "hist.quotient", fn_);
  // Step 0 passes the test; its cttz, 32, masked to 0 gives diff, which
  // the caller never uses (below min, the bucket is 0).
  llvm::Value* shift = b_.CreateBinaryIntrinsic(llvm::Intrinsic::cttz, step, b_.getFalse());
  llvm::Value* shifted = b_.CreateLShr(diff, b_.CreateAnd(shift, b_.getInt32(31)));
  b_.CreateCondBr(pow2, joined, divide);
  b_.SetInsertPoint(divide);
  llvm::Value* divided = b_.CreateUDiv(diff, step);
  b_.CreateBr(joined);
  b_.SetInsertPoint(joined);
  llvm::PHINode* quotient = b_.CreatePHI(I32(), 2);
  quotient->addIncoming(shifted, before);
  quotient->addIncoming(divided, divide);
  return quotient;
}

llvm::Value* FunctionLowering::UniformAddOk(const DescRef& map, uint32_t type, llvm::Value* key) {
  llvm::Value* max = DescLoad(map, offsetof(cuprobe_map_desc, max_entries), I32());
  llvm::Value* ok = DescHeadOk(map, type);
  if (type == CUPROBE_MAP_ARRAY) {
    llvm::Value* value_size = DescLoad(map, offsetof(cuprobe_map_desc, value_size), I32());
    ok = b_.CreateAnd(ok, b_.CreateICmpUGE(value_size, b_.getInt32(8)));
    return b_.CreateAnd(ok, b_.CreateICmpULT(b_.CreateTrunc(key, I32()), max));
  }
  ok = b_.CreateAnd(ok, b_.CreateICmpNE(max, b_.getInt32(0)));
  if (type == CUPROBE_MAP_HIST_LOG2) return ok;
  // A bucket between min and the last one whose offset passes 32 bits
  // needs a 64-bit division: the helper's.
  const LinearBucket l = LinearBucketOf(map, key, b_.CreateSub(max, b_.getInt32(1)));
  llvm::Value* wide = b_.CreateAnd(b_.CreateICmpULT(l.diff, l.last_start),
                                   b_.CreateICmpUGT(l.diff, C64(0xffffffffull)));
  return b_.CreateAnd(ok, b_.CreateNot(b_.CreateAnd(b_.CreateNot(l.below), wide)));
}

llvm::Value* FunctionLowering::UniformAddTarget(const DescRef& map, uint32_t type,
                                                llvm::Value* key) {
  llvm::Value* values = DescLoad(map, offsetof(cuprobe_map_desc, values), I64());
  if (type == CUPROBE_MAP_ARRAY) {
    llvm::Value* stride = DescLoad(map, offsetof(cuprobe_map_desc, value_stride), I32());
    return b_.CreateAdd(values, b_.CreateMul(b_.CreateAnd(key, C64(0xffffffffull)),
                                             b_.CreateZExt(stride, I64())));
  }
  llvm::Value* max = DescLoad(map, offsetof(cuprobe_map_desc, max_entries), I32());
  llvm::Value* last = b_.CreateSub(max, b_.getInt32(1));
  llvm::Value* bucket;
  if (type == CUPROBE_MAP_HIST_LOG2) {
    // 64 - clz(value): 0 for 0, floor(log2(value)) + 1 otherwise.
    llvm::Value* clz = b_.CreateBinaryIntrinsic(llvm::Intrinsic::ctlz, key, b_.getFalse());
    bucket = b_.CreateTrunc(b_.CreateSub(C64(64), clz), I32());
  } else {
    const LinearBucket l = LinearBucketOf(map, key, last);
    // (UniformAddOk sent offsets past 32 bits below the last bucket to the
    // helper; the divisor is never 0 where the quotient is used.)
    llvm::Value* quotient = LinearQuotient(b_.CreateTrunc(l.diff, I32()), l.step);
    bucket = b_.CreateSelect(
        l.below, b_.getInt32(0),
        b_.CreateSelect(b_.CreateICmpUGE(l.diff, l.last_start), last,
                        b_.CreateAdd(quotient, b_.getInt32(1))));
  }
  bucket = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, bucket, last);
  return b_.CreateAdd(values, b_.CreateShl(b_.CreateZExt(bucket, I64()), 3));
}

FunctionLowering::WarpUniform FunctionLowering::UniformLanes(
    const std::vector<llvm::Value*>& values) {
  WarpUniform w;
  w.active = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_activemask, {}, {});
  w.lane = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_laneid, {}, {});
  w.leader = b_.CreateBinaryIntrinsic(llvm::Intrinsic::cttz, w.active, b_.getTrue());
  llvm::Value* same = b_.getTrue();
  for (llvm::Value* v : values) {
    w.same.push_back(b_.CreateICmpEQ(v, Shfl64(w.active, v, w.leader)));
    same = b_.CreateAnd(same, w.same.back());
  }
  w.uniform = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_vote_all_sync, {}, {w.active, same});
  return w;
}

llvm::Value* FunctionLowering::UniformAdd(const DescRef& map, uint32_t type, llvm::Value* key,
                                          llvm::Value* delta,
                                          const std::function<llvm::Value*()>& slow) {
  if (target_ != LowerTarget::kNvptx || !ConstDesc(map) || !input_.maps.uniform_adds) {
    return slow();
  }
  // A log2 histogram's lanes agree on the bucket (two instructions), which
  // values that differ share: a warp's addresses, say.
  llvm::Value* same_as = key;
  if (type == CUPROBE_MAP_HIST_LOG2) {
    same_as = b_.CreateSub(C64(64), b_.CreateBinaryIntrinsic(llvm::Intrinsic::ctlz, key,
                                                             b_.getFalse()));
  }
  const WarpUniform w = UniformLanes({same_as, delta});
  llvm::BasicBlock* fast_block = llvm::BasicBlock::Create(ctx_, "map.uniform", fn_);
  llvm::BasicBlock* lead = llvm::BasicBlock::Create(ctx_, "map.uniform.lead", fn_);
  llvm::BasicBlock* grouped = llvm::BasicBlock::Create(ctx_, "map.grouped", fn_);
  llvm::BasicBlock* slow_block = llvm::BasicBlock::Create(ctx_, "map.helper", fn_);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "map.add.done", fn_);
  llvm::Value* ok = UniformAddOk(map, type, key);  // this lane's inline checks
  b_.CreateCondBr(b_.CreateAnd(w.uniform, ok), fast_block, grouped);

  b_.SetInsertPoint(fast_block);
  b_.CreateCondBr(b_.CreateICmpEQ(w.lane, w.leader), lead, done);

  // The first lane adds for all.
  b_.SetInsertPoint(lead);
  llvm::Value* lanes =
      b_.CreateZExt(b_.CreateUnaryIntrinsic(llvm::Intrinsic::ctpop, w.active), I64());
  AddToShard(map, UniformAddTarget(map, type, key), b_.CreateMul(delta, lanes));
  llvm::BasicBlock* lead_end = b_.GetInsertBlock();
  b_.CreateBr(done);

  llvm::BasicBlock* grouped_end =
      GroupedAdd(map, type, key, delta, ok, w, grouped, slow_block, done);

  b_.SetInsertPoint(slow_block);
  llvm::Value* r = slow();
  llvm::BasicBlock* slow_end = b_.GetInsertBlock();
  b_.CreateBr(done);

  b_.SetInsertPoint(done);
  llvm::PHINode* r0 = b_.CreatePHI(I64(), 4);
  r0->addIncoming(C64(0), fast_block);
  r0->addIncoming(C64(0), lead_end);
  r0->addIncoming(C64(0), grouped_end);
  r0->addIncoming(r, slow_end);
  return r0;
}

// map.grouped: the lanes differ, yet every one passes the inline checks and
// the same delta (one more vote): they are grouped by
// the counter each adds to (one match.any), and each group's first lane
// adds delta x its lanes. A warp whose lanes fall on a few buckets (a tiled
// kernel's rows, each on its own page) thus makes a few atomics and no
// call. Otherwise every lane calls the helper (`slow`). Returns the block
// that branches to `done` after the adds (R0 is 0 there).
llvm::BasicBlock* FunctionLowering::GroupedAdd(const DescRef& map, uint32_t type, llvm::Value* key,
                                              llvm::Value* delta, llvm::Value* ok,
                                              const WarpUniform& w,
                                              llvm::BasicBlock* grouped, llvm::BasicBlock* slow,
                                              llvm::BasicBlock* done) {
  b_.SetInsertPoint(grouped);
  llvm::BasicBlock* match = llvm::BasicBlock::Create(ctx_, "map.grouped.match", fn_);
  llvm::BasicBlock* lead = llvm::BasicBlock::Create(ctx_, "map.grouped.lead", fn_);
  llvm::BasicBlock* added = llvm::BasicBlock::Create(ctx_, "map.grouped.done", fn_);
  // Whether this lane's delta is the first lane's: UniformLanes' compare
  // (a constant delta folds it to true).
  llvm::Value* same_delta = w.same.at(1);
  llvm::Value* all = b_.CreateIntrinsic(
      llvm::Intrinsic::nvvm_vote_all_sync, {},
      {w.active, b_.CreateAnd(same_delta, ok)});
  b_.CreateCondBr(all, match, slow);

  b_.SetInsertPoint(match);
  llvm::Value* target = UniformAddTarget(map, type, key);
  llvm::Value* group =
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_match_any_sync_i64, {}, {w.active, target});
  llvm::Value* first = b_.CreateBinaryIntrinsic(llvm::Intrinsic::cttz, group, b_.getTrue());
  b_.CreateCondBr(b_.CreateICmpEQ(w.lane, first), lead, added);

  b_.SetInsertPoint(lead);
  llvm::Value* lanes = b_.CreateZExt(b_.CreateUnaryIntrinsic(llvm::Intrinsic::ctpop, group), I64());
  AddToShard(map, target, b_.CreateMul(delta, lanes));
  b_.CreateBr(added);

  b_.SetInsertPoint(added);
  b_.CreateBr(done);
  return added;
}

// A red.add of `delta` to the counter at `target` in this SM's copy of the
// value (maps/map_algo_desc.h ValueShard; one copy unless the map is add-only).
void FunctionLowering::AddToShard(const DescRef& map, llvm::Value* target, llvm::Value* delta) {
  llvm::Value* sm = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_smid, {}, {});
  llvm::Value* shard_mask = DescLoad(map, offsetof(cuprobe_map_desc, shard_mask), I32());
  llvm::Value* shard_bytes = DescLoad(map, offsetof(cuprobe_map_desc, shard_bytes), I64());
  llvm::Value* shard = b_.CreateMul(b_.CreateZExt(b_.CreateAnd(sm, shard_mask), I64()), shard_bytes);
  AddNoReturn(b_.CreateAdd(target, shard), delta);
}

// The helper of HASH keys by address searches (and inserts) per lane, so a
// warp-uniform add is one call by the first lane with delta x lanes, whose
// result the other lanes take. Where that call fails (a full map, a bad
// descriptor), every other lane calls with its own delta, so that each
// lane's result and the map's error count are what per-lane calls give (a
// failed add adds nothing).
llvm::Value* FunctionLowering::UniformHashAdd(const std::vector<llvm::Value*>& key,
                                              llvm::Value* delta,
                                              const std::function<llvm::Value*(llvm::Value*)>& add) {
  if (target_ != LowerTarget::kNvptx || !input_.maps.uniform_adds) return add(delta);
  std::vector<llvm::Value*> values = key;
  values.push_back(delta);
  const WarpUniform w = UniformLanes(values);
  llvm::BasicBlock* uniform = llvm::BasicBlock::Create(ctx_, "map.hash.uniform", fn_);
  llvm::BasicBlock* lead = llvm::BasicBlock::Create(ctx_, "map.hash.lead", fn_);
  llvm::BasicBlock* joined = llvm::BasicBlock::Create(ctx_, "map.hash.joined", fn_);
  llvm::BasicBlock* others = llvm::BasicBlock::Create(ctx_, "map.hash.others", fn_);
  llvm::BasicBlock* grouped = llvm::BasicBlock::Create(ctx_, "map.grouped", fn_);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "map.add.done", fn_);
  b_.CreateCondBr(w.uniform, uniform, grouped);

  b_.SetInsertPoint(uniform);
  llvm::Value* is_leader = b_.CreateICmpEQ(w.lane, w.leader);
  b_.CreateCondBr(is_leader, lead, joined);

  b_.SetInsertPoint(lead);
  llvm::Value* lanes =
      b_.CreateZExt(b_.CreateUnaryIntrinsic(llvm::Intrinsic::ctpop, w.active), I64());
  llvm::Value* led = add(b_.CreateMul(delta, lanes));
  llvm::BasicBlock* lead_end = b_.GetInsertBlock();
  b_.CreateBr(joined);

  b_.SetInsertPoint(joined);
  llvm::PHINode* own = b_.CreatePHI(I64(), 2);
  own->addIncoming(C64(0), uniform);
  own->addIncoming(led, lead_end);
  llvm::Value* result = Shfl64(w.active, own, w.leader);
  b_.CreateCondBr(b_.CreateAnd(b_.CreateICmpNE(result, C64(0)), b_.CreateNot(is_leader)), others,
                  done);

  b_.SetInsertPoint(others);
  llvm::Value* retried = add(delta);
  llvm::BasicBlock* others_end = b_.GetInsertBlock();
  b_.CreateBr(done);

  b_.SetInsertPoint(grouped);
  llvm::Value* called = add(delta);
  llvm::BasicBlock* grouped_end = b_.GetInsertBlock();
  b_.CreateBr(done);

  b_.SetInsertPoint(done);
  llvm::PHINode* r0 = b_.CreatePHI(I64(), 3);
  r0->addIncoming(result, joined);
  r0->addIncoming(retried, others_end);
  r0->addIncoming(called, grouped_end);
  return r0;
}

// The key of the map helper call at `pc` (R2 points to it) as an integer of
// `bytes` (1..8) bytes from `offset` on, zero-extended: read from the stack's alloca when the
// verifier saw it at one constant stack offset (so the stack is never
// addressed by a helper and stays in registers), else through R2.
llvm::Value* FunctionLowering::KeyValue(uint32_t pc, uint32_t bytes, uint32_t offset) {
  const InsnInfo& info = v_.insns[pc];
  llvm::Type* type = b_.getIntNTy(8 * bytes);
  llvm::Value* address;
  llvm::Align align(1);
  if (info.call_key_on_stack) {
    const int64_t at = stack_depth_ + info.call_key_stack_offset + offset;
    address = b_.CreateConstGEP1_64(I8(), stack_, at);
    align = llvm::commonAlignment(llvm::Align(8), static_cast<uint64_t>(at));
  } else {
    address = b_.CreateConstGEP1_64(I8(), b_.CreateIntToPtr(Reg(2), b_.getPtrTy()), offset);
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

// map_add on a HASH map the call site fixes, by the size of its keys: one
// word or two by value (the key's stack slot then stays in registers; those
// helpers group a warp's lanes by key themselves, which measured cheaper
// than a call by the first lane alone), wider keys by address, where
// warp-uniform keys of up to four words add once per warp (UniformHashAdd)
// and wider ones, rare, call per lane.
llvm::Value* FunctionLowering::HashAdd(uint32_t pc, uint32_t key_size) {
  auto call = [&](const char* name, std::vector<llvm::Value*> args) {
    return b_.CreateCall(Helper(name, static_cast<int>(args.size())), args);
  };
  if (key_size <= 8) {
    return call(CUPROBE_HELPER_SYMBOL_MAP_ADD_HASH_WORD, {Reg(1), KeyValue(pc, key_size), Reg(3)});
  }
  if (key_size <= 16) {
    return call(CUPROBE_HELPER_SYMBOL_MAP_ADD_HASH_2WORD,
                {Reg(1), KeyValue(pc, 8), KeyValue(pc, key_size - 8, 8), Reg(3)});
  }
  auto add = [&](llvm::Value* delta) {
    return call(CUPROBE_HELPER_SYMBOL_MAP_ADD_HASH, {Reg(1), Reg(2), delta});
  };
  if (key_size > 32) return add(Reg(3));
  std::vector<llvm::Value*> words;
  for (uint32_t at = 0; at < key_size; at += 8) {
    words.push_back(KeyValue(pc, std::min<uint32_t>(8, key_size - at), at));
  }
  return UniformHashAdd(words, Reg(3), add);
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
        case CUPROBE_MAP_ARRAY: {
          llvm::Value* key = KeyValue(pc, 4);
          llvm::Value* delta = Reg(3);
          *r0 = UniformAdd(ref, type, key, delta, [&] {
            return call(CUPROBE_HELPER_SYMBOL_MAP_ADD_ARRAY, {Reg(1), key, delta});
          });
          return true;
        }
        case CUPROBE_MAP_PERWARP:
          *r0 = call(CUPROBE_HELPER_SYMBOL_MAP_ADD_PERWARP, {Reg(1), KeyValue(pc, 4), Reg(3)});
          return true;
        case CUPROBE_MAP_PERSM:
          *r0 = call(CUPROBE_HELPER_SYMBOL_MAP_ADD_PERSM, {Reg(1), KeyValue(pc, 4), Reg(3)});
          return true;
        case CUPROBE_MAP_HASH:
          *r0 = HashAdd(pc, key_size);
          return true;
        default:
          return false;
      }
    case CUPROBE_HELPER_HIST_ADD: {
      if (type != CUPROBE_MAP_HIST_LOG2 && type != CUPROBE_MAP_HIST_LINEAR) return false;
      const char* helper = type == CUPROBE_MAP_HIST_LOG2 ? CUPROBE_HELPER_SYMBOL_HIST_ADD_LOG2
                                                         : CUPROBE_HELPER_SYMBOL_HIST_ADD_LINEAR;
      llvm::Value* value = Reg(2);
      llvm::Value* count = Reg(3);
      *r0 = UniformAdd(ref, type, value, count,
                       [&] { return call(helper, {Reg(1), value, count}); });
      return true;
    }
    default:
      return false;
  }
}

}  // namespace cuprobe::lower_internal
