// What the lowering emits for the GPU: the probe ABI signature, special
// registers for context fields, helper calls and the map table, eBPF's
// division rules, atomics, and unreachable code for paths the verifier
// excluded. Every PTX is also assembled by ptxas.
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loader/args.h"
#include "loader/compile_command.h"
#include "loader/compiler/compiler.h"
#include "probe/map_desc.h"
#include "probe/bundle.h"
#include "ptx_rewriter/site_summary.h"
#include "tests/compiler/test_util.h"

namespace cuprobe {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace cuprobe::testing;  // NOLINT

TEST(Lowering, ContextFieldsBecomeSpecialRegistersAndParameters) {
  auto r = CompileC(R"(
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u32); __type(value, u64);
         __uint(max_entries, 8); } m SEC(".maps");
SEC("cuprobe/mem/*") int p(struct cuprobe_ctx *ctx) {
  u32 k = ctx->block_idx[1] ^ ctx->thread_idx[2] ^ ctx->block_dim[0] ^ ctx->grid_dim[2] ^
          ctx->sm_id ^ ctx->warp_id ^ ctx->lane_id ^ ctx->active_mask ^ ctx->mem_space;
  cuprobe_map_add(&m, &k, ctx->global_timer - ctx->clock + ctx->mem_addr);
  return 0;
})");
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string& ptx = r->bundle.ptx;
  for (const char* sreg : {"%ctaid.y", "%tid.z", "%ntid.x", "%nctaid.z", "%smid", "%warpid",
                           "%laneid", "activemask.b32", "%globaltimer", "%clock64"}) {
    EXPECT_THAT(ptx, HasSubstr(sreg));
  }
  EXPECT_THAT(ptx, HasSubstr(".visible .func  (.param .b32 func_retval0) __cuprobe_probe_p(\n"
                             "\t.param .b64 __cuprobe_probe_p_param_0,\n"
                             "\t.param .b32 __cuprobe_probe_p_param_1,\n"
                             "\t.param .b32 __cuprobe_probe_p_param_2,\n"
                             "\t.param .b32 __cuprobe_probe_p_param_3,\n"
                             "\t.param .b64 __cuprobe_probe_p_param_4\n)"));
  EXPECT_THAT(ptx, HasSubstr(".extern .global .align 8 .b8 __cuprobe_map_table[];"));
  // A HASH map with a u32 key: the specialized entry point, key by value.
  EXPECT_THAT(ptx,
              HasSubstr(".extern .func  (.param .b64 func_retval0) __cuprobe_map_add_hash_word"));
  EXPECT_EQ(r->bundle.helpers, std::vector<std::string>{"__cuprobe_map_add_hash_word"});
  EXPECT_FALSE(r->bundle.programs[0].reads_args);
  EXPECT_TRUE(PtxasAccepts(ptx).ok()) << PtxasAccepts(ptx);
}

// cuprobe_grid_id() reads %gridid inline (64 bits, no helper call), and can
// key a map: blocks counted per launch.
TEST(Lowering, GridIdIsReadInlineAndKeysAMap) {
  auto r = CompileC(R"(
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u64); __type(value, u64);
         __uint(max_entries, 64); } blocks SEC(".maps");
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
  if (!cuprobe_is_block_leader(ctx)) return 0;
  u64 grid = cuprobe_grid_id();
  cuprobe_map_add(&blocks, &grid, 1);
  return 0;
})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->bundle.ptx, ContainsRegex("mov\\.u64 %rd[0-9]+, %gridid;"));
  EXPECT_EQ(r->bundle.helpers, std::vector<std::string>{"__cuprobe_map_add_hash_word"});
  EXPECT_TRUE(PtxasAccepts(r->bundle.ptx).ok()) << PtxasAccepts(r->bundle.ptx);
}

TEST(Lowering, ArgumentsAreReadWithACountCheck) {
  auto r = CompileC(R"(
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u32); __type(value, u64);
         __uint(max_entries, 8); } m SEC(".maps");
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
  u32 k = 0; cuprobe_map_add(&m, &k, ctx->args[3]); return 0;
})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->bundle.programs[0].reads_args);
  // args->count is compared with 3 (index < count) before value[3] is read.
  EXPECT_THAT(r->bundle.ptx, HasSubstr("[%rd"));
  EXPECT_THAT(r->bundle.ptx, HasSubstr("+32]"));
  EXPECT_TRUE(PtxasAccepts(r->bundle.ptx).ok());
}

TEST(Lowering, DivisionByZeroFollowsEbpfRules) {
  auto r = CompileC(R"(
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u32); __type(value, u64);
         __uint(max_entries, 8); } m SEC(".maps");
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
  u64 a = ctx->args[0], b = ctx->args[1];
  u32 k = 0; cuprobe_map_add(&m, &k, a / b + a % b); return 0;
})", /*keep_llvm=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  // The divisor is made safe with a select before udiv/urem.
  EXPECT_THAT(r->llvm_ir, HasSubstr("select i1"));
  EXPECT_THAT(r->llvm_ir, HasSubstr("udiv i64"));
  EXPECT_THAT(r->llvm_ir, HasSubstr("alloca i64"));  // registers before mem2reg
  EXPECT_TRUE(PtxasAccepts(r->bundle.ptx).ok());
}

