// bpftime's GPU probes, unchanged. The fixtures in tests/compiler/bpftime/
// are our own probes written the way bpftime's GPU examples are: vmlinux.h,
// libbpf's headers, BPF_NO_GLOBAL_DATA printk (formats built on the stack),
// messages in stack arrays, bpf_perf_event_output with a NULL context,
// bpftime's helper ids 501-511 and GPU map numbers, host programs beside GPU
// ones. Each must compile into the bundle it means; what the GPU lacks is
// named in the error. With CUPROBE_BPFTIME_DIR pointing at a bpftime
// checkout, every example/gpu/**/*.bpf.c in it must compile as well.
//
// The printk formats picked from their bytes (one call site, several
// formats) are also run: the host lowering is JIT-compiled and its record
// checked. The GPU side of the same (the PTX under a real launch) belongs to
// the gpu tests.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ThreadSafeModule.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/TargetSelect.h"
#include "loader/compiler/compiler.h"
#include "loader/compiler/lower.h"
#include "loader/compiler/object.h"
#include "loader/compiler/verifier.h"
#include "probe/map_layout.h"
#include "tests/compiler/test_util.h"

namespace cuprobe {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using namespace cuprobe::testing;  // NOLINT

std::string FixturePath(const std::string& name) {
  return std::string(CUPROBE_SOURCE_DIR) + "/tests/compiler/bpftime/" + name;
}

absl::StatusOr<CompileResult> CompileFixture(const std::string& name) {
  return CompileFile(FixturePath(name), ProbeCompileOptions{});
}

absl::StatusOr<CompileResult> CompileSource(const std::string& source) {
  absl::StatusOr<std::vector<uint8_t>> object = CompileProbeSource(source);
  if (!object.ok()) return object.status();
  return CompileObject(*object, "probe.bpf.c", ProbeCompileOptions{});
}

const ProbeProgram* FindProgram(const ProbeBundle& b, const std::string& name) {
  for (const ProbeProgram& p : b.programs) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const MapSpec* FindMap(const ProbeBundle& b, const std::string& name) {
  for (const MapSpec& m : b.maps) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

// The host runtime can allocate every map of the bundle.
void ExpectMapsLayOut(const ProbeBundle& b) {
  for (const MapSpec& m : b.maps) {
    absl::StatusOr<MapGeometry> g = ComputeMapGeometry(m);
    EXPECT_TRUE(g.ok()) << m.name << ": " << g.status();
  }
}

constexpr char kBpftimeHeaders[] = R"(#define BPF_NO_GLOBAL_DATA
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
static const u64 (*gpu_thread_idx)(u64 *x, u64 *y, u64 *z) = (void *)505;
)";

TEST(BpftimeCompat, PrintkFormatsOnTheStackReachTheBundle) {
  absl::StatusOr<CompileResult> r = CompileFixture("printk.bpf.c");
  ASSERT_TRUE(r.ok()) << r.status();
  const ProbeBundle& b = r->bundle;
  ASSERT_EQ(b.programs.size(), 3u);
  ASSERT_NE(FindProgram(b, "print_exit"), nullptr);
  EXPECT_EQ(FindProgram(b, "print_exit")->attach, AttachKind::kExit);
  EXPECT_EQ(FindProgram(b, "print_entry")->kernel_glob, "_Z6scalePfi");
  const std::set<std::string> formats(b.printk_formats.begin(), b.printk_formats.end());
  EXPECT_EQ(formats, (std::set<std::string>{"scale entered by thread %lu (y=%lu)\n",
                                            "scale left\n", "odd thread %lu\n",
                                            "even thread %lu!\n"}));
  EXPECT_NE(FindMap(b, CUPROBE_PRINTK_MAP_NAME), nullptr);
  // clang merges print_parity's two calls: one call site, both formats.
  size_t choices = 0;
  for (const VerifiedProgram& v : r->verified) {
    for (const InsnInfo& info : v.insns) choices = std::max(choices, info.printk_choices.size());
  }
  EXPECT_EQ(choices, 2u);
  EXPECT_TRUE(PtxasAccepts(b.ptx).ok());
}

// ---- The merged call, run: the host lowering JIT-compiled -------------------

uint64_t g_thread_x = 0;
uint8_t g_record[32];
int g_records = 0;
uint64_t g_map_table[4] = {0x1000, 0x2000, 0x3000, 0x4000};

extern "C" uint64_t BpftimeTestSreg(int32_t offset) { return offset == 20 ? g_thread_x : 0; }

extern "C" uint64_t BpftimeTestRingOutput(uint64_t, uint64_t data, uint64_t size, uint64_t) {
  std::memcpy(g_record, reinterpret_cast<const void*>(data), std::min<uint64_t>(size, 32));
  ++g_records;
  return 0;
}

TEST(BpftimeCompat, MergedPrintkCallPrintsTheFormatItsPathBuilt) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  absl::StatusOr<std::vector<uint8_t>> bytes =
      CompileProbeSource(std::string(kBpftimeHeaders) + R"(
SEC("kprobe/k") int parity() {
  u64 x, y, z;
  gpu_thread_idx(&x, &y, &z);
  if (x & 1) bpf_printk("odd thread %lu\n", x);
  else bpf_printk("even thread %lu!\n", x);
  return 0;
}
)");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<BpfObject> obj = ReadBpfObject(*bytes, "parity.bpf.c");
  ASSERT_TRUE(obj.ok()) << obj.status();
  ASSERT_EQ(obj->programs.size(), 1u);
  absl::StatusOr<VerifiedProgram> v = Verify(*obj, obj->programs[0], {});
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->printk_formats.size(), 2u);

