// File: tests/ptx_rewriter/passes_site_counters_test.cc
//
// The rewriter's site counters (ptx_rewriter/site_summary.h,
// site_counter_pass.h): which probes the compiler ships summary code for,
// sites reduced to their keys and sizes, code that must stay a call, a
// counter shared by equal sites, mem_trace's counters flushed at every exit,
// threadhist's one thread-range record per launch, and the exits that keep
// their calls. Every rewritten module is also assembled by ptxas.
//
// Part of ptx_rewriter_passes_test (tests/ptx_rewriter/CMakeLists.txt); the
// golden files and the test bundle are in passes_test_util.h.

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/gpu/helpers_ptx.h"
#include "probe/bundle.h"
#include "probe/map_desc.h"
#include "ptx_rewriter/instrument.h"
#include "ptx_rewriter/ptx_parser.h"
#include "ptx_rewriter/site_summary.h"
#include "tests/ptx_rewriter/passes_test_util.h"
#include "tests/ptx_rewriter/ptx_test_util.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::cuprobe::testing::Count;
using ::cuprobe::testing::Golden;

std::vector<uint8_t> Key(uint32_t kernel_id, uint32_t kind) {
  std::vector<uint8_t> k(8, 0);
  std::memcpy(k.data(), &kernel_id, 4);
  std::memcpy(k.data() + 4, &kind, 4);
  return k;
}

TEST(SiteCountersTest, TheCompilerShipsSummaryCodeOnlyForConstantAdders) {
  EXPECT_FALSE(testing::CompiledProbeBundle("mem_trace").programs.at(0).summary_code.empty());
  // threadhist adds 1 to its thread's PERTHREAD slot (a thread-range add).
  EXPECT_FALSE(testing::CompiledProbeBundle("threadhist").programs.at(0).summary_code.empty());
  // kernel_trace reads thread ids and fills a ring: always called.
  EXPECT_TRUE(testing::CompiledProbeBundle("kernel_trace").programs.at(0).summary_code.empty());
}

TEST(SiteCountersTest, MemTraceSitesReduceToTheirKeysAndSizes) {
  const ProbeBundle b = testing::CompiledProbeBundle("mem_trace");
  ASSERT_EQ(b.maps.size(), 2u);
  SiteConstants site;
  site.attach = AttachKind::kMemory;
  site.kernel_id = 7;
  site.mem_info = CUPROBE_MEM_INFO(16, CUPROBE_SPACE_GLOBAL, CUPROBE_ACCESS_LOAD);
  site.site_index = 3;
  std::optional<std::vector<SiteAdd>> adds = SummarizeSite(b.programs[0], b.maps, site);
  ASSERT_TRUE(adds.has_value());
  const std::vector<SiteAdd> want = {SiteAdd{0, false, Key(7, CUPROBE_ACCESS_LOAD), 1},
                                     SiteAdd{1, false, Key(7, CUPROBE_ACCESS_LOAD), 16}};
  EXPECT_EQ(*adds, want);
  // The probe ignores shared memory: nothing to count there.
  site.mem_info = CUPROBE_MEM_INFO(4, CUPROBE_SPACE_SHARED, CUPROBE_ACCESS_STORE);
  adds = SummarizeSite(b.programs[0], b.maps, site);
  ASSERT_TRUE(adds.has_value());
  EXPECT_TRUE(adds->empty());
  // A map that is not add-only makes the site a call.
  ProbeBundle changed = b;
  changed.maps[1].flags &= ~CUPROBE_MAP_F_ADD_ONLY;
  site.mem_info = CUPROBE_MEM_INFO(4, CUPROBE_SPACE_GLOBAL, CUPROBE_ACCESS_STORE);
  EXPECT_FALSE(SummarizeSite(changed.programs[0], changed.maps, site).has_value());
}

