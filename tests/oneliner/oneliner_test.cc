// The one-liner language: what parses and what is refused (with the column),
// what the maps print, and what the translated programs compute. For the
// last, each one-liner goes through the real pipeline (translation, clang-19,
// the object reader and the verifier) and its eBPF programs run on the
// reference interpreter over synthetic threads and accesses, with the maps
// kept on the host; the printed maps are then compared with what the
// one-liner means.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "gtest/gtest.h"
#include "loader/args.h"
#include "loader/compiler/compiler.h"
#include "loader/compiler/object.h"
#include "loader/compiler/verifier.h"
#include "loader/oneliner/compile.h"
#include "loader/oneliner/parser.h"
#include "loader/oneliner/print.h"
#include "loader/oneliner/translate.h"
#include "probe/bundle.h"
#include "probe/interpreter.h"

namespace cuprobe::oneliner {
namespace {

// ---- errors ----

std::string ErrorOf(std::string_view text) {
  absl::StatusOr<Translation> t = TranslateOneliner(text);
  return t.ok() ? std::string("(accepted)") : std::string(t.status().message());
}

TEST(OnelinerErrors, PointAtTheColumnWithACaret) {
  EXPECT_EQ(ErrorOf("exit:vec_add* { @a = 1 @b = 2 }"),
            "-e:1:24: expected ';' or '}' after a statement, found '@'\n"
            "exit:vec_add* { @a = 1 @b = 2 }\n"
            "                       ^");
  EXPECT_EQ(ErrorOf("exot:* { @a = count(); }"),
            "-e:1:1: expected an attach point (entry:GLOB, exit:GLOB or mem:GLOB), found "
            "'exot'\nexot:* { @a = count(); }\n^");
}

TEST(OnelinerErrors, SayWhatWasExpected) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"", "expected a probe"},
      {"entry { }", "expected ':' and a kernel glob after 'entry'"},
      {"entry: { }", "expected a kernel glob after 'entry:'"},
      {"exit:\"vec* { }", "a kernel glob holds no quotes"},
      {"entry:* @a = count(); }", "expected '{' to start the probe's block or '/'"},
      {"entry:* /tid.x == 0 { }", "'/' to close the filter"},
      {"entry:* { @a = count();", "expected '}' to close the block"},
      {"entry:* { @a = foo(1); }", "unknown map function 'foo'"},
      {"entry:* { @a = sum(); }", "sum() takes 1 argument, not 0"},
      {"entry:* { @a = lhist(sm, 0, 10); }", "lhist() takes 4 arguments (x, min, max, step)"},
      {"entry:* { @a = lhist(sm, 0, sm, 1); }", "lhist's min, max and step must be numbers"},
      {"entry:* { @a = lhist(sm, 0, 10, 0); }", "lhist's step must be positive"},
      {"entry:* { @a = lhist(sm, 10, 0, 1); }", "lhist's max must be above its min"},
      {"entry:* { @a = lhist(sm, 0, 100000, 1); }", "100000 buckets; at most 1000"},
      {"entry:* { @a = count(); @a = sum(sm); }", "@a already holds count()"},
      {"entry:* { @a[sm] = count(); @a = count(); }", "@a has 1 key elsewhere, 0 here"},
      {"entry:* { @a = addr; }", "addr exists only in mem: probes (this probe attaches at entry:*)"},
      {"exit:* { @a[kind] = count(); }", "kind exists only in mem: probes"},
      {"entry:* { @a = tid; }", "tid has three parts: use tid.x, tid.y or tid.z"},
      {"entry:* { @a = tid.w; }", "expected x, y or z after 'tid.'"},
      {"entry:* { @a = pid; }", "unknown builtin 'pid'; expected one of kernel, tid.x"},
      {"entry:* { @a = arg16; }", "unknown builtin 'arg16'"},
      {"entry:* { @a = $x; }", "$x is never assigned in this probe"},
      {"entry:* { @a = @b; }", "maps cannot be read in expressions"},
      {"entry:* { @a = count() + 1; }", "expected ';' or '}' after a statement"},
      {"entry:* { @a = 1 + count(); }", "'count(...)' cannot be used here"},
      {"entry:* { @int = count(); }", "@int cannot be a map's name"},
      {"entry:* { printf(\"%s\", sm); }", "'%s' is not an integer conversion"},
      {"entry:* { printf(\"%d %d\", sm); }", "the format has 2 conversions and 1 arguments"},
      {"entry:* { printf(\"%d%d%d%d\", 1, 2, 3, 4); }", "at most 3 arguments"},
      {"entry:* { printf(\"x); }", "the string is not closed"},
      {"entry:* { @a = 99999999999999999999; }", "does not fit in 64 bits"},
      {"entry:* { @a = 12ab; }", "expected a number"},
      {"entry:* { @a = (1 + 2; }", "expected ')'"},
      {"entry:* { @a = 1 ? 2; }", "':' in the ternary"},
      {"entry:* { if 1 { } }", "expected '(' after if"},
      {"entry:* { x = 1; }", "expected a statement"},
  };
  for (const auto& [text, want] : cases) {
    const std::string got = ErrorOf(text);
    EXPECT_TRUE(absl::StrContains(got, want)) << text << "\n got: " << got << "\n want: " << want;
  }
}