  LowerInput input;
  input.object = &*obj;
  for (size_t m = 0; m < obj->maps.size(); ++m) {
    input.map_slot.push_back(obj->maps[m].read_only() ? -1 : static_cast<int32_t>(m));
  }
  input.printk_slot = 3;
  ProgramToLower lp;
  lp.program = &obj->programs[0];
  lp.verified = &*v;
  lp.function_name = "parity";
  lp.printk_ids = {7, 9};  // bundle ids, to tell them from local indices
  input.programs.push_back(lp);
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
  add("__cuprobe_host_sreg", reinterpret_cast<const void*>(&BpftimeTestSreg));
  add(CUPROBE_HELPER_SYMBOL_RINGBUF_OUTPUT, reinterpret_cast<const void*>(&BpftimeTestRingOutput));
  add(CUPROBE_MAP_TABLE_SYMBOL, g_map_table);
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      (*jit)->getDataLayout().getGlobalPrefix());
  ASSERT_TRUE(static_cast<bool>(process));
  (*jit)->getMainJITDylib().addGenerator(std::move(*process));
  ASSERT_FALSE(static_cast<bool>(
      (*jit)->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(symbols)))));
  ASSERT_FALSE(static_cast<bool>((*jit)->addIRModule(
      llvm::orc::ThreadSafeModule(std::move(*module), std::move(context)))));
  auto sym = (*jit)->lookup("parity");
  ASSERT_TRUE(static_cast<bool>(sym)) << llvm::toString(sym.takeError());
  auto* fn = sym->toPtr<int32_t (*)(uint64_t, uint32_t, uint32_t, uint32_t, void*)>();

  const int odd = v->printk_formats[0] == "odd thread %lu\n" ? 0 : 1;
  for (uint64_t x : {3ull, 4ull, 17ull, 100ull}) {
    g_thread_x = x;
    g_records = 0;
    std::memset(g_record, 0xee, sizeof(g_record));
    fn(0, 0, 0, 0, nullptr);
    ASSERT_EQ(g_records, 1);
    uint32_t id, nargs;
    uint64_t arg0;
    std::memcpy(&id, g_record, 4);
    std::memcpy(&nargs, g_record + 4, 4);
    std::memcpy(&arg0, g_record + 8, 8);
    const int expected = (x & 1) ? odd : 1 - odd;
    EXPECT_EQ(id, lp.printk_ids[expected]) << "thread " << x;
    EXPECT_EQ(nargs, 1u);
    EXPECT_EQ(arg0, x);
  }
}

// ---- Helpers and maps ---------------------------------------------------------

TEST(BpftimeCompat, GpuHelpers501To511LowerToSpecialRegistersAndExit) {
  absl::StatusOr<CompileResult> r = CompileFixture("helpers.bpf.c");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->verified.size(), 1u);
  const std::set<int32_t>& used = r->verified[0].helpers_used;
  for (int32_t id = 501; id <= 511; ++id) EXPECT_TRUE(used.count(id)) << "helper " << id;
  const std::string& ptx = r->bundle.ptx;
  for (const char* s : {"%smid", "%warpid", "%laneid", "%nctaid.x", "%ntid.x", "%ctaid.x",
                        "%tid.x", "%globaltimer", "membar.sys", "exit;"}) {
    EXPECT_THAT(ptx, HasSubstr(s));
  }
  EXPECT_THAT(r->bundle.printk_formats, Contains("a warp's last lane\n"));  // puts, on the stack
  EXPECT_TRUE(PtxasAccepts(ptx).ok());
}

