// The .cpb format: byte-exact round trips, and a clear error for every
// truncation, every flipped byte and every version mismatch.
#include <string>

#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "probe/bundle.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;

ProbeBundle Sample() {
  ProbeBundle b;
  b.compiler_version = "cuprobe 0.1.0 / LLVM 19.1.7";
  b.source_hash = 0x1234567890abcdefull;
  b.source_name = "threadhist.bpf.c";
  ProbeProgram p;
  p.name = "count_exits";
  p.section = "cuprobe/exit/vec_add*";
  p.attach = AttachKind::kExit;
  p.kernel_glob = "vec_add*";
  p.ptx_function = "__cuprobe_probe_count_exits";
  p.reads_args = true;
  b.programs.push_back(p);
  p.name = "mem";
  p.attach = AttachKind::kMemory;
  p.ptx_function = "__cuprobe_probe_mem";
  p.reads_args = false;
  p.mem_spaces = 1u << CUPROBE_SPACE_SHARED;
  b.programs.push_back(p);
  MapSpec m;
  m.name = "exits";
  m.type = CUPROBE_MAP_PERTHREAD;
  m.key_size = 4;
  m.value_size = 16;
  m.max_entries = 1024;
  m.flags = 3;
  m.map_extra = 0x0000000a00000002ull;
  m.key_type = {"u32", 4, {}};
  m.value_type = {"struct v", 16, {{"count", "u64", 0, 8}, {"last", "u64", 8, 8}}};
  b.maps.push_back(m);
  MapSpec data;
  data.name = ".data";
  data.type = CUPROBE_MAP_ARRAY;
  data.key_size = 4;
  data.value_size = 8;
  data.max_entries = 1;
  data.initial_value = {1, 2, 3, 4, 5, 6, 7, 8};
  b.maps.push_back(data);
  b.ptx = ".version 8.0\n.target sm_90\n.visible .func __cuprobe_probe_count_exits()\n"
          ".visible .func __cuprobe_probe_mem()\n";
  b.helpers = {"__cuprobe_map_add", "__cuprobe_map_lookup"};
  b.printk_formats = {"x=%d\n", ""};
  return b;
}

TEST(Bundle, RoundTripIsByteExactAndFieldExact) {
  const std::vector<uint8_t> bytes = WriteBundle(Sample());
  absl::StatusOr<ProbeBundle> read = ReadBundle(bytes);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(WriteBundle(*read), bytes);
  const ProbeBundle& b = *read;
  EXPECT_EQ(b.compiler_version, "cuprobe 0.1.0 / LLVM 19.1.7");
  EXPECT_EQ(b.source_hash, 0x1234567890abcdefull);
  ASSERT_EQ(b.programs.size(), 2u);
  EXPECT_EQ(b.programs[0].attach, AttachKind::kExit);
  EXPECT_TRUE(b.programs[0].reads_args);
  EXPECT_EQ(b.programs[1].mem_spaces, 1u << CUPROBE_SPACE_SHARED);
  ASSERT_EQ(b.maps.size(), 2u);
  EXPECT_EQ(b.maps[0].map_extra, 0x0000000a00000002ull);
  ASSERT_EQ(b.maps[0].value_type.fields.size(), 2u);
  EXPECT_EQ(b.maps[0].value_type.fields[1].name, "last");
  EXPECT_EQ(b.maps[0].value_type.fields[1].offset, 8u);
  EXPECT_EQ(b.maps[1].initial_value, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(b.printk_formats, (std::vector<std::string>{"x=%d\n", ""}));
  EXPECT_EQ(b.helpers.size(), 2u);
}

TEST(Bundle, SummaryCodeRoundTripsAndBadReferencesAreRejected) {
  ProbeBundle b = Sample();
  // ld_imm64 r1, map 1; exit
  b.programs[1].summary_code = {0x18, 0x11, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                0x95, 0, 0, 0, 0, 0, 0, 0};
  b.programs[1].summary_maps = {{0, 1}};
  const std::vector<uint8_t> bytes = WriteBundle(b);
  absl::StatusOr<ProbeBundle> read = ReadBundle(bytes);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(WriteBundle(*read), bytes);
  EXPECT_TRUE(read->programs[0].summary_code.empty());
  EXPECT_EQ(read->programs[1].summary_code, b.programs[1].summary_code);
  EXPECT_EQ(read->programs[1].summary_maps, b.programs[1].summary_maps);
  // A reference to a map the bundle lacks, to an instruction that is not an
  // ld_imm64, and code that is not whole instructions: each refused.
  for (int bad = 0; bad < 3; ++bad) {
    ProbeBundle c = b;
    if (bad == 0) c.programs[1].summary_maps = {{0, 9}};
    if (bad == 1) c.programs[1].summary_maps = {{2, 0}};
    if (bad == 2) c.programs[1].summary_code.pop_back();
    absl::StatusOr<ProbeBundle> r = ReadBundle(WriteBundle(c));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("chunk 'SUMM'")) << bad;
  }
}

