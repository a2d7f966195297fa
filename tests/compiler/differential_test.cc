// Differential test of the lowering: randomized eBPF programs (every ALU,
// JMP, JMP32, LDX, ST, STX and atomic opcode, and cuprobe_clz) are verified, lowered to LLVM
// IR for the host (LowerTarget::kHost), optimized with O2, JIT-compiled with
// LLVM ORC and run on random inputs; the reference interpreter runs the same
// programs. The return values and every byte of memory the programs wrote
// (a global-data map value that also receives all registers and stack slots
// at the end) must be identical.
//
// And the map operations the lowering inlines (ARRAY / HIST / PER* lookups,
// PERTHREAD map_add, global data; abi.h 8.): a C probe JIT-compiled the same
// way runs against real map images (tests/maps/map_test_util.h) and must
// leave them exactly as the helper library's algorithms
// (maps/map_algorithms.h) do, for ids and indices in and out of range and
// for descriptors of the wrong type.
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "gtest/gtest.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ThreadSafeModule.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/TargetSelect.h"
#include "probe/interpreter.h"
#include "loader/compiler/lower.h"
#include "loader/compiler/verifier.h"
#include "maps/map_algorithms.h"
#include "probe/map_desc.h"
#include "tests/compiler/test_util.h"
#include "tests/maps/map_test_util.h"

namespace cuprobe {
namespace {

using namespace cuprobe::testing;  // NOLINT

constexpr uint32_t kValueSize = 256;
constexpr int kPrograms = 250;
constexpr int kInputsPerProgram = 4;

// The memory both executions write: the global-data map's value. The
// lowering reads its address inline from the map's descriptor (a one-entry
// ARRAY, abi.h 5.), so map 0 of the table is a real descriptor.
alignas(8) uint8_t g_value[kValueSize];
cuprobe_map_desc g_desc;
uint64_t g_map_table[4] = {0, 0x2000, 0x3000, 0x4000};

void MakeDataDescriptor() {
  g_desc = cuprobe_map_desc{};
  g_desc.magic = CUPROBE_MAP_DESC_MAGIC;
  g_desc.version = CUPROBE_MAP_DESC_VERSION;
  g_desc.size = CUPROBE_MAP_DESC_SIZE;
  g_desc.type = CUPROBE_MAP_ARRAY;
  g_desc.key_size = 4;
  g_desc.value_size = kValueSize;
  g_desc.max_entries = 1;
  g_desc.value_stride = kValueSize;
  g_desc.values = reinterpret_cast<uint64_t>(g_value);
  g_map_table[0] = reinterpret_cast<uint64_t>(&g_desc);
}

// Special registers of the host build: ctx offsets -> values. Empty: the
// random programs' stand-in values.
std::map<int32_t, uint64_t>* g_sregs = new std::map<int32_t, uint64_t>();

extern "C" uint64_t TestHostSreg(int32_t offset) {
  auto it = g_sregs->find(offset);
  return it != g_sregs->end() ? it->second : 0x5000 + static_cast<uint64_t>(offset);
}

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  std::vector<Insn> Program(std::set<uint8_t>* opcodes) {
    std::vector<Insn> p;
    // r0, r2..r8 and r1 from the kernel arguments; r9 = the map value.
    for (int r : {0, 2, 3, 4, 5, 6, 7, 8}) p.push_back(Ldx(kSizeDw, r, 1, 120 + 8 * r));
    p.push_back(Ldx(kSizeDw, 1, 1, 128));
    Insn ld{kLdImm64, 9, kPseudoMapValue, 0, 0};
    p.push_back(ld);
    p.push_back(Insn{0, 0, 0, 0, 0});
    for (int s = 1; s <= 8; ++s) p.push_back(Stx(kSizeDw, 10, static_cast<uint8_t>(s % 9), -8 * s));
    // r0 = cuprobe_clz(rK >> n), n in 0..63 (every magnitude; 0 too, once
    // the shift passes rK's top bit), then r1..r5, which the call
    // clobbers, back from their stack slots.
    Insn mov;
    mov.code = kClassAlu64 | kAluMov | 0x08;
    mov.dst = 1;
    mov.src = Reg();
    p.push_back(mov);
    Insn shift;
    shift.code = kClassAlu64 | kAluRsh;
    shift.dst = 1;
    shift.imm = static_cast<int32_t>(rng_() % 64);
    p.push_back(shift);
    p.push_back(Call(CUPROBE_HELPER_CLZ));
    for (int r = 1; r <= 5; ++r) p.push_back(Ldx(kSizeDw, static_cast<uint8_t>(r), 10, -8 * r));
    const int body = 40 + static_cast<int>(rng_() % 40);
    int jumps = 0;
    std::vector<Insn> b;
    for (int i = 0; i < body; ++i) {
      const int remaining = body - i - 1;
      const int kind = static_cast<int>(rng_() % 100);
      if (kind < 55) {
        b.push_back(AluInsn());
      } else if (kind < 63 && jumps < 7 && remaining > 0) {
        ++jumps;
        b.push_back(JumpInsn(static_cast<int16_t>(rng_() % std::min(remaining, 6) + 0)));
      } else if (kind < 75) {
        b.push_back(MemInsn());
      } else if (kind < 88) {
        b.push_back(AtomicInsn());
      } else {
        b.push_back(StoreInsn());
      }
    }
    for (const Insn& insn : b) opcodes->insert(insn.code);
    p.insert(p.end(), b.begin(), b.end());
    // Everything into the map value: registers at 64.., stack slots at 144...
    for (int r = 0; r <= 8; ++r) p.push_back(Stx(kSizeDw, 9, static_cast<uint8_t>(r), 64 + 8 * r));
    for (int s = 1; s <= 8; ++s) {
      p.push_back(Ldx(kSizeDw, 1, 10, -8 * s));
      p.push_back(Stx(kSizeDw, 9, 1, 136 + 8 * s));
    }
    p.push_back(Exit());
    return p;
  }