// Summary code built by hand: 8-byte eBPF instructions.
void Emit(std::vector<uint8_t>* code, uint8_t op, uint8_t dst, uint8_t src, int16_t off,
          int32_t imm) {
  const uint8_t b[8] = {op,
                        static_cast<uint8_t>((src << 4) | dst),
                        static_cast<uint8_t>(off),
                        static_cast<uint8_t>(static_cast<uint16_t>(off) >> 8),
                        static_cast<uint8_t>(imm),
                        static_cast<uint8_t>(imm >> 8),
                        static_cast<uint8_t>(imm >> 16),
                        static_cast<uint8_t>(imm >> 24)};
  code->insert(code->end(), b, b + 8);
}

TEST(SiteCountersTest, CodeThatDependsOnMoreThanTheSiteOrMisbehavesIsCalled) {
  ProbeBundle b = testing::CompiledProbeBundle("mem_trace");
  ProbeProgram p = b.programs.at(0);
  SiteConstants site;
  site.attach = AttachKind::kMemory;
  site.mem_info = CUPROBE_MEM_INFO(4, CUPROBE_SPACE_GLOBAL, CUPROBE_ACCESS_LOAD);
  auto run = [&](std::vector<uint8_t> code) {
    p.summary_code = std::move(code);
    p.summary_maps.clear();
    return SummarizeSite(p, b.maps, site);
  };
  // r2 = ctx->thread_idx[0]; exit
  std::vector<uint8_t> code;
  Emit(&code, 0x61, 2, 1, 20, 0);
  Emit(&code, 0xb7, 0, 0, 0, 0);
  Emit(&code, 0x95, 0, 0, 0, 0);
  EXPECT_FALSE(run(code).has_value());
  // A load far outside the stack: refused, not performed.
  code.clear();
  Emit(&code, 0xbf, 2, 10, 0, 0);      // r2 = r10
  Emit(&code, 0x07, 2, 0, 0, 1 << 20);  // r2 += 1 MiB
  Emit(&code, 0x79, 3, 2, 0, 0);        // r3 = *(u64 *)(r2 + 0)
  Emit(&code, 0x95, 0, 0, 0, 0);
  EXPECT_FALSE(run(code).has_value());
  // An endless loop: the step limit ends it.
  code.clear();
  Emit(&code, 0x05, 0, 0, -1, 0);
  EXPECT_FALSE(run(code).has_value());
  // A jump out of the code.
  code.clear();
  Emit(&code, 0x05, 0, 0, 100, 0);
  EXPECT_FALSE(run(code).has_value());
  // Any other helper (ktime_get_ns).
  code.clear();
  Emit(&code, 0x85, 0, 0, 0, CUPROBE_HELPER_KTIME_GET_NS);
  Emit(&code, 0x95, 0, 0, 0, 0);
  EXPECT_FALSE(run(code).has_value());
  // Registers r11..r15 (4-bit fields, 11 registers): refused before the
  // register file is indexed (found by bundle_fuzz under UBSan).
  code.clear();
  Emit(&code, 0xb7, 15, 0, 0, 7);  // r15 = 7
  Emit(&code, 0x95, 0, 0, 0, 0);
  EXPECT_FALSE(run(code).has_value());
  code.clear();
  Emit(&code, 0xbf, 0, 13, 0, 0);  // r0 = r13
  Emit(&code, 0x95, 0, 0, 0, 0);
  EXPECT_FALSE(run(code).has_value());
  // Doing nothing at all is a summary: no adds.
  code.clear();
  Emit(&code, 0xb7, 0, 0, 0, 0);
  Emit(&code, 0x95, 0, 0, 0, 0);
  std::optional<std::vector<SiteAdd>> none = run(code);
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());
}

TEST(SiteCountersTest, TableSharesACounterBetweenEqualSites) {
  SiteCounterTable t;
  EXPECT_EQ(t.IndexOf({SiteAdd{0, false, {1, 2}, 1}}), 0u);
  EXPECT_EQ(t.IndexOf({SiteAdd{0, false, {1, 2}, 2}}), 1u);
  EXPECT_EQ(t.IndexOf({SiteAdd{0, true, {1, 2}, 1}}), 2u);
  EXPECT_EQ(t.IndexOf({SiteAdd{0, false, {1, 2}, 1}}), 0u);
  EXPECT_EQ(t.counters().size(), 3u);
}