TEST(Bundle, EveryTruncationIsRejected) {
  const std::vector<uint8_t> bytes = WriteBundle(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<ProbeBundle> r =
        ReadBundle(absl::Span<const uint8_t>(bytes.data(), n));
    ASSERT_FALSE(r.ok()) << "accepted a truncation to " << n << " bytes";
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("bundle: "));
  }
}

TEST(Bundle, EveryFlippedByteIsRejected) {
  const std::vector<uint8_t> good = WriteBundle(Sample());
  for (size_t i = 0; i < good.size(); ++i) {
    std::vector<uint8_t> bad = good;
    bad[i] ^= 0x41;
    ASSERT_FALSE(ReadBundle(bad).ok()) << "accepted a flip at byte " << i;
  }
}

TEST(Bundle, ClearMessages) {
  std::vector<uint8_t> bytes = WriteBundle(Sample());
  EXPECT_THAT(std::string(ReadBundle(absl::Span<const uint8_t>(bytes.data(), 10)).status().message()),
              HasSubstr("truncated"));
  std::vector<uint8_t> elf = {0x7f, 'E', 'L', 'F'};
  elf.resize(64);
  EXPECT_THAT(std::string(ReadBundle(elf).status().message()),
              HasSubstr("not a cuprobe probe bundle"));
  std::vector<uint8_t> v2 = bytes;
  v2[4] = 2;
  EXPECT_THAT(std::string(ReadBundle(v2).status().message()),
              HasSubstr("format version 2 is not supported"));
  std::vector<uint8_t> abi = bytes;
  abi[8] = CUPROBE_ABI_VERSION + 1;  // a bundle from a newer cuprobe
  EXPECT_THAT(std::string(ReadBundle(abi).status().message()),
              HasSubstr(absl::StrCat("probe ABI version ", CUPROBE_ABI_VERSION + 1)));
  std::vector<uint8_t> padded = bytes;
  padded.push_back(0);
  EXPECT_THAT(std::string(ReadBundle(padded).status().message()), HasSubstr("total size"));
  std::vector<uint8_t> corrupt = bytes;
  corrupt[100] ^= 1;
  EXPECT_THAT(std::string(ReadBundle(corrupt).status().message()), HasSubstr("checksum"));
}

TEST(Bundle, SemanticChecks) {
  ProbeBundle b = Sample();
  b.programs[0].ptx_function = "__cuprobe_probe_missing";
  EXPECT_THAT(std::string(ReadBundle(WriteBundle(b)).status().message()),
              HasSubstr("is not in the PTX"));
  b = Sample();
  b.maps[0].type = 77;
  EXPECT_THAT(std::string(ReadBundle(WriteBundle(b)).status().message()),
              HasSubstr("unknown map type 77"));
  b = Sample();
  b.maps[1].initial_value.pop_back();
  EXPECT_THAT(std::string(ReadBundle(WriteBundle(b)).status().message()),
              HasSubstr("initial value of 7 bytes"));
  b = Sample();
  b.maps[0].value_type.fields[1].offset = 12;
  EXPECT_THAT(std::string(ReadBundle(WriteBundle(b)).status().message()),
              HasSubstr("lies outside its type"));
}

TEST(KernelGlob, MatchesMangledOrDemangledNames) {
  EXPECT_TRUE(KernelGlobMatches("vec_add*", "_Z7vec_addPfS_S_i", "vec_add"));
  EXPECT_TRUE(KernelGlobMatches("_Z7vec_add*", "_Z7vec_addPfS_S_i", ""));
  EXPECT_TRUE(KernelGlobMatches("*", "anything", ""));
  EXPECT_TRUE(KernelGlobMatches("mat?ul", "matmul", ""));
  EXPECT_FALSE(KernelGlobMatches("vec_add", "_Z7vec_addPfS_S_i", ""));
  EXPECT_FALSE(KernelGlobMatches("vec_mul*", "_Z7vec_addPfS_S_i", "vec_add"));
  EXPECT_TRUE(KernelGlobMatches("ns::k*", "_ZN2ns6kernelEv", "ns::kernel"));
}

}  // namespace
}  // namespace cuprobe