TEST(OnelinerParse, PrecedenceAndTheFilterSlash) {
  absl::StatusOr<Program> p = ParseOneliner("entry:* /sm / 2 == 1/ { @a = 1 + 2 * 3 << 1; }");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->probes.size(), 1u);
  const Expr& filter = *p->probes[0].filter;
  EXPECT_EQ(filter.op, "==");
  EXPECT_EQ(filter.kids[0]->op, "/");  // division inside the filter
  const Expr& value = *p->probes[0].body[0].args[0];
  EXPECT_EQ(value.op, "<<");            // (1 + (2 * 3)) << 1
  EXPECT_EQ(value.kids[0]->op, "+");
  EXPECT_EQ(value.kids[0]->kids[1]->op, "*");
  absl::StatusOr<Program> several =
      ParseOneliner("exit:a*,entry:b[xy]* { @n = count() } mem:c /kind == write/ { @m = 1; }");
  ASSERT_TRUE(several.ok()) << several.status();
  ASSERT_EQ(several->probes.size(), 2u);
  ASSERT_EQ(several->probes[0].attaches.size(), 2u);
  EXPECT_EQ(several->probes[0].attaches[1].glob, "b[xy]*");
}

// ---- the pipeline on the interpreter ----

// One thread at one attach point: the context fields the program reads.
struct Event {
  AttachPoint point = AttachPoint::kEntry;
  uint32_t kernel = 0;
  uint32_t tid[3] = {0, 0, 0};
  uint32_t bid[3] = {0, 0, 0};
  uint32_t sm = 0;
  uint64_t nsecs = 0;
  uint64_t addr = 0;
  uint32_t size = 0, space = CUPROBE_SPACE_GLOBAL, kind = CUPROBE_ACCESS_LOAD;
  uint64_t args[2] = {0, 0};
};

uint64_t CtxField(const Event& e, int32_t off) {
  if (off >= 20 && off < 32) return e.tid[(off - 20) / 4];
  if (off >= 8 && off < 20) return e.bid[(off - 8) / 4];
  if (off >= 120) return e.args[((off - 120) / 8) % 2];
  switch (off) {
    case 4: return e.kernel;
    case 56: return e.sm;
    case 72: return e.nsecs;
    case 88: return e.addr;
    case 96: return e.size;
    case 100: return e.space;
    case 104: return e.kind;
    case 32: case 36: case 40: return 32;  // block_dim
    default: return 0;
  }
}

class HostMaps {
 public:
  explicit HostMaps(const BpfObject& object) : object_(object), maps_(object.maps.size()) {}

  uint64_t Helper(int32_t id, const uint64_t* a, std::vector<std::string>* printed) {
    auto key = [&](uint64_t map, uint64_t ptr) {
      const uint32_t size = object_.maps[map].spec.key_size;
      const auto* p = reinterpret_cast<const uint8_t*>(ptr);
      return std::vector<uint8_t>(p, p + size);
    };
    const uint64_t m = a[0] - 1;
    switch (id) {
      case CUPROBE_HELPER_MAP_ADD:
        maps_[m][key(m, a[1])] += a[2];
        return 0;
      case CUPROBE_HELPER_MAP_LOOKUP_ELEM: {
        auto it = maps_[m].find(key(m, a[1]));
        return it == maps_[m].end() ? 0 : reinterpret_cast<uint64_t>(&it->second);
      }
      case CUPROBE_HELPER_MAP_UPDATE_ELEM: {
        auto k = key(m, a[1]);
        if (a[3] == BPF_NOEXIST_VALUE && maps_[m].contains(k)) return static_cast<uint64_t>(-17);
        std::memcpy(&maps_[m][k], reinterpret_cast<const void*>(a[2]), 8);
        return 0;
      }
      case CUPROBE_HELPER_TRACE_PRINTK:
        printed->push_back(absl::StrCat(a[2], " ", a[3]));
        return 0;
      default:
        return 0;
    }
  }