TEST(SiteCountersTest, MemTraceBecomesCountersFlushedAtEveryExit) {
  const ProbeBundle bundle = testing::CompiledProbeBundle("mem_trace");
  InstrumentOptions options;
  options.helper_ptx = HelpersPtx();
  options.module_name = "passes_input.ptx";
  absl::StatusOr<InstrumentResult> r = InstrumentPtx(Golden("passes_input.ptx"), bundle, options);
  ASSERT_TRUE(r.ok()) << r.status();
  // `sites` (kernel 0): a 16-byte global load, two 4-byte atomics (atom and
  // red: one counter), an 8-byte global store and a guarded 4-byte generic
  // store. Shared, local and const accesses are not instrumented.
  ASSERT_EQ(r->site_counters.size(), 4u);
  EXPECT_EQ(r->site_counters[0].adds,
            (std::vector<SiteAdd>{SiteAdd{0, false, Key(0, CUPROBE_ACCESS_LOAD), 1},
                                  SiteAdd{1, false, Key(0, CUPROBE_ACCESS_LOAD), 16}}));
  EXPECT_EQ(r->site_counters[1].adds,
            (std::vector<SiteAdd>{SiteAdd{0, false, Key(0, CUPROBE_ACCESS_ATOMIC), 1},
                                  SiteAdd{1, false, Key(0, CUPROBE_ACCESS_ATOMIC), 4}}));
  EXPECT_EQ(r->site_counters[2].adds[1].delta, 8u);
  EXPECT_EQ(r->site_counters[3].adds[1].delta, 4u);
  ASSERT_FALSE(r->instrumented.empty());
  EXPECT_EQ(r->instrumented[0].stats.counted_calls, 5u);
  const std::string& ptx = r->ptx;
  EXPECT_EQ(Count(ptx, "call (__cp_ret)"), 0) << ptx;
  EXPECT_THAT(ptx, HasSubstr(".visible .global .align 8 .u64 __cuprobe_site_counts;"));
  EXPECT_THAT(ptx, HasSubstr("@%p2 add.u64 %__cp_sc3, %__cp_sc3, 1;"));  // the guarded store
  // Zeroed before the first increment; each of the 3 exits (the guarded
  // ones under their guards) goes to the one flush, which returns.
  EXPECT_LT(ptx.find("mov.u64 %__cp_sc0, 0;"), ptx.find("add.u64 %__cp_sc0"));
  EXPECT_THAT(ptx, HasSubstr("@%p1 bra $__cp_sc_flush;\n\t@%p1 ret;"));
  EXPECT_THAT(ptx, HasSubstr("@%p2 bra $__cp_sc_flush;\n\t@%p2 exit;"));
  EXPECT_EQ(Count(ptx, "bra $__cp_sc_flush;"), 3);
  EXPECT_THAT(ptx, HasSubstr("$__cp_sc_done:\n\tret;"));
  EXPECT_EQ(Count(ptx, "redux.sync.add.u32 %__cp_"), 2 + 3 * 4);  // fast + wide paths
  absl::StatusOr<std::string> ptxas = testing::RunPtxas(ptx);
  EXPECT_TRUE(ptxas.ok()) << ptxas.status() << "\n" << ptx;

  options.site_counters = false;
  absl::StatusOr<InstrumentResult> calls =
      InstrumentPtx(Golden("passes_input.ptx"), bundle, options);
  ASSERT_TRUE(calls.ok()) << calls.status();
  EXPECT_TRUE(calls->site_counters.empty());
  EXPECT_THAT(calls->ptx, Not(HasSubstr("__cp_sc")));
  EXPECT_EQ(Count(calls->ptx, "call (__cp_ret)"), 5);
}

