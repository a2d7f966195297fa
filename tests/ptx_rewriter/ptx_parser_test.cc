// File: tests/ptx_rewriter/ptx_parser_test.cc
//
// The PTX lexer, parser and printer on hand-written PTX and on real nvcc and
// clang output: tokens, the model, diagnostics with line:col, and the round
// trip (parse -> print -> parse prints the same; ptxas reports the same
// resource usage for the printed PTX as for the original).
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptx_rewriter/ptx_lexer.h"
#include "ptx_rewriter/ptx_module.h"
#include "ptx_rewriter/ptx_parser.h"
#include "tests/ptx_rewriter/fixtures.h"
#include "tests/ptx_rewriter/ptx_test_util.h"

namespace cuprobe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Lex(std::string_view text) {
  std::vector<std::string> out;
  PtxLexer lex(text);
  for (Token t = lex.Next(); t.kind != TokenKind::kEnd; t = lex.Next()) {
    out.push_back(std::string(t.text));
    if (t.kind == TokenKind::kError) break;
  }
  return out;
}

TEST(PtxLexerTest, WordsKeepTheirModifiers) {
  EXPECT_THAT(Lex("@!%p1 ld.global.nc.v4.f32 {%f1, %f2}, [%rd4+-8]; // c\n"),
              ElementsAre("@", "!", "%p1", "ld.global.nc.v4.f32", "{", "%f1", ",", "%f2", "}",
                          ",", "[", "%rd4", "+", "-", "8", "]", ";"));
  EXPECT_THAT(Lex("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"),
              ElementsAre("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"));
  EXPECT_THAT(Lex("mov.u32 %r3, %ctaid.x;"), ElementsAre("mov.u32", "%r3", ",", "%ctaid.x", ";"));
  EXPECT_THAT(Lex(".reg .b32 %r<6>;"), ElementsAre(".reg", ".b32", "%r", "<", "6", ">", ";"));
  EXPECT_THAT(Lex("prototype_0 : .callprototype"),
              ElementsAre("prototype_0", ":", ".callprototype"));
  EXPECT_THAT(Lex("$L__BB0_2:"), ElementsAre("$L__BB0_2", ":"));
}

TEST(PtxLexerTest, Numbers) {
  EXPECT_THAT(Lex("0f3F800000 0d3FF0000000000000 0x1F 42U 1.5e-3 9.0 -7"),
              ElementsAre("0f3F800000", "0d3FF0000000000000", "0x1F", "42U", "1.5e-3", "9.0",
                          "-", "7"));
  PtxLexer lex("0f3F800000");
  EXPECT_EQ(lex.Next().kind, TokenKind::kNumber);
}

TEST(PtxLexerTest, CommentsStringsAndPositions) {
  PtxLexer lex("/* a\n b */ .file 1 \"x \\\"y\\\".cu\"\n  // only a comment\n\tret;");
  Token t = lex.Next();
  EXPECT_EQ(t.text, ".file");
  EXPECT_EQ(t.line, 2u);
  EXPECT_EQ(t.col, 7u);
  (void)lex.Next();
  t = lex.Next();
  EXPECT_EQ(t.kind, TokenKind::kString);
  EXPECT_EQ(t.text, "\"x \\\"y\\\".cu\"");
  t = lex.Next();
  EXPECT_EQ(t.text, "ret");
  EXPECT_EQ(t.line, 4u);
  EXPECT_EQ(t.col, 2u);
}

TEST(PtxLexerTest, ErrorsStopTheStream) {
  PtxLexer a("ret; /* never closed");
  (void)a.Next();
  (void)a.Next();
  Token t = a.Next();
  EXPECT_EQ(t.kind, TokenKind::kError);
  EXPECT_EQ(t.text, "unterminated /* comment");
  EXPECT_EQ(a.Next().kind, TokenKind::kEnd);
  PtxLexer b("\"open");
  EXPECT_EQ(b.Next().kind, TokenKind::kError);
  PtxLexer c("add \x01");
  (void)c.Next();
  t = c.Next();
  EXPECT_EQ(t.kind, TokenKind::kError);
  EXPECT_EQ(t.col, 5u);
}

constexpr char kSmall[] = R"(//
// hand-written
.version 8.5
.target sm_90
.address_size 64

.extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
.global .align 4 .b8 table[8] = {1, 2, 3, 4, 5, 6, 7, 8};
.extern .shared .align 16 .b8 dyn[];

.visible .entry k(
	.param .u64 .ptr .global .align 4 k_param_0,
	.param .align 8 .b8 k_param_1[24],
	.param .u8 k_param_2
)
.maxntid 128, 1, 1
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<5>, %extra;
	.reg .b64 	%rd<4>;
	.pragma "nounroll";
	ld.param.u64 	%rd1, [k_param_0];
	@!%p1 bra 	$L__BB0_2;
	{ // inline asm block
	.reg .pred p;
	setp.ne.u32 p, %r1, 0;
	@p st.global.v2.u32 [%rd1+8], {%r1, %r2};
	}
