// File: tests/ptx_rewriter/fatbin_test.cc
//
// The fatbin container format on real nvcc 13 output: entry listing, header
// fields, zstd / LZ4 / stored payloads, and rejection of lying headers.
#include "ptx_rewriter/fatbin.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptx_rewriter/image.h"
#include "tests/ptx_rewriter/fixtures.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::KindsAndArchs;
using ::cuprobe::testing::MinifyLikeFatbinary;
using ::cuprobe::testing::PokeLe;
using ::cuprobe::testing::ReadFixture;
using ::cuprobe::testing::ReadFixtureText;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr const char* kMultiFatbins[] = {"multi_default.fatbin", "multi_zstd_all.fatbin",
                                         "multi_lz4.fatbin", "multi_none.fatbin"};

// What _multi_arch in CMakeLists.txt compiles, as (kind, sm), sorted.
std::vector<std::pair<EntryKind, uint32_t>> ExpectedMulti() {
  return {{EntryKind::kPtx, 80},  {EntryKind::kPtx, 90},  {EntryKind::kPtx, 120},
          {EntryKind::kElf, 75},  {EntryKind::kElf, 90},  {EntryKind::kElf, 100}};
}

const ImageEntry* FindEntry(const Image& image, EntryKind kind, uint32_t sm) {
  for (const ImageEntry& e : image.entries) {
    if (e.kind == kind && e.sm_arch == sm) return &e;
  }
  return nullptr;
}

TEST(FatbinTest, ListingMatchesWhatNvccCompiled) {
  for (const char* name : kMultiFatbins) {
    SCOPED_TRACE(name);
    std::vector<uint8_t> bytes = ReadFixture(name);
    absl::StatusOr<Image> image = ReadImage(bytes);
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(image->format, ImageFormat::kFatbin);
    ASSERT_EQ(image->containers.size(), 1u);
    EXPECT_EQ(image->containers[0].offset, 0u);
    EXPECT_EQ(image->containers[0].size, bytes.size());
    EXPECT_EQ(image->containers[0].version, 1);
    EXPECT_EQ(image->containers[0].header_size, 16);
    auto listed = KindsAndArchs(*image);
    std::sort(listed.begin(), listed.end(),
              [](const auto& a, const auto& b) {
                return std::make_pair(static_cast<int>(a.first), a.second) <
                       std::make_pair(static_cast<int>(b.first), b.second);
              });
    EXPECT_EQ(listed, ExpectedMulti()) << DescribeImage(*image);
    for (const ImageEntry& e : image->entries) {
      SCOPED_TRACE(DescribeEntry(e));
      EXPECT_EQ(e.entry_format, 0x0101);
      EXPECT_EQ(e.flags & (kEntryFlag64Bit | kEntryFlagLinux), kEntryFlag64Bit | kEntryFlagLinux);
      EXPECT_EQ(e.payload_size % 8, 0u);
      if (e.is_ptx()) {
        // nvcc 13 writes PTX ISA 9.0.
        EXPECT_EQ(e.version_major, 9);
        EXPECT_EQ(e.version_minor, 0);
      } else {
        EXPECT_EQ(e.version_major, 1);
        EXPECT_EQ(e.version_minor, 8);
      }
    }
  }
}