// threadhist at exit: the same PERTHREAD add at every exit of every kernel
// is one thread-range counter, recorded once per launch at entry by the
// launch's first thread; the exits keep no call and no flush.
TEST(SiteCountersTest, ThreadhistExitsBecomeOneThreadRangeRecordPerLaunch) {
  ProbeBundle bundle = testing::CompiledProbeBundle("threadhist");
  ASSERT_EQ(bundle.programs.size(), 1u);
  ASSERT_EQ(bundle.programs[0].attach, AttachKind::kExit);
  InstrumentOptions options;
  options.helper_ptx = HelpersPtx();
  options.module_name = "passes_input.ptx";
  absl::StatusOr<InstrumentResult> r = InstrumentPtx(Golden("passes_input.ptx"), bundle, options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->site_counters.size(), 1u);
  EXPECT_EQ(r->site_counters[0].thread_ids, 1u << 20);  // the map's default ids per key
  EXPECT_EQ(r->site_counters[0].adds,
            (std::vector<SiteAdd>{SiteAdd{0, false, {0, 0, 0, 0}, 1}}));
  ASSERT_EQ(r->instrumented.size(), 2u);  // sites (3 exits) and empty (1)
  EXPECT_EQ(r->instrumented[0].stats.counted_calls, 3u);
  EXPECT_EQ(r->instrumented[1].stats.counted_calls, 1u);
  const std::string& ptx = r->ptx;
  EXPECT_EQ(Count(ptx, "call (__cp_ret)"), 0) << ptx;
  EXPECT_THAT(ptx, Not(HasSubstr("$__cp_sc_flush"))) << ptx;
  EXPECT_EQ(Count(ptx, "$__cp_tr_done:"), 2) << ptx;
  EXPECT_EQ(Count(ptx, "red.global.add.u64 [%__cp_d3+16], 1;"), 2) << ptx;
  EXPECT_EQ(Count(ptx, "red.global.max.u64 [%__cp_d1+8], %__cp_d3;"), 2) << ptx;
  EXPECT_THAT(ptx, HasSubstr("min.u64 %__cp_d3, %__cp_d2, 1048576;")) << ptx;
  absl::StatusOr<std::string> ptxas = testing::RunPtxas(ptx);
  EXPECT_TRUE(ptxas.ok()) << ptxas.status() << "\n" << ptx;
}

// Summary code that adds 1 to key ctx->site_index of PERTHREAD map 0.
std::vector<uint8_t> PerThreadAddKeyedBySite() {
  std::vector<uint8_t> code;
  Emit(&code, 0x61, 2, 1, 108, 0);   // r2 = *(u32 *)(r1 + 108): site index
  Emit(&code, 0x63, 10, 2, -4, 0);   // *(u32 *)(r10 - 4) = r2
  Emit(&code, 0x18, 1, 1, 0, 0);     // r1 = map 0 (ld_imm64, insn 2)
  Emit(&code, 0x00, 0, 0, 0, 0);
  Emit(&code, 0xbf, 2, 10, 0, 0);    // r2 = r10
  Emit(&code, 0x07, 2, 0, 0, -4);    // r2 += -4
  Emit(&code, 0xb7, 3, 0, 0, 1);     // r3 = 1
  Emit(&code, 0x85, 0, 0, 0, CUPROBE_HELPER_MAP_ADD);
  Emit(&code, 0xb7, 0, 0, 0, 0);
  Emit(&code, 0x95, 0, 0, 0, 0);
  return code;
}

