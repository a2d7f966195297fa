// File: tests/compiler/lowering_adds_test.cc
//
// The lowering of map adds on the GPU: warp-uniform adds (one red.add by the
// first lane), lanes grouped by counter with match.any, HASH adds by key
// size, and cuprobe_clz (one clz.b64) with the site counters it keeps.
// Part of compiler_test (tests/compiler/CMakeLists.txt).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "cuprobe/abi.h"
#include "loader/compiler/compiler.h"
#include "probe/bundle.h"
#include "probe/map_desc.h"
#include "ptx_rewriter/site_summary.h"
#include "tests/compiler/test_util.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace cuprobe::testing;  // NOLINT

size_t Occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Warp-uniform adds: ARRAY and histogram adds whose fixed map's descriptor
// is in the constant bank become a vote (on the key; for a log2 histogram,
// the bucket) and one inline `red` by the first lane, and, for lanes that
// differ, a second vote (every lane's checks pass) and a match.any that
// groups them by counter, one `red` per group, next to the per-lane call.
// A HASH add of keys by address becomes a vote, the first lane's call
// (with delta x lanes), its result shuffled to the others, and the others'
// own calls where it failed; word and 2-word keys call their helper once
// (it groups lanes itself). CUPROBE_UNIFORM_ADDS=0 (and HASH keys past 32
// bytes) leave one per-lane call.
TEST(Lowering, WarpUniformAddsVoteThenAddOncePerWarp) {
  const std::string source = R"(
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, u32); __type(value, u64);
         __uint(max_entries, 8); } arr SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u64); __type(value, u64);
         __uint(max_entries, 8); } h8 SEC(".maps");
struct wide { u64 a, b; };
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, struct wide); __type(value, u64);
         __uint(max_entries, 8); } h16 SEC(".maps");
struct three { u64 a, b, c; };
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, struct three); __type(value, u64);
         __uint(max_entries, 8); } h24 SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HIST_LOG2); __uint(max_entries, 65); } lg SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HIST_LINEAR); __uint(max_entries, 10);
         __uint(map_extra, CUPROBE_HIST_LINEAR_RANGE(0, 4096)); } ln SEC(".maps");
struct huge { u64 a, b, c, d, e; };
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, struct huge); __type(value, u64);
         __uint(max_entries, 8); } h40 SEC(".maps");
SEC("cuprobe/mem/*") int p(struct cuprobe_ctx *ctx) {
  u32 k = ctx->mem_addr >> 7; u64 k8 = ctx->mem_addr >> 21;
  struct wide w = {k8, ctx->kernel_id}; struct three t = {k8, 1, 2};
  struct huge h = {k8, 1, 2, 3, 4};
  cuprobe_map_add(&arr, &k, 1); cuprobe_map_add(&h8, &k8, 1);
  cuprobe_map_add(&h16, &w, ctx->mem_size); cuprobe_map_add(&h24, &t, 1);
  cuprobe_map_add(&h40, &h, 1);
  cuprobe_hist_log2(&lg, ctx->mem_addr); cuprobe_hist_linear(&ln, ctx->mem_addr & 0xffff);
  return 0;
})";
  auto on = CompileC(source);
  ASSERT_TRUE(on.ok()) << on.status();
  const std::string& ptx = on->bundle.ptx;
  // (The log2 histogram's lanes vote on their bucket, 64 - clz(value);
  // the others' on the key. Two votes each for arr, lg and ln, one for h24.)
  EXPECT_EQ(Occurrences(ptx, "vote.sync.all.pred"), 7u) << ptx;
  EXPECT_EQ(Occurrences(ptx, "match.any.sync.b64"), 3u) << ptx;
  EXPECT_THAT(ptx, HasSubstr("clz.b64"));
  // The linear histogram's step, 4096, is a power of two: a shift, the
  // division behind a branch for other steps.
  EXPECT_THAT(ptx, HasSubstr("shr.u32"));
  EXPECT_EQ(Occurrences(ptx, "red.relaxed.gpu.global.add.u64"), 6u) << ptx;
  // h24: the first lane's call and the per-lane one (LLVM merges the
  // others' retry into it); h40, h8 and h16: one call.
  for (const char* helper : {"__cuprobe_map_add_hash_word", "__cuprobe_map_add_hash_2word"}) {
    EXPECT_EQ(Occurrences(ptx, absl::StrCat("call.uni (retval0), \n\t", helper, ", ")), 1u)
        << helper;
  }
  EXPECT_EQ(Occurrences(ptx, "call.uni (retval0), \n\t__cuprobe_map_add_hash, "), 3u) << ptx;
  EXPECT_TRUE(PtxasAccepts(ptx).ok()) << PtxasAccepts(ptx);

  MapLowering off;
  off.uniform_adds = false;
  auto called = CompileC(source, false, {}, off);
  ASSERT_TRUE(called.ok()) << called.status();
  EXPECT_THAT(called->bundle.ptx, Not(HasSubstr("vote.sync")));
  for (const char* helper : {"__cuprobe_map_add_hash_word", "__cuprobe_map_add_hash_2word"}) {
    EXPECT_EQ(Occurrences(called->bundle.ptx, absl::StrCat("call.uni (retval0), \n\t", helper, ", ")),
              1u)
        << helper;
  }
  EXPECT_EQ(Occurrences(called->bundle.ptx, "call.uni (retval0), \n\t__cuprobe_map_add_hash, "),
            2u);
  EXPECT_TRUE(PtxasAccepts(called->bundle.ptx).ok());
}