 private:
  uint8_t Reg() { return static_cast<uint8_t>(rng_() % 9); }  // r0..r8
  int32_t Imm() {
    switch (rng_() % 6) {
      case 0: return 0;
      case 1: return -1;
      case 2: return INT32_MIN;
      case 3: return static_cast<int32_t>(rng_() % 64);
      default: return static_cast<int32_t>(rng_());
    }
  }

  Insn AluInsn() {
    static constexpr uint8_t kOps[] = {kAluAdd, kAluSub, kAluMul, kAluDiv, kAluOr,  kAluAnd,
                                       kAluLsh, kAluRsh, kAluNeg, kAluMod, kAluXor, kAluMov,
                                       kAluArsh, kAluEnd};
    const uint8_t op = kOps[next_alu_++ % std::size(kOps)];
    const bool is64 = rng_() % 2;
    const bool reg = rng_() % 2;
    Insn i;
    i.code = static_cast<uint8_t>((is64 ? kClassAlu64 : kClassAlu) | op | (reg ? 0x08 : 0));
    i.dst = Reg();
    i.src = reg ? Reg() : 0;
    i.imm = reg ? 0 : Imm();
    if (op == kAluNeg) {
      i.code = static_cast<uint8_t>((is64 ? kClassAlu64 : kClassAlu) | op);
      i.src = 0;
      i.imm = 0;
    }
    if (op == kAluEnd) {
      static constexpr int kWidths[] = {16, 32, 64};
      i.imm = kWidths[rng_() % 3];
      i.src = 0;
      // ALU64 | END is bswap (K only); ALU | END: to_le (K) / to_be (X).
      i.code = static_cast<uint8_t>((is64 ? kClassAlu64 : kClassAlu) | op |
                                    (!is64 && reg ? 0x08 : 0));
    }
    if ((op == kAluDiv || op == kAluMod) && rng_() % 2) i.off = 1;  // signed (v4)
    if (op == kAluMov && rng_() % 3 == 0) {
      static constexpr int16_t kSx[] = {8, 16, 32};
      i.off = kSx[rng_() % (is64 ? 3 : 2)];
    }
    return i;
  }