  std::vector<MapEntry> Entries(const std::string& name) const {
    std::vector<MapEntry> out;
    for (size_t i = 0; i < object_.maps.size(); ++i) {
      if (object_.maps[i].spec.name != name) continue;
      for (const auto& [k, v] : maps_[i]) out.push_back({k, v});
    }
    return out;
  }

  static constexpr uint64_t BPF_NOEXIST_VALUE = 1;

 private:
  const BpfObject& object_;
  std::vector<std::map<std::vector<uint8_t>, uint64_t>> maps_;
};

struct RunResult {
  std::string maps;  // as printed
  std::vector<std::string> printed;
};

RunResult RunOneliner(std::string_view text, const std::vector<Event>& events) {
  RunResult result;
  absl::StatusOr<Translation> t = TranslateOneliner(text);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return result;
  const std::string dir = ::testing::TempDir() + "/oneliner_" +
                          std::to_string(reinterpret_cast<uintptr_t>(&result));
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/p.bpf.c";
  std::ofstream(path) << t->c_source;
  absl::StatusOr<std::vector<uint8_t>> bytes = CompileCToBpf(path, ProbeCompileOptions{});
  EXPECT_TRUE(bytes.ok()) << bytes.status() << "\n" << t->c_source;
  if (!bytes.ok()) return result;
  absl::StatusOr<BpfObject> object = ReadBpfObject(*bytes, "p.o");
  EXPECT_TRUE(object.ok()) << object.status();
  if (!object.ok()) return result;
  for (const BpfProgram& prog : object->programs) {
    absl::StatusOr<VerifiedProgram> v = Verify(*object, prog, VerifierOptions{});
    EXPECT_TRUE(v.ok()) << v.status() << "\n" << t->c_source;
  }
  HostMaps maps(*object);
  for (const Event& e : events) {
    for (const BpfProgram& prog : object->programs) {
      const bool here = (e.point == AttachPoint::kEntry && absl::StartsWith(prog.name, "entry_")) ||
                        (e.point == AttachPoint::kExit && absl::StartsWith(prog.name, "exit_")) ||
                        (e.point == AttachPoint::kMem && absl::StartsWith(prog.name, "mem_"));
      if (!here) continue;
      InterpreterEnv env;
      env.ctx_field = [&](int32_t off) { return CtxField(e, off); };
      env.helper = [&](int32_t id, const uint64_t* a) {
        return maps.Helper(id, a, &result.printed);
      };
      env.map_handle = [](uint32_t m) { return uint64_t{m} + 1; };
      env.value_address = [](uint32_t) { return uint64_t{0}; };
      absl::StatusOr<uint64_t> r = Interpret(prog.insns, env);
      EXPECT_TRUE(r.ok()) << r.status();
    }
  }
  for (const MapPlan& plan : t->maps) {
    result.maps += FormatOnelinerMap(plan, maps.Entries(plan.c_name), [](uint32_t id) {
      return id == 1 ? std::string("vec_add") : id == 2 ? std::string("matmul") : std::string();
    });
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return result;
}

std::vector<Event> Threads(AttachPoint point, uint32_t kernel, uint32_t n) {
  std::vector<Event> out;
  for (uint32_t i = 0; i < n; ++i) {
    Event e;
    e.point = point;
    e.kernel = kernel;
    e.tid[0] = i % 32;
    e.tid[1] = (i / 32) % 2;
    e.bid[0] = i / 64;
    e.sm = (i / 64) % 4;
    e.nsecs = 1000 + i;
    out.push_back(e);
  }
  return out;
}

TEST(OnelinerRun, CountsExitsPerKernelByName) {
  std::vector<Event> events = Threads(AttachPoint::kExit, 1, 100);
  for (const Event& e : Threads(AttachPoint::kExit, 2, 30)) events.push_back(e);
  for (const Event& e : Threads(AttachPoint::kEntry, 1, 7)) events.push_back(e);
  EXPECT_EQ(RunOneliner("exit:vec_add* { @exits[kernel] = count(); }", events).maps,
            "@exits[matmul]: 30\n@exits[vec_add]: 100\n\n");
}

TEST(OnelinerRun, SumsTheBytesOfWritesOnly) {
  std::vector<Event> events;
  for (uint32_t i = 0; i < 10; ++i) {
    Event e;
    e.point = AttachPoint::kMem;
    e.kernel = 1 + i % 2;
    e.size = 4 << (i % 2);
    e.kind = i < 6 ? CUPROBE_ACCESS_STORE : CUPROBE_ACCESS_LOAD;
    events.push_back(e);
  }
  // Writes: i = 0, 2, 4 (vec_add, 4 bytes) and 1, 3, 5 (matmul, 8 bytes).
  EXPECT_EQ(RunOneliner("mem:*gemm* /kind == write/ { @bytes[kernel] = sum(size); }", events).maps,
            "@bytes[vec_add]: 12\n@bytes[matmul]: 24\n\n");
  EXPECT_EQ(RunOneliner("mem:* { @n[kind, space] = count(); }", events).maps,
            "@n[read, global]: 4\n@n[write, global]: 6\n\n");
}

TEST(OnelinerRun, LinearHistogramOfBlockLeadersPerSm) {
  // 256 threads, 64 per block: blocks 0..3 on SMs 0..3, one leader each.
  EXPECT_EQ(RunOneliner("entry:* /tid.x == 0 && tid.y == 0/ { @sm_blocks = lhist(sm, 0, 132, 1); }",
                        Threads(AttachPoint::kEntry, 1, 256))
                .maps,
            "@sm_blocks:\n"
            "[0, 1)                 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n"
            "[1, 2)                 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n"
            "[2, 3)                 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n"
            "[3, 4)                 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\n");
}

TEST(OnelinerRun, Log2HistogramOfAddresses) {
  std::vector<Event> events;
  for (uint64_t a : {0ull, 1ull, 2ull, 3ull, 5ull, 1024ull, 1500ull, 0x7fff00001000ull}) {
    Event e;
    e.point = AttachPoint::kMem;
    e.addr = a;
    events.push_back(e);
  }
  // addr & 0xffffff: 0, 1, 2, 3, 5, 1024, 1500, 0x1000.
  EXPECT_EQ(RunOneliner("mem:matmul* { @addr = hist(addr & 0xffffff); }", events).maps,
            "@addr:\n"
            "[0]                    1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |\n"
            "[1]                    1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |\n"
            "[2, 4)                 2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n"
            "[4, 8)                 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |\n"
            "[8, 16)                0 |                                                    |\n"
            "[16, 32)               0 |                                                    |\n"
            "[32, 64)               0 |                                                    |\n"
            "[64, 128)              0 |                                                    |\n"
            "[128, 256)             0 |                                                    |\n"
            "[256, 512)             0 |                                                    |\n"
            "[512, 1K)              0 |                                                    |\n"
            "[1K, 2K)               2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n"
            "[2K, 4K)               0 |                                                    |\n"
            "[4K, 8K)               1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |\n\n");
}

TEST(OnelinerRun, MinMaxAvgStatsAndNegativeValues) {
  std::vector<Event> events = Threads(AttachPoint::kEntry, 1, 64);  // tid.x 0..31 twice
  EXPECT_EQ(RunOneliner("entry:* { @lo = min(tid.x - 5); @hi = max(tid.x * 3); "
                        "@mean = avg(tid.x); @s[kernel] = stats(tid.x); @neg = hist(tid.x - 2); }",
                        events)
                .maps,
            "@lo: -5\n\n@hi: 93\n\n@mean: 15\n\n"
            "@s[vec_add]: count 64, average 15, total 992\n\n"
            "@neg:\n"
            "(..., 0)               4 |@@@@@@@                                             |\n"
            "[0]                    2 |@@@                                                 |\n"
            "[1]                    2 |@@@                                                 |\n"
            "[2, 4)                 4 |@@@@@@@                                             |\n"
            "[4, 8)                 8 |@@@@@@@@@@@@@@                                      |\n"
            "[8, 16)               16 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                       |\n"
            "[16, 32)              28 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\n");
}

TEST(OnelinerRun, ArithmeticVariablesConditionsAndPrintf) {
  Event e;
  e.args[0] = 100;
  e.args[1] = 7;
  RunResult r = RunOneliner(
      "entry:* { $q = arg0 / arg1; $r = arg0 % arg1; $z = arg0 / 0; "
      "@v[1] = $q; @v[2] = $r; @v[3] = $z; @v[4] = -arg1 >> 60; @v[5] = arg1 << 65; "
      "@v[6] = (arg0 > arg1) ? ~0 : 9; @v[7] = !arg0 || arg1 == 7 && arg0 != 3; "
      "@v[8] = (arg0 ^ 0xff) & 0xf0 | 1; "
      "if ($q == 14) { @v[9] = 1; } else { @v[9] = 2; } "
      "printf(\"q=%d r=%x\\n\", $q, $r); }",
      {e});
  EXPECT_EQ(r.maps,
            "@v[6]: -1\n@v[3]: 0\n@v[7]: 1\n@v[9]: 1\n@v[2]: 2\n@v[1]: 14\n@v[5]: 14\n"
            "@v[4]: 15\n@v[8]: 145\n\n");
  ASSERT_EQ(r.printed.size(), 1u);
  EXPECT_EQ(r.printed[0], "14 2");
}

// ---- the rest of the pipeline ----

TEST(OnelinerCompile, TheBundleKeepsTheOnelinerAndSpacesWhenReadingSpace) {
  const std::string text = "mem:* /space == shared/ { @n = count(); } exit:* { @e = count(); }";
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<CompileResult> r = CompileOneliner(text, ProbeCompileOptions{});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.status();
  std::cout << "one-liner compiled in " << s << " s\n";
  ::testing::Test::RecordProperty("compile_seconds", absl::StrCat(s));
  absl::StatusOr<ProbeBundle> back = ReadBundle(WriteBundle(r->bundle));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->oneliner, text);
  ASSERT_EQ(back->programs.size(), 2u);
  for (const ProbeProgram& p : back->programs) {
    if (p.attach == AttachKind::kMemory) {
      EXPECT_EQ(p.mem_spaces, 0x1eu);  // global, shared, local, generic
    } else {
      EXPECT_EQ(p.kernel_glob, "*");
    }
  }
  // A counting one-liner keeps the site-counter fast path of C probes.
  EXPECT_FALSE(back->programs[0].summary_code.empty());
}