TEST(BpftimeCompat, GpuMapNumbersResolveAndLayOut) {
  absl::StatusOr<CompileResult> r = CompileFixture("maps.bpf.c");
  ASSERT_TRUE(r.ok()) << r.status();
  const ProbeBundle& b = r->bundle;
  const std::pair<const char*, uint32_t> kTypes[] = {
      {"gpu_hash", CUPROBE_MAP_HASH},          {"per_thread", CUPROBE_MAP_PERTHREAD},
      {"gpu_array", CUPROBE_MAP_ARRAY},        {"kernel_shared", CUPROBE_MAP_ARRAY},
      {"per_thread_host", CUPROBE_MAP_PERTHREAD}, {"array_host", CUPROBE_MAP_ARRAY},
      {"events", CUPROBE_MAP_RINGBUF},         {"plain_array", CUPROBE_MAP_ARRAY},
  };
  for (const auto& [name, type] : kTypes) {
    const MapSpec* m = FindMap(b, name);
    ASSERT_NE(m, nullptr) << name;
    EXPECT_EQ(m->type, type) << name;
  }
  EXPECT_EQ(FindMap(b, "per_thread_host")->max_entries, 3u);
  // 1527's 16 records become a keyless ring of bytes that still names them.
  const MapSpec* ring = FindMap(b, "events");
  EXPECT_EQ(ring->max_entries, 1u << 20);
  EXPECT_EQ(ring->key_size, 0u);
  EXPECT_EQ(ring->value_size, 0u);
  EXPECT_EQ(ring->value_type.name, "struct event");
  ExpectMapsLayOut(b);
  ASSERT_EQ(b.programs.size(), 1u);
  EXPECT_EQ(b.programs[0].attach, AttachKind::kExit);
  EXPECT_THAT(b.helpers, Contains(CUPROBE_HELPER_SYMBOL_RINGBUF_OUTPUT));  // perf_event_output
  EXPECT_TRUE(PtxasAccepts(b.ptx).ok());
}

TEST(BpftimeCompat, RingBytesHoldBpftimesRecordCount) {
  EXPECT_EQ(BpftimeRingBytes(16, 56), 1u << 20);           // the floor
  EXPECT_EQ(BpftimeRingBytes(65536, 1024), 1u << 27);      // 65536 x (1024 + 8) bytes
  EXPECT_EQ(BpftimeRingBytes(0xffffffffu, 0xffffffu), 1u << 30);  // the ceiling
}

TEST(BpftimeCompat, UnsupportedGpuMapNumberIsRejected) {
  absl::StatusOr<CompileResult> r = CompileSource(std::string(kBpftimeHeaders) + R"(
struct { __uint(type, 1505); __uint(max_entries, 4); __type(key, u32); __type(value, u64);
} odd SEC(".maps");
SEC("kprobe/k") int p() { u32 k = 0; bpf_map_lookup_elem(&odd, &k); return 0; }
)");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("map type 1505 is not supported"));
}

// ---- Host programs --------------------------------------------------------------

TEST(BpftimeCompat, HostProgramsAreLeftOutWithAWarning) {
  absl::StatusOr<CompileResult> r = CompileFixture("host_and_gpu.bpf.c");
  ASSERT_TRUE(r.ok()) << r.status();
  const ProbeBundle& b = r->bundle;
  ASSERT_EQ(b.programs.size(), 1u);
  EXPECT_EQ(b.programs[0].name, "on_kernel");
  EXPECT_EQ(b.programs[0].attach, AttachKind::kEntry);
  EXPECT_EQ(b.programs[0].kernel_glob, "_Z6kernelPf");  // bpftime's cuda_ prefix dropped
  ASSERT_EQ(r->warnings.size(), 2u) << absl::StrJoin(r->warnings, "\n");
  EXPECT_THAT(r->warnings[0], HasSubstr("'on_launch' (uprobe) is not attached"));
  EXPECT_THAT(r->warnings[1],
              HasSubstr("'on_launch_return' (uretprobe/./app:cudaLaunchKernel) is not attached"));
  // The map the host program fills stays (the GPU probe reads it); the
  // host program's printk is not compiled.
  EXPECT_NE(FindMap(b, "launched_at"), nullptr);
  EXPECT_EQ(FindMap(b, CUPROBE_PRINTK_MAP_NAME), nullptr);
  EXPECT_TRUE(b.printk_formats.empty());
  ExpectMapsLayOut(b);
}

