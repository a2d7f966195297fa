// File: tests/ptx_rewriter/passes_test.cc
//
// Golden before/after PTX of each rewriter pass (golden/*.ptx) on a
// hand-written module with every kind of site, and the passes' rules checked
// directly: entry, exit, memory and context passes, linking the helpers,
// selecting kernels, classifying instructions, the kernel editor, and
// inlining the probe calls. Every rewritten module is also assembled by
// ptxas -arch=sm_90. The site counters are in passes_site_counters_test.cc.
//
// Part of ptx_rewriter_passes_test (tests/ptx_rewriter/CMakeLists.txt); the
// golden files and the test bundle are in passes_test_util.h.
//
// To regenerate the golden files after an intended change:
//   CUPROBE_UPDATE_GOLDEN=1 build/tests/ptx_rewriter_passes_test
// and review the diff.

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cuprobe/abi.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/gpu/helpers_ptx.h"
#include "probe/map_desc.h"
#include "probe/bundle.h"
#include "ptx_rewriter/inline_pass.h"
#include "ptx_rewriter/instrument.h"
#include "ptx_rewriter/kernel_editor.h"
#include "ptx_rewriter/memory_pass.h"
#include "ptx_rewriter/ptx_parser.h"
#include "ptx_rewriter/settings.h"
#include "tests/ptx_rewriter/passes_test_util.h"
#include "tests/ptx_rewriter/ptx_test_util.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::cuprobe::testing::Count;
using ::cuprobe::testing::Golden;
using ::cuprobe::testing::Program;
using ::cuprobe::testing::TestBundle;
using ::cuprobe::testing::kGoldenDir;

// Instruments golden/<input> and compares with golden/<expected>; assembles.
void ExpectGolden(std::string_view input, const ProbeBundle& bundle, std::string_view expected,
                  InstrumentResult* out = nullptr) {
  const std::string module = Golden(input);
  const std::string helper = Golden("test_helper.ptx");
  InstrumentOptions options;
  options.helper_ptx = helper;
  options.first_kernel_id = 7;
  options.module_name = std::string(input);
  absl::StatusOr<InstrumentResult> r = InstrumentPtx(module, bundle, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->skipped.empty()) << r->skipped[0].name << ": " << r->skipped[0].reason;
  if (const char* update = std::getenv("CUPROBE_UPDATE_GOLDEN"); update && *update == '1') {
    testing::WriteTextFile(kGoldenDir + std::string(expected), r->ptx);
  }
  EXPECT_EQ(r->ptx, Golden(expected)) << "golden/" << expected << " differs; if intended, "
                                      << "regenerate with CUPROBE_UPDATE_GOLDEN=1";
  absl::StatusOr<std::string> ptxas = testing::RunPtxas(r->ptx);
  EXPECT_TRUE(ptxas.ok()) << ptxas.status();
  // The output parses and prints back to itself.
  absl::StatusOr<Module> again = ParsePtx(r->ptx);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(PrintPtx(*again), r->ptx);
  if (out != nullptr) *out = *std::move(r);
}

TEST(EntryPassTest, Golden) {
  InstrumentResult r;
  ExpectGolden("passes_input.ptx", TestBundle({Program("entry", AttachKind::kEntry, "on_entry")}),
               "entry.after.ptx", &r);
  ASSERT_EQ(r.instrumented.size(), 2u);
  EXPECT_EQ(r.instrumented[0].name, "sites");
  EXPECT_EQ(r.instrumented[0].kernel_id, 7u);
  EXPECT_EQ(r.instrumented[1].kernel_id, 8u);
  EXPECT_EQ(r.instrumented[0].stats.entry_sites, 1u);
  // One call per kernel, launch bounds untouched, args not copied.
  EXPECT_EQ(Count(r.ptx, "call (__cp_ret), on_entry,"), 2);
  EXPECT_THAT(r.ptx, HasSubstr(".maxntid 256, 1, 1\n{"));
  EXPECT_THAT(r.ptx, Not(HasSubstr("__cuprobe_args")));
}

TEST(ExitPassTest, Golden) {
  InstrumentResult r;
  ExpectGolden("passes_input.ptx", TestBundle({Program("exit", AttachKind::kExit, "on_exit")}),
               "exit.after.ptx", &r);
  // sites: `@%p1 ret`, `@%p2 exit`, `ret` -- and `empty`'s ret. The device
  // function's ret is not a kernel exit.
  EXPECT_EQ(r.instrumented[0].stats.exit_sites, 3u);
  EXPECT_EQ(r.instrumented[1].stats.exit_sites, 1u);
  EXPECT_THAT(r.ptx, HasSubstr("@%p1 call (__cp_ret), on_exit,"));
  EXPECT_THAT(r.ptx, HasSubstr("@%p2 call (__cp_ret), on_exit,"));
  EXPECT_EQ(Count(r.ptx, "call (__cp_ret), on_exit,"), 4);
}