TEST(Lowering, MapValueAtomicsBecomePtxAtomsStackAtomicsDoNot) {
  auto r = CompileC(R"(
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, u32); __type(value, u64);
         __uint(max_entries, 8); } m SEC(".maps");
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
  u32 k = ctx->lane_id & 7; u64 *v = bpf_map_lookup_elem(&m, &k); if (!v) return 0;
  u64 old = __sync_fetch_and_add(v, 3);
  __sync_val_compare_and_swap(v, old, old * 2);
  __sync_fetch_and_or(v, 1);
  return 0;
})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->bundle.ptx, HasSubstr("atom"));
  EXPECT_THAT(r->bundle.ptx, HasSubstr(".cas.b64"));
  EXPECT_THAT(r->bundle.ptx, Not(HasSubstr("atom.local")));
  EXPECT_TRUE(PtxasAccepts(r->bundle.ptx).ok()) << PtxasAccepts(r->bundle.ptx);
}

TEST(Lowering, GlobalDataUsesTheValueOfItsArrayMapAndRodataIsConstant) {
  auto r = CompileC(R"(
u64 counter = 0;
const volatile u64 step = 5;
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
  __sync_fetch_and_add(&counter, step); return 0;
})");
  ASSERT_TRUE(r.ok()) << r.status();
  // .bss is a one-entry ARRAY map; .rodata is compiled in (5 is an immediate).
  ASSERT_EQ(r->bundle.maps.size(), 1u);
  EXPECT_EQ(r->bundle.maps[0].name, ".bss");
  EXPECT_EQ(r->bundle.maps[0].type, uint32_t{CUPROBE_MAP_ARRAY});
  EXPECT_EQ(r->bundle.maps[0].max_entries, 1u);
  ASSERT_EQ(r->bundle.maps[0].value_type.fields.size(), 1u);
  EXPECT_EQ(r->bundle.maps[0].value_type.fields[0].name, "counter");
  // The value address is read inline from the descriptor's constant copy
  // (values at +56): no helper, no table load.
  EXPECT_TRUE(r->bundle.helpers.empty());
  EXPECT_THAT(r->bundle.ptx, HasSubstr("ld.const.u64 \t%rd8, [__cuprobe_map_descs+56];"));
  EXPECT_THAT(r->bundle.ptx, Not(HasSubstr("__cuprobe_map_table")));
  // A value address of 0 (the copy never filled) returns before any access.
  EXPECT_THAT(r->bundle.ptx, HasSubstr("setp.eq.s64 \t%p5, %rd8, 0;\n\t@%p5 bra \t$L__BB0_4;\n"
                                       "\tatom.add.u64 \t%rd7, [%rd8], 5;\n$L__BB0_4:"));
  EXPECT_THAT(r->bundle.ptx, Not(HasSubstr("__local_depot")));
  EXPECT_THAT(r->bundle.ptx, HasSubstr(", 5;"));
  EXPECT_TRUE(PtxasAccepts(r->bundle.ptx).ok());
}

TEST(Lowering, PerThreadLookupIsInlineAndTheStackStaysInRegisters) {
  // threadhist: the lookup of a PERTHREAD map is a few descriptor loads and
  // the id arithmetic; the key on the stack is read from the alloca, so the
  // 512-byte stack never becomes local memory.
  auto r = CompileC(R"(
struct { __uint(type, BPF_MAP_TYPE_PERTHREAD); __type(key, u32); __type(value, u64);
         __uint(max_entries, 1); } m SEC(".maps");
SEC("cuprobe/exit/*") int p(struct cuprobe_ctx *ctx) {
  u32 key = 0; u64 *count = bpf_map_lookup_elem(&m, &key); if (count) *count += 1; return 0;
})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->bundle.helpers.empty());
  EXPECT_THAT(r->bundle.ptx, Not(HasSubstr("__local_depot")));
  EXPECT_THAT(r->bundle.ptx, Not(HasSubstr("call")));
  for (const char* sreg : {"%ctaid.x", "%tid.x", "%ntid.x", "%nctaid.x"}) {
    EXPECT_THAT(r->bundle.ptx, HasSubstr(sreg));
  }
  // The id is checked against id_slots (desc +36); an id out of range is
  // counted in control.errors (control at desc +80, errors at +8).
  EXPECT_THAT(r->bundle.ptx, HasSubstr("+36]"));
  EXPECT_THAT(r->bundle.ptx, HasSubstr("+80]"));
  EXPECT_THAT(r->bundle.ptx, HasSubstr("red.relaxed.gpu.global.add.u64"));  // no return awaited
  // The map is fixed at the call site: its fields come from the module's
  // constant copy of the descriptors (abi.h 3.), and the table is not read.
  EXPECT_THAT(r->bundle.ptx, HasSubstr(".extern .const .align 8 .b8 __cuprobe_map_descs[];"));
  EXPECT_THAT(r->bundle.ptx, HasSubstr("ld.const.u32"));
  EXPECT_THAT(r->bundle.ptx, HasSubstr("[__cuprobe_map_descs+36]"));
  EXPECT_THAT(r->bundle.ptx, Not(HasSubstr("[__cuprobe_map_table")));
  EXPECT_TRUE(PtxasAccepts(r->bundle.ptx).ok()) << PtxasAccepts(r->bundle.ptx);
}