$L__BB0_2:
	prototype_0 : .callprototype (.param .b32 _) _ (.param .b64 _);
	mov.b64 	{%r3, %r4}, %rd2;
	@%p2 ret;
	exit;
}
)";

TEST(PtxParserTest, BuildsTheModel) {
  absl::StatusOr<Module> m = ParsePtx(kSmall, "small.ptx");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->version, (PtxVersion{8, 5}));
  EXPECT_EQ(m->target, "sm_90");
  EXPECT_EQ(m->address_size, 64u);
  ASSERT_EQ(m->functions.size(), 2u);
  const Function& vprintf = m->functions[0];
  EXPECT_FALSE(vprintf.has_body);
  EXPECT_EQ(vprintf.linkage, Linkage::kExtern);
  EXPECT_EQ(vprintf.returns.size(), 1u);
  const Function& k = m->functions[1];
  EXPECT_TRUE(k.is_kernel);
  EXPECT_EQ(k.name, "k");
  EXPECT_THAT(std::string(k.header), HasSubstr(".maxntid 128, 1, 1"));
  ASSERT_EQ(k.params.size(), 3u);
  EXPECT_EQ(k.params[0].type, ".u64");
  EXPECT_EQ(k.params[0].size, 8u);
  EXPECT_EQ(k.params[1].align, 8u);
  EXPECT_EQ(k.params[1].array_count, 24u);
  EXPECT_EQ(k.params[1].size, 24u);
  EXPECT_EQ(k.params[2].size, 1u);

  // Module-level declarations know their names.
  std::vector<std::string> names;
  for (const ModuleItem& item : m->items) {
    if (!item.is_function && item.statement.kind == StatementKind::kDeclaration) {
      names.push_back(std::string(item.statement.operands));
    }
  }
  EXPECT_THAT(names, ElementsAre("table", "dyn"));

  std::vector<StatementKind> kinds;
  for (const Statement& s : k.body) kinds.push_back(s.kind);
  using K = StatementKind;
  EXPECT_THAT(kinds, ElementsAre(K::kDeclaration, K::kDeclaration, K::kDeclaration, K::kDirective,
                                 K::kInstruction, K::kInstruction, K::kBlockOpen,
                                 K::kDeclaration, K::kInstruction, K::kInstruction,
                                 K::kBlockClose, K::kLabel, K::kPrototype, K::kInstruction,
                                 K::kInstruction, K::kInstruction));
  const Statement& guarded = k.body[5];
  EXPECT_EQ(guarded.guard, "%p1");
  EXPECT_TRUE(guarded.guard_negated);
  EXPECT_EQ(guarded.opcode, "bra");
  EXPECT_EQ(guarded.operands, "$L__BB0_2");
  const Statement& store = k.body[9];
  EXPECT_EQ(store.guard, "p");
  EXPECT_EQ(store.Op(), "st");
  EXPECT_TRUE(store.HasModifier("global"));
  EXPECT_FALSE(store.HasModifier("shared"));
  EXPECT_THAT(SplitOperands(store.operands), ElementsAre("[%rd1+8]", "{%r1, %r2}"));
  EXPECT_EQ(k.body[11].operands, "$L__BB0_2");
  EXPECT_EQ(k.body[12].operands, "prototype_0");

  absl::StatusOr<Declaration> d = ParseDeclaration(k.body[1]);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->type, ".b32");
  EXPECT_THAT(d->names, ElementsAre("%r", "%extra"));
  EXPECT_EQ(d->count, 5u);
}

TEST(PtxParserTest, PrintIsStableAndAssemblesTheSame) {
  absl::StatusOr<Module> m = ParsePtx(kSmall, "small.ptx");
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string printed = PrintPtx(*m);
  absl::StatusOr<Module> again = ParsePtx(printed, "printed.ptx");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << printed;
  EXPECT_EQ(PrintPtx(*again), printed);
  absl::StatusOr<std::string> a = testing::RunPtxas(kSmall);
  absl::StatusOr<std::string> b = testing::RunPtxas(printed);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(testing::ResourceReport(*a), testing::ResourceReport(*b));
}

struct BadPtx {
  const char* text;
  const char* message;
};

class PtxDiagnosticsTest : public ::testing::TestWithParam<BadPtx> {};