TEST(BpftimeCompat, DirectRunProgramsAloneGiveABundleWithoutPrograms) {
  absl::StatusOr<CompileResult> r = CompileSource(std::string(kBpftimeHeaders) + R"(
struct { __uint(type, 1503); __uint(max_entries, 1); __type(key, u32); __type(value, u32);
} n SEC(".maps");
SEC("kprobe/__directly_run") int run() {
  u32 k = 0, sum = 0; u32 *limit = bpf_map_lookup_elem(&n, &k);
  if (!limit) return 0;
  for (u32 i = 0; i < *limit; i++) sum += i;  /* no bound the verifier could prove */
  return sum;
}
)");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->bundle.programs.empty());
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_THAT(r->warnings[0], HasSubstr("'run' (kprobe/__directly_run) is not attached"));
  EXPECT_THAT(r->warnings[0], HasSubstr("direct run"));
}

TEST(BpftimeCompat, CudaPrefixIsDroppedOnlyBeforeAMangledName) {
  AttachKind kind;
  std::string glob;
  ASSERT_TRUE(ParseAttachPoint("kretprobe/cuda__Z3fooPf", &kind, &glob).ok());
  EXPECT_EQ(kind, AttachKind::kExit);
  EXPECT_EQ(glob, "_Z3fooPf");
  ASSERT_TRUE(ParseAttachPoint("kprobe/cuda_scale", &kind, &glob).ok());
  EXPECT_EQ(glob, "cuda_scale");
  ASSERT_TRUE(ParseAttachPoint("cuprobe/entry/cuda__Z3fooPf", &kind, &glob).ok());
  EXPECT_EQ(glob, "cuda__Z3fooPf");
  EXPECT_FALSE(NotAttachedReason("kprobe/_Z3fooPf").has_value());
  EXPECT_TRUE(NotAttachedReason("uprobe").has_value());
  EXPECT_TRUE(NotAttachedReason("uretprobe/./app:cudaLaunchKernel").has_value());
  EXPECT_TRUE(NotAttachedReason("tracepoint/sched/sched_switch").has_value());
  EXPECT_FALSE(NotAttachedReason("uprobes_are_not_this").has_value());
}

// ---- What the GPU lacks, named --------------------------------------------------

TEST(BpftimeCompat, KernelOnlyAndUnknownBpftimeHelpersAreNamed) {
  absl::StatusOr<CompileResult> r = CompileSource(std::string(kBpftimeHeaders) + R"(
SEC("kprobe/k") int p() { char comm[16]; bpf_get_current_comm(comm, sizeof(comm)); return 0; }
)");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("helper 16 (bpf_get_current_comm) exists only in the Linux kernel"));
  r = CompileSource(std::string(kBpftimeHeaders) + R"(
static const u64 (*future_helper)(void) = (void *)520;
SEC("kprobe/k") int p() { return future_helper() != 0; }
)");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("bpftime GPU helper 520 is not one cuprobe knows"));
}

TEST(BpftimeCompat, StackFormatMustHoldConstantBytes) {
  absl::StatusOr<CompileResult> r = CompileSource(std::string(kBpftimeHeaders) + R"(
SEC("kprobe/k") int p() {
  u64 x, y, z;
  gpu_thread_idx(&x, &y, &z);
  char fmt[] = "?=%d\n";
  fmt[0] = 'a' + (x & 1);
  bpf_trace_printk(fmt, sizeof(fmt), 1);
  return 0;
}
)");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("is not a constant string"));
}