// An entry probe that reserves a 24-byte record in a 64 KiB ring after
// `first`, writes its first word and ends it with `finish`.
std::string RingProbe(std::string_view first, std::string_view finish) {
  return absl::StrCat(R"(
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 1 << 16); } events SEC(".maps");
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
  )", first, R"(
  u64 *e = bpf_ringbuf_reserve(&events, 24, 0);
  if (!e) return 0;
  e[0] = ctx->global_timer;
  )", finish, R"(
  return 0;
})");
}

// Whether `ptx` adds with `red` to the register that holds `base` + offset.
bool RedAt(const std::string& ptx, const std::string& base, int offset) {
  const std::string operands = absl::StrCat(", ", base, ", ", offset, ";");
  for (size_t at = ptx.find(operands); at != std::string::npos;
       at = ptx.find(operands, at + 1)) {
    const size_t line = ptx.rfind('\n', at) + 1;
    const std::string_view add = "\tadd.s64 \t";
    if (ptx.compare(line, add.size(), add) != 0) continue;
    const std::string reg = ptx.substr(line + add.size(), at - line - add.size());
    if (absl::StrContains(ptx, absl::StrCat("red.relaxed.gpu.global.add.u64 [", reg, "]"))) {
      return true;
    }
  }
  return false;
}

// The first group of `pattern`'s first match in `ptx`, or "".
std::string FirstGroup(const std::string& ptx, const char* pattern) {
  std::smatch m;
  return std::regex_search(ptx, m, std::regex(pattern)) ? m[1].str() : std::string();
}

// The register that holds the calling SM's counter shard in a ring
// reserve: the base of the full hint's load (+16384, through L1).
std::string HintShard(const std::string& ptx) {
  return FirstGroup(ptx, R"(ld\.global\.u64 \t%rd[0-9]+, \[(%rd[0-9]+)\+16384\];)");
}

TEST(Lowering, RingReserveDropsInlineWhileTheSmsFullHintHolds) {
  // kernel_trace's reserve: the descriptor's fields from the constant copy
  // (the ring is the only map the probe uses: slot 0), the SM's hint (its
  // line in the hint array after the counter shards: + 16384) with a plain
  // load, the drop counted in the SM's counter shard (+16 records, +24
  // bytes); the helper for everything else.
  auto r = CompileC(RingProbe("", "bpf_ringbuf_submit(e, 0);"));
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string& ptx = r->bundle.ptx;
  EXPECT_THAT(ptx, HasSubstr("ld.const.u64 \t%rd2, [__cuprobe_map_descs+112];"));  // aux
  EXPECT_THAT(ptx, HasSubstr("[__cuprobe_map_descs+8];"));                        // type
  EXPECT_THAT(ptx, ContainsRegex("mov\\.u32 %r[0-9]+, %smid;"));
  const std::string shard = HintShard(ptx);  // the hint, through L1
  ASSERT_FALSE(shard.empty()) << ptx;
  EXPECT_THAT(ptx, HasSubstr("%globaltimer"));
  // Counted with `red`: the dropping warp does not wait for the adds.
  EXPECT_TRUE(RedAt(ptx, shard, 16));  // records dropped
  EXPECT_TRUE(RedAt(ptx, shard, 24));  // their bytes
  // The bytes: a fixed record size (32 bytes) times the lanes, with no
  // redux.sync for the dropping warp to wait on.
  EXPECT_THAT(ptx, ContainsRegex("mul\\.wide\\.u32 \t%rd[0-9]+, %r[0-9]+, 32;"));
  EXPECT_THAT(ptx, Not(HasSubstr("redux.sync")));
  EXPECT_THAT(ptx, HasSubstr("call.uni (retval0), \n\t__cuprobe_ringbuf_reserve,"));
  EXPECT_TRUE(PtxasAccepts(ptx).ok()) << PtxasAccepts(ptx);
}

TEST(Lowering, RingDropsOfRecordSizesThatDifferBetweenLanesAreSummed) {
  // Two paths reach the reserve with different sizes: the dropping warp's
  // bytes are the lanes' sizes summed with redux.sync.
  auto r = CompileC(R"(
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 1 << 16); } events SEC(".maps");
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
  u64 *e;
  if (ctx->thread_idx[0] & 1) e = bpf_ringbuf_reserve(&events, 24, 0);
  else e = bpf_ringbuf_reserve(&events, 8, 0);
  if (!e) return 0;
  e[0] = ctx->global_timer;
  bpf_ringbuf_submit(e, 0);
  return 0;
})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->bundle.ptx, HasSubstr("redux.sync.add.s32"));
  EXPECT_TRUE(PtxasAccepts(r->bundle.ptx).ok()) << PtxasAccepts(r->bundle.ptx);
}