TEST(MemoryPassTest, GoldenGlobalAndGeneric) {
  InstrumentResult r;
  ExpectGolden("passes_input.ptx", TestBundle({Program("mem", AttachKind::kMemory, "on_mem")}),
               "memory.after.ptx", &r);
  // ld.global.v4, atom.global, red.global, st.global [table+8], @%p2 st.u32
  // (generic); not shared, const, local or param.
  EXPECT_EQ(r.instrumented[0].stats.memory_sites, 5u);
  EXPECT_EQ(r.instrumented[0].stats.memory_sites_skipped, 0u);
  EXPECT_THAT(r.ptx, HasSubstr("add.s64 %__cp_d0, %rd4, 16;"));
  EXPECT_THAT(r.ptx, HasSubstr("add.s64 %__cp_d0, %rd4, -8;"));
  EXPECT_THAT(r.ptx, HasSubstr("mov.u64 %__cp_d0, table;\n\tadd.s64 %__cp_d0, %__cp_d0, 8;"));
  EXPECT_THAT(r.ptx, HasSubstr("st.param.b64 [__cp_a0], %rd2;"));  // [%rd2] as is
  EXPECT_THAT(r.ptx, HasSubstr(absl::StrCat(
                         "st.param.b32 [__cp_a1], ",
                         CUPROBE_MEM_INFO(16, CUPROBE_SPACE_GLOBAL, CUPROBE_ACCESS_LOAD), ";")));
  EXPECT_THAT(r.ptx, HasSubstr(absl::StrCat(
                         "st.param.b32 [__cp_a1], ",
                         CUPROBE_MEM_INFO(4, CUPROBE_SPACE_GLOBAL, CUPROBE_ACCESS_ATOMIC), ";")));
  EXPECT_THAT(r.ptx, HasSubstr("@%p2 call (__cp_ret), on_mem,"));
}

TEST(MemoryPassTest, GoldenAllSpaces) {
  ProbeProgram p = Program("mem", AttachKind::kMemory, "on_mem");
  p.mem_spaces = (1u << CUPROBE_SPACE_GLOBAL) | (1u << CUPROBE_SPACE_GENERIC) |
                 (1u << CUPROBE_SPACE_SHARED) | (1u << CUPROBE_SPACE_LOCAL) |
                 (1u << CUPROBE_SPACE_CONST);
  InstrumentResult r;
  ExpectGolden("passes_input.ptx", TestBundle({p}), "memory_all_spaces.after.ptx", &r);
  // + st.shared [%r5] (32-bit address), ld.shared [smem+4], ld.const
  // [coeffs+8], ld.local [16] (an immediate address).
  EXPECT_EQ(r.instrumented[0].stats.memory_sites, 9u);
  EXPECT_THAT(r.ptx, HasSubstr("mov.u64 %__cp_d0, 16;"));
  EXPECT_THAT(r.ptx, HasSubstr("cvt.u64.u32 %__cp_d0, %r5;"));
  EXPECT_THAT(r.ptx, HasSubstr(absl::StrCat(
                         "st.param.b32 [__cp_a1], ",
                         CUPROBE_MEM_INFO(4, CUPROBE_SPACE_SHARED, CUPROBE_ACCESS_STORE), ";")));
}

// CUPROBE_MEM_PROBE_AFTER=1 for one test.
class MemProbesAfter {
 public:
  MemProbesAfter() : saved_(CurrentRewriterSettings()) {
    RewriterSettings s = saved_;
    s.mem_probes_after = true;
    SetRewriterSettings(std::move(s));
  }
  ~MemProbesAfter() { SetRewriterSettings(saved_); }

 private:
  RewriterSettings saved_;
};