TEST(OnelinerArgs, RunAttachAndCompileTakeE) {
  absl::StatusOr<CliArgs> run = ParseArgs({"cuprobe", "run", "-e", "exit:* { @n = count(); }",
                                           "-k", "vec*", "--", "./app"});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->run.oneliner, "exit:* { @n = count(); }");
  EXPECT_EQ(run->run.kernels, "vec*");
  absl::StatusOr<CliArgs> events = ParseArgs({"cuprobe", "run", "-p", "p.cpb", "-e", "json",
                                              "--", "./app"});
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_TRUE(events->run.events_json);
  EXPECT_TRUE(events->run.oneliner.empty());
  absl::StatusOr<CliArgs> both = ParseArgs({"cuprobe", "run", "-p", "p.cpb", "-e",
                                            "exit:* { @n = count(); }", "--", "./app"});
  EXPECT_FALSE(both.ok());
  absl::StatusOr<CliArgs> compile = ParseArgs({"cuprobe", "compile", "-e",
                                               "exit:* { @n = count(); }", "-o", "n.cpb"});
  ASSERT_TRUE(compile.ok()) << compile.status();
  EXPECT_EQ(compile->compile.oneliner, "exit:* { @n = count(); }");
  absl::StatusOr<CliArgs> attach = ParseArgs({"cuprobe", "attach", "42", "-e",
                                              "exit:* { @n = count(); }"});
  ASSERT_TRUE(attach.ok()) << attach.status();
  EXPECT_EQ(attach->attach.run.oneliner, "exit:* { @n = count(); }");
}

}  // namespace
}  // namespace cuprobe::oneliner