TEST(Lowering, ALoneLaneReservesInlineWhileItsRecordFits) {
  // kernel_trace's block leader (abi.h 9.): the cursors and the refresh
  // window from the control block whose address the constant copy holds
  // (+80), one fetch-and-add of
  // the 32-byte record (24 + header, rounded to 8) on the head (+16), the
  // record counted in the SM's shard (+8) and its span reset (hint line,
  // + 16392), the
  // length into header word 0; anything else ends in the helper, with the
  // position and the tail.
  auto r = CompileC(RingProbe("if (!cuprobe_is_block_leader(ctx)) return 0;",
                              "bpf_ringbuf_submit(e, 0);"));
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string& ptx = r->bundle.ptx;
  EXPECT_THAT(ptx, HasSubstr("popc.b32"));                                  // one lane
  EXPECT_THAT(ptx, HasSubstr("[__cuprobe_map_descs+40];"));                 // capacity - 1
  EXPECT_THAT(ptx, HasSubstr("[__cuprobe_map_descs+80];"));                 // control
  // The head and the cached tail in one load (+16); the refresh window
  // (+56) only when the ring is over half full.
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(ptx, "ld.relaxed.gpu.global.v2.b64")).size(),
            2u);
  // A ring flagged RING_SPECULATIVE (bit 30 of the flags at +12: 64 in byte 15)
  // loads neither: the consumer's tail (ring_host, +96 in the constant
  // copy, then +64) and the SM's span (hint line +8: 16392) instead, the
  // same fetch-and-add after them.
  EXPECT_THAT(ptx, ContainsRegex("\\[__cuprobe_map_descs\\+12\\];\n\tand\\.b32\\s+%r[0-9]+, "
                                 "%r[0-9]+, 1073741824;|\\[__cuprobe_map_descs\\+15\\];\n\t"
                                 "and\\.b16\\s+%rs[0-9]+, %rs[0-9]+, 64;"));
  const std::string ring_host =
      FirstGroup(ptx, R"(ld\.const\.u64 \t(%rd[0-9]+), \[__cuprobe_map_descs\+96\];)");
  ASSERT_FALSE(ring_host.empty()) << ptx;
  EXPECT_THAT(ptx, HasSubstr(absl::StrCat(", ", ring_host, ", 64;")));
  const std::string shard = HintShard(ptx);
  ASSERT_FALSE(shard.empty()) << ptx;
  EXPECT_THAT(ptx, HasSubstr(absl::StrCat(", [", shard, "+16392];")));  // the span
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(ptx, "ld.relaxed.gpu.global.b64")).size(), 3u)
      << "the refresh window and the consumer's tail";
  EXPECT_THAT(ptx, HasSubstr("], 32;"));  // the fetch-and-add of one record on the head
  EXPECT_TRUE(RedAt(ptx, shard, 8));  // reserved, in the SM's counter shard
  EXPECT_THAT(ptx, HasSubstr(", 16392;\n\t// begin inline asm\n\tst.relaxed.gpu.global.b64"));  // span reset
  EXPECT_THAT(ptx, HasSubstr(", 24;\n\tst.global.u32"));  // header word 0
  EXPECT_THAT(ptx, HasSubstr("call.uni (retval0), \n\t__cuprobe_ringbuf_reserve_at,"));
  // The head's fetch-and-add; drops (2) and the reserved count as `red`.
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(ptx, "atom.global.add.u64")).size(), 2u);
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(ptx, "red.relaxed.gpu.global.add.u64")).size(),
            4u);
  EXPECT_EQ(r->bundle.helpers,
            (std::vector<std::string>{"__cuprobe_ringbuf_reserve", "__cuprobe_ringbuf_reserve_at"}));
  EXPECT_TRUE(PtxasAccepts(ptx).ok()) << PtxasAccepts(ptx);
}

TEST(Lowering, SubmitAndDiscardCommitInline) {
  // RingFinishRecord without the call: header word 1 (the body's address
  // - 4) gets COMMIT (0x80000000), or COMMIT | DISCARD (0xC0000000), with a
  // system-scope release store.
  auto r = CompileC(RingProbe(
      "", "if (ctx->lane_id & 1) bpf_ringbuf_discard(e, 0); else bpf_ringbuf_submit(e, 0);"));
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string& ptx = r->bundle.ptx;
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(ptx, "st.release.sys.b32")).size(), 3u);
  EXPECT_THAT(ptx, HasSubstr("-2147483648;"));  // COMMIT
  EXPECT_THAT(ptx, HasSubstr("-1073741824;"));  // COMMIT | DISCARD
  EXPECT_THAT(ptx, HasSubstr(", -4;"));         // word 1, before the body
  EXPECT_THAT(ptx, Not(HasSubstr("__cuprobe_ringbuf_submit")));
  EXPECT_THAT(ptx, Not(HasSubstr("__cuprobe_ringbuf_discard")));
  EXPECT_TRUE(PtxasAccepts(ptx).ok()) << PtxasAccepts(ptx);
}