TEST(FatbinTest, CompressionFollowsTheFatbinaryMode) {
  struct Case {
    const char* file;
    Compression ptx;
    Compression elf;
    uint64_t ptx_flag;
  };
  const Case cases[] = {
      {"multi_default.fatbin", Compression::kZstd, Compression::kNone, kEntryFlagZstd},
      {"multi_zstd_all.fatbin", Compression::kZstd, Compression::kZstd, kEntryFlagZstd},
      {"multi_lz4.fatbin", Compression::kLz4, Compression::kLz4, kEntryFlagLz4},
      {"multi_none.fatbin", Compression::kNone, Compression::kNone, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    std::vector<uint8_t> bytes = ReadFixture(c.file);
    absl::StatusOr<Image> image = ReadImage(bytes);
    ASSERT_TRUE(image.ok()) << image.status();
    for (const ImageEntry& e : image->entries) {
      SCOPED_TRACE(DescribeEntry(e));
      EXPECT_EQ(e.compression, e.is_ptx() ? c.ptx : c.elf);
      if (e.is_ptx()) {
        EXPECT_EQ(e.flags & (kEntryFlagZstd | kEntryFlagLz4), c.ptx_flag);
      }
      if (e.compression == Compression::kNone) {
        EXPECT_EQ(e.compressed_size, 0u);
        EXPECT_EQ(e.decompressed_size, 0u);
        EXPECT_EQ(e.stored.size(), e.payload_size);
      } else {
        EXPECT_GT(e.compressed_size, 0u);
        EXPECT_LE(e.compressed_size, e.payload_size);
        // The payload is the compressed stream padded to 8 bytes.
        EXPECT_EQ(e.payload_size, (uint64_t{e.compressed_size} + 7) / 8 * 8);
        EXPECT_EQ(e.stored.size(), e.compressed_size);
      }
    }
  }
}

// The PTX of every entry, whatever its compression, byte for byte equals the
// `nvcc --ptx` output of the same source in the form fatbinary stores it.
TEST(FatbinTest, ExtractedPtxEqualsNvccPtx) {
  for (const char* name : kMultiFatbins) {
    SCOPED_TRACE(name);
    std::vector<uint8_t> bytes = ReadFixture(name);
    absl::StatusOr<Image> image = ReadImage(bytes);
    ASSERT_TRUE(image.ok()) << image.status();
    for (uint32_t sm : {80u, 90u, 120u}) {
      SCOPED_TRACE(sm);
      const ImageEntry* e = FindEntry(*image, EntryKind::kPtx, sm);
      ASSERT_NE(e, nullptr);
      absl::StatusOr<std::string> ptx = ExtractPtx(*e);
      ASSERT_TRUE(ptx.ok()) << ptx.status();
      const std::string nvcc_ptx = ReadFixtureText(absl::StrCat("kernels_sm", sm, ".ptx"));
      ASSERT_THAT(nvcc_ptx, HasSubstr(".entry _Z7add_onePfi"));
      EXPECT_EQ(*ptx, MinifyLikeFatbinary(nvcc_ptx));
      // The stored text ends in exactly one NUL; a compressed payload is
      // exactly text + NUL.
      absl::StatusOr<std::vector<uint8_t>> payload = ExtractPayload(*e);
      ASSERT_TRUE(payload.ok()) << payload.status();
      ASSERT_GT(payload->size(), ptx->size());
      EXPECT_EQ((*payload)[ptx->size()], 0);
      if (e->compression != Compression::kNone) {
        EXPECT_EQ(payload->size(), ptx->size() + 1);
        EXPECT_EQ(payload->size(), e->decompressed_size);
      } else {
        EXPECT_TRUE(std::all_of(payload->begin() + ptx->size(), payload->end(),
                                [](uint8_t c) { return c == 0; }));
      }
    }
  }
}

// The decoders against ground truth that involves no decoder: the stored
// bytes of the uncompressed fatbin.
TEST(FatbinTest, DecompressedPayloadsEqualTheStoredOnes) {
  std::vector<uint8_t> none_bytes = ReadFixture("multi_none.fatbin");
  absl::StatusOr<Image> none = ReadImage(none_bytes);
  ASSERT_TRUE(none.ok()) << none.status();
  for (const char* name : {"multi_zstd_all.fatbin", "multi_lz4.fatbin"}) {
    SCOPED_TRACE(name);
    std::vector<uint8_t> bytes = ReadFixture(name);
    absl::StatusOr<Image> image = ReadImage(bytes);
    ASSERT_TRUE(image.ok()) << image.status();
    ASSERT_EQ(image->entries.size(), none->entries.size());
    for (const ImageEntry& e : image->entries) {
      SCOPED_TRACE(DescribeEntry(e));
      const ImageEntry* plain = FindEntry(*none, e.kind, e.sm_arch);
      ASSERT_NE(plain, nullptr);
      absl::StatusOr<std::vector<uint8_t>> payload = ExtractPayload(e);
      ASSERT_TRUE(payload.ok()) << payload.status();
      ASSERT_EQ(payload->size(), e.decompressed_size);
      ASSERT_LE(payload->size(), plain->stored.size());
      EXPECT_TRUE(std::equal(payload->begin(), payload->end(), plain->stored.begin()));
      // What the uncompressed entry has beyond that is padding.
      EXPECT_TRUE(std::all_of(plain->stored.begin() + payload->size(), plain->stored.end(),
                              [](uint8_t c) { return c == 0; }));
    }
  }
}

TEST(FatbinTest, CubinEntryEqualsTheCubinNvccWrites) {
  // The sm_90 SASS in the fatbin is the cubin of `nvcc -cubin -arch=sm_90`
  // (up to the tool-info note, which records the command line), so compare
  // what matters: SM and kernels.
  std::vector<uint8_t> bytes = ReadFixture("multi_lz4.fatbin");
  absl::StatusOr<Image> image = ReadImage(bytes);
  ASSERT_TRUE(image.ok()) << image.status();
  const ImageEntry* e = FindEntry(*image, EntryKind::kElf, 90);
  ASSERT_NE(e, nullptr);
  absl::StatusOr<std::vector<std::string>> names = KernelNames(*e);
  ASSERT_TRUE(names.ok()) << names.status();
  std::vector<uint8_t> cubin = ReadFixture("kernels_sm90.cubin");
  absl::StatusOr<CubinInfo> info = ReadCubin(cubin);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(*names, info->KernelNames());
}

TEST(FatbinTest, DebugEntriesCarryObjectNameAndOptions) {
  std::vector<uint8_t> bytes = ReadFixture("debug_sm90.fatbin");
  absl::StatusOr<Image> image = ReadImage(bytes);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_THAT(KindsAndArchs(*image),
              ElementsAre(Pair(EntryKind::kElf, 90u), Pair(EntryKind::kPtx, 90u)));
  for (const ImageEntry& e : image->entries) {
    SCOPED_TRACE(DescribeEntry(e));
    // nvcc names the source as it was given on its command line.
    EXPECT_THAT(e.object_name, EndsWith("/tests/ptx_rewriter/testdata/kernels.cu"));
    EXPECT_NE(e.flags & kEntryFlagDebug, 0u);
    EXPECT_GT(e.header_size, kFatbinEntryHeaderSize);
    // fatbinary compresses debug images even when it stores others.
    EXPECT_EQ(e.compression, Compression::kZstd);
    EXPECT_TRUE(ExtractPayload(e).ok());
  }
  const ImageEntry& ptx = image->entries[1];
  EXPECT_THAT(ptx.options, HasSubstr("-g"));
}

TEST(FatbinTest, PtxasOptionsAreListed) {
  std::vector<uint8_t> bytes = ReadFixture("ptxas_o2_sm90.fatbin");
  absl::StatusOr<Image> image = ReadImage(bytes);
  ASSERT_TRUE(image.ok()) << image.status();
  const ImageEntry* ptx = FindEntry(*image, EntryKind::kPtx, 90);
  ASSERT_NE(ptx, nullptr);
  EXPECT_THAT(ptx->options, HasSubstr("-O2"));
  EXPECT_THAT(DescribeEntry(*ptx), HasSubstr("options '-O2"));
}

TEST(FatbinTest, ArchAndFamilySpecificFlags) {
  std::vector<uint8_t> bytes = ReadFixture("archspec.fatbin");
  absl::StatusOr<Image> image = ReadImage(bytes);
  ASSERT_TRUE(image.ok()) << image.status();
  ASSERT_EQ(image->entries.size(), 4u);
  for (const ImageEntry& e : image->entries) {
    SCOPED_TRACE(DescribeEntry(e));
    const uint64_t expected = e.sm_arch == 90 ? kEntryFlagArchSpecific : kEntryFlagFamilySpecific;
    EXPECT_EQ(e.flags & (kEntryFlagArchSpecific | kEntryFlagFamilySpecific), expected);
    if (e.is_ptx()) {
      absl::StatusOr<std::string> text = ExtractPtx(e);
      ASSERT_TRUE(text.ok()) << text.status();
      EXPECT_THAT(*text, HasSubstr(e.sm_arch == 90 ? ".target sm_90a" : ".target sm_100f"));
    }
  }
}

TEST(FatbinTest, ChainedContainersWithPadding) {
  std::vector<uint8_t> a = ReadFixture("multi_default.fatbin");
  std::vector<uint8_t> b = ReadFixture("debug_sm90.fatbin");
  std::vector<uint8_t> chain = a;
  chain.insert(chain.end(), 8, 0);  // padding between containers
  chain.insert(chain.end(), b.begin(), b.end());
  chain.insert(chain.end(), 16, 0);  // section tail padding
  absl::StatusOr<Image> image = ReadImage(chain);
  ASSERT_TRUE(image.ok()) << image.status();
  ASSERT_EQ(image->containers.size(), 2u);
  EXPECT_EQ(image->containers[1].offset, a.size() + 8);
  EXPECT_EQ(image->containers[1].size, b.size());
  EXPECT_EQ(image->containers[0].entry_count, 6u);
  EXPECT_EQ(image->containers[1].entry_count, 2u);
  EXPECT_EQ(image->containers[1].first_entry, 6u);
  ASSERT_EQ(image->entries.size(), 8u);
  EXPECT_EQ(image->entries[6].container_index, 1);
  EXPECT_EQ(image->entries[6].index_in_container, 0);
  EXPECT_EQ(image->entries[6].offset, a.size() + 8 + 16);
  for (const ImageEntry& e : image->entries) EXPECT_TRUE(ExtractPayload(e).ok());

  // Something other than padding or a container after the first one.
  std::vector<uint8_t> garbage = a;
  garbage.insert(garbage.end(), {0, 0, 0, 0, 'x', 'y', 'z', 'w', 0, 0, 0, 0, 0, 0, 0, 0,
                                 0, 0, 0, 0});
  absl::StatusOr<Image> bad = ReadImage(garbage);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr(absl::StrCat("fatbin at offset 0x", absl::Hex(a.size() + 4),
                                     ": magic is 0x777a7978, expected 0xba55ed50 "
                                     "(after container 0)")));
}

