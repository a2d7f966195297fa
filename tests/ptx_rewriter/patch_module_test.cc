// File: tests/ptx_rewriter/patch_module_test.cc
//
// The patch backend's CPU side (include/cuprobe/abi.h, 10.): the map block
// pass on hand-written probe PTX and on every bundle the build compiles,
// the adapters (which kinds, which program bits, the flags -> kind table),
// the whole patch module compiled by ptxas --compile-as-tools-patch (and by
// nvJitLink, which refuses the mode), the compile cache and ProgramMask.
// (redux_pass_test.cc, in the same binary, tests the redux lowering.)
#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cuprobe/abi.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/gpu/helpers_ptx.h"
#include "probe/bundle.h"
#include "ptx_rewriter/compile_cache.h"
#include "ptx_rewriter/elf.h"
#include "ptx_rewriter/map_block_pass.h"
#include "ptx_rewriter/nvjitlink.h"
#include "ptx_rewriter/patch_adapters.h"
#include "ptx_rewriter/patch_module.h"
#include "ptx_rewriter/ptx_parser.h"
#include "tests/ptx_rewriter/ptx_test_util.h"

namespace cuprobe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A probe function `name` with the ABI signature and `body` after its
// declarations (registers %r<20>, %rd<20>, %p<4>).
std::string ProbeFunction(std::string_view name, std::string_view body) {
  return absl::StrCat(".visible .func (.param .b32 func_retval0) ", name, "(\n",
                      "\t.param .b64 ", name, "_param_0,\n\t.param .b32 ", name, "_param_1,\n",
                      "\t.param .b32 ", name, "_param_2,\n\t.param .b32 ", name, "_param_3,\n",
                      "\t.param .b64 ", name, "_param_4\n)\n{\n",
                      "\t.reg .pred %p<4>;\n\t.reg .b32 %r<20>;\n\t.reg .b64 %rd<20>;\n", body,
                      "\tmov.u32 %r0, 0;\n\tst.param.b32 [func_retval0+0], %r0;\n\tret;\n}\n");
}

constexpr char kHeader[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".extern .global .align 8 .b8 __cuprobe_map_table[];\n"
    ".extern .const .align 8 .b8 __cuprobe_map_descs[];\n";

// RunMapBlockPass over `ptx` with probe functions `probes`: the printed
// module, or the error.
absl::StatusOr<std::string> MapBlock(const std::string& ptx, std::vector<std::string> probes,
                                     uint32_t slots) {
  absl::StatusOr<Module> m = ParsePtx(ptx, "<test>");
  if (!m.ok()) return m.status();
  absl::Status s = RunMapBlockPass(*m, probes, slots);
  if (!s.ok()) return s;
  return PrintPtx(*m);
}

// The lines of `text`, whitespace-trimmed, without empty ones.
std::vector<std::string> Lines(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view l : absl::StrSplit(text, '\n')) {
    l = absl::StripAsciiWhitespace(l);
    if (!l.empty()) out.emplace_back(l);
  }
  return out;
}

TEST(MapBlockPassTest, RewritesEveryReferenceForm) {
  const std::string ptx = absl::StrCat(
      kHeader, ProbeFunction("probe", "\tld.const.u32 %r1, [__cuprobe_map_descs+8];\n"
                                      "\tld.const.u64 %rd1, [__cuprobe_map_descs];\n"
                                      "\tld.const.v2.u32 {%r2, %r3}, [__cuprobe_map_descs+136];\n"
                                      "\tld.global.nc.u64 %rd2, [__cuprobe_map_table+16];\n"
                                      "\tld.global.nc.u64 %rd3, [__cuprobe_map_table];\n"
                                      "\t@!%p1 ld.global.nc.u64 %rd4, [__cuprobe_map_table+8];\n"
                                      "\tmov.u64 %rd5, __cuprobe_map_table;\n"
                                      "\tadd.s64 %rd6, %rd5, 8;\n"));
  absl::StatusOr<std::string> out = MapBlock(ptx, {"probe"}, 3);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, Not(HasSubstr("__cuprobe_map_")));
  const std::vector<std::string> lines = Lines(*out);
  auto at = [&](std::string_view what) {
    return std::find(lines.begin(), lines.end(), what) - lines.begin();
  };
  // The register and the preamble, after the declarations, before the body.
  EXPECT_LT(at(".reg .b64 %cuprobe_pb;"), at(".reg .pred %p<4>;"));
  EXPECT_EQ(at("ld.param.u64 %cuprobe_pb, [probe_param_4];"), at(".reg .b64 %rd<20>;") + 1);
  EXPECT_EQ(at("ld.u64 %cuprobe_pb, [%cuprobe_pb+-16];"),
            at("ld.param.u64 %cuprobe_pb, [probe_param_4];") + 1);
  // Table offset: 128 * 3 = 384.
  for (std::string_view expected :
       {"ld.global.nc.u32 %r1, [%cuprobe_pb+8];", "ld.global.nc.u64 %rd1, [%cuprobe_pb+0];",
        "ld.global.nc.v2.u32 {%r2, %r3}, [%cuprobe_pb+136];",
        "ld.global.nc.u64 %rd2, [%cuprobe_pb+400];", "ld.global.nc.u64 %rd3, [%cuprobe_pb+384];",
        "@!%p1 ld.global.nc.u64 %rd4, [%cuprobe_pb+392];", "add.s64 %rd5, %cuprobe_pb, 384;"}) {
    EXPECT_LT(at(expected), static_cast<ptrdiff_t>(lines.size())) << expected << "\n" << *out;
  }
  EXPECT_LT(at("ld.u64 %cuprobe_pb, [%cuprobe_pb+-16];"), at("ld.global.nc.u32 %r1, [%cuprobe_pb+8];"));
  // ptxas takes it (a function nobody calls is still checked).
  absl::StatusOr<std::string> assembled = testing::RunPtxas(*out);
  EXPECT_TRUE(assembled.ok()) << assembled.status() << "\n" << *out;
}