// A memory probe that adds 1 to slot 65 - cuprobe_clz(ctx->`field`) of an
// ARRAY: a one-liner's hist() slot.
std::string ClzSlotProbe(const std::string& field) {
  return absl::StrCat(R"(
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, u32); __type(value, u64);
         __uint(max_entries, 66); } slots SEC(".maps");
SEC("cuprobe/mem/*") int p(struct cuprobe_ctx *ctx) {
  u32 slot = 65 - cuprobe_clz(ctx->)", field, R"();
  cuprobe_map_add(&slots, &slot, 1);
  return 0;
})");
}

// cuprobe_clz() is one clz.b64, no helper call: a one-liner's hist() slot.
TEST(Lowering, ClzIsOneInstruction) {
  auto r = CompileC(ClzSlotProbe("mem_addr"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Occurrences(r->bundle.ptx, "clz.b64"), 1u) << r->bundle.ptx;
  EXPECT_THAT(r->bundle.ptx, Not(HasSubstr("shr.u64"))) << "no loop of shifts";
  EXPECT_TRUE(PtxasAccepts(r->bundle.ptx).ok()) << PtxasAccepts(r->bundle.ptx);
}

// A slot computed with cuprobe_clz from site constants still reduces to a
// site counter: the compiler ships the summary code, and the interpreter
// computes the call (hist(size) of a one-liner).
TEST(Lowering, ClzOfSiteConstantsKeepsTheSiteCounter) {
  auto r = CompileC(ClzSlotProbe("mem_size"));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(r->bundle.programs[0].summary_code.empty());
  SiteConstants site;
  site.attach = AttachKind::kMemory;
  site.mem_info = CUPROBE_MEM_INFO(8, CUPROBE_SPACE_GLOBAL, CUPROBE_ACCESS_LOAD);
  std::optional<std::vector<SiteAdd>> adds =
      SummarizeSite(r->bundle.programs[0], r->bundle.maps, site);
  ASSERT_TRUE(adds.has_value());
  ASSERT_EQ(adds->size(), 1u);
  // 65 - clz(8) = 5: the slot of [8, 16).
  EXPECT_EQ((*adds)[0].key, (std::vector<uint8_t>{5, 0, 0, 0}));
  EXPECT_EQ((*adds)[0].delta, 1u);
}

}  // namespace
}  // namespace cuprobe