TEST(MemoryPassTest, GoldenAfterTheAccess) {
  MemProbesAfter after;
  InstrumentResult r;
  ExpectGolden("passes_input.ptx", TestBundle({Program("mem", AttachKind::kMemory, "on_mem")}),
               "memory_after_access.after.ptx", &r);
  EXPECT_EQ(r.instrumented[0].stats.memory_sites, 5u);
  // [%rd2] is copied: the access may overwrite its base.
  EXPECT_THAT(r.ptx, HasSubstr("mov.b64 %__cp_d0, %rd2;"));
  EXPECT_THAT(r.ptx, Not(HasSubstr("st.param.b64 [__cp_a0], %rd2;")));
  // The address is formed before the access, the call comes after it.
  const size_t add = r.ptx.find("add.s64 %__cp_d0, %rd4, 16;");
  const size_t load = r.ptx.find("ld.global.v4.f32");
  const size_t call = r.ptx.find("call (__cp_ret), on_mem,");
  ASSERT_NE(add, std::string::npos);
  EXPECT_LT(add, load);
  EXPECT_LT(load, call);
}

// An access that overwrites its own base, just before the kernel's `ret`:
// the probe sees the address the access used, and runs before the exit
// probe.
TEST(MemoryPassTest, AfterTheAccessKeepsTheAddressAndPrecedesTheExitProbe) {
  MemProbesAfter after;
  const std::string module = R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [k_param_0];
	ld.global.u64 %rd1, [%rd1];
	st.global.u64 [%rd1+8], %rd1;
	ret;
}
)";
  const std::string helper = Golden("test_helper.ptx");
  InstrumentOptions options;
  options.helper_ptx = helper;
  options.site_counters = false;
  absl::StatusOr<InstrumentResult> r = InstrumentPtx(
      module, TestBundle({Program("mem", AttachKind::kMemory, "on_mem"),
                          Program("exit", AttachKind::kExit, "on_exit")}),
      options);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string& ptx = r->ptx;
  const size_t copy = ptx.find("mov.b64 %__cp_d0, %rd1;");
  const size_t load = ptx.find("ld.global.u64 %rd1, [%rd1];");
  const size_t first_call = ptx.find("call (__cp_ret), on_mem,");
  const size_t add = ptx.find("add.s64 %__cp_d0, %rd1, 8;");
  const size_t store = ptx.find("st.global.u64 [%rd1+8], %rd1;");
  const size_t second_call = ptx.find("call (__cp_ret), on_mem,", first_call + 1);
  const size_t exit_call = ptx.find("call (__cp_ret), on_exit,");
  for (size_t at : {copy, load, first_call, add, store, second_call, exit_call}) {
    ASSERT_NE(at, std::string::npos) << ptx;
  }
  EXPECT_LT(copy, load) << ptx;
  EXPECT_LT(load, first_call) << ptx;
  EXPECT_LT(first_call, add) << ptx;
  EXPECT_LT(add, store) << ptx;
  EXPECT_LT(store, second_call) << ptx;
  EXPECT_LT(second_call, exit_call) << ptx;
  absl::StatusOr<std::string> ptxas = testing::RunPtxas(ptx);
  EXPECT_TRUE(ptxas.ok()) << ptxas.status() << "\n" << ptx;
}

TEST(ContextPassTest, GoldenArgsCopy) {
  InstrumentResult r;
  ExpectGolden("passes_input.ptx",
               TestBundle({Program("entry", AttachKind::kEntry, "on_entry", /*reads_args=*/true),
                           Program("exit", AttachKind::kExit, "on_exit")}),
               "context.after.ptx", &r);
  EXPECT_TRUE(r.instrumented[0].stats.args_copied);
  // count 4; u64, u32, first 8 bytes of the 12-byte struct in two u32
  // loads (.align 4), u8.
  EXPECT_THAT(r.ptx, HasSubstr(".local .align 8 .b8 __cuprobe_args[136];"));
  EXPECT_THAT(r.ptx, HasSubstr("st.local.u32 [__cuprobe_args], 4;"));
  EXPECT_THAT(r.ptx, HasSubstr("ld.param.u32 %__cp_d1, [sites_param_2+4];\n\tshl.b64 %__cp_d1, "
                               "%__cp_d1, 32;"));
  EXPECT_THAT(r.ptx, HasSubstr("ld.param.u8 %__cp_d0, [sites_param_3];"));
  EXPECT_THAT(r.ptx, HasSubstr("st.local.u64 [__cuprobe_args+32], %__cp_d0;"));
  // The entry probe reads arguments and gets the pointer; the exit probe
  // does not and gets 0.
  EXPECT_THAT(r.ptx, HasSubstr("st.param.b64 [__cp_a4], %__cp_args;"));
  EXPECT_THAT(r.ptx, HasSubstr("st.param.b64 [__cp_a4], 0;"));
  // `empty` has no parameters: count 0.
  EXPECT_THAT(r.ptx, HasSubstr("st.local.u32 [__cuprobe_args], 0;"));
}