  Insn JumpInsn(int16_t off) {
    static constexpr uint8_t kOps[] = {kJmpJeq,  kJmpJgt,  kJmpJge, kJmpJset, kJmpJne, kJmpJsgt,
                                       kJmpJsge, kJmpJlt,  kJmpJle, kJmpJslt, kJmpJsle, kJmpJa};
    const uint8_t op = kOps[next_jmp_++ % std::size(kOps)];
    const bool is64 = rng_() % 2;
    const bool reg = rng_() % 2;
    Insn i;
    i.code = static_cast<uint8_t>((is64 ? kClassJmp : kClassJmp32) | op | (reg ? 0x08 : 0));
    i.dst = Reg();
    i.src = reg ? Reg() : 0;
    i.imm = reg ? 0 : Imm();
    i.off = off;
    if (op == kJmpJa) {
      i.code = static_cast<uint8_t>((is64 ? kClassJmp : kClassJmp32) | kJmpJa);
      i.dst = i.src = 0;
      if (is64) {
        i.imm = 0;
      } else {  // gotol: the offset is the immediate
        i.imm = off;
        i.off = 0;
      }
    }
    return i;
  }

  // Loads (plain and sign-extending) from the stack or the map value.
  Insn MemInsn() {
    static constexpr uint8_t kSizes[] = {kSizeB, kSizeH, kSizeW, kSizeDw};
    const uint8_t size = kSizes[rng_() % 4];
    const int bytes = SizeBytes(size);
    const bool sx = size != kSizeDw && rng_() % 3 == 0;
    const bool stack = rng_() % 2;
    Insn i;
    i.code = static_cast<uint8_t>(kClassLdx | size | (sx ? kModeMemsx : kModeMem));
    i.dst = Reg();
    i.src = stack ? 10 : 9;
    i.off = static_cast<int16_t>(stack ? -64 + bytes * static_cast<int>(rng_() % (64 / bytes))
                                       : bytes * static_cast<int>(rng_() % (64 / bytes)));
    return i;
  }

  Insn StoreInsn() {
    static constexpr uint8_t kSizes[] = {kSizeB, kSizeH, kSizeW, kSizeDw};
    const uint8_t size = kSizes[rng_() % 4];
    const int bytes = SizeBytes(size);
    const bool stack = rng_() % 2;
    const bool imm = rng_() % 3 == 0;
    Insn i;
    i.code = static_cast<uint8_t>((imm ? kClassSt : kClassStx) | size | kModeMem);
    i.dst = stack ? 10 : 9;
    i.src = imm ? 0 : Reg();
    i.imm = imm ? Imm() : 0;
    i.off = static_cast<int16_t>(stack ? -64 + bytes * static_cast<int>(rng_() % (64 / bytes))
                                       : bytes * static_cast<int>(rng_() % (64 / bytes)));
    return i;
  }

  Insn AtomicInsn() {
    static constexpr int32_t kOps[] = {kAluAdd, kAluOr, kAluAnd, kAluXor,
                                       kAluAdd | kAtomicFetch, kAluOr | kAtomicFetch,
                                       kAluAnd | kAtomicFetch, kAluXor | kAtomicFetch,
                                       kAtomicXchg, kAtomicCmpxchg};
    const int32_t op = kOps[next_atomic_++ % std::size(kOps)];
    const bool dw = rng_() % 2;
    const bool stack = rng_() % 2;
    const int bytes = dw ? 8 : 4;
    Insn i;
    i.code = static_cast<uint8_t>(kClassStx | (dw ? kSizeDw : kSizeW) | kModeAtomic);
    i.dst = stack ? 10 : 9;
    i.src = Reg();
    i.imm = op;
    i.off = static_cast<int16_t>(stack ? -64 + bytes * static_cast<int>(rng_() % (64 / bytes))
                                       : bytes * static_cast<int>(rng_() % (64 / bytes)));
    return i;
  }