// A byte stored over a spilled constant keeps the constant's other bytes.
TEST(BpftimeCompat, StackFormatSurvivesAPartialOverwrite) {
  std::vector<Insn> p = LdImm64(1, 0x0067666564636261ull);  // "abcdefg\0"
  p.push_back(Stx(kSizeDw, 10, 1, -8));
  p.push_back(StImm(kSizeB, 10, -8, 'X'));
  p.push_back(MovReg(1, 10));
  p.push_back(Alu64Imm(kAluAdd, 1, -8));
  p.push_back(MovImm(2, 8));
  p.push_back(Call(CUPROBE_HELPER_TRACE_PRINTK));
  p.push_back(MovImm(0, 0));
  p.push_back(Exit());
  BpfObject obj = RawObject(p, {}, "kprobe/k");
  absl::StatusOr<VerifiedProgram> v = Verify(obj, obj.programs[0], {});
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->printk_formats.size(), 1u);
  EXPECT_EQ(v->printk_formats[0], "Xbcdefg");
}

TEST(BpftimeCompat, PerfEventOutputTakesNullOrTheContext) {
  const std::string ring = R"(
struct { __uint(type, 1527); __uint(max_entries, 8); __type(key, u32); __type(value, u64);
} rb SEC(".maps");
)";
  absl::StatusOr<CompileResult> r = CompileSource(std::string(kBpftimeHeaders) + ring + R"(
SEC("kprobe/k") int p(struct pt_regs *ctx) {
  u64 v = 1;
  bpf_perf_event_output(ctx, &rb, 0, &v, sizeof(v));
  return 0;
}
)");
  EXPECT_TRUE(r.ok()) << r.status();
  r = CompileSource(std::string(kBpftimeHeaders) + ring + R"(
SEC("kprobe/k") int p() {
  u64 v = 1;
  bpf_perf_event_output((void *)8, &rb, 0, &v, sizeof(v));
  return 0;
}
)");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("expected the context (ctx) or NULL"));
}

TEST(BpftimeCompat, VmlinuxCombinesWithProbeHInEitherHelperOrder) {
  for (const char* includes :
       {"#include <vmlinux.h>\n#include \"cuprobe/probe.h\"\n#include <bpf/bpf_helpers.h>\n",
        "#include <vmlinux.h>\n#include <bpf/bpf_helpers.h>\n#include \"cuprobe/probe.h\"\n"}) {
    absl::StatusOr<CompileResult> r = CompileSource(std::string(includes) + R"(
struct { __uint(type, BPF_MAP_TYPE_PERTHREAD); __uint(max_entries, 1); __type(key, u32);
         __type(value, u64); __uint(map_flags, BPF_F_MMAPABLE); } hits SEC(".maps");
SEC("cuprobe/exit/*") int p(struct cuprobe_ctx *ctx) {
  u32 k = 0; bool leader = ctx->thread_idx[0] == 0;
  cuprobe_map_add(&hits, &k, 1);
  if (leader) bpf_printk("sm %u\n", bpf_get_sm_id());
  return 0;
}
)");
    ASSERT_TRUE(r.ok()) << includes << r.status();
    EXPECT_THAT(r->bundle.printk_formats, Contains("sm %u\n"));
  }
}

// ---- A bpftime checkout ----------------------------------------------------------

TEST(BpftimeCompat, EveryGpuExampleOfABpftimeCheckoutCompiles) {
  const char* dir = std::getenv("CUPROBE_BPFTIME_DIR");
  if (dir == nullptr || *dir == '\0') {
    GTEST_SKIP() << "set CUPROBE_BPFTIME_DIR to a bpftime checkout to compile its GPU examples";
  }
  const std::filesystem::path examples = std::filesystem::path(dir) / "example" / "gpu";
  ASSERT_TRUE(std::filesystem::is_directory(examples)) << examples << " is not a directory";
  std::vector<std::string> probes;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(examples)) {
    const std::string path = entry.path().string();
    if (entry.is_regular_file() && path.size() > 6 && path.ends_with(".bpf.c")) {
      probes.push_back(path);
    }
  }
  ASSERT_FALSE(probes.empty()) << "no .bpf.c under " << examples;
  for (const std::string& path : probes) {
    absl::StatusOr<CompileResult> r = CompileFile(path, ProbeCompileOptions{});
    ASSERT_TRUE(r.ok()) << path << ":\n" << r.status();
    EXPECT_TRUE(!r->bundle.programs.empty() || !r->warnings.empty()) << path;
    ExpectMapsLayOut(r->bundle);
    if (!r->bundle.programs.empty()) {
      absl::Status ptxas = PtxasAccepts(r->bundle.ptx);
      EXPECT_TRUE(ptxas.ok()) << path << ": " << ptxas;
    }
  }
}

}  // namespace
}  // namespace cuprobe
