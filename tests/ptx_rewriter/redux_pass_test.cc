// File: tests/ptx_rewriter/redux_pass_test.cc
//
// The redux pass (ptx_rewriter/redux_pass.h): every known form is lowered
// to shfl.sync and assembles with ptxas --compile-as-tools-patch, which
// refuses the original; guards become branches; unknown forms are refused.
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptx_rewriter/nvjitlink.h"
#include "ptx_rewriter/ptx_parser.h"
#include "ptx_rewriter/redux_pass.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A patch function whose body is `body` (registers %r<8>, %p<3>).
std::string Function(std::string_view body) {
  return absl::StrCat(
      ".version 8.0\n.target sm_90\n.address_size 64\n"
      ".visible .func (.param .b32 ret) f(.param .b64 out, .param .b32 a, .param .b32 mask)\n{\n"
      "\t.reg .pred %p<3>;\n\t.reg .b32 %r<8>;\n\t.reg .b64 %rd<3>;\n"
      "\tld.param.u64 %rd1, [out];\n\tld.param.u32 %r1, [a];\n\tld.param.u32 %r2, [mask];\n"
      "\tsetp.eq.u32 %p1, %r1, 0;\n",
      body,
      "\tst.global.u32 [%rd1], %r3;\n\tst.param.b32 [ret], 0;\n\tret;\n}\n");
}

absl::StatusOr<CompiledCubin> CompileToolsPatch(std::string_view ptx) {
  CompileOptions options;
  options.tools_patch = true;
  return CompilePtx(ptx, options);
}

// LowerRedux over `ptx`: the printed module and the count.
absl::StatusOr<std::pair<std::string, int>> Lower(const std::string& ptx) {
  absl::StatusOr<Module> m = ParsePtx(ptx, "<test>");
  if (!m.ok()) return m.status();
  absl::StatusOr<int> n = LowerRedux(*m);
  if (!n.ok()) return n.status();
  return std::make_pair(PrintPtx(*m), *n);
}

bool HavePtxas() { return absl::StartsWith(PtxCompilerName(/*tools_patch=*/true), "ptxas"); }

TEST(ReduxPassTest, ToolsPatchRefusesTheOriginal) {
  if (!HavePtxas()) GTEST_SKIP() << "no ptxas";
  absl::StatusOr<CompiledCubin> c =
      CompileToolsPatch(Function("\tredux.sync.add.u32 %r3, %r1, %r2;\n"));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("'redux' is not allowed"));
}

TEST(ReduxPassTest, LowersEveryKnownFormToWhatToolsPatchTakes) {
  for (std::string_view form : {"add.u32", "add.s32", "min.u32", "min.s32", "max.u32", "max.s32",
                                "and.b32", "or.b32", "xor.b32"}) {
    absl::StatusOr<std::pair<std::string, int>> out = Lower(Function(absl::StrCat(
        "\tredux.sync.", form, " %r3, %r1, %r2;\n\tredux.sync.", form, " %r4, %r3, -1;\n")));
    ASSERT_TRUE(out.ok()) << form << ": " << out.status();
    EXPECT_EQ(out->second, 2) << form;
    const std::string& ptx = out->first;
    EXPECT_THAT(ptx, Not(HasSubstr("redux"))) << form;
    EXPECT_THAT(ptx, HasSubstr(absl::StrCat(form, " %__cprx_acc, %__cprx_acc, %__cprx_v;")))
        << form;
    EXPECT_THAT(ptx, HasSubstr("shfl.sync.bfly.b32 %__cprx_v, %__cprx_acc, 16, 31, -1;"));
    EXPECT_THAT(ptx, HasSubstr("shfl.sync.idx.b32 %__cprx_v, %r1, %__cprx_l, 31, %r2;"));
    EXPECT_THAT(ptx, HasSubstr("mov.b32 %r3, %__cprx_acc;"));
    EXPECT_THAT(ptx, HasSubstr("mov.b32 %r4, %__cprx_acc;"));
    // Labels differ between the two.
    EXPECT_THAT(ptx, HasSubstr("$L__cprx0_done:"));
    EXPECT_THAT(ptx, HasSubstr("$L__cprx1_done:"));
    if (HavePtxas()) {
      absl::StatusOr<CompiledCubin> c = CompileToolsPatch(ptx);
      EXPECT_TRUE(c.ok()) << form << ": " << c.status() << "\n" << ptx;
    }
  }
}

TEST(ReduxPassTest, AGuardBecomesABranchAroundTheSequence) {
  for (const auto& [guard, branch] :
       {std::pair{"@%p1 ", "@!%p1 bra $L__cprx0_skip;"}, {"@!%p1 ", "@%p1 bra $L__cprx0_skip;"}}) {
    absl::StatusOr<std::pair<std::string, int>> out =
        Lower(Function(absl::StrCat("\t", guard, "redux.sync.add.u32 %r3, %r1, %r2;\n")));
    ASSERT_TRUE(out.ok()) << out.status();
    const std::string& ptx = out->first;
    EXPECT_THAT(ptx, HasSubstr(branch));
    EXPECT_LT(ptx.find(branch), ptx.find("mov.b32 %__cprx_m, %r2;"));
    EXPECT_LT(ptx.find("mov.b32 %r3, %__cprx_acc;"), ptx.find("$L__cprx0_skip:"));
    if (HavePtxas()) {
      absl::StatusOr<CompiledCubin> c = CompileToolsPatch(ptx);
      EXPECT_TRUE(c.ok()) << c.status() << "\n" << ptx;
    }
  }
}

TEST(ReduxPassTest, RefusesUnknownForms) {
  for (std::string_view insn : {"redux.sync.min.abs.f32 %r3, %r1, %r2;",
                                "redux.sync.add.b32 %r3, %r1, %r2;",
                                "redux.sync.and.u32 %r3, %r1, %r2;"}) {
    absl::StatusOr<std::pair<std::string, int>> out =
        Lower(Function(absl::StrCat("\t", insn, "\n")));
    ASSERT_FALSE(out.ok()) << insn;
    EXPECT_THAT(out.status().message(), HasSubstr("cannot lower")) << insn;
    EXPECT_THAT(out.status().message(), HasSubstr(insn)) << insn;
  }
}

TEST(ReduxPassTest, LeavesModulesWithoutReduxAlone) {
  const std::string ptx = Function("\tadd.u32 %r3, %r1, %r2;\n");
  absl::StatusOr<std::pair<std::string, int>> out = Lower(ptx);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->second, 0);
  EXPECT_THAT(out->first, Not(HasSubstr("__cprx")));
}

}  // namespace
}  // namespace cuprobe