  std::mt19937_64 rng_;
  size_t next_alu_ = 0, next_jmp_ = 0, next_atomic_ = 0;
};

TEST(Differential, JitOfLoweredIrMatchesTheReferenceInterpreter) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();

  BpfObject obj;
  obj.name = "random.o";
  ObjectMap data;
  data.origin = MapOrigin::kBss;
  data.spec.name = ".bss";
  data.spec.type = CUPROBE_MAP_ARRAY;
  data.spec.key_size = 4;
  data.spec.value_size = kValueSize;
  data.spec.max_entries = 1;
  data.spec.initial_value.assign(kValueSize, 0);
  obj.maps.push_back(data);

  Generator gen(20251202);
  std::set<uint8_t> opcodes;
  std::vector<VerifiedProgram> verified;
  for (int i = 0; i < kPrograms; ++i) {
    BpfProgram p;
    p.name = absl::StrCat("rand", i);
    p.section = "cuprobe/entry/*";
    p.insns = gen.Program(&opcodes);
    for (uint32_t k = 0; k < p.insns.size(); ++k) {
      if (p.insns[k].code == kLdImm64) p.map_refs[k] = MapRef{0, true, 0};
    }
    obj.programs.push_back(std::move(p));
  }
  for (const BpfProgram& p : obj.programs) {
    absl::StatusOr<VerifiedProgram> v = Verify(obj, p, {});
    ASSERT_TRUE(v.ok()) << v.status();
    verified.push_back(*std::move(v));
  }
  // Every opcode of the instruction classes under test appeared.
  std::set<uint8_t> alu_ops, jmp_ops;
  bool atomic_w = false, atomic_dw = false, ldsx = false, st = false, stx = false, jmp32 = false;
  for (uint8_t c : opcodes) {
    const uint8_t cls = c & 7;
    if (cls == kClassAlu || cls == kClassAlu64) alu_ops.insert(c & 0xf0);
    if (cls == kClassJmp || cls == kClassJmp32) jmp_ops.insert(c & 0xf0);
    if (cls == kClassJmp32) jmp32 = true;
    if (cls == kClassStx && (c & 0xe0) == kModeAtomic) ((c & 0x18) == kSizeDw ? atomic_dw : atomic_w) = true;
    if (cls == kClassLdx && (c & 0xe0) == kModeMemsx) ldsx = true;
    if (cls == kClassSt) st = true;
    if (cls == kClassStx && (c & 0xe0) == kModeMem) stx = true;
  }
  EXPECT_EQ(alu_ops.size(), 14u);
  EXPECT_EQ(jmp_ops.size(), 12u);
  EXPECT_TRUE(atomic_w && atomic_dw && ldsx && st && stx && jmp32);