TEST(Lowering, TheDiagnosticCommitScopeChangesOnlyTheCommitStore) {
  // CUPROBE_DIAG_RING_COMMIT, for measuring the system-scope release: the
  // commit becomes a relaxed system-scope or a GPU-scope release store.
  for (const auto& [value, store] : {std::pair<const char*, const char*>{"relaxed",
                                                                         "st.relaxed.sys.b32"},
                                     {"gpu", "st.release.gpu.b32"}}) {
    RingLowering ring;
    ring.commit = value;
    auto r = CompileC(RingProbe("", "bpf_ringbuf_submit(e, 0);"), false, ring);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_THAT(r->bundle.ptx, HasSubstr(store)) << value;
    EXPECT_THAT(r->bundle.ptx, Not(HasSubstr("st.release.sys.b32"))) << value;
    EXPECT_TRUE(PtxasAccepts(r->bundle.ptx).ok()) << value;
  }
}

// The CLI's options from the environment, through its lookup.
TEST(ProbeCompileOptions, FromTheEnvironmentThroughTheLookup) {
  const ProbeCompileOptions none =
      ProbeCompileOptions::FromEnvironment([](const char*) -> const char* { return nullptr; });
  EXPECT_TRUE(none.clang.empty() && none.include_dir.empty());
  EXPECT_TRUE(none.ring.inline_reservations);
  EXPECT_TRUE(ClangPath(none).find("clang") != std::string::npos) << ClangPath(none);
  const ProbeCompileOptions set =
      ProbeCompileOptions::FromEnvironment([](const char* name) -> const char* {
        const std::string n = name;
        if (n == "CUPROBE_CLANG") return "/opt/clang";
        if (n == "CUPROBE_INCLUDE_DIR") return "/opt/include";
        if (n == "CUPROBE_RING_INLINE") return "0";
        if (n == "CUPROBE_DIAG_RING_COMMIT") return "gpu";
        if (n == "CUPROBE_DIAG_RING_DROP") return "always";
        if (n == "CUPROBE_UNIFORM_ADDS") return "0";
        return nullptr;
      });
  EXPECT_EQ(ClangPath(set), "/opt/clang");
  EXPECT_EQ(ProbeIncludeDir(set), "/opt/include");
  EXPECT_FALSE(set.ring.inline_reservations);
  EXPECT_EQ(set.ring.commit, "gpu");
  EXPECT_EQ(set.ring.drop, "always");
  EXPECT_TRUE(none.maps.uniform_adds);
  EXPECT_FALSE(set.maps.uniform_adds);
}

TEST(Lowering, RecordFieldsAreStoredEightBytesAtATime) {
  // kernel_trace's record: a u64 and six u32 fields. The body is 8-byte
  // aligned, so each pair of adjacent u32 fields is one vector store: four
  // stores into host memory instead of seven.
  auto r = CompileC(R"(
struct rec { u64 t; u32 a, b, c, d, e, f; };
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 1 << 16); } events SEC(".maps");
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
  struct rec *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) return 0;
  e->t = ctx->global_timer;
  e->a = ctx->kernel_id; e->b = ctx->sm_id;
  e->c = ctx->block_idx[0]; e->d = ctx->block_idx[1];
  e->e = ctx->block_idx[2]; e->f = 0;
  bpf_ringbuf_submit(e, 0);
  return 0;
})");
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string& ptx = r->bundle.ptx;
  EXPECT_THAT(ptx, HasSubstr("and.b64"));  // the reserved address, known 8-aligned
  EXPECT_THAT(ptx, HasSubstr("st.u64 \t[%rd"));
  for (const char* at : {"+8]", "+16]", "+24]"}) {
    EXPECT_THAT(ptx, HasSubstr(absl::StrCat(at, ", {"))) << "a vector store at " << at;
  }
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(ptx, "st.v2.u32")).size(), 4u);
  EXPECT_THAT(ptx, Not(HasSubstr("\tst.u32")));
  EXPECT_TRUE(PtxasAccepts(ptx).ok()) << PtxasAccepts(ptx);
}

TEST(Lowering, EachMapTypeGetsItsSpecializedEntryPoint) {
  auto r = CompileC(R"(
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, u32); __type(value, u64);
         __uint(max_entries, 8); } arr SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_PERTHREAD); __type(key, u32); __type(value, u64);
         __uint(max_entries, 1); } pt SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_PERWARP); __type(key, u32); __type(value, u64);
         __uint(max_entries, 1); } pw SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_PERSM); __type(key, u32); __type(value, u64);
         __uint(max_entries, 1); } ps SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u64); __type(value, u64);
         __uint(max_entries, 8); } h8 SEC(".maps");