TEST(LinkPassTest, GoldenClashesAndDeclarations) {
  InstrumentResult r;
  ExpectGolden("link_input.ptx", TestBundle({Program("entry", AttachKind::kEntry, "on_entry")}),
               "link.after.ptx", &r);
  // .version raised to the bundle's 8.5, the module's .target kept.
  EXPECT_TRUE(absl::StartsWith(r.ptx, ".version 8.5\n.target sm_90\n.address_size 64\n"));
  // One map table definition, no extern declaration of it.
  EXPECT_EQ(Count(r.ptx, "__cuprobe_map_table["), 1);
  EXPECT_THAT(r.ptx, HasSubstr(".visible .global .align 8 .u64 __cuprobe_map_table[3];"));
  // The probe `on_entry` and the helper `__cuprobe_map_add` clash with the
  // application's names: ours are renamed, theirs are untouched.
  EXPECT_THAT(r.ptx, HasSubstr("call (__cp_ret), on_entry_cuprobe,"));
  EXPECT_THAT(r.ptx, HasSubstr(".visible .func  (.param .b64 func_retval0) __cuprobe_map_add_cuprobe("));
  EXPECT_THAT(r.ptx, HasSubstr("__cuprobe_map_add_cuprobe, \n"));
  EXPECT_THAT(r.ptx, HasSubstr("ld.global.u64 \t%rd2, [__cuprobe_map_add];"));
  EXPECT_THAT(r.ptx, HasSubstr("call.uni (retval0), \n\ton_entry, \n"));
  // vprintf declared once (the bundle's copy, ahead of the application's
  // code); the bundle's extern declaration of the helper is gone.
  EXPECT_EQ(Count(r.ptx, "vprintf\n("), 1);
  EXPECT_EQ(Count(r.ptx, ".extern .func  (.param .b64 func_retval0) __cuprobe_map_add"), 0);
}

// A bundle whose probes read the descriptors' constant copy (abi.h 3.) gets
// it defined once, 128 bytes per map, with the bundle's declaration gone; a
// bundle that does not read it gets none, and a module that has one is
// refused as already instrumented.
TEST(LinkPassTest, DefinesTheDescriptorsConstantCopyWhenAProbeDeclaresIt) {
  const std::string module = Golden("passes_input.ptx");
  const std::string helper = Golden("test_helper.ptx");
  InstrumentOptions options;
  options.helper_ptx = helper;
  ProbeBundle b = TestBundle({Program("p", AttachKind::kEntry, "on_entry")});
  absl::StatusOr<InstrumentResult> without = InstrumentPtx(module, b, options);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_THAT(without->ptx, Not(HasSubstr(CUPROBE_MAP_DESCS_SYMBOL)));

  const std::string table = ".extern .global .align 8 .u64 __cuprobe_map_table[];";
  ASSERT_THAT(b.ptx, HasSubstr(table));
  b.ptx = absl::StrReplaceAll(
      b.ptx, {{table, absl::StrCat(table, "\n.extern .const .align 8 .b8 __cuprobe_map_descs[];")}});
  absl::StatusOr<InstrumentResult> with = InstrumentPtx(module, b, options);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(Count(with->ptx, "__cuprobe_map_descs"), 1);
  EXPECT_THAT(with->ptx, HasSubstr(".visible .const .align 8 .b8 __cuprobe_map_descs[384];"));
  absl::StatusOr<std::string> ptxas = testing::RunPtxas(with->ptx);
  EXPECT_TRUE(ptxas.ok()) << ptxas.status();

  const std::string only_descs =
      absl::StrCat(module, "\n.visible .const .align 8 .b8 __cuprobe_map_descs[128];\n");
  absl::StatusOr<InstrumentResult> again = InstrumentPtx(only_descs, b, options);
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(std::string(again.status().message()), HasSubstr("instrumented by cuprobe before"));
}