// Exits that add to different slots (here: keyed by the exit's index) are
// not one range: each exit calls the probe. At entry the same code is one
// range (the site index is always 0 there). At a memory access a PERTHREAD
// add is never summarized (a thread may pass it any number of times).
TEST(SiteCountersTest, PerThreadAddsThatDifferBetweenExitsAreCalled) {
  ProbeBundle bundle = testing::CompiledProbeBundle("threadhist");
  bundle.maps.at(0).max_entries = 4;
  ProbeProgram& p = bundle.programs.at(0);
  p.summary_code = PerThreadAddKeyedBySite();
  p.summary_maps = {{2, 0}};
  InstrumentOptions options;
  options.helper_ptx = HelpersPtx();
  options.module_name = "passes_input.ptx";
  absl::StatusOr<InstrumentResult> r = InstrumentPtx(Golden("passes_input.ptx"), bundle, options);
  ASSERT_TRUE(r.ok()) << r.status();
  // `sites` calls at its 3 exits; `empty` has one exit: one range.
  ASSERT_EQ(r->instrumented.size(), 2u);
  EXPECT_EQ(r->instrumented[0].stats.counted_calls, 0u);
  EXPECT_EQ(r->instrumented[1].stats.counted_calls, 1u);
  EXPECT_EQ(Count(r->ptx, "call (__cp_ret)"), 3) << r->ptx;
  EXPECT_EQ(Count(r->ptx, "$__cp_tr_done:"), 1) << r->ptx;
  absl::StatusOr<std::string> ptxas = testing::RunPtxas(r->ptx);
  EXPECT_TRUE(ptxas.ok()) << ptxas.status();

  p.attach = AttachKind::kEntry;
  r = InstrumentPtx(Golden("passes_input.ptx"), bundle, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Count(r->ptx, "call (__cp_ret)"), 0) << r->ptx;
  EXPECT_EQ(Count(r->ptx, "$__cp_tr_done:"), 2) << r->ptx;
  ASSERT_EQ(r->site_counters.size(), 1u);
  EXPECT_EQ(r->site_counters[0].thread_ids, 1u << 20);

  SiteConstants site;
  site.attach = AttachKind::kMemory;
  site.mem_info = CUPROBE_MEM_INFO(4, CUPROBE_SPACE_GLOBAL, CUPROBE_ACCESS_LOAD);
  EXPECT_FALSE(SummarizeSite(p, bundle.maps, site).has_value());
  site.attach = AttachKind::kExit;
  EXPECT_TRUE(SummarizeSite(p, bundle.maps, site).has_value());
}

// A function that leaves its thread with `exit` takes the thread past
// every exit site of the kernel: such a module keeps the exit calls. So do
// the other ways a thread could leave unseen.
TEST(SiteCountersTest, ThreadsThatMayLeaveUnseenKeepTheExitCalls) {
  const ProbeBundle bundle = testing::CompiledProbeBundle("threadhist");
  const std::string ptx = R"(.version 8.0
.target sm_90
.address_size 64

.func quit()
{
	exit;
}

.visible .entry k(
	.param .u32 k_param_0
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<3>;
	ld.param.u32 %r1, [k_param_0];
	setp.eq.s32 %p1, %r1, 0;
	@%p1 bra $L__done;
	call.uni quit, ();
$L__done:
	ret;
}
)";
  InstrumentOptions options;
  options.helper_ptx = HelpersPtx();
  options.module_name = "quit.ptx";
  absl::StatusOr<InstrumentResult> r = InstrumentPtx(ptx, bundle, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Count(r->ptx, "call (__cp_ret)"), 1) << r->ptx;
  EXPECT_THAT(r->ptx, Not(HasSubstr("$__cp_tr_done"))) << r->ptx;
  EXPECT_TRUE(r->site_counters.empty());

  // A function only declared (an -rdc module's extern one could exit), and
  // a body whose threads run off its end (its only exit is guarded): the
  // exit calls stay.
  const std::string variants[] = {
      R"(.version 8.0
.target sm_90
.address_size 64
.extern .func quit();
.visible .entry k(
	.param .u32 k_param_0
)
{
	call.uni quit, ();
	ret;
}
)",
      R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry k(
	.param .u32 k_param_0
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<2>;
	ld.param.u32 %r1, [k_param_0];
	setp.eq.s32 %p1, %r1, 0;
	@%p1 ret;
}
)"};
  for (const std::string& text : variants) {
    r = InstrumentPtx(text, bundle, options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(Count(r->ptx, "call (__cp_ret)"), 1) << r->ptx;
    EXPECT_TRUE(r->site_counters.empty());
  }
}

}  // namespace
}  // namespace cuprobe