// --- Lying headers: each is rejected with where and what.

struct Forged {
  std::vector<uint8_t> bytes;
  absl::Status status;
};

// Reads multi_default.fatbin after `poke` changed it; returns the status of
// reading plus extracting every entry.
template <typename Poke>
Forged ReadForged(Poke poke) {
  Forged f{ReadFixture("multi_default.fatbin"), absl::OkStatus()};
  poke(f.bytes);
  absl::StatusOr<Image> image = ReadImage(f.bytes);
  if (!image.ok()) {
    f.status = image.status();
    return f;
  }
  for (const ImageEntry& e : image->entries) {
    absl::StatusOr<std::vector<uint8_t>> payload = ExtractPayload(e);
    if (!payload.ok()) {
      f.status = payload.status();
      return f;
    }
  }
  return f;
}

// Offsets of the entry headers of multi_default.fatbin.
std::vector<uint64_t> EntryOffsets() {
  std::vector<uint8_t> bytes = ReadFixture("multi_default.fatbin");
  absl::StatusOr<Image> image = ReadImage(bytes);
  EXPECT_TRUE(image.ok()) << image.status();
  std::vector<uint64_t> offsets;
  if (image.ok()) {
    for (const ImageEntry& e : image->entries) offsets.push_back(e.offset);
  }
  return offsets;
}