TEST(LinkPassTest, ErrorsNameTheProblem) {
  const std::string module = Golden("passes_input.ptx");
  const std::string helper = Golden("test_helper.ptx");
  InstrumentOptions options;
  options.helper_ptx = helper;
  // Missing probe function.
  absl::StatusOr<InstrumentResult> r =
      InstrumentPtx(module, TestBundle({Program("p", AttachKind::kEntry, "nope")}), options);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("probe program 'p' (cuprobe/p/*): function 'nope' is not in the bundle's PTX"));
  // A function with the wrong signature.
  ProbeBundle b = TestBundle({Program("p", AttachKind::kEntry, "on_entry")});
  b.ptx = absl::StrReplaceAll(b.ptx, {{"\t.param .b32 on_entry_param_3,\n", ""}});
  r = InstrumentPtx(module, b, options);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("has 4 parameters, not 5"));
  // An already instrumented module.
  ProbeBundle ok = TestBundle({Program("p", AttachKind::kEntry, "on_entry")});
  absl::StatusOr<InstrumentResult> once = InstrumentPtx(module, ok, options);
  ASSERT_TRUE(once.ok()) << once.status();
  r = InstrumentPtx(once->ptx, ok, options);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("already has __cuprobe_map_table"));
  // A helper library that defines what the bundle also defines.
  const std::string clashing = absl::StrCat(
      helper, "\n.visible .func (.param .b32 r) on_exit(.param .b64 a)\n{\n\tret;\n}\n");
  options.helper_ptx = clashing;
  r = InstrumentPtx(module, ok, options);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("both <helper library> and <bundle test_bundle> define 'on_exit'"));
  // Bad helper PTX is a diagnostic with its location.
  options.helper_ptx = ".version 8.0\n.target sm_90\n.func f(\n";
  r = InstrumentPtx(module, ok, options);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("<helper library>:3:"));
}

TEST(LinkPassTest, LeavesOutHelpersNoProbeReaches) {
  // The helper library: map_add calls an inner helper that uses a global;
  // map_lookup and its global are used by no probe.
  const std::string helper = absl::StrCat(R"(.version 8.0
.target sm_90
.address_size 64
.global .align 8 .u64 inner_calls;
.global .align 8 .u64 lookups;
.func (.param .b64 r) inner(.param .b64 a)
{
	.reg .b64 %rd<3>;
	mov.u64 %rd1, inner_calls;
	atom.global.add.u64 %rd2, [%rd1], 1;
	st.param.b64 [r], %rd2;
	ret;
}
.visible .func (.param .b64 r) __cuprobe_map_lookup(.param .b64 a, .param .b64 b)
{
	.reg .b64 %rd<3>;
	mov.u64 %rd1, lookups;
	st.param.b64 [r], %rd1;
	ret;
}
.visible .func (.param .b64 r) __cuprobe_map_add(.param .b64 a, .param .b64 b, .param .b64 c)
{
	.reg .b64 %rd<2>;
	{
	.param .b64 p0;
	.param .b64 r0;
	st.param.b64 [p0], 0;
	call (r0), inner, (p0);
	ld.param.b64 %rd1, [r0];
	}
	st.param.b64 [r], %rd1;
	ret;
}
)");
  const std::string module = Golden("passes_input.ptx");
  InstrumentOptions options;
  options.helper_ptx = helper;
  absl::StatusOr<InstrumentResult> r =
      InstrumentPtx(module, TestBundle({Program("e", AttachKind::kEntry, "on_entry")}), options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->ptx, HasSubstr("__cuprobe_map_add("));
  EXPECT_THAT(r->ptx, HasSubstr(") inner("));
  EXPECT_THAT(r->ptx, HasSubstr(".u64 inner_calls;"));
  EXPECT_THAT(r->ptx, Not(HasSubstr("__cuprobe_map_lookup")));
  EXPECT_THAT(r->ptx, Not(HasSubstr("lookups")));
  absl::StatusOr<std::string> ptxas = testing::RunPtxas(r->ptx);
  EXPECT_TRUE(ptxas.ok()) << ptxas.status();
}

TEST(InstrumentTest, SelectionSkipsAndIds) {
  const std::string module = Golden("passes_input.ptx");
  const std::string helper = Golden("test_helper.ptx");
  InstrumentOptions options;
  options.helper_ptx = helper;
  options.kernel_ids = {{"empty", 41}};
  options.first_kernel_id = 100;
  // Only `sites` matches.
  absl::StatusOr<InstrumentResult> r = InstrumentPtx(
      module, TestBundle({Program("e", AttachKind::kEntry, "on_entry", false, "si*")}), options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->instrumented.size(), 1u);
  EXPECT_EQ(r->instrumented[0].name, "sites");
  EXPECT_EQ(r->instrumented[0].kernel_id, 100u);
  EXPECT_EQ(r->kernels_in_module, 2u);
  // Both match; `empty` has its id from the map; `sites` skipped on request.
  options.skip_kernels = {"sites"};
  r = InstrumentPtx(module, TestBundle({Program("e", AttachKind::kEntry, "on_entry")}), options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->instrumented.size(), 1u);
  EXPECT_EQ(r->instrumented[0].name, "empty");
  EXPECT_EQ(r->instrumented[0].kernel_id, 41u);
  ASSERT_EQ(r->skipped.size(), 1u);
  EXPECT_EQ(r->skipped[0].reason, "skipped on request");
  // Nothing matches: the module comes back unchanged.
  r = InstrumentPtx(module, TestBundle({Program("e", AttachKind::kEntry, "on_entry", false, "zz")}),
                    options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->instrumented.empty());
  EXPECT_EQ(r->ptx, module);
}

