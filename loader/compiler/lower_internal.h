// File: loader/compiler/lower_internal.h
//
// The lowering's internals, shared by its source files; not a public header
// (users include lower.h). FunctionLowering builds the LLVM function of one
// verified program; its members are defined by responsibility:
//   lower.cc       the function, its blocks and frame, the loop over the
//                  instructions; and the entry points of lower.h (module,
//                  O2, PTX);
//   lower_insn.cc  ALU, load, store, atomic and jump instructions, and the
//                  virtual context (special registers, parameters, ids);
//   lower_call.cc  helper calls by helper id, and the helpers that are a
//                  few instructions (printk, membar, grid id, warp match);
//   lower_map.cc   map descriptors and table entries, the inline map
//                  operations (ARRAY / HIST / PER* values, error counting),
//                  and map helpers' calls specialized by map type;
//   lower_ring.cc  ring-buffer reservations (inline on the GPU when the
//                  call site fixes the ring) and submit / discard.
#ifndef CUPROBE_LOADER_COMPILER_LOWER_INTERNAL_H_
#define CUPROBE_LOADER_COMPILER_LOWER_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/Module.h"
#include "loader/compiler/lower.h"

namespace cuprobe::lower_internal {

// struct { u32 format_id; u32 nargs; u64 args[3]; } (abi.h)
inline constexpr uint32_t kPrintkRecordSize = 32;

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

  // lower.cc: Lower's steps, the function, its blocks and frame, then the
  // program.
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

  // lower_insn.cc: instructions and the virtual context.
  void LowerAlu(const Insn& insn);
  llvm::Value* Alu(const Insn& insn, llvm::Value* dst, llvm::Value* src, unsigned bits);
  void LowerLoad(uint32_t pc, const Insn& insn);
  void LowerStore(uint32_t pc, const Insn& insn);
  void LowerAtomic(uint32_t pc, const Insn& insn);
  llvm::Value* Address(const Insn& insn, int base_reg, int16_t off);
  llvm::Value* Condition(const Insn& insn);
  llvm::Value* Sreg(llvm::Intrinsic::ID id, int32_t ctx_offset);
  llvm::Value* CtxField(int32_t offset);
  llvm::Value* ArgValue(llvm::Value* index);
  llvm::Value* NumArgs();
  llvm::Value* GlobalThreadId();
  llvm::Value* Linear(int32_t x, int32_t y, int32_t z, int32_t nx, int32_t ny);
  llvm::Value* BlockLinear();
  llvm::Value* ThreadsPerBlock();
  llvm::Value* ThreadLinear();
  llvm::Value* PerId(uint32_t type);

  // lower_call.cc: helper calls.
  absl::Status LowerCall(uint32_t pc, const Insn& insn);
  llvm::Function* Helper(const char* name, int nargs);
  llvm::Value* CallHelper(const char* name, std::initializer_list<int> regs);
  llvm::Value* StoreXyz(int32_t off_x);
  llvm::Value* Membar();
  llvm::Value* ExitThread();
  llvm::Value* FormatChoice(const std::vector<int32_t>& formats, size_t from,
                            const std::function<uint64_t(int32_t)>& constant);
  llvm::Value* GridId();
  llvm::Value* WarpMatch();
  absl::StatusOr<llvm::Value*> Printk(uint32_t pc);