TEST(FatbinLyingTest, PayloadLargerThanTheContainer) {
  const std::vector<uint64_t> at = EntryOffsets();
  ASSERT_EQ(at.size(), 6u);
  Forged f = ReadForged([&](std::vector<uint8_t>& b) { PokeLe(b, at[2] + 8, 123456, 8); });
  ASSERT_FALSE(f.status.ok());
  EXPECT_EQ(f.status.code(), absl::StatusCode::kInvalidArgument);
  // What remains is the container's end minus the end of entry 2's header
  // (its size is the u32 at +4).
  const uint32_t header_size = f.bytes[at[2] + 4] | (f.bytes[at[2] + 5] << 8);
  const uint64_t remain = f.bytes.size() - (at[2] + header_size);
  EXPECT_THAT(f.status.message(),
              HasSubstr(absl::StrCat("fatbin at offset 0x0: entry 2 at offset 0x",
                                     absl::Hex(at[2]), ": header claims a payload of 0x1e240 "
                                     "bytes but only 0x", absl::Hex(remain),
                                     " remain in the container")));
}

TEST(FatbinLyingTest, HugeSizesDoNotOverflow) {
  const std::vector<uint64_t> at = EntryOffsets();
  ASSERT_EQ(at.size(), 6u);
  Forged f = ReadForged([&](std::vector<uint8_t>& b) { PokeLe(b, at[1] + 8, ~uint64_t{0}, 8); });
  EXPECT_THAT(f.status.message(), HasSubstr("payload of 0xffffffffffffffff bytes"));
  f = ReadForged([&](std::vector<uint8_t>& b) { PokeLe(b, 8, ~uint64_t{0} - 8, 8); });
  EXPECT_THAT(f.status.message(),
              HasSubstr("fatbin at offset 0x0: header claims 0xfffffffffffffff7 bytes of "
                        "entries but only"));
  f = ReadForged([&](std::vector<uint8_t>& b) { PokeLe(b, at[3] + 4, 0xffffffff, 4); });
  EXPECT_THAT(f.status.message(),
              HasSubstr(absl::StrCat("entry 3 at offset 0x", absl::Hex(at[3]),
                                     ": header claims a header size of 0xffffffff bytes")));
}