struct Classified {
  const char* instruction;
  bool access;
  uint32_t space, kind, size;
  const char* address;
};

class ClassifyTest : public ::testing::TestWithParam<Classified> {};

TEST_P(ClassifyTest, Instruction) {
  const Classified& c = GetParam();
  absl::StatusOr<std::vector<Statement>> s = ParseBodyStatements(c.instruction);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 1u);
  std::optional<MemoryAccess> a = ClassifyMemoryAccess((*s)[0]);
  ASSERT_EQ(a.has_value(), c.access) << c.instruction;
  if (!a) return;
  EXPECT_EQ(a->space, c.space);
  EXPECT_EQ(a->kind, c.kind);
  EXPECT_EQ(a->size, c.size);
  EXPECT_EQ(a->address, c.address);
}

constexpr uint32_t G = CUPROBE_SPACE_GLOBAL, S = CUPROBE_SPACE_SHARED, L = CUPROBE_SPACE_LOCAL,
                   C = CUPROBE_SPACE_CONST, N = CUPROBE_SPACE_GENERIC;
constexpr uint32_t LD = CUPROBE_ACCESS_LOAD, ST = CUPROBE_ACCESS_STORE, AT = CUPROBE_ACCESS_ATOMIC;

INSTANTIATE_TEST_SUITE_P(
    Instructions, ClassifyTest,
    ::testing::Values(
        Classified{"ld.global.f32 %f1, [%rd4];", true, G, LD, 4, "%rd4"},
        Classified{"ld.global.nc.L1::no_allocate.v4.u32 {%r1,%r2,%r3,%r4}, [%rd1+16];", true, G,
                   LD, 16, "%rd1+16"},
        Classified{"ld.global.L2::cache_hint.b64 %rd2, [%rd1], %rd9;", true, G, LD, 8, "%rd1"},
        Classified{"ldu.global.v2.f64 {%fd1, %fd2}, [%rd1];", true, G, LD, 16, "%rd1"},
        Classified{"st.shared::cta.v2.b16 [%r1+2], {%rs1, %rs2};", true, S, ST, 4, "%r1+2"},
        Classified{"st.local.u8 [%rd1], %rs1;", true, L, ST, 1, "%rd1"},
        Classified{"ld.const.u32 %r1, [coeffs+8];", true, C, LD, 4, "coeffs+8"},
        Classified{"st.relaxed.gpu.u64 [%rd1], %rd2;", true, N, ST, 8, "%rd1"},
        Classified{"atom.global.cas.b32 %r1, [%rd1], %r2, %r3;", true, G, AT, 4, "%rd1"},
        Classified{"atom.add.noftz.f16x2 %r1, [%rd1], %r2;", true, N, AT, 4, "%rd1"},
        Classified{"atom.global.v4.f32.add {%f1,%f2,%f3,%f4}, [%rd1], {%f5,%f6,%f7,%f8};", true,
                   G, AT, 16, "%rd1"},
        Classified{"red.shared::cluster.add.u32 [%r1], 1;", true, S, AT, 4, "%r1"},
        Classified{"ld.param.u64 %rd1, [k_param_0];", false, 0, 0, 0, ""},
        Classified{"st.param.b32 [param0+0], %r1;", false, 0, 0, 0, ""},
        Classified{"cp.async.ca.shared.global [%r1], [%rd1], 16;", false, 0, 0, 0, ""},
        Classified{"mov.u64 %rd1, %rd2;", false, 0, 0, 0, ""}));

