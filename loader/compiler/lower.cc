// File: loader/compiler/lower.cc
//
// The lowering's driver: a function per verified program, its blocks and
// frame, and the loop over its instructions (lower_internal.h says which
// file lowers what); then the entry points of lower.h, the module, LLVM's
// O2 pipeline and NVPTX code generation.
#include "loader/compiler/lower.h"

#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "llvm/Analysis/CGSCCPassManager.h"
#include "llvm/Analysis/LoopAnalysisManager.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/PassManager.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "loader/compiler/lower_internal.h"
#include "support/status_macros.h"

extern "C" void LLVMInitializeNVPTXTargetInfo();
extern "C" void LLVMInitializeNVPTXTarget();
extern "C" void LLVMInitializeNVPTXTargetMC();
extern "C" void LLVMInitializeNVPTXAsmPrinter();

namespace cuprobe {
namespace lower_internal {
namespace {

// The context pointer never becomes an address (the context is virtual); r1
// holds this non-NULL stand-in so that comparisons the verifier decided
// ("ctx != NULL") also hold at run time.
constexpr uint64_t kCtxStandIn = 0xc7c70000;

std::string Sanitize(std::string_view s) {
  std::string out;
  for (char c : s) {
    out += ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) ? c : '_';
  }
  return out;
}

}  // namespace

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

}  // namespace lower_internal

namespace {

constexpr char kNvptxTriple[] = "nvptx64-nvidia-cuda";
constexpr char kSm[] = "sm_90";
constexpr char kPtxFeatures[] = "+ptx80";

void InitNvptx() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
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
    lower_internal::FunctionLowering f(*module, input, p, target);
    CUPROBE_RETURN_IF_ERROR(f.Lower());
  }
  return module;
}

namespace {

// A shuffle of a constant returns that constant, whichever lane it reads:
// LLVM does not know this of the NVVM intrinsic, so a warp-uniform check
// of a constant (UniformAdd's delta, mostly 1) would keep two shuffles and
// a compare at every site. Run at the pipeline's peephole points, after
// constants have propagated into the shuffles.
struct FoldShufflesOfConstants : llvm::PassInfoMixin<FoldShufflesOfConstants> {
  llvm::PreservedAnalyses run(llvm::Function& f, llvm::FunctionAnalysisManager&) {
    bool changed = false;
    for (llvm::BasicBlock& block : f) {
      for (llvm::Instruction& insn : llvm::make_early_inc_range(block)) {
        auto* call = llvm::dyn_cast<llvm::IntrinsicInst>(&insn);
        if (call == nullptr || call->getIntrinsicID() != llvm::Intrinsic::nvvm_shfl_sync_idx_i32 ||
            !llvm::isa<llvm::Constant>(call->getArgOperand(1))) {
          continue;
        }
        call->replaceAllUsesWith(call->getArgOperand(1));
        call->eraseFromParent();
        changed = true;
      }
    }
    return changed ? llvm::PreservedAnalyses::none() : llvm::PreservedAnalyses::all();
  }
};

}  // namespace

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
  pb.registerPeepholeEPCallback([](llvm::FunctionPassManager& fpm, llvm::OptimizationLevel) {
    fpm.addPass(FoldShufflesOfConstants());
  });
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