  LowerInput input;
  input.object = &obj;
  input.map_slot = {0};
  for (size_t i = 0; i < obj.programs.size(); ++i) {
    ProgramToLower lp;
    lp.program = &obj.programs[i];
    lp.verified = &verified[i];
    lp.function_name = absl::StrCat("f", i);
    input.programs.push_back(lp);
  }
  auto context = std::make_unique<llvm::LLVMContext>();
  absl::StatusOr<std::unique_ptr<llvm::Module>> module =
      LowerToLlvm(*context, input, LowerTarget::kHost);
  ASSERT_TRUE(module.ok()) << module.status();
  auto jit = llvm::orc::LLJITBuilder().create();
  ASSERT_TRUE(static_cast<bool>(jit)) << llvm::toString(jit.takeError());
  (*module)->setDataLayout((*jit)->getDataLayout());
  (*module)->setTargetTriple((*jit)->getTargetTriple().str());
  ASSERT_TRUE(OptimizeModule(**module, nullptr).ok());
  llvm::orc::MangleAndInterner mangle((*jit)->getExecutionSession(), (*jit)->getDataLayout());
  llvm::orc::SymbolMap symbols;
  auto add = [&](const char* name, const void* address) {
    symbols[mangle(name)] = {llvm::orc::ExecutorAddr::fromPtr(address),
                             llvm::JITSymbolFlags::Exported};
  };
  MakeDataDescriptor();
  add("__cuprobe_host_sreg", reinterpret_cast<const void*>(&TestHostSreg));
  add("__cuprobe_map_table", g_map_table);
  // memset/memcpy that the optimizer may introduce come from this process.
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      (*jit)->getDataLayout().getGlobalPrefix());
  ASSERT_TRUE(static_cast<bool>(process));
  (*jit)->getMainJITDylib().addGenerator(std::move(*process));
  ASSERT_FALSE(static_cast<bool>(
      (*jit)->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(symbols)))));
  ASSERT_FALSE(static_cast<bool>((*jit)->addIRModule(
      llvm::orc::ThreadSafeModule(std::move(*module), std::move(context)))));

  using ProbeFn = int32_t (*)(uint64_t, uint32_t, uint32_t, uint32_t, void*);
  std::mt19937_64 rng(7);
  int compared = 0;
  for (size_t i = 0; i < obj.programs.size(); ++i) {
    auto sym = (*jit)->lookup(absl::StrCat("f", i));
    ASSERT_TRUE(static_cast<bool>(sym)) << llvm::toString(sym.takeError());
    auto fn = sym->toPtr<ProbeFn>();
    for (int input_set = 0; input_set < kInputsPerProgram; ++input_set) {
      cuprobe_args args{};
      args.count = CUPROBE_MAX_ARGS;
      for (uint64_t& v : args.value) {
        switch (rng() % 5) {
          case 0: v = 0; break;
          case 1: v = ~uint64_t{0}; break;
          case 2: v = uint64_t{1} << 63; break;
          case 3: v = rng() % 256; break;
          default: v = rng(); break;
        }
      }
      uint8_t initial[kValueSize];
      for (uint8_t& b : initial) b = static_cast<uint8_t>(rng());

      // Reference.
      std::memcpy(g_value, initial, kValueSize);
      InterpreterEnv env;
      env.ctx_field = [&](int32_t off) -> uint64_t {
        if (off >= 120) return args.value[(off - 120) / 8];
        return TestHostSreg(off);
      };
      env.helper = [](int32_t, const uint64_t*) -> uint64_t { return 0; };
      env.map_handle = [](uint32_t m) { return g_map_table[m]; };
      env.value_address = [](uint32_t) { return reinterpret_cast<uint64_t>(g_value); };
      absl::StatusOr<uint64_t> expected = Interpret(obj.programs[i].insns, env);
      ASSERT_TRUE(expected.ok()) << expected.status();
      uint8_t expected_mem[kValueSize];
      std::memcpy(expected_mem, g_value, kValueSize);

      // JIT.
      std::memcpy(g_value, initial, kValueSize);
      const int32_t got = fn(0, 0, 0, 0, &args);
      ASSERT_EQ(got, static_cast<int32_t>(*expected))
          << "program " << i << " input " << input_set;
      for (uint32_t b = 0; b < kValueSize; ++b) {
        ASSERT_EQ(g_value[b], expected_mem[b])
            << "program " << i << " input " << input_set << " byte " << b
            << (b >= 64 && b < 136 ? absl::StrCat(" (r", (b - 64) / 8, ")") : "");
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, kPrograms * kInputsPerProgram);
}

// A JIT of the programs of a C probe, lowered for the host, whose map table
// is `table`.
class HostProbe {
 public:
  static std::unique_ptr<HostProbe> Compile(const std::string& source, uint64_t* table) {
    auto p = std::unique_ptr<HostProbe>(new HostProbe);
    absl::StatusOr<std::vector<uint8_t>> bytes =
        CompileProbeSource(absl::StrCat("#include \"cuprobe/probe.h\"\n", source));
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (!bytes.ok()) return nullptr;
    absl::StatusOr<BpfObject> obj = ReadBpfObject(*bytes, "probe.o");
    EXPECT_TRUE(obj.ok()) << obj.status();
    if (!obj.ok()) return nullptr;
    p->object_ = *std::move(obj);
    LowerInput input;
    input.object = &p->object_;
    int32_t slot = 0;
    for (const ObjectMap& m : p->object_.maps) {
      input.map_slot.push_back(m.global_data() && m.read_only() ? -1 : slot++);
    }
    p->verified_.reserve(p->object_.programs.size());
    for (const BpfProgram& prog : p->object_.programs) {
      absl::StatusOr<VerifiedProgram> v = Verify(p->object_, prog, {});
      EXPECT_TRUE(v.ok()) << v.status();
      if (!v.ok()) return nullptr;
      p->verified_.push_back(*std::move(v));
    }
    for (size_t i = 0; i < p->object_.programs.size(); ++i) {
      ProgramToLower lp;
      lp.program = &p->object_.programs[i];
      lp.verified = &p->verified_[i];
      lp.function_name = p->object_.programs[i].name;
      input.programs.push_back(lp);
    }
    auto context = std::make_unique<llvm::LLVMContext>();
    absl::StatusOr<std::unique_ptr<llvm::Module>> module =
        LowerToLlvm(*context, input, LowerTarget::kHost);
    EXPECT_TRUE(module.ok()) << module.status();
    if (!module.ok()) return nullptr;
    p->helpers_ = HelperSymbolsUsed(**module);
    auto jit = llvm::orc::LLJITBuilder().create();
    EXPECT_TRUE(static_cast<bool>(jit));
    if (!jit) return nullptr;
    p->jit_ = std::move(*jit);
    (*module)->setDataLayout(p->jit_->getDataLayout());
    (*module)->setTargetTriple(p->jit_->getTargetTriple().str());
    EXPECT_TRUE(OptimizeModule(**module, nullptr).ok());
    llvm::orc::MangleAndInterner mangle(p->jit_->getExecutionSession(),
                                        p->jit_->getDataLayout());
    llvm::orc::SymbolMap symbols;
    symbols[mangle("__cuprobe_host_sreg")] = {
        llvm::orc::ExecutorAddr::fromPtr(reinterpret_cast<const void*>(&TestHostSreg)),
        llvm::JITSymbolFlags::Exported};
    symbols[mangle("__cuprobe_map_table")] = {llvm::orc::ExecutorAddr::fromPtr(table),
                                              llvm::JITSymbolFlags::Exported};
    EXPECT_FALSE(static_cast<bool>(
        p->jit_->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(symbols)))));
    EXPECT_FALSE(static_cast<bool>(p->jit_->addIRModule(
        llvm::orc::ThreadSafeModule(std::move(*module), std::move(context)))));
    return p;
  }

  using ProbeFn = int32_t (*)(uint64_t, uint32_t, uint32_t, uint32_t, void*);
  ProbeFn Function(const std::string& name) {
    auto sym = jit_->lookup(name);
    EXPECT_TRUE(static_cast<bool>(sym)) << llvm::toString(sym.takeError());
    return sym ? sym->toPtr<ProbeFn>() : nullptr;
  }
  const BpfObject& object() const { return object_; }
  const std::vector<std::string>& helpers() const { return helpers_; }

 private:
  HostProbe() = default;
  BpfObject object_;
  std::vector<VerifiedProgram> verified_;
  std::vector<std::string> helpers_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
};