TEST(MapBlockPassTest, MovOfDescsBecomesTheBlockAddress) {
  const std::string ptx = absl::StrCat(
      kHeader, ProbeFunction("probe", "\tmov.u64 %rd1, __cuprobe_map_descs;\n"
                                      "\tld.global.nc.u32 %r1, [%rd1+8];\n"));
  absl::StatusOr<std::string> out = MapBlock(ptx, {"probe"}, 1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, HasSubstr("add.s64 %rd1, %cuprobe_pb, 0;"));
}

TEST(MapBlockPassTest, RefusesMovOfDescsWithAConstLoadThroughARegister) {
  const std::string ptx = absl::StrCat(
      kHeader, ProbeFunction("probe", "\tmov.u64 %rd1, __cuprobe_map_descs;\n"
                                      "\tld.const.u32 %r1, [%rd1+8];\n"));
  absl::StatusOr<std::string> out = MapBlock(ptx, {"probe"}, 1);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("the patch backend cannot take this probe"));
  EXPECT_THAT(out.status().message(), HasSubstr("ld.const.u32 %r1, [%rd1+8];"));
}

TEST(MapBlockPassTest, RefusesAnUnknownFormNamingTheLine) {
  const std::string ptx = absl::StrCat(
      kHeader, ProbeFunction("probe", "\tcvta.global.u64 %rd1, __cuprobe_map_table;\n"));
  // kHeader is 5 lines, the function header 8 and the declarations 3.
  absl::StatusOr<std::string> out = MapBlock(ptx, {"probe"}, 1);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(),
              HasSubstr("the patch backend cannot take this probe: <test>:17: "));
  EXPECT_THAT(out.status().message(), HasSubstr("cvta.global.u64 %rd1, __cuprobe_map_table;"));
  EXPECT_THAT(out.status().message(), HasSubstr("hint:"));
}

TEST(MapBlockPassTest, RefusesOtherForms) {
  for (std::string_view body : {
           "\tld.global.u64 %rd1, [__cuprobe_map_descs+8];\n",     // descs from .global
           "\tld.const.u64 %rd1, [__cuprobe_map_table];\n",        // table from .const
           "\tld.global.nc.u64 %rd1, [__cuprobe_map_table+%rd2];\n",
           "\tmov.u32 %r1, __cuprobe_map_table;\n",
           "\tst.global.u64 [__cuprobe_map_table], %rd1;\n",
       }) {
    absl::StatusOr<std::string> out =
        MapBlock(absl::StrCat(kHeader, ProbeFunction("probe", body)), {"probe"}, 1);
    ASSERT_FALSE(out.ok()) << body;
    EXPECT_THAT(out.status().message(), HasSubstr("the patch backend cannot take this probe"))
        << body;
  }
}

TEST(MapBlockPassTest, RefusesAReferenceOutsideAProbeFunction) {
  const std::string ptx =
      absl::StrCat(kHeader, ProbeFunction("helper", "\tld.global.nc.u64 %rd1, [__cuprobe_map_table];\n"),
                   ProbeFunction("probe", ""));
  absl::StatusOr<std::string> out = MapBlock(ptx, {"probe"}, 1);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("helper reads the maps but is not a probe function"));
}

TEST(MapBlockPassTest, RefusesAProbeWithoutTheProbeSignature) {
  const std::string ptx = absl::StrCat(
      kHeader,
      ".visible .func (.param .b32 r) probe(.param .b64 a)\n{\n\t.reg .b64 %rd<3>;\n"
      "\tld.global.nc.u64 %rd1, [__cuprobe_map_table];\n\tst.param.b32 [r], 0;\n\tret;\n}\n");
  absl::StatusOr<std::string> out = MapBlock(ptx, {"probe"}, 1);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("does not have the probe signature"));
}

TEST(MapBlockPassTest, LeavesFunctionsWithoutMapsAlone) {
  const std::string ptx = absl::StrCat(kHeader, ProbeFunction("probe", "\tmov.u32 %r1, 7;\n"));
  absl::StatusOr<std::string> out = MapBlock(ptx, {"probe"}, 1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, Not(HasSubstr("%cuprobe_pb")));
  EXPECT_THAT(*out, Not(HasSubstr(".extern .global .align 8 .b8 __cuprobe_map_table")));
  EXPECT_THAT(*out, Not(HasSubstr("__cuprobe_map_descs")));
}