struct wide { u64 a, b; };
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, struct wide); __type(value, u64);
         __uint(max_entries, 8); } h16 SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HIST_LOG2); __uint(max_entries, 65); } lg SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HIST_LINEAR); __uint(max_entries, 10);
         __uint(map_extra, CUPROBE_HIST_LINEAR_RANGE(0, 4)); } ln SEC(".maps");
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
  u32 k = ctx->lane_id; u64 k8 = ctx->global_timer; struct wide w = {k8, 1};
  cuprobe_map_add(&arr, &k, 1); cuprobe_map_add(&pt, &k, 1);
  cuprobe_map_add(&pw, &k, 1); cuprobe_map_add(&ps, &k, 1);
  cuprobe_map_add(&h8, &k8, 1); cuprobe_map_add(&h16, &w, 1);
  u64 *v = bpf_map_lookup_elem(&h8, &k8); u64 *x = bpf_map_lookup_elem(&h16, &w);
  cuprobe_hist_add(&lg, k8, 1); cuprobe_hist_add(&ln, k8, 1);
  return (v ? 1 : 0) + (x ? 1 : 0);
})");
  ASSERT_TRUE(r.ok()) << r.status();
  // PERTHREAD's add is inline (a relaxed atomic), every other one calls the
  // map type's entry point.
  EXPECT_EQ(r->bundle.helpers,
            (std::vector<std::string>{
                "__cuprobe_hist_add_linear", "__cuprobe_hist_add_log2", "__cuprobe_map_add_array",
                "__cuprobe_map_add_hash_2word", "__cuprobe_map_add_hash_word", "__cuprobe_map_add_persm",
                "__cuprobe_map_add_perwarp", "__cuprobe_map_lookup_hash",
                "__cuprobe_map_lookup_hash_word"}));
  EXPECT_TRUE(PtxasAccepts(r->bundle.ptx).ok()) << PtxasAccepts(r->bundle.ptx);
}

TEST(Lowering, SmallHashKeysPassByValueWideOnesByAddress) {
  // mem_trace: an 8-byte struct key built on the stack goes by value, so the
  // stack stays in registers; so does mem_regions' 16-byte key (two words);
  // a 24-byte key needs the stack's address.
  auto compile = [](const std::string& key) {
    return CompileC("struct key { " + key + R"( };
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, struct key); __type(value, u64);
         __uint(max_entries, 64); } m SEC(".maps");
SEC("cuprobe/mem/*") int p(struct cuprobe_ctx *ctx) {
  struct key k = {ctx->kernel_id, ctx->mem_kind};
  cuprobe_map_add(&m, &k, 1); cuprobe_map_add(&m, &k, ctx->mem_size); return 0;
})");
  };
  for (const auto& [key, helper, stack] :
       {std::tuple<const char*, const char*, bool>{"u32 kernel, kind;",
                                                   "__cuprobe_map_add_hash_word", false},
        {"u32 kernel, kind; u64 region;", "__cuprobe_map_add_hash_2word", false},
        {"u32 kernel, kind, region;", "__cuprobe_map_add_hash_2word", false},
        {"u64 kernel, kind, region;", "__cuprobe_map_add_hash", true}}) {
    SCOPED_TRACE(key);
    auto r = compile(key);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->bundle.helpers, std::vector<std::string>{helper});
    EXPECT_EQ(r->bundle.ptx.find("__local_depot") != std::string::npos, stack);
    EXPECT_TRUE(PtxasAccepts(r->bundle.ptx).ok());
  }
}

TEST(Lowering, ACallSiteWhoseMapDiffersBetweenPathsUsesTheGenericHelper) {
  auto r = CompileC(R"(
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, u32); __type(value, u64);
         __uint(max_entries, 8); } a SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u32); __type(value, u64);
         __uint(max_entries, 8); } b SEC(".maps");
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
  u32 k = ctx->lane_id;
  void *m = ctx->lane_id & 1 ? (void *)&a : (void *)&b;
  cuprobe_map_add(m, &k, 1);
  return 0;
})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->bundle.helpers, std::vector<std::string>{"__cuprobe_map_add"});
  EXPECT_TRUE(PtxasAccepts(r->bundle.ptx).ok());
}

// `cuprobe run -p a -p b`: several objects in one bundle. Each program keeps
// its own maps and read-only data, clashing names are made distinct, and
// the PTX assembles.
TEST(Lowering, SeveralObjectsCompileIntoOneBundle) {
  // a prints and reads its .rodata; b only counts (summary code); c reads a
  // .rodata of the same name as a's.
  const std::string a_src = R"(#include "cuprobe/probe.h"
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, u32); __type(value, u64);
         __uint(max_entries, 4); } counts SEC(".maps");
const volatile u32 table[4] = {0, 1, 2, 3};
SEC("cuprobe/entry/*") int count(struct cuprobe_ctx *ctx) {
  u32 k = table[ctx->lane_id & 3]; cuprobe_map_add(&counts, &k, 1); bpf_printk("a %d", k);
  return 0;
})";
  const std::string b_src = R"(#include "cuprobe/probe.h"
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u64); __type(value, u64);
         __uint(max_entries, 64); } counts SEC(".maps");
SEC("cuprobe/exit/*") int count(struct cuprobe_ctx *ctx) {
  u64 k = ctx->kernel_id; cuprobe_map_add(&counts, &k, 1); return 0;
})";
  const std::string c_src = R"(#include "cuprobe/probe.h"
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, u32); __type(value, u64);
         __uint(max_entries, 4); } seen SEC(".maps");