  // lower_map.cc: maps.
  llvm::Value* MapTableEntry(uint32_t map);
  llvm::Value* TableEntry(int32_t slot);
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
  llvm::Value* DescPointer(llvm::Value* map, uint32_t offset);
  llvm::Value* DescLoad(const DescRef& map, uint32_t offset, llvm::Type* type);
  llvm::Value* DescHeadOk(const DescRef& map, uint32_t type);
  // Inline map operations (abi.h 8.): see IndexedValue.
  struct IndexedRef {
    llvm::Value* address;  // i64: the value's address, 0 on failure
    llvm::Value* error;    // i64: 0, -EINVAL or -E2BIG
  };
  IndexedRef IndexedValue(const DescRef& map, llvm::Value* index, uint32_t type, bool for_add);
  void CountError(const DescRef& map);
  // A relaxed add whose old value nobody reads, as `red` (GPU, global
  // memory at `address`, an i64): the warp does not wait for it.
  void AddNoReturn(llvm::Value* address, llvm::Value* delta);
  llvm::Value* KeyValue(uint32_t pc, uint32_t bytes, uint32_t offset = 0);
  // map_add on an ARRAY and hist_add on a HIST_* map on the GPU: when every
  // active lane passes the same key (or value; for HIST_LOG2, a value of
  // the same bucket) and delta, the first lane adds delta x lanes inline,
  // to its SM's copy of the value; when the keys differ, GroupedAdd; when
  // the deltas differ, or whenever the inline checks refuse (a bad map, an
  // index out of range, a bucket that needs a 64-bit division), every lane
  // calls `slow` (the type's helper, which groups, counts errors and
  // answers exactly).
  llvm::Value* UniformAdd(const DescRef& map, uint32_t type, llvm::Value* key, llvm::Value* delta,
                          const std::function<llvm::Value*()>& slow);
  // map_add on a HASH map of keys by address on the GPU: when every active
  // lane passes the same key (its words) and delta, the first lane alone
  // calls `add` with delta x lanes, the others calling with their own where
  // it fails; otherwise every lane calls `add` with its own delta.
  llvm::Value* UniformHashAdd(const std::vector<llvm::Value*>& key, llvm::Value* delta,
                              const std::function<llvm::Value*(llvm::Value*)>& add);
  // The warp's active lanes, this lane, the first active lane, and whether
  // every active lane holds the first one's `values` (i1; one shuffle per
  // 32 bits and a vote), and whether this lane holds each of them (i1s).
  struct WarpUniform {
    llvm::Value* active;
    llvm::Value* lane;
    llvm::Value* leader;
    llvm::Value* uniform;
    std::vector<llvm::Value*> same;
  };
  WarpUniform UniformLanes(const std::vector<llvm::Value*>& values);
  // UniformAdd's adds when the lanes differ (`ok`: this lane's
  // UniformAddOk), and its add to an SM's copy.
  llvm::BasicBlock* GroupedAdd(const DescRef& map, uint32_t type, llvm::Value* key,
                               llvm::Value* delta, llvm::Value* ok, const WarpUniform& w,
                               llvm::BasicBlock* grouped, llvm::BasicBlock* slow,
                               llvm::BasicBlock* done);
  void AddToShard(const DescRef& map, llvm::Value* target, llvm::Value* delta);
  llvm::Value* LinearQuotient(llvm::Value* diff, llvm::Value* step);
  // The inline target check of UniformAdd (i1) and, where it holds, the
  // u64 the add goes to before sharding.
  llvm::Value* UniformAddOk(const DescRef& map, uint32_t type, llvm::Value* key);
  llvm::Value* UniformAddTarget(const DescRef& map, uint32_t type, llvm::Value* key);
  llvm::Value* Shfl64(llvm::Value* mask, llvm::Value* v, llvm::Value* lane);
  struct LinearBucket {
    llvm::Value* step;        // i32
    llvm::Value* below;       // i1: bucket 0 (value < min, or step 0)
    llvm::Value* diff;        // i64: value - min
    llvm::Value* last_start;  // i64: the last bucket's offset from min
  };
  LinearBucket LinearBucketOf(const DescRef& map, llvm::Value* value, llvm::Value* last);
  llvm::Value* HashAdd(uint32_t pc, uint32_t key_size);
  const ObjectMap* CallMap(uint32_t pc) const;
  bool LowerMapCall(uint32_t pc, const Insn& insn, llvm::Value** r0);

  // lower_ring.cc: ring buffers.
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

}  // namespace cuprobe::lower_internal

#endif  // CUPROBE_LOADER_COMPILER_LOWER_INTERNAL_H_