// The names of the bundles the build compiled (samples/CMakeLists.txt).
std::vector<std::string> BuiltBundleNames() {
  std::vector<std::string> names;
  const std::string dir = absl::StrCat(CUPROBE_BINARY_DIR, "/probes");
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".cpb") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(MapBlockPassTest, TakesEveryBundleOfTheBuild) {
  const std::vector<std::string> names = BuiltBundleNames();
  for (std::string_view expected : {"threadhist", "mem_trace", "arglogger", "kernel_trace"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
  for (const std::string& name : names) {
    ProbeBundle bundle = testing::CompiledProbeBundle(name);
    std::vector<std::string> functions;
    for (const ProbeProgram& p : bundle.programs) functions.push_back(p.ptx_function);
    absl::StatusOr<std::string> out = MapBlock(bundle.ptx, functions, PatchMapSlots(bundle));
    ASSERT_TRUE(out.ok()) << name << ": " << out.status();
    EXPECT_THAT(*out, Not(HasSubstr(CUPROBE_MAP_TABLE_SYMBOL))) << name;
    EXPECT_THAT(*out, Not(HasSubstr(CUPROBE_MAP_DESCS_SYMBOL))) << name;
    // Every function that read the maps loads the block first.
    if (absl::StrContains(bundle.ptx, "__cuprobe_map_")) {
      EXPECT_THAT(*out, HasSubstr("ld.u64 %cuprobe_pb, [%cuprobe_pb+-16];")) << name;
    }
  }
}

// --- Adapters.

ProbeProgram Program(std::string function, AttachKind attach, uint32_t mem_spaces = 0,
                     std::string glob = "*") {
  ProbeProgram p;
  p.name = function;
  p.attach = attach;
  p.kernel_glob = std::move(glob);
  p.ptx_function = std::move(function);
  if (mem_spaces != 0) p.mem_spaces = mem_spaces;
  return p;
}

// A bundle whose programs are trivial probes reading map 0 (through the
// table and the descriptors' copy) and argument 0.
ProbeBundle HandBundle(std::vector<ProbeProgram> programs, uint32_t maps = 2) {
  ProbeBundle b;
  b.source_name = "hand.bpf.c";
  b.ptx = kHeader;
  for (const ProbeProgram& p : programs) {
    if (absl::StrContains(b.ptx, absl::StrCat(" ", p.ptx_function, "("))) continue;
    absl::StrAppend(&b.ptx, ProbeFunction(p.ptx_function,
                                          "\tld.const.u32 %r1, [__cuprobe_map_descs+8];\n"
                                          "\tld.global.nc.u64 %rd1, [__cuprobe_map_table];\n"
                                          "\tld.param.u64 %rd2, [" + p.ptx_function +
                                              "_param_4];\n"
                                              "\tld.u64 %rd3, [%rd2+8];\n"));
  }
  b.programs = std::move(programs);
  b.maps.resize(maps);
  return b;
}

std::vector<std::string> FunctionsOf(const ProbeBundle& b) {
  std::vector<std::string> out;
  for (const ProbeProgram& p : b.programs) out.push_back(p.ptx_function);
  return out;
}

std::vector<uint32_t> Instructions(const std::vector<PatchCallback>& callbacks) {
  std::vector<uint32_t> out;
  for (const PatchCallback& c : callbacks) out.push_back(c.instruction);
  return out;
}

TEST(PatchAdaptersTest, AccessKindFollowsTheFlags) {
  constexpr uint32_t R = kSanitizerMemoryRead, W = kSanitizerMemoryWrite,
                     A = kSanitizerMemoryAtomSys, P = kSanitizerMemoryPrefetch;
  const std::map<uint32_t, uint32_t> expected = {
      {0, CUPROBE_ACCESS_LOAD},          {R, CUPROBE_ACCESS_LOAD},
      {W, CUPROBE_ACCESS_STORE},         {R | W, CUPROBE_ACCESS_ATOMIC},
      {A, CUPROBE_ACCESS_ATOMIC},        {A | R, CUPROBE_ACCESS_ATOMIC},
      {A | W, CUPROBE_ACCESS_ATOMIC},    {A | R | W, CUPROBE_ACCESS_ATOMIC},
      {P, 0},                            {P | R, CUPROBE_ACCESS_LOAD},
      {P | W, CUPROBE_ACCESS_STORE},     {P | R | W, CUPROBE_ACCESS_ATOMIC},
      {P | A, CUPROBE_ACCESS_ATOMIC},    {P | A | R, CUPROBE_ACCESS_ATOMIC},
      {P | A | W, CUPROBE_ACCESS_ATOMIC}, {P | A | R | W, CUPROBE_ACCESS_ATOMIC},
  };
  ASSERT_EQ(expected.size(), 16u);
  for (const auto& [flags, kind] : expected) {
    EXPECT_EQ(PatchAccessKind(flags), kind) << "flags " << flags;
    EXPECT_EQ(PatchAccessKind(flags | 0x10 | 0x80000000u), kind) << "flags " << flags;
  }
}

TEST(PatchAdaptersTest, SpacesOfEachAdapter) {
  EXPECT_EQ(PatchAdapterSpaces(kSanitizerGlobalMemoryAccess),
            (1u << CUPROBE_SPACE_GLOBAL) | (1u << CUPROBE_SPACE_GENERIC));
  EXPECT_EQ(PatchAdapterSpaces(kSanitizerSharedMemoryAccess), 1u << CUPROBE_SPACE_SHARED);
  EXPECT_EQ(PatchAdapterSpaces(kSanitizerLocalMemoryAccess), 1u << CUPROBE_SPACE_LOCAL);
  EXPECT_EQ(PatchAdapterSpaces(kSanitizerBlockEnter), 0u);
  EXPECT_EQ(PatchAdapterSpaces(kSanitizerBlockExit), 0u);
}

TEST(PatchAdaptersTest, OnlyKindsWithPrograms) {
  struct Case {
    std::vector<ProbeProgram> programs;
    std::vector<uint32_t> instructions;
  };
  const uint32_t kShared = 1u << CUPROBE_SPACE_SHARED, kLocal = 1u << CUPROBE_SPACE_LOCAL,
                 kGeneric = 1u << CUPROBE_SPACE_GENERIC, kConst = 1u << CUPROBE_SPACE_CONST;
  const std::vector<Case> cases = {
      {{Program("a", AttachKind::kEntry)}, {kSanitizerBlockEnter}},
      {{Program("a", AttachKind::kExit)}, {kSanitizerBlockExit}},
      {{Program("a", AttachKind::kMemory)}, {kSanitizerGlobalMemoryAccess, kSanitizerMemcpyAsync}},
      {{Program("a", AttachKind::kMemory, kGeneric)},
       {kSanitizerGlobalMemoryAccess, kSanitizerMemcpyAsync}},
      {{Program("a", AttachKind::kMemory, kShared)}, {kSanitizerSharedMemoryAccess}},
      {{Program("a", AttachKind::kMemory, kLocal | kShared)},
       {kSanitizerSharedMemoryAccess, kSanitizerLocalMemoryAccess}},
      {{Program("a", AttachKind::kMemory, kConst)}, {}},
      {{Program("a", AttachKind::kExit), Program("b", AttachKind::kEntry),
        Program("c", AttachKind::kMemory, ~0u)},
       {kSanitizerBlockEnter, kSanitizerBlockExit, kSanitizerGlobalMemoryAccess,
        kSanitizerSharedMemoryAccess, kSanitizerLocalMemoryAccess, kSanitizerMemcpyAsync}},
  };
  const std::map<uint32_t, std::string> names = {
      {kSanitizerBlockEnter, CUPROBE_PATCH_SYMBOL_BLOCK_ENTER},
      {kSanitizerBlockExit, CUPROBE_PATCH_SYMBOL_BLOCK_EXIT},
      {kSanitizerGlobalMemoryAccess, CUPROBE_PATCH_SYMBOL_GLOBAL_ACCESS},
      {kSanitizerSharedMemoryAccess, CUPROBE_PATCH_SYMBOL_SHARED_ACCESS},
      {kSanitizerLocalMemoryAccess, CUPROBE_PATCH_SYMBOL_LOCAL_ACCESS},
      {kSanitizerMemcpyAsync, CUPROBE_PATCH_SYMBOL_ASYNC_COPY}};
  for (size_t c = 0; c < cases.size(); ++c) {
    const ProbeBundle b = HandBundle(cases[c].programs);
    absl::StatusOr<PatchAdapters> a = GeneratePatchAdapters(b, FunctionsOf(b));
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(Instructions(a->callbacks), cases[c].instructions) << "case " << c;
    for (const auto& [instruction, name] : names) {
      const bool wanted = std::count(cases[c].instructions.begin(), cases[c].instructions.end(),
                                     instruction) != 0;
      EXPECT_EQ(absl::StrContains(a->ptx, absl::StrCat(" ", name, "(")), wanted)
          << "case " << c << ": " << name;
    }
    for (const PatchCallback& cb : a->callbacks) EXPECT_EQ(cb.function, names.at(cb.instruction));
  }
}

// The body of adapter `name` in `ptx`.
std::string_view AdapterBody(std::string_view ptx, std::string_view name) {
  const size_t at = ptx.find(absl::StrCat(" ", name, "("));
  if (at == std::string_view::npos) return {};
  const size_t end = ptx.find("\n}\n", at);
  return ptx.substr(at, end - at);
}

// (bit mask tested, function called) of each program call of an adapter, in order.
std::vector<std::pair<uint32_t, std::string>> CallsOf(std::string_view body) {
  std::vector<std::pair<uint32_t, std::string>> out;
  uint32_t mask = 0;
  for (const std::string& line : Lines(body)) {
    std::string_view l = line;
    if (absl::ConsumePrefix(&l, "and.b32 %r5, %r2, ") && absl::ConsumeSuffix(&l, ";")) {
      EXPECT_TRUE(absl::SimpleAtoi(l, &mask)) << line;
    }
    if (absl::ConsumePrefix(&l, "call.uni (__cp_ret), ")) {
      out.emplace_back(mask, std::string(l.substr(0, l.find(','))));
      mask = 0;
    }
  }
  return out;
}

TEST(PatchAdaptersTest, EachCallTestsItsProgramsBit) {
  const ProbeBundle b = HandBundle({Program("on_entry", AttachKind::kEntry),
                                    Program("on_exit", AttachKind::kExit),
                                    Program("on_entry2", AttachKind::kEntry),
                                    Program("on_mem", AttachKind::kMemory)});
  absl::StatusOr<PatchAdapters> a = GeneratePatchAdapters(b, FunctionsOf(b));
  ASSERT_TRUE(a.ok()) << a.status();
  using Call = std::pair<uint32_t, std::string>;
  EXPECT_THAT(CallsOf(AdapterBody(a->ptx, CUPROBE_PATCH_SYMBOL_BLOCK_ENTER)),
              ElementsAre(Call{1, "on_entry"}, Call{4, "on_entry2"}));
  EXPECT_THAT(CallsOf(AdapterBody(a->ptx, CUPROBE_PATCH_SYMBOL_BLOCK_EXIT)),
              ElementsAre(Call{2, "on_exit"}));
  EXPECT_THAT(CallsOf(AdapterBody(a->ptx, CUPROBE_PATCH_SYMBOL_GLOBAL_ACCESS)),
              ElementsAre(Call{8, "on_mem"}));
  // Every adapter returns at once on a userdata of 0, and reads kernel_id
  // and programs from the kernel block.
  for (const PatchCallback& cb : a->callbacks) {
    const std::vector<std::string> lines = Lines(AdapterBody(a->ptx, cb.function));
    auto at = [&](std::string_view what) {
      return std::find(lines.begin(), lines.end(), what) - lines.begin();
    };
    const ptrdiff_t n = static_cast<ptrdiff_t>(lines.size());
    EXPECT_LT(at("setp.eq.u64 %p1, %rd1, 0;"), at("@%p1 bra $L__cuprobe_done;")) << cb.function;
    EXPECT_LT(at("@%p1 bra $L__cuprobe_done;"), at("ld.global.nc.u32 %r1, [%rd1+8];"));
    EXPECT_LT(at("ld.global.nc.u32 %r2, [%rd1+12];"), n) << cb.function;
    EXPECT_LT(at("add.s64 %rd2, %rd1, 16;"), n) << cb.function;
    EXPECT_LT(at("st.param.b32 [__cuprobe_ret], 0;"), n) << cb.function;
  }
}

// The argument of `prefix` ... `;` in `body`, as a number (-1 when absent).
int64_t Immediate(std::string_view body, std::string_view prefix) {
  for (const std::string& line : Lines(body)) {
    std::string_view l = line;
    int64_t v = 0;
    if (absl::ConsumePrefix(&l, prefix) && absl::ConsumeSuffix(&l, ";") && absl::SimpleAtoi(l, &v)) {
      return v;
    }
  }
  return -1;
}

TEST(PatchAdaptersTest, MemoryAdaptersEncodeSpaceAndKindLikeTheHost) {
  const ProbeBundle b = HandBundle({Program("on_mem", AttachKind::kMemory, ~0u)});
  absl::StatusOr<PatchAdapters> a = GeneratePatchAdapters(b, FunctionsOf(b));
  ASSERT_TRUE(a.ok()) << a.status();
  const std::map<std::string, uint32_t> spaces = {
      {CUPROBE_PATCH_SYMBOL_GLOBAL_ACCESS, CUPROBE_SPACE_GLOBAL},
      {CUPROBE_PATCH_SYMBOL_SHARED_ACCESS, CUPROBE_SPACE_SHARED},
      {CUPROBE_PATCH_SYMBOL_LOCAL_ACCESS, CUPROBE_SPACE_LOCAL}};
  // An async copy is a global load of its source.
  std::string_view copy = AdapterBody(a->ptx, CUPROBE_PATCH_SYMBOL_ASYNC_COPY);
  ASSERT_FALSE(copy.empty());
  EXPECT_EQ(Immediate(copy, "or.b32 %r3, %r3, "),
            int64_t{CUPROBE_MEM_INFO(0, CUPROBE_SPACE_GLOBAL, CUPROBE_ACCESS_LOAD)});
  EXPECT_EQ(copy.find("__cuprobe_flags"), std::string_view::npos);
  for (const auto& [name, space] : spaces) {
    std::string_view body = AdapterBody(a->ptx, name);
    ASSERT_FALSE(body.empty()) << name;
    // mem_info = size | space << 16 | kind << 20, kind from the flags table.
    EXPECT_EQ(Immediate(body, "or.b32 %r3, %r3, "), int64_t{CUPROBE_MEM_INFO(0, space, 0)}) << name;
    const int64_t table = Immediate(body, "mov.u32 %r7, ");
    ASSERT_GE(table, 0) << name;
    for (uint32_t flags = 0; flags < 16; ++flags) {
      EXPECT_EQ((static_cast<uint64_t>(table) >> (2 * flags)) & 3, PatchAccessKind(flags))
          << name << " flags " << flags;
    }
    EXPECT_THAT(body, HasSubstr("shl.b32 %r7, %r7, 20;"));
    EXPECT_THAT(body, HasSubstr("ld.param.u64 %rd3, [__cuprobe_ptr];"));
    EXPECT_THAT(body, HasSubstr("cvt.u32.u64 %r4, %rd4;"));  // site_index = pc
  }
}

// --- Site counters on the patch backend (abi.h, 10.).

// eBPF summary code: `r0 = ctx->site_index; exit` (reads the site index,
// adds nothing) or `r0 = 0; exit` (adds nothing).
std::vector<uint8_t> ReadsSiteIndexCode() {
  return {0x61, 0x10, 108, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0};
}
std::vector<uint8_t> AddsNothingCode() {
  return {0xb7, 0x00, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0};
}

TEST(PatchAdaptersTest, MemoryAdaptersCountOnlyWhenAProgramHasSummaryCode) {
  ProbeBundle b = HandBundle({Program("on_mem", AttachKind::kMemory, ~0u),
                              Program("on_entry", AttachKind::kEntry)});
  absl::StatusOr<PatchAdapters> plain = GeneratePatchAdapters(b, FunctionsOf(b));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_THAT(plain->ptx, Not(HasSubstr("$L__cuprobe_call")));
  b.programs[0].summary_code = AddsNothingCode();
  absl::StatusOr<PatchAdapters> a = GeneratePatchAdapters(b, FunctionsOf(b));
  ASSERT_TRUE(a.ok()) << a.status();
  const std::map<std::string, uint32_t> slots = {{CUPROBE_PATCH_SYMBOL_GLOBAL_ACCESS, 0},
                                                 {CUPROBE_PATCH_SYMBOL_ASYNC_COPY, 0},
                                                 {CUPROBE_PATCH_SYMBOL_SHARED_ACCESS, 1},
                                                 {CUPROBE_PATCH_SYMBOL_LOCAL_ACCESS, 2}};
  for (const auto& [name, slot] : slots) {
    std::string_view body = AdapterBody(a->ptx, name);
    ASSERT_FALSE(body.empty()) << name;
    EXPECT_THAT(body, HasSubstr(absl::StrCat("ld.global.nc.u64 %rd5, [%rd1+",
                                             CUPROBE_PATCH_SITE_COUNTERS_OFFSET, "];")));
    EXPECT_THAT(body, HasSubstr(absl::StrCat("ld.global.nc.u8 %r12, [%rd6+",
                                             CUPROBE_PATCH_COUNTER_OF_OFFSET + 32 * slot, "];")))
        << name;
    EXPECT_THAT(body, HasSubstr("red.global.add.u64 [%rd7], %rd9;"));
    EXPECT_EQ(Immediate(body, "and.b32 %r14, %r14, "), CUPROBE_SITE_COUNTER_SHARDS - 1);
    EXPECT_EQ(Immediate(body, "mul.wide.u32 %rd7, %r13, "), CUPROBE_SITE_COUNTER_GROUP_BYTES);
    // The counting path comes before the calls, which stay for the rest.
    EXPECT_LT(body.find("red.global.add.u64"), body.find("call.uni")) << name;
  }
  EXPECT_THAT(AdapterBody(a->ptx, CUPROBE_PATCH_SYMBOL_BLOCK_ENTER),
              Not(HasSubstr("$L__cuprobe_call")));
}

TEST(PatchAdaptersTest, AccessClassesAreDistinctAndInRange) {
  std::vector<uint32_t> seen;
  for (uint32_t instruction : {kSanitizerGlobalMemoryAccess, kSanitizerSharedMemoryAccess,
                               kSanitizerLocalMemoryAccess}) {
    for (uint32_t kind : {CUPROBE_ACCESS_LOAD, CUPROBE_ACCESS_STORE, CUPROBE_ACCESS_ATOMIC}) {
      for (uint32_t size = 1; size <= 128; size *= 2) {
        std::optional<uint32_t> c = PatchAccessClass(instruction, kind, size);
        ASSERT_TRUE(c.has_value()) << instruction << " " << kind << " " << size;
        EXPECT_LT(*c, uint32_t{CUPROBE_PATCH_ACCESS_CLASSES});
        seen.push_back(*c);
      }
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end());
  // What the adapters compute: slot * 32 + kind * 8 + log2(size).
  EXPECT_EQ(PatchAccessClass(kSanitizerSharedMemoryAccess, CUPROBE_ACCESS_STORE, 16),
            32 + CUPROBE_ACCESS_STORE * 8 + 4);
  EXPECT_EQ(PatchAccessClass(kSanitizerMemcpyAsync, CUPROBE_ACCESS_LOAD, 16),
            PatchAccessClass(kSanitizerGlobalMemoryAccess, CUPROBE_ACCESS_LOAD, 16));
  EXPECT_EQ(PatchAccessClass(kSanitizerGlobalMemoryAccess, CUPROBE_ACCESS_LOAD, 12), std::nullopt);
  EXPECT_EQ(PatchAccessClass(kSanitizerGlobalMemoryAccess, CUPROBE_ACCESS_LOAD, 256), std::nullopt);
  EXPECT_EQ(PatchAccessClass(kSanitizerGlobalMemoryAccess, CUPROBE_ACCESS_LOAD, 0), std::nullopt);
  EXPECT_EQ(PatchAccessClass(kSanitizerBlockEnter, CUPROBE_ACCESS_LOAD, 4), std::nullopt);
}

TEST(PatchSiteCountersTest, MemTraceCountsPerKernelKindAndSize) {
  const ProbeBundle bundle = testing::CompiledProbeBundle("mem_trace");
  ASSERT_EQ(bundle.programs.size(), 1u);
  ASSERT_FALSE(bundle.programs[0].summary_code.empty());
  std::optional<PatchKernelCounters> c = PatchSiteCounters(bundle, 1, 7);
  ASSERT_TRUE(c.has_value());
  // Global accesses: one counter per kind and size (the bytes differ);
  // shared and local ones add nothing (the probe returns).
  EXPECT_EQ(c->counters.size(), 3u * 8u);
  for (uint32_t kind : {CUPROBE_ACCESS_LOAD, CUPROBE_ACCESS_STORE, CUPROBE_ACCESS_ATOMIC}) {
    for (uint32_t size = 1; size <= 128; size *= 2) {
      const uint8_t counter =
          c->counter_of[*PatchAccessClass(kSanitizerGlobalMemoryAccess, kind, size)];
      ASSERT_LT(counter, c->counters.size());
      const std::vector<SiteAdd>& adds = c->counters[counter].adds;
      ASSERT_EQ(adds.size(), 2u);
      const std::vector<uint8_t> key = {7, 0, 0, 0, static_cast<uint8_t>(kind), 0, 0, 0};
      EXPECT_EQ(adds[0], (SiteAdd{.map = 0, .key = key, .delta = 1}));
      EXPECT_EQ(adds[1], (SiteAdd{.map = 1, .key = key, .delta = size}));
      EXPECT_EQ(c->counter_of[*PatchAccessClass(kSanitizerSharedMemoryAccess, kind, size)],
                CUPROBE_PATCH_NO_COUNTER);
      EXPECT_EQ(c->counter_of[*PatchAccessClass(kSanitizerLocalMemoryAccess, kind, size)],
                CUPROBE_PATCH_NO_COUNTER);
    }
  }
  // Kind 0 (never passed by the adapters) has no counter.
  EXPECT_EQ(c->counter_of[0], CUPROBE_PATCH_NO_COUNTER);
}

TEST(PatchSiteCountersTest, NoneWhenAMemoryProgramCannotBeSummarized) {
  ProbeBundle b = HandBundle({Program("on_mem", AttachKind::kMemory, ~0u),
                              Program("on_entry", AttachKind::kEntry)});
  // No summary code.
  EXPECT_EQ(PatchSiteCounters(b, 0b11, 0), std::nullopt);
  // Adds nothing: counters, none used.
  b.programs[0].summary_code = AddsNothingCode();
  std::optional<PatchKernelCounters> c = PatchSiteCounters(b, 0b11, 0);
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->counters.empty());
  EXPECT_TRUE(std::all_of(c->counter_of.begin(), c->counter_of.end(),
                          [](uint8_t i) { return i == CUPROBE_PATCH_NO_COUNTER; }));
  // No memory program selected: nothing to count.
  EXPECT_EQ(PatchSiteCounters(b, 0b10, 0), std::nullopt);
  // Reads the site index, which is the pc on this backend.
  b.programs[0].summary_code = ReadsSiteIndexCode();
  EXPECT_EQ(PatchSiteCounters(b, 0b11, 0), std::nullopt);
  // Reads the address.
  const ProbeBundle regions = testing::CompiledProbeBundle("mem_regions");
  ASSERT_FALSE(regions.programs.empty());
  EXPECT_EQ(PatchSiteCounters(regions, 1, 0), std::nullopt);
}

TEST(PatchAdaptersTest, RefusesMoreThan32Programs) {
  std::vector<ProbeProgram> programs(33, Program("p", AttachKind::kEntry));
  const ProbeBundle b = HandBundle(programs);
  absl::StatusOr<PatchAdapters> a = GeneratePatchAdapters(b, FunctionsOf(b));
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("at most 32 programs"));
  programs.pop_back();
  EXPECT_TRUE(GeneratePatchAdapters(HandBundle(programs), FunctionsOf(HandBundle(programs))).ok());
}

// --- The whole module.

// The functions of a compiled patch module (a test failure when it is not a
// cubin for `sm`).
std::vector<std::string> CubinFunctions(const std::vector<uint8_t>& cubin, uint32_t sm) {
  absl::StatusOr<CubinInfo> info = ReadCubin(cubin);
  EXPECT_TRUE(info.ok()) << info.status();
  if (!info.ok()) return {};
  EXPECT_EQ(info->sm_arch, sm);
  std::vector<std::string> out;
  for (const CubinFunction& f : info->functions) out.push_back(f.name);
  return out;
}

void ExpectAdaptersIn(const std::vector<uint8_t>& cubin, uint32_t sm,
                      const std::vector<PatchCallback>& callbacks, std::string_view what) {
  ASSERT_GE(cubin.size(), 4u) << what;
  EXPECT_EQ(std::string(cubin.begin(), cubin.begin() + 4), "\x7f" "ELF") << what;
  const std::vector<std::string> functions = CubinFunctions(cubin, sm);
  for (const PatchCallback& cb : callbacks) {
    EXPECT_NE(std::find(functions.begin(), functions.end(), cb.function), functions.end())
        << what << ": " << cb.function;
  }
}

class TempDir {
 public:
  TempDir() : path_(testing::MakeTempDir()) {}
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool HavePtxas() { return absl::StartsWith(PtxCompilerName(/*tools_patch=*/true), "ptxas"); }

TEST(PatchModuleTest, PtxHasNoMapSymbolsAndEveryPart) {
  const ProbeBundle b = HandBundle({Program("on_entry", AttachKind::kEntry),
                                    Program("on_mem", AttachKind::kMemory)});
  absl::StatusOr<std::string> ptx = PatchModulePtx(b, HelpersPtx());
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_THAT(*ptx, Not(HasSubstr(CUPROBE_MAP_TABLE_SYMBOL)));
  EXPECT_THAT(*ptx, Not(HasSubstr(CUPROBE_MAP_DESCS_SYMBOL)));
  EXPECT_THAT(*ptx, HasSubstr(".target sm_90"));
  EXPECT_THAT(*ptx, HasSubstr(" on_entry("));
  EXPECT_THAT(*ptx, HasSubstr(" on_mem("));
  EXPECT_THAT(*ptx, HasSubstr(" " CUPROBE_PATCH_SYMBOL_BLOCK_ENTER "("));
  EXPECT_THAT(*ptx, HasSubstr(" " CUPROBE_PATCH_SYMBOL_GLOBAL_ACCESS "("));
  // The map block is 2 slots: the table starts at 256.
  EXPECT_THAT(*ptx, HasSubstr("ld.global.nc.u64 %rd1, [%cuprobe_pb+256];"));
  // No probe calls a helper: none of the helper library comes along.
  EXPECT_THAT(*ptx, Not(HasSubstr(CUPROBE_HELPER_SYMBOL_MAP_LOOKUP "(")));
}

TEST(PatchModuleTest, RefusesABundleThatDefinesAnAdapterName) {
  ProbeBundle b = HandBundle({Program(CUPROBE_PATCH_SYMBOL_BLOCK_EXIT, AttachKind::kExit)});
  absl::StatusOr<std::string> ptx = PatchModulePtx(b, HelpersPtx());
  ASSERT_FALSE(ptx.ok());
  EXPECT_THAT(ptx.status().message(), HasSubstr("the name of a patch module adapter"));
}

TEST(PatchModuleTest, ToolsPatchFlagKeepsTheAdapters) {
  if (!HavePtxas()) GTEST_SKIP() << "no ptxas: " << PtxCompilerName(true);
  const ProbeBundle b = HandBundle({Program("on_exit", AttachKind::kExit)});
  absl::StatusOr<std::string> ptx = PatchModulePtx(b, HelpersPtx());
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  CompileOptions options;
  options.sm = 90;
  options.tools_patch = true;
  absl::StatusOr<CompiledCubin> patch = CompilePtx(*ptx, options);
  ASSERT_TRUE(patch.ok()) << patch.status();
  ExpectAdaptersIn(patch->cubin, 90, {{kSanitizerBlockExit, CUPROBE_PATCH_SYMBOL_BLOCK_EXIT}},
                   "tools patch");
  // Without the mode, ptxas drops the functions no kernel calls.
  options.tools_patch = false;
  absl::StatusOr<CompiledCubin> plain = CompilePtx(*ptx, options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  const std::vector<std::string> functions = CubinFunctions(plain->cubin, 90);
  EXPECT_EQ(std::find(functions.begin(), functions.end(), CUPROBE_PATCH_SYMBOL_BLOCK_EXIT),
            functions.end());
}

TEST(PatchModuleTest, ThirtyTwoProgramsCompile) {
  if (!HavePtxas()) GTEST_SKIP() << "no ptxas: " << PtxCompilerName(true);
  std::vector<ProbeProgram> programs;
  for (int i = 0; i < 32; ++i) {
    programs.push_back(Program(absl::StrCat("p", i), i % 2 ? AttachKind::kExit : AttachKind::kMemory,
                               ~0u));
  }
  const ProbeBundle b = HandBundle(programs, 40);
  absl::StatusOr<PatchModule> m = BuildPatchModule(b, HelpersPtx(), 90, CompileCache::Disabled());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->map_slots, 40u);
  EXPECT_EQ(Instructions(m->callbacks),
            (std::vector<uint32_t>{kSanitizerBlockExit, kSanitizerGlobalMemoryAccess,
                                   kSanitizerSharedMemoryAccess, kSanitizerLocalMemoryAccess,
                                   kSanitizerMemcpyAsync}));
  ExpectAdaptersIn(m->cubin, 90, m->callbacks, "32 programs");
}

TEST(PatchModuleTest, EveryBundleOfTheBuildCompilesAsAToolsPatch) {
  if (!HavePtxas()) GTEST_SKIP() << "no ptxas: " << PtxCompilerName(true);
  const std::vector<std::string> names = BuiltBundleNames();
  ASSERT_FALSE(names.empty());
  for (const std::string& name : names) {
    ProbeBundle bundle = testing::CompiledProbeBundle(name);
    // Every memory program in every space, so that all five adapters exist
    // where the bundle has the kinds.
    for (ProbeProgram& p : bundle.programs) p.mem_spaces = ~0u;
    absl::StatusOr<PatchModule> m =
        BuildPatchModule(bundle, HelpersPtx(), 90, CompileCache::Disabled());
    ASSERT_TRUE(m.ok()) << name << ": " << m.status();
    EXPECT_FALSE(m->callbacks.empty()) << name;
    EXPECT_EQ(m->map_slots, PatchMapSlots(bundle)) << name;
    ExpectAdaptersIn(m->cubin, 90, m->callbacks, name);
  }
}

TEST(PatchModuleTest, NvJitLinkRefusesToolsPatchWithAHintOrKeepsTheAdapters) {
  if (!LoadNvJitLink().ok()) GTEST_SKIP() << LoadNvJitLink().status();
  const ProbeBundle b = HandBundle({Program("on_entry", AttachKind::kEntry)});
  absl::StatusOr<std::string> ptx = PatchModulePtx(b, HelpersPtx());
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  CompileOptions options;
  options.sm = 90;
  options.tools_patch = true;
  absl::StatusOr<CompiledCubin> c = CompilePtxWithNvJitLink(*ptx, options);
  if (c.ok()) {
    ExpectAdaptersIn(c->cubin, 90, {{kSanitizerBlockEnter, CUPROBE_PATCH_SYMBOL_BLOCK_ENTER}},
                     "nvJitLink");
  } else {
    // nvJitLink 13.0: "Conflicting options '--compile-only' and
    // --compile-as-tools-patch".
    EXPECT_THAT(c.status().message(), HasSubstr("compile-as-tools-patch"));
    EXPECT_THAT(c.status().message(), HasSubstr("hint: nvJitLink cannot compile a tools patch"));
  }
}

TEST(PatchModuleTest, SecondBuildIsACacheHit) {
  if (!HavePtxas()) GTEST_SKIP() << "no ptxas: " << PtxCompilerName(true);
  TempDir dir;
  CompileCache cache(dir.path() + "/cache");
  const ProbeBundle b = HandBundle({Program("on_entry", AttachKind::kEntry)});
  absl::StatusOr<PatchModule> first = BuildPatchModule(b, HelpersPtx(), 90, cache);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->cache_hit);
  absl::StatusOr<PatchModule> second = BuildPatchModule(b, HelpersPtx(), 90, cache);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->cache_hit);
  EXPECT_EQ(second->cubin, first->cubin);
  EXPECT_EQ(second->callbacks, first->callbacks);
  EXPECT_EQ(second->map_slots, first->map_slots);
  // Another SM, another bundle: misses.
  absl::StatusOr<PatchModule> other_sm = BuildPatchModule(b, HelpersPtx(), 100, cache);
  ASSERT_TRUE(other_sm.ok()) << other_sm.status();
  EXPECT_FALSE(other_sm->cache_hit);
  EXPECT_EQ(CubinFunctions(other_sm->cubin, 100).empty(), false);
  const ProbeBundle b2 = HandBundle({Program("on_entry", AttachKind::kEntry)}, 3);
  absl::StatusOr<PatchModule> other_bundle = BuildPatchModule(b2, HelpersPtx(), 90, cache);
  ASSERT_TRUE(other_bundle.ok()) << other_bundle.status();
  EXPECT_FALSE(other_bundle->cache_hit);
  EXPECT_EQ(other_bundle->map_slots, 3u);
}