const volatile u32 table[4] = {3, 2, 1, 0};
SEC("cuprobe/mem/*") int look(struct cuprobe_ctx *ctx) {
  u32 k = table[ctx->lane_id & 3]; cuprobe_map_add(&seen, &k, 1); return 0;
})";
  absl::StatusOr<std::vector<uint8_t>> a = CompileProbeSource(a_src);
  absl::StatusOr<std::vector<uint8_t>> b = CompileProbeSource(b_src);
  absl::StatusOr<std::vector<uint8_t>> c = CompileProbeSource(c_src);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status() << b.status() << c.status();
  const ProbeObject inputs[] = {{*a, "a.bpf.c"}, {*b, "dir/b.bpf.c"}, {*c, "c.bpf.c"}};
  absl::StatusOr<CompileResult> r = CompileObjects(inputs, ProbeCompileOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  const ProbeBundle& bundle = r->bundle;
  EXPECT_EQ(bundle.source_name, "a.bpf.c+dir/b.bpf.c+c.bpf.c");
  ASSERT_EQ(bundle.programs.size(), 3u);
  EXPECT_EQ(bundle.programs[0].attach, AttachKind::kEntry);
  EXPECT_EQ(bundle.programs[1].attach, AttachKind::kExit);
  EXPECT_EQ(bundle.programs[2].attach, AttachKind::kMemory);
  EXPECT_NE(bundle.programs[0].ptx_function, bundle.programs[1].ptx_function);
  // Maps: a's counts, b's counts (renamed), c's seen, the one printk ring.
  ASSERT_EQ(bundle.maps.size(), 4u);
  EXPECT_EQ(bundle.maps[0].name, "counts");
  EXPECT_EQ(bundle.maps[0].type, static_cast<uint32_t>(CUPROBE_MAP_ARRAY));
  EXPECT_EQ(bundle.maps[1].name, "b.counts");
  EXPECT_EQ(bundle.maps[1].type, static_cast<uint32_t>(CUPROBE_MAP_HASH));
  EXPECT_EQ(bundle.maps[2].name, "seen");
  EXPECT_EQ(bundle.maps[3].name, CUPROBE_PRINTK_MAP_NAME);
  EXPECT_EQ(bundle.printk_formats, (std::vector<std::string>{"a %d"}));
  // a's and c's tables are two constants, not one.
  EXPECT_THAT(bundle.ptx, HasSubstr("__cuprobe_ro_"));
  EXPECT_THAT(bundle.ptx, HasSubstr("__cuprobe_ro2_"));
  EXPECT_TRUE(PtxasAccepts(bundle.ptx).ok()) << bundle.ptx;
  // b's add targets table slot 1, though b's object numbers it 0: run at a
  // site, its summary names map 1.
  ASSERT_FALSE(bundle.programs[1].summary_code.empty());
  ASSERT_EQ(bundle.programs[1].summary_maps.size(), 1u);
  EXPECT_EQ(bundle.programs[1].summary_maps[0].second, 1u);
  SiteConstants site;
  site.attach = AttachKind::kExit;
  site.kernel_id = 5;
  std::optional<std::vector<SiteAdd>> adds = SummarizeSite(bundle.programs[1], bundle.maps, site);
  ASSERT_TRUE(adds.has_value());
  ASSERT_EQ(adds->size(), 1u);
  EXPECT_EQ((*adds)[0].map, 1u);
  EXPECT_EQ((*adds)[0].key, (std::vector<uint8_t>{5, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ((*adds)[0].delta, 1u);
}

TEST(Lowering, MapsThatProbesOnlyAddToAreMarkedAddOnly) {
  // A probe may not declare the flag itself: the compiler decides.
  auto r = CompileC(R"(
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u64); __type(value, u64);
         __uint(max_entries, 64); __uint(map_flags, 0x80000000); } only_added SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u64); __type(value, u64);
         __uint(max_entries, 64); __uint(map_flags, 0x80000000); } also_read SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HIST_LOG2); __uint(max_entries, 65); } hist SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, u32); __type(value, u64);
         __uint(max_entries, 4); } updated SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, u32); __type(value, u64);
         __uint(max_entries, 4); } unused SEC(".maps");
u64 total;  /* .bss: read and written directly */
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
  u64 k = ctx->kernel_id; u32 i = 0; u64 one = 1;
  cuprobe_map_add(&only_added, &k, 1);
  cuprobe_map_add(&also_read, &k, 1);
  u64 *v = bpf_map_lookup_elem(&also_read, &k);
  cuprobe_hist_add(&hist, k, 1);
  bpf_map_update_elem(&updated, &i, &one, 0);
  cuprobe_map_add(&updated, &i, 1);
  total += 1;
  return v ? 1 : 0;
})");
  ASSERT_TRUE(r.ok()) << r.status();
  std::map<std::string, bool> add_only;
  for (const MapSpec& m : r->bundle.maps) add_only[m.name] = (m.flags & CUPROBE_MAP_F_ADD_ONLY) != 0;
  EXPECT_TRUE(add_only.at("only_added"));
  EXPECT_FALSE(add_only.at("also_read")) << "looked up: its value must be one copy";
  EXPECT_TRUE(add_only.at("hist"));
  EXPECT_FALSE(add_only.at("updated"));
  EXPECT_FALSE(add_only.at("unused"));
  EXPECT_FALSE(add_only.at(".bss"));
}