TEST(KernelEditorTest, RegisterPrefixAvoidsTakenNamesAndBadSnippetsChangeNothing) {
  constexpr char kPtx[] = R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry k()
{
	.reg .b64 %__cp_d<3>;
	.reg .b32 %r<4>;
	ret;
}
)";
  absl::StatusOr<Module> m = ParsePtx(kPtx);
  ASSERT_TRUE(m.ok()) << m.status();
  Function& k = m->functions[0];
  KernelEditor editor(*m, k);
  const std::string reg = editor.ScratchRegister(".b64", 0);
  EXPECT_FALSE(absl::StartsWith(reg, "%__cp_"));
  EXPECT_EQ(editor.RegisterBits("%r3"), 32u);
  EXPECT_EQ(editor.RegisterBits("%__cp_d2"), 64u);
  EXPECT_EQ(editor.RegisterBits(reg), 64u);
  EXPECT_EQ(editor.RegisterBits("%nope"), 0u);
  EXPECT_EQ(editor.EntryPoint(), 2u);
  EXPECT_FALSE(editor.InsertBefore(0, "{\nret;\n").ok());
  EXPECT_FALSE(editor.InsertBefore(99, "ret;\n").ok());
  const size_t before = k.body.size();
  // The failed inserts queued nothing; a good one lands before `ret`.
  ASSERT_TRUE(editor.InsertBefore(2, "membar.gl;\n").ok());
  ASSERT_TRUE(editor.Finish().ok());
  ASSERT_EQ(k.body.size(), before + 2);  // the register declaration + membar
  EXPECT_EQ(k.body[0].text, absl::StrCat(".reg .b64 ", reg, ";"));
  EXPECT_EQ(k.body[3].text, "membar.gl;");
  EXPECT_EQ(k.body[4].text, "ret;");
}

// ---- Inlining (ptx_rewriter/inline_pass.h) -----------------------------------

// Instruments golden/passes_input.ptx with `bundle` and `helper`, inlines,
// and checks that no direct probe call is left and that ptxas accepts it.
void ExpectInlined(const ProbeBundle& bundle, std::string_view helper, size_t min_sites) {
  InstrumentOptions options;
  options.helper_ptx = helper;
  options.module_name = "passes_input.ptx";
  options.site_counters = false;  // every site keeps its call, to be inlined
  absl::StatusOr<InstrumentResult> r = InstrumentPtx(Golden("passes_input.ptx"), bundle, options);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<Module> m = ParsePtx(r->ptx);
  ASSERT_TRUE(m.ok()) << m.status();
  const size_t calls = Count(r->ptx, "call (__cp_ret)");
  ASSERT_GE(calls, min_sites);
  EXPECT_EQ(InlineProbeCalls(*m), calls);
  const std::string inlined = PrintPtx(*m);
  EXPECT_EQ(Count(inlined, "call (__cp_ret)"), 0) << inlined;
  absl::StatusOr<std::string> ptxas = testing::RunPtxas(inlined);
  EXPECT_TRUE(ptxas.ok()) << ptxas.status() << "\n" << inlined;
  // Printed and parsed again, it is stable.
  absl::StatusOr<Module> again = ParsePtx(inlined);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(PrintPtx(*again), inlined);
}

TEST(InlinePassTest, TestBundleProbesReplaceTheirCalls) {
  ExpectInlined(TestBundle({Program("entry", AttachKind::kEntry, "on_entry", /*reads_args=*/true),
                            Program("exit", AttachKind::kExit, "on_exit"),
                            Program("mem", AttachKind::kMemory, "on_mem")}),
                Golden("test_helper.ptx"), 3);
}

TEST(InlinePassTest, CompiledReferenceProbesReplaceTheirCalls) {
  // What the probe compiler emits: helper calls in nested blocks, guarded
  // returns, 64-bit arguments (kernel_trace: ring reserve/submit; mem_trace:
  // HASH adds; count_entries and vec_add_args: maps, args, printk).
  // addr_hist and mem_regions read only a part of mem_info (LLVM narrows
  // the space test to `ld.param.u16 [p+2]`): folded from the site's
  // immediate.
  for (const char* name : {"kernel_trace", "mem_trace", "empty", "count_entries", "vec_add_args",
                           "addr_hist", "mem_regions"}) {
    SCOPED_TRACE(name);
    const ProbeBundle bundle = testing::CompiledProbeBundle(name);
    ASSERT_FALSE(bundle.programs.empty());
    ExpectInlined(bundle, HelpersPtx(), 1);
  }
}