TEST(PatchModuleTest, ProgramMaskMatchesEachProgramsGlob) {
  ProbeBundle b = HandBundle({Program("a", AttachKind::kEntry, 0, "vec_add*"),
                              Program("b", AttachKind::kEntry, 0, "*"),
                              Program("c", AttachKind::kExit, 0, "_Z6matmulPfS_S_i"),
                              Program("d", AttachKind::kExit, 0, "matmul")});
  EXPECT_EQ(ProgramMask(b, "_Z7vec_addPfS_S_i", "vec_add"), 0b0011u);
  EXPECT_EQ(ProgramMask(b, "_Z6matmulPfS_S_i", "matmul"), 0b1110u);
  EXPECT_EQ(ProgramMask(b, "_Z6matmulPfS_S_i", ""), 0b0110u);
  EXPECT_EQ(ProgramMask(b, "other", ""), 0b0010u);
  // Programs past the 32nd have no bit.
  std::vector<ProbeProgram> many(40, Program("p", AttachKind::kEntry, 0, "k"));
  b.programs = many;
  EXPECT_EQ(ProgramMask(b, "k", ""), 0xffffffffu);
  b.programs[3].kernel_glob = "nope";
  EXPECT_EQ(ProgramMask(b, "k", ""), 0xfffffff7u);
}

}  // namespace
}  // namespace cuprobe
