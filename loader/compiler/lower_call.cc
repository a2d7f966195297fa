// File: loader/compiler/lower_call.cc
//
// The lowering of helper calls: map helpers specialized by the map's type
// (lower_map.cc) and ring-buffer ones (lower_ring.cc) where the call site
// allows, the generic helper library entry point otherwise, and inline code
// for the helpers that are a few instructions (time, ids, membar, printk's
// record).
#include "loader/compiler/lower_internal.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "support/status_macros.h"

namespace cuprobe::lower_internal {

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
    case CUPROBE_HELPER_GET_SMP_PROCESSOR_ID:
    case CUPROBE_HELPER_BPFTIME_SM_ID:
      r0 = CtxField(56);
      break;
    case CUPROBE_HELPER_BPFTIME_WARP_ID: r0 = CtxField(60); break;
    case CUPROBE_HELPER_BPFTIME_LANE_ID: r0 = CtxField(64); break;
    case CUPROBE_HELPER_BPFTIME_BLOCK_IDX: r0 = StoreXyz(8); break;
    case CUPROBE_HELPER_BPFTIME_THREAD_IDX: r0 = StoreXyz(20); break;
    case CUPROBE_HELPER_BPFTIME_BLOCK_DIM: r0 = StoreXyz(32); break;
    case CUPROBE_HELPER_GRID_DIM:
    case CUPROBE_HELPER_BPFTIME_GRID_DIM:
      r0 = StoreXyz(44);
      break;
    case CUPROBE_HELPER_BPFTIME_MEMBAR: r0 = Membar(); break;
    case CUPROBE_HELPER_BPFTIME_EXIT: r0 = ExitThread(); break;
    case CUPROBE_HELPER_GET_ARG: r0 = ArgValue(Reg(2)); break;
    case CUPROBE_HELPER_GLOBAL_THREAD_ID: r0 = GlobalThreadId(); break;
    case CUPROBE_HELPER_GRID_ID: r0 = GridId(); break;
    case CUPROBE_HELPER_WARP_MATCH: r0 = WarpMatch(); break;
    case CUPROBE_HELPER_CLZ:  // clz.b64 on the GPU; 64 for 0 on both targets
      r0 = b_.CreateBinaryIntrinsic(llvm::Intrinsic::ctlz, Reg(1), b_.getFalse());
      break;
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

llvm::Function* FunctionLowering::Helper(const char* name, int nargs) {
  std::vector<llvm::Type*> params(nargs, I64());
  auto* type = llvm::FunctionType::get(I64(), params, false);
  llvm::FunctionCallee callee = m_.getOrInsertFunction(name, type);
  return llvm::cast<llvm::Function>(callee.getCallee());
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

// bpftime's cuda_exit: the thread ends here (PTX exit is legal in a .func),
// so the rest of its kernel, and its exit probes, do not run. The code after
// the call stays, as the eBPF program has it: LLVM does not know that the
// asm does not return. The host lowering (tests) has no thread to end.
llvm::Value* FunctionLowering::ExitThread() {
  if (target_ == LowerTarget::kNvptx) {
    b_.CreateCall(llvm::InlineAsm::get(llvm::FunctionType::get(b_.getVoidTy(), false), "exit;",
                                       "", /*hasSideEffects=*/true));
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
  llvm::Value* id = b_.getInt32(lp_.printk_ids[info.printk_format]);
  llvm::Value* nargs = b_.getInt32(info.printk_nargs);
  uint32_t max_nargs = info.printk_nargs;
  if (!info.printk_choices.empty()) {
    auto nargs_of = [&](int32_t k) {
      return static_cast<uint64_t>(CountPrintkConversions(v_.printk_formats[k]));
    };
    for (int32_t k : info.printk_choices) {
      max_nargs = std::max(max_nargs, static_cast<uint32_t>(nargs_of(k)));
    }
    id = b_.CreateTrunc(
        FormatChoice(info.printk_choices, 0, [&](int32_t k) { return lp_.printk_ids[k]; }), I32());
    nargs = b_.CreateTrunc(FormatChoice(info.printk_choices, 0, nargs_of), I32());
  }
  // struct { u32 format_id; u32 nargs; u64 args[3]; } (abi.h)
  b_.CreateAlignedStore(id, record_, llvm::Align(8));
  b_.CreateAlignedStore(nargs, b_.CreateConstGEP1_64(I8(), record_, 4), llvm::Align(4));
  for (uint32_t a = 0; a < 3; ++a) {
    llvm::Value* v = a < max_nargs ? Reg(3 + static_cast<int>(a)) : C64(0);
    b_.CreateAlignedStore(v, b_.CreateConstGEP1_64(I8(), record_, 8 + 8 * a), llvm::Align(8));
  }
  llvm::Value* map = TableEntry(input_.printk_slot);
  return b_.CreateCall(Helper(CUPROBE_HELPER_SYMBOL_RINGBUF_OUTPUT, 4),
                       {map, b_.CreatePtrToInt(record_, I64()), C64(kPrintkRecordSize), C64(0)});
}

// Which of `formats` (VerifiedProgram::printk_formats indices; distinct
// strings) the string at R1 is, as constant(format): a decision on the
// string's bytes. `from` is the first byte where they may differ: at the
// first byte where they do, each group of formats with the same byte there
// is told apart by its own bytes after it. Every byte read lies within each
// candidate string (with its NUL): two strings that agree up to one's NUL
// are equal, so the first difference comes no later. Bytes read for a group
// the string is not in may be anything, and only select() what they give.
llvm::Value* FunctionLowering::FormatChoice(const std::vector<int32_t>& formats, size_t from,
                                            const std::function<uint64_t(int32_t)>& constant) {
  auto byte_at = [&](int32_t k, size_t i) -> uint8_t {
    const std::string& f = v_.printk_formats[k];
    return i < f.size() ? static_cast<uint8_t>(f[i]) : 0;
  };
  if (formats.size() == 1) return C64(constant(formats[0]));
  size_t at = from;
  while (std::all_of(formats.begin(), formats.end(),
                     [&](int32_t k) { return byte_at(k, at) == byte_at(formats[0], at); })) {
    ++at;
  }
  std::map<uint8_t, std::vector<int32_t>> groups;
  for (int32_t k : formats) groups[byte_at(k, at)].push_back(k);
  llvm::Value* address = b_.CreateAdd(Reg(1), C64(at));
  llvm::Value* byte = b_.CreateLoad(I8(), b_.CreateIntToPtr(address, b_.getPtrTy()));
  llvm::Value* result = nullptr;
  for (auto it = groups.rbegin(); it != groups.rend(); ++it) {
    llvm::Value* value = FormatChoice(it->second, at + 1, constant);
    result = result == nullptr
                 ? value
                 : b_.CreateSelect(b_.CreateICmpEQ(byte, b_.getInt8(it->first)), value, result);
  }
  return result;
}

}  // namespace cuprobe::lower_internal