TEST(FatbinLyingTest, ContainerClaimsMoreThanTheBuffer) {
  Forged f = ReadForged([](std::vector<uint8_t>& b) {
    for (int i = 0; i < 8 && !b.empty(); ++i) b.pop_back();  // cut the last 8 bytes
  });
  ASSERT_FALSE(f.status.ok());
  EXPECT_THAT(f.status.message(),
              HasSubstr(absl::StrCat("fatbin at offset 0x0: header claims 0x",
                                     absl::Hex(f.bytes.size() + 8 - 16),
                                     " bytes of entries but only 0x",
                                     absl::Hex(f.bytes.size() - 16), " remain")));
}

TEST(FatbinLyingTest, SmallHeaderSizeAndBadVersion) {
  const std::vector<uint64_t> at = EntryOffsets();
  Forged f = ReadForged([&](std::vector<uint8_t>& b) { PokeLe(b, at[0] + 4, 8, 4); });
  EXPECT_THAT(f.status.message(), HasSubstr("entry 0 at offset 0x10: header size 0x8 is "
                                            "smaller than the minimum of 0x40"));
  f = ReadForged([](std::vector<uint8_t>& b) { PokeLe(b, 4, 7, 2); });
  EXPECT_EQ(f.status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(f.status.message(), HasSubstr("container version 7 is not supported"));
  f = ReadForged([](std::vector<uint8_t>& b) { PokeLe(b, 6, 8, 2); });
  EXPECT_THAT(f.status.message(), HasSubstr("header size 0x8 is outside 0x10.."));
}

TEST(FatbinLyingTest, CompressedSizes) {
  const std::vector<uint64_t> at = EntryOffsets();
  std::vector<uint8_t> bytes = ReadFixture("multi_default.fatbin");
  absl::StatusOr<Image> image = ReadImage(bytes);
  ASSERT_TRUE(image.ok());
  size_t ptx = 0;
  while (!image->entries[ptx].is_ptx()) ++ptx;
  const ImageEntry e = image->entries[ptx];
  ASSERT_EQ(e.compression, Compression::kZstd);
  const uint64_t h = e.offset;
  const std::string where = absl::StrCat("entry ", ptx, " at offset 0x", absl::Hex(h), ": ");

  Forged f = ReadForged([&](std::vector<uint8_t>& b) { PokeLe(b, h + 0x10, 0x7fffffff, 4); });
  EXPECT_THAT(f.status.message(),
              HasSubstr(where + "zstd entry claims a compressed size of 0x7fffffff bytes in a "
                                "payload of 0x" + absl::StrCat(absl::Hex(e.payload_size))));
  f = ReadForged([&](std::vector<uint8_t>& b) { PokeLe(b, h + 0x38, e.decompressed_size + 1, 8); });
  EXPECT_THAT(f.status.message(),
              HasSubstr(absl::StrCat("header claims a decompressed size of 0x",
                                     absl::Hex(e.decompressed_size + 1),
                                     " bytes but the zstd frame holds 0x",
                                     absl::Hex(e.decompressed_size))));
  f = ReadForged([&](std::vector<uint8_t>& b) { PokeLe(b, h + 0x38, uint64_t{1} << 40, 8); });
  EXPECT_THAT(f.status.message(), HasSubstr(where + "zstd entry claims a decompressed size of "
                                                    "0x10000000000 bytes"));
  f = ReadForged([&](std::vector<uint8_t>& b) { PokeLe(b, h + 0x38, 0, 8); });
  EXPECT_THAT(f.status.message(), HasSubstr("decompressed size of 0x0 bytes"));
  // A payload that is not zstd at all.
  f = ReadForged([&](std::vector<uint8_t>& b) { b[h + e.header_size] ^= 0xff; });
  EXPECT_THAT(f.status.message(), HasSubstr("payload is not a zstd frame (flags 0x8011)"));
  // Both compression flags.
  f = ReadForged([&](std::vector<uint8_t>& b) {
    PokeLe(b, h + 0x28, e.flags | kEntryFlagLz4, 8);
  });
  EXPECT_THAT(f.status.message(), HasSubstr("name more than one compression scheme"));
}

TEST(FatbinLyingTest, Lz4Sizes) {
  std::vector<uint8_t> bytes = ReadFixture("multi_lz4.fatbin");
  absl::StatusOr<Image> image = ReadImage(bytes);
  ASSERT_TRUE(image.ok());
  for (const ImageEntry& original : image->entries) {
    SCOPED_TRACE(DescribeEntry(original));
    ImageEntry e = original;
    e.decompressed_size = original.decompressed_size + 1;
    EXPECT_THAT(ExtractPayload(e).status().message(),
                HasSubstr(absl::StrCat("header claims a decompressed size of 0x",
                                       absl::Hex(e.decompressed_size),
                                       " bytes but the LZ4 block holds 0x",
                                       absl::Hex(original.decompressed_size))));
    e.decompressed_size = original.decompressed_size - 1;
    EXPECT_THAT(ExtractPayload(e).status().message(), HasSubstr("LZ4 block does not decode"));
    e.decompressed_size = uint64_t{e.stored.size()} * 300;
    EXPECT_THAT(ExtractPayload(e).status().message(),
                HasSubstr("which no LZ4 block can expand to"));
  }
}

TEST(FatbinLyingTest, NameAndOptionsOutsideTheHeader) {
  std::vector<uint8_t> bytes = ReadFixture("debug_sm90.fatbin");
  absl::StatusOr<Image> image = ReadImage(bytes);
  ASSERT_TRUE(image.ok());
  const uint64_t h = image->entries[0].offset;
  const uint32_t header_size = image->entries[0].header_size;
  std::vector<uint8_t> forged = bytes;
  PokeLe(forged, h + 0x24, header_size, 4);  // name size runs past the header
  EXPECT_THAT(ReadImage(forged).status().message(),
              HasSubstr(absl::StrCat("entry 0 at offset 0x10: object name claims 0x",
                                     absl::Hex(header_size), " bytes at +0x40, outside")));
  const uint64_t p = image->entries[1].offset;
  forged = bytes;
  PokeLe(forged, p + 0x14, 0x1000, 4);  // options descriptor beyond the header
  EXPECT_THAT(ReadImage(forged).status().message(),
              HasSubstr("entry 1 at offset 0x" + absl::StrCat(absl::Hex(p)) +
                        ": options descriptor at +0x1000 lies outside"));
}

// A compressed stream cut at every length decodes to an error, never a crash
// (run under ASan: CUPROBE_SANITIZE=address;undefined).
TEST(FatbinTruncationTest, EveryPrefixOfEveryCompressedStream) {
  for (const char* name : {"multi_zstd_all.fatbin", "multi_lz4.fatbin"}) {
    SCOPED_TRACE(name);
    std::vector<uint8_t> bytes = ReadFixture(name);
    absl::StatusOr<Image> image = ReadImage(bytes);
    ASSERT_TRUE(image.ok());
    int checked = 0;
    for (const ImageEntry& original : image->entries) {
      // Each cut is copied to an exact-size buffer so ASan sees any over-read.
      for (size_t len = 0; len < original.stored.size(); ++len) {
        std::vector<uint8_t> cut(original.stored.begin(), original.stored.begin() + len);
        ImageEntry e = original;
        e.stored = cut;
        absl::StatusOr<std::vector<uint8_t>> payload = ExtractPayload(e);
        EXPECT_FALSE(payload.ok()) << "length " << len;
        ++checked;
      }
    }
    EXPECT_GT(checked, 1000);
  }
}

}  // namespace
}  // namespace cuprobe