// The probe: per map, `v = lookup(map, &k); if (v) *v += 7;` and
// `rc = map_add(map, &k, 5)` with k = args[0]; return codes land in the
// global `rcs` (a .bss ARRAY, itself inline).
constexpr char kInlineMapsProbe[] = R"(
#define MAP(name, kind, n, extra) \
  struct { __uint(type, kind); __type(key, u32); __type(value, u64); \
           __uint(max_entries, n); __uint(map_extra, extra); } name SEC(".maps");
MAP(arr, BPF_MAP_TYPE_ARRAY, 4, 0)
MAP(pt, BPF_MAP_TYPE_PERTHREAD, 3, 64)
MAP(pw, BPF_MAP_TYPE_PERWARP, 3, 3)
MAP(ps, BPF_MAP_TYPE_PERSM, 2, 4)
MAP(hist, BPF_MAP_TYPE_HIST_LOG2, 5, 0)
u64 rcs[2];
SEC("cuprobe/entry/*") int lookups(struct cuprobe_ctx *ctx) {
  u32 k = ctx->args[0];
  u64 *v;
  v = bpf_map_lookup_elem(&arr, &k); if (v) *v += 7;
  v = bpf_map_lookup_elem(&pt, &k); if (v) *v += 7;
  v = bpf_map_lookup_elem(&pw, &k); if (v) *v += 7;
  v = bpf_map_lookup_elem(&ps, &k); if (v) *v += 7;
  v = bpf_map_lookup_elem(&hist, &k); if (v) *v += 7;
  return 0;
}
SEC("cuprobe/entry/*") int adds(struct cuprobe_ctx *ctx) {
  u32 k = ctx->args[0];
  rcs[0] = cuprobe_map_add(&pt, &k, 5);
  rcs[1] = cuprobe_map_add(&pt, &k, ctx->args[1]);
  return 0;
}
)";

