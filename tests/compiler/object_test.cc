// The eBPF object reader on real clang-19 output and on bad bytes.
#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loader/compiler/object.h"
#include "tests/compiler/test_util.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;
using namespace cuprobe::testing;  // NOLINT

constexpr char kProbe[] = R"(#include "cuprobe/probe.h"
struct event { u64 ts; u32 sm; u32 block; };
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, u32); __type(value, struct event);
         __uint(max_entries, 128); } events SEC(".maps");
struct { __uint(type, 1502); __type(key, u32); __type(value, u64);
         __uint(max_entries, 4); } per_thread SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HIST_LINEAR); __type(key, u32); __type(value, u64);
         __uint(max_entries, 32); __uint(map_extra, CUPROBE_HIST_LINEAR_RANGE(3, 10));
       } lin SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 4096);
         __type(value, struct event); } ring SEC(".maps");
struct bpf_map_def { unsigned int type, key_size, value_size, max_entries, map_flags; };
struct bpf_map_def SEC("maps") legacy = { .type = 2, .key_size = 4, .value_size = 8,
                                          .max_entries = 10 };
u64 total = 0;
u32 seed = 42;
const volatile u32 only_sm = 3;
SEC("kprobe/vec_add") int first(struct cuprobe_ctx *ctx) {
  u32 k = 0; struct event *e = bpf_map_lookup_elem(&events, &k);
  if (e) e->ts = ctx->global_timer + seed + only_sm;
  total += 1; return 0;
}
SEC("cuprobe/exit/vec_*") int second(struct cuprobe_ctx *ctx) {
  u32 k = 0; u64 *v = bpf_map_lookup_elem(&legacy, &k); if (v) *v += 1;
  v = bpf_map_lookup_elem(&per_thread, &k); if (v) *v += 1;
  cuprobe_hist_add(&lin, ctx->clock, 1); return 0;
}
)";

TEST(Object, ReadsProgramsMapsGlobalDataTypesAndLines) {
  auto bytes = CompileProbeSource(kProbe);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<BpfObject> obj = ReadBpfObject(*bytes, "probe.bpf.c");
  ASSERT_TRUE(obj.ok()) << obj.status();
  ASSERT_EQ(obj->programs.size(), 2u);
  EXPECT_EQ(obj->programs[0].name, "second");  // sorted by section
  EXPECT_EQ(obj->programs[0].section, "cuprobe/exit/vec_*");
  EXPECT_EQ(obj->programs[1].name, "first");
  EXPECT_FALSE(obj->programs[1].lines.empty());
  EXPECT_EQ(obj->programs[1].lines[0].file.substr(obj->programs[1].lines[0].file.rfind('/') + 1),
            "probe.bpf.c");
  std::map<std::string, const ObjectMap*> maps;
  for (const ObjectMap& m : obj->maps) maps[m.spec.name] = &m;
  ASSERT_TRUE(maps.count("events"));
  const MapSpec& ev = maps["events"]->spec;
  EXPECT_EQ(ev.type, uint32_t{CUPROBE_MAP_HASH});
  EXPECT_EQ(ev.key_size, 4u);
  EXPECT_EQ(ev.value_size, 16u);
  EXPECT_EQ(ev.max_entries, 128u);
  EXPECT_EQ(ev.value_type.name, "struct event");
  ASSERT_EQ(ev.value_type.fields.size(), 3u);
  EXPECT_EQ(ev.value_type.fields[2].name, "block");
  EXPECT_EQ(ev.value_type.fields[2].offset, 12u);
  EXPECT_EQ(ev.value_type.fields[2].type, "u32");
  EXPECT_EQ(maps["per_thread"]->spec.type, uint32_t{CUPROBE_MAP_PERTHREAD});  // bpftime alias
  // A ring's __type(value, T) names its records' fields; records have no
  // fixed size, so value_size stays BPF's 0.
  ASSERT_TRUE(maps.count("ring"));
  EXPECT_EQ(maps["ring"]->spec.value_size, 0u);
  EXPECT_EQ(maps["ring"]->spec.value_type.name, "struct event");
  EXPECT_EQ(maps["ring"]->spec.value_type.fields.size(), 3u);
  EXPECT_EQ(maps["lin"]->spec.map_extra, (10ull << 32) | 3);
  ASSERT_TRUE(maps.count("legacy"));
  EXPECT_EQ(maps["legacy"]->origin, MapOrigin::kLegacy);
  EXPECT_EQ(maps["legacy"]->spec.value_size, 8u);
  ASSERT_TRUE(maps.count(".bss"));
  ASSERT_TRUE(maps.count(".data"));
  ASSERT_TRUE(maps.count(".rodata"));
  EXPECT_TRUE(maps[".rodata"]->read_only());
  EXPECT_EQ(maps[".data"]->spec.initial_value, (std::vector<uint8_t>{42, 0, 0, 0}));
  EXPECT_EQ(maps[".data"]->spec.value_type.fields.at(0).name, "seed");
  EXPECT_EQ(maps[".bss"]->spec.value_type.fields.at(0).name, "total");
  // Map references resolved on the ld_imm64 instructions.
  EXPECT_GE(obj->programs[1].map_refs.size(), 4u);
}

TEST(Object, RejectsNonEbpfTruncatedAndCorruptInput) {
  EXPECT_THAT(std::string(ReadBpfObject({}, "x.o").status().message()), HasSubstr("not an ELF"));
  const std::string text = "int main() {}";
  EXPECT_THAT(std::string(ReadBpfObject(absl::Span<const uint8_t>(
                                            reinterpret_cast<const uint8_t*>(text.data()),
                                            text.size()),
                                        "x.o")
                              .status()
                              .message()),
              HasSubstr("not an ELF file"));
  auto bytes = CompileProbeSource(kProbe);
  ASSERT_TRUE(bytes.ok());
  std::vector<uint8_t> x86 = *bytes;
  x86[18] = 62;  // EM_X86_64
  EXPECT_THAT(std::string(ReadBpfObject(x86, "x.o").status().message()),
              HasSubstr("is not eBPF"));
  // Every truncation is an error, never a crash.
  for (size_t n = 0; n < bytes->size(); n += 7) {
    EXPECT_FALSE(ReadBpfObject(absl::Span<const uint8_t>(bytes->data(), n), "x.o").ok()) << n;
  }
  // Section table pointing past the end.
  std::vector<uint8_t> bad = *bytes;
  const uint64_t shoff = bytes->size() + 1000;
  std::memcpy(bad.data() + 40, &shoff, 8);
  EXPECT_THAT(std::string(ReadBpfObject(bad, "x.o").status().message()),
              HasSubstr("section header table at offset"));
}

TEST(Object, RejectsCallsOfNonInlinedFunctions) {
  auto bytes = CompileProbeSource(R"(#include "cuprobe/probe.h"
__attribute__((noinline)) static int helper(int x) { return x * 3; }
SEC("cuprobe/entry/*") int p(struct cuprobe_ctx *ctx) { return helper(ctx->sm_id); }
)");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_THAT(std::string(ReadBpfObject(*bytes, "x.o").status().message()),
              HasSubstr("__always_inline"));
}

}  // namespace
}  // namespace cuprobe