TEST(Lowering, PrintkWritesARecordIntoTheImplicitRingBuffer) {
  auto r = CompileC(R"(
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
  bpf_printk("sm %u lane %u", ctx->sm_id, ctx->lane_id);
  bpf_printk("second");
  return 0;
})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->bundle.printk_formats.size(), 2u);
  EXPECT_EQ(r->bundle.printk_formats[0], "sm %u lane %u");
  EXPECT_EQ(r->bundle.printk_formats[1], "second");
  ASSERT_EQ(r->bundle.maps.size(), 1u);
  EXPECT_EQ(r->bundle.maps[0].name, CUPROBE_PRINTK_MAP_NAME);
  EXPECT_EQ(r->bundle.maps[0].type, uint32_t{CUPROBE_MAP_RINGBUF});
  EXPECT_THAT(r->bundle.ptx, HasSubstr("__cuprobe_ringbuf_output"));
  EXPECT_TRUE(PtxasAccepts(r->bundle.ptx).ok());
}

TEST(Lowering, UnreachedCodeIsDropped) {
  // kind is a constant per program: the mem branch is never verified and
  // never emitted.
  auto r = CompileC(R"(
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u32); __type(value, u64);
         __uint(max_entries, 8); } m SEC(".maps");
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) {
  u32 k = 1;
  if (ctx->kind == CUPROBE_ATTACH_MEM) cuprobe_hist_add(&m, 1, 1);
  else cuprobe_map_add(&m, &k, 1);
  return 0;
})");
  ASSERT_TRUE(r.ok()) << r.status();  // hist_add on a HASH would be rejected if reached
  EXPECT_THAT(r->bundle.ptx, Not(HasSubstr("__cuprobe_hist_add")));
}

}  // namespace
}  // namespace cuprobe

namespace cuprobe {
namespace {

using ::testing::HasSubstr;

TEST(ProbeHeader, CompatibleWithLibbpfHeadersInEitherOrder) {
  constexpr char kBody[] = R"(
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u32); __type(value, u64);
         __uint(max_entries, 8); } m SEC(".maps");
SEC("kprobe/vec_add") int p(struct cuprobe_ctx *ctx) {
  u32 k = 0; u64 *v = bpf_map_lookup_elem(&m, &k); if (v) *v += 1;
  bpf_printk("k=%d", k); return 0;
}
char LICENSE[] SEC("license") = "GPL";
)";
  for (const char* includes :
       {"#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n#include \"cuprobe/probe.h\"\n",
        "#include <linux/bpf.h>\n#include \"cuprobe/probe.h\"\n#include <bpf/bpf_helpers.h>\n"}) {
    auto object = testing::CompileProbeSource(absl::StrCat(includes, kBody));
    ASSERT_TRUE(object.ok()) << includes << object.status();
    auto r = CompileObject(*object, "probe.bpf.c", ProbeCompileOptions{});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->bundle.programs.at(0).kernel_glob, "vec_add");
  }
}

TEST(CompileCommand, ParsesAndWritesABundleThatReadsBack) {
  // A folder of this run's own: two runs on one machine do not share files.
  std::string dir = (std::filesystem::temp_directory_path() / "cuprobe-compile-cmd-XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string out = dir + "/kernel_trace.cpb";
  absl::StatusOr<CliArgs> args = ParseArgs(
      {"cuprobe", "compile", std::string(CUPROBE_SOURCE_DIR) + "/samples/kernel_trace/kernel_trace.bpf.c",
       "-o", out, "--emit-ptx", "--max-insns", "500", "-DUNUSED=1"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->command, Command::kCompile);
  EXPECT_EQ(args->compile.max_insns, 500u);
  EXPECT_TRUE(args->compile.emit_ptx);
  EXPECT_EQ(args->compile.clang_args, std::vector<std::string>{"-DUNUSED=1"});
  ASSERT_TRUE(RunCompile(args->compile).ok());
  std::ifstream in(out, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<ProbeBundle> b = ReadBundle(bytes);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->programs.size(), 1u);
  EXPECT_EQ(b->programs[0].name, "trace_block_start");
  EXPECT_EQ(b->maps.at(0).name, "block_events");
  EXPECT_EQ(b->maps.at(0).max_entries, 1u << 22);
  EXPECT_EQ(b->source_name, "kernel_trace.bpf.c");
  EXPECT_TRUE(testing::PtxasAccepts(b->ptx).ok());
  EXPECT_EQ(DefaultBundlePath("dir/x.bpf.c"), "dir/x.cpb");
  EXPECT_FALSE(ParseArgs({"cuprobe", "compile"}).ok());
  EXPECT_FALSE(ParseArgs({"cuprobe", "compile", "a.c", "b.c"}).ok());
  absl::Status missing = RunCompile(CompileArgs{.input = "/nonexistent/p.bpf.c"});
  EXPECT_THAT(std::string(missing.message()), HasSubstr("cannot open /nonexistent/p.bpf.c"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cuprobe