// A probe site as ProbeCallText writes it, calling `p` with mem_info
// `info` (an immediate or a register).
std::string PartialReadModule(std::string_view info) {
  return absl::StrCat(R"(.version 8.0
.target sm_90
.address_size 64
.func (.param .b32 r) p(.param .b64 a, .param .b32 b, .param .b32 c, .param .b32 d, .param .b64 e)
{
.reg .b16 %rs<4>;
.reg .b32 %r<3>;
ld.param.u16 %rs1, [b+2];
ld.param.u8 %rs2, [b+1];
ld.param.s8 %rs3, [b+3];
ld.param.u16 %r1, [b];
ld.param.u32 %r2, [c];
st.param.b32 [r], 0;
ret;
}
.visible .entry k(.param .u32 k_param_0)
{
.reg .b32 %q<2>;
ld.param.u32 %q1, [k_param_0];
{
.param .b64 __cp_a0;
.param .b32 __cp_a1;
.param .b32 __cp_a2;
.param .b32 __cp_a3;
.param .b64 __cp_a4;
.param .b32 __cp_ret;
st.param.b64 [__cp_a0], 0;
st.param.b32 [__cp_a1], )", info, R"(;
st.param.b32 [__cp_a2], 7;
st.param.b32 [__cp_a3], 0;
st.param.b64 [__cp_a4], 0;
call (__cp_ret), p, (__cp_a0, __cp_a1, __cp_a2, __cp_a3, __cp_a4);
}
ret;
}
)");
}

TEST(InlinePassTest, PartsOfAnImmediateArgumentAreFolded) {
  // 0xf2345678: bytes 78 56 34 f2, little-endian as the parameter is.
  // The module's statements point into their source text: keep it.
  const std::string decimal = PartialReadModule("4063516280");
  absl::StatusOr<Module> m = ParsePtx(decimal);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(InlineProbeCalls(*m), 1u);
  const std::string out = PrintPtx(*m);
  EXPECT_THAT(out, HasSubstr("mov.b16 %__ci0_rs1, 62004;"));  // 0xf234
  EXPECT_THAT(out, HasSubstr("mov.b16 %__ci0_rs2, 86;"));     // 0x56
  EXPECT_THAT(out, HasSubstr("mov.b16 %__ci0_rs3, 65522;"));  // (s8)0xf2 = -14
  EXPECT_THAT(out, HasSubstr("mov.b32 %__ci0_r1, 22136;"));   // 0x5678
  EXPECT_THAT(out, HasSubstr("mov.b32 %__ci0_r2, 7;"));       // whole, as before
  EXPECT_THAT(out, Not(HasSubstr("call (__cp_ret)")));
  absl::StatusOr<std::string> ptxas = testing::RunPtxas(out);
  EXPECT_TRUE(ptxas.ok()) << ptxas.status() << "\n" << out;
  // Hex immediates fold the same.
  const std::string hex = PartialReadModule("0xf2345678");
  m = ParsePtx(hex);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(InlineProbeCalls(*m), 1u);
  EXPECT_THAT(PrintPtx(*m), HasSubstr("mov.b16 %__ci0_rs1, 62004;"));
}

TEST(InlinePassTest, APartOfARegisterArgumentStaysACall) {
  const std::string text = PartialReadModule("%q1");
  absl::StatusOr<Module> m = ParsePtx(text);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(InlineProbeCalls(*m), 0u);
  EXPECT_THAT(PrintPtx(*m), HasSubstr("call (__cp_ret), p"));
}

TEST(InlinePassTest, AFunctionThatTakesAParameterAddressStaysACall) {
  absl::StatusOr<Module> parsed = ParsePtx(R"(.version 8.0
.target sm_90
.address_size 64
.func (.param .b32 r) p(.param .b64 a, .param .b32 b, .param .b32 c, .param .b32 d, .param .b64 e)
{
.reg .b64 %rd<2>;
mov.u64 %rd1, a;
st.param.b32 [r], 0;
ret;
}
.visible .entry k()
{
{
.param .b64 __cp_a0;
.param .b32 __cp_a1;
.param .b32 __cp_a2;
.param .b32 __cp_a3;
.param .b64 __cp_a4;
.param .b32 __cp_ret;
st.param.b64 [__cp_a0], 0;
st.param.b32 [__cp_a1], 0;
st.param.b32 [__cp_a2], 0;
st.param.b32 [__cp_a3], 0;
st.param.b64 [__cp_a4], 0;
call (__cp_ret), p, (__cp_a0, __cp_a1, __cp_a2, __cp_a3, __cp_a4);
}
ret;
}
)");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(InlineProbeCalls(*parsed), 0u);
  EXPECT_THAT(PrintPtx(*parsed), HasSubstr("call (__cp_ret), p"));
}

}  // namespace
}  // namespace cuprobe