TEST(InlineMaps, JitOfInlineMapOperationsMatchesTheHelperAlgorithms) {
  using ::cuprobe::testing::HostMap;
  namespace algo = ::cuprobe::mapalgo;
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  uint64_t table[8] = {};
  std::unique_ptr<HostProbe> probe = HostProbe::Compile(kInlineMapsProbe, table);
  ASSERT_NE(probe, nullptr);
  // Every operation is inline: no helper is called at all.
  EXPECT_TRUE(probe->helpers().empty()) << probe->helpers().front();
  HostProbe::ProbeFn lookups = probe->Function("lookups");
  HostProbe::ProbeFn adds = probe->Function("adds");
  ASSERT_TRUE(lookups != nullptr && adds != nullptr);

  // Two copies of every map: the JIT runs on `jit`, the algorithms on `ref`.
  std::vector<HostMap> jit, ref;
  for (const ObjectMap& m : probe->object().maps) {
    if (m.global_data() && m.read_only()) continue;
    jit.push_back(HostMap::Make(m.spec));
    ref.push_back(HostMap::Make(m.spec));
  }
  ASSERT_EQ(jit.size(), 6u);  // arr pt pw ps hist .bss
  auto point_table = [&](std::vector<size_t> order) {
    for (size_t i = 0; i < jit.size(); ++i) {
      table[i] = reinterpret_cast<uint64_t>(jit[order[i]].desc());
    }
  };
  point_table({0, 1, 2, 3, 4, 5});

  // The ids of probe/map_desc.h from the special registers.
  struct Sregs {
    uint64_t ctaid[3], tid[3], ntid[3], nctaid[3], smid;
  };
  auto set_sregs = [](const Sregs& r) {
    for (int i = 0; i < 3; ++i) {
      (*g_sregs)[8 + 4 * i] = r.ctaid[i];
      (*g_sregs)[20 + 4 * i] = r.tid[i];
      (*g_sregs)[32 + 4 * i] = r.ntid[i];
      (*g_sregs)[44 + 4 * i] = r.nctaid[i];
    }
    (*g_sregs)[56] = r.smid;
  };
  auto ids = [](const Sregs& r, uint32_t type) -> uint64_t {
    const uint64_t tpb = r.ntid[0] * r.ntid[1] * r.ntid[2];
    const uint64_t block = (r.ctaid[2] * r.nctaid[1] + r.ctaid[1]) * r.nctaid[0] + r.ctaid[0];
    const uint64_t thread = (r.tid[2] * r.ntid[1] + r.tid[1]) * r.ntid[0] + r.tid[0];
    if (type == CUPROBE_MAP_PERTHREAD) return block * tpb + thread;
    if (type == CUPROBE_MAP_PERWARP) return block * ((tpb + 31) / 32) + thread / 32;
    if (type == CUPROBE_MAP_PERSM) return r.smid;
    return 0;
  };
  auto image = [](const HostMap& m) {
    const uint8_t* base = reinterpret_cast<const uint8_t*>(m.control());
    return std::vector<uint8_t>(base, base + m.geometry().snapshot_bytes());
  };

  std::mt19937_64 rng(11);
  int runs = 0;
  for (int round = 0; round < 400; ++round) {
    Sregs r{};
    for (int i = 0; i < 3; ++i) {
      r.ntid[i] = 1 + rng() % (i == 0 ? 48 : 2);
      r.tid[i] = rng() % r.ntid[i];
      r.nctaid[i] = 1 + rng() % 2;
      r.ctaid[i] = rng() % r.nctaid[i];
    }
    r.smid = rng() % 6;
    set_sregs(r);
    const uint32_t k = static_cast<uint32_t>(rng() % 7);  // in and out of range
    cuprobe_args args{};
    args.count = 2;
    args.value[0] = k;
    args.value[1] = rng();

    // Reference: the helper library's algorithms, per map.
    const uint32_t types[] = {CUPROBE_MAP_ARRAY, CUPROBE_MAP_PERTHREAD, CUPROBE_MAP_PERWARP,
                              CUPROBE_MAP_PERSM, CUPROBE_MAP_HIST_LOG2};
    for (int m = 0; m < 5; ++m) {
      const uint64_t v = algo::MapLookup(ref[m].desc(), &k, ids(r, types[m]));
      if (v != 0) *reinterpret_cast<uint64_t*>(v) += 7;
    }
    uint64_t rcs[2];
    for (int a = 0; a < 2; ++a) {
      int64_t err = 0;
      uint64_t* t = algo::MapAddTarget(ref[1].desc(), &k, ids(r, CUPROBE_MAP_PERTHREAD), &err);
      if (t != nullptr) *t += a == 0 ? 5 : args.value[1];
      rcs[a] = static_cast<uint64_t>(err);
    }
    std::memcpy(ref[5].image(), rcs, sizeof(rcs));

    ASSERT_EQ(lookups(0, 0, 0, 0, &args), 0);
    ASSERT_EQ(adds(0, 0, 0, 0, &args), 0);
    for (size_t m = 0; m < jit.size(); ++m) {
      ASSERT_EQ(image(jit[m]), image(ref[m])) << "map " << m << " round " << round << " key " << k;
    }
    ++runs;
  }
  EXPECT_EQ(runs, 400);
  // Some lookups hit, some ids and indices were out of range (counted).
  EXPECT_GT(ref[1].control()->errors, 0u);
  EXPECT_GT(ref[0].control()->errors + ref[1].control()->errors, 0u);

  // Descriptors of another type are refused as bad maps: nothing changes but
  // the return codes (-EINVAL), exactly as the helpers' typed entry points.
  point_table({1, 2, 3, 4, 0, 5});
  std::vector<std::vector<uint8_t>> before;
  for (size_t m = 0; m < 5; ++m) before.push_back(image(jit[m]));
  cuprobe_args args{};
  args.count = 2;
  ASSERT_EQ(lookups(0, 0, 0, 0, &args), 0);
  ASSERT_EQ(adds(0, 0, 0, 0, &args), 0);
  for (size_t m = 0; m < 5; ++m) EXPECT_EQ(image(jit[m]), before[m]) << "map " << m;
  uint64_t got[2];
  std::memcpy(got, jit[5].image(), sizeof(got));
  EXPECT_EQ(static_cast<int64_t>(got[0]), algo::kEINVAL);
  EXPECT_EQ(static_cast<int64_t>(got[1]), algo::kEINVAL);
  g_sregs->clear();
}

}  // namespace
}  // namespace cuprobe