TEST_P(PtxDiagnosticsTest, NamesWhereAndWhat) {
  absl::StatusOr<Module> m = ParsePtx(GetParam().text, "bad.ptx");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Errors, PtxDiagnosticsTest,
    ::testing::Values(
        BadPtx{".version 9.0\n.target sm_90\n.entry k()\n{\n\tadd.s32 %r1, %r2, 1\n}\n",
               "bad.ptx:5:21: error: expected ';' after the instruction 'add.s32'\n  hint: PTX "
               "instructions end with ';'"},
        BadPtx{".version 9.0\n.entry k()\n{\n\tret;\n", "bad.ptx:3:1: error: unterminated function body"},
        BadPtx{".target sm_90\n", "bad.ptx:1:1: error: no .version directive"},
        BadPtx{".version 9.0\n.bogus 1;\n", "bad.ptx:2:1: error: unknown module-level directive '.bogus'"},
        BadPtx{".version 9.0\nret;\n", "bad.ptx:2:1: error: expected a directive at module level"},
        BadPtx{".version x\n", "bad.ptx:1:1: error: expected a version number"},
        BadPtx{".version 9.0\n.entry k()\n{\n\tmov.u32 %r1, ];\n}\n",
               "bad.ptx:4:15: error: unbalanced ']'"},
        BadPtx{".version 9.0\n.entry k()\n{\n\t@ ret;\n}\n",
               "bad.ptx:4:7: error: expected an opcode after '@ret'"},
        BadPtx{".version 9.0\n.entry k()\n{\n\t@;\n}\n",
               "bad.ptx:4:3: error: expected a predicate register after '@'"},
        BadPtx{".version 9.0\n.entry k()\n{\n\t.maxnreg 4;\n}\n",
               "bad.ptx:4:2: error: unexpected directive '.maxnreg' in a function body"},
        BadPtx{"\x7f" "ELF\x02\x01", "bad.ptx:1:1: error: unexpected byte 0x7f\n  hint: PTX is ASCII text"},
        BadPtx{".version 9.0\n.entry (\n", "bad.ptx:2:8: error: expected the name of the .entry"},
        BadPtx{".version 9.0\n.entry k(.param .u32 a b)\n{\n}\n",
               "bad.ptx:2:24: error: parameter 'a' has two names"}));

// Real compiler output: nvcc 13 (plain, -lineinfo, -G) and clang 19, plus the
// same PTX as fatbinary stores it (comments gone, blanks collapsed).
class RealPtxTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RealPtxTest, RoundTripsAndAssemblesTheSame) {
  const std::string original = testing::ReadFixtureText(GetParam());
  ASSERT_FALSE(original.empty());
  for (const std::string& text : {original, testing::MinifyLikeFatbinary(original)}) {
    absl::StatusOr<Module> m = ParsePtx(text, GetParam());
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_FALSE(m->functions.empty());
    const std::string printed = PrintPtx(*m);
    absl::StatusOr<Module> again = ParsePtx(printed, "printed");
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(PrintPtx(*again), printed);
    absl::StatusOr<std::string> a = testing::RunPtxas(text);
    absl::StatusOr<std::string> b = testing::RunPtxas(printed);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(testing::ResourceReport(*a), testing::ResourceReport(*b));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RealPtxTest,
                         ::testing::Values("kernels_sm90.ptx", "kernels_sm80.ptx",
                                           "kernels_rdc_sm90.ptx", "kernels_lineinfo_sm90.ptx",
                                           "kernels_debug_sm90.ptx", "clang_kernels.ptx"),
                         [](const auto& info) {
                           std::string name = info.param.substr(0, info.param.find('.'));
                           return name;
                         });

TEST(PtxParserTest, DebugSectionsStayWhole) {
  // The module's statements are views into the text: it must outlive them.
  const std::string text = testing::ReadFixtureText("kernels_debug_sm90.ptx");
  absl::StatusOr<Module> m = ParsePtx(text);
  ASSERT_TRUE(m.ok()) << m.status();
  int sections = 0, files = 0, locs = 0;
  for (const ModuleItem& item : m->items) {
    if (item.is_function) {
      for (const Statement& s : m->functions[item.function_index].body) locs += s.opcode == ".loc";
    } else {
      sections += item.statement.opcode == ".section";
      files += item.statement.opcode == ".file";
    }
  }
  EXPECT_GE(sections, 2);
  EXPECT_GE(files, 1);
  EXPECT_GT(locs, 10);
}

TEST(PtxParserTest, SnippetsAndSplitOperands) {
  absl::StatusOr<std::vector<Statement>> s =
      ParseBodyStatements("{\n.reg .b32 %t;\n@%p1 call (r), f, (a, b);\n}\nlab:\n");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 5u);
  EXPECT_EQ((*s)[2].opcode, "call");
  EXPECT_THAT(SplitOperands((*s)[2].operands), ElementsAre("(r)", "f", "(a, b)"));
  EXPECT_FALSE(ParseBodyStatements("{\nret;\n").ok());
  EXPECT_FALSE(ParseBodyStatements("}\n").ok());
  EXPECT_THAT(SplitOperands(""), ElementsAre());
  EXPECT_THAT(SplitOperands(" %r1 "), ElementsAre("%r1"));
}

TEST(PtxTypeSizeTest, KnowsTheTypes) {
  EXPECT_EQ(PtxTypeSize(".u8"), 1u);
  EXPECT_EQ(PtxTypeSize(".bf16"), 2u);
  EXPECT_EQ(PtxTypeSize(".f16x2"), 4u);
  EXPECT_EQ(PtxTypeSize(".f64"), 8u);
  EXPECT_EQ(PtxTypeSize(".b128"), 16u);
  EXPECT_EQ(PtxTypeSize(".pred"), 0u);
  EXPECT_EQ(PtxTypeSize(".global"), 0u);
}

}  // namespace
}  // namespace cuprobe
