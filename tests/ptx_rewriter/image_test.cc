// File: tests/ptx_rewriter/image_test.cc
//
// ReadImage / ReadImageAt on every input form the driver accepts, PickPtxFor,
// host executables, and truncation at every byte.
#include "ptx_rewriter/image.h"

#include <fatbinary_section.h>  // the toolkit's own __fatBinC_Wrapper_t

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ptx_rewriter/fixtures.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::KindsAndArchs;
using ::cuprobe::testing::MinifyLikeFatbinary;
using ::cuprobe::testing::ReadFixture;
using ::cuprobe::testing::ReadFixtureText;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// Our wrapper struct is the toolkit's.
static_assert(sizeof(FatbinWrapper) == sizeof(__fatBinC_Wrapper_t));
static_assert(offsetof(FatbinWrapper, data) == offsetof(__fatBinC_Wrapper_t, data));
static_assert(offsetof(FatbinWrapper, filename_or_fatbins) ==
              offsetof(__fatBinC_Wrapper_t, filename_or_fatbins));
static_assert(kFatbinWrapperMagic == FATBINC_MAGIC);

// An exact-size heap copy, so that ASan reports any read past the end.
std::unique_ptr<uint8_t[]> ExactCopy(const std::vector<uint8_t>& bytes) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[bytes.size()]);
  std::copy(bytes.begin(), bytes.end(), copy.get());
  return copy;
}

TEST(ReadImageTest, PtxText) {
  const std::string nvcc_ptx = ReadFixtureText("kernels_sm90.ptx");
  absl::StatusOr<Image> image =
      ReadImage(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(nvcc_ptx.data()),
                                    nvcc_ptx.size()));
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->format, ImageFormat::kPtx);
  ASSERT_EQ(image->entries.size(), 1u);
  const ImageEntry& e = image->entries[0];
  EXPECT_EQ(e.kind, EntryKind::kPtx);
  EXPECT_EQ(e.sm_arch, 90u);
  EXPECT_EQ(e.version_major, 9);
  EXPECT_EQ(e.version_minor, 0);
  absl::StatusOr<std::string> text = ExtractPtx(e);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, nvcc_ptx);  // a bare PTX image is returned verbatim
  EXPECT_EQ(PickPtxFor(*image, 90), &e);
  EXPECT_EQ(PickPtxFor(*image, 89), nullptr);

  // Minified PTX (no leading comment) is PTX too.
  const std::string minified = MinifyLikeFatbinary(nvcc_ptx);
  image = ReadImage(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(minified.data()),
                                        minified.size()));
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->entries[0].sm_arch, 90u);
}

TEST(ReadImageTest, PtxHeader) {
  absl::StatusOr<PtxHeader> h = ReadPtxHeader("/* c */ // x\n\n.version 8.5\n.target sm_90a\n");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->version_major, 8);
  EXPECT_EQ(h->version_minor, 5);
  EXPECT_EQ(h->sm_arch, 90u);
  EXPECT_EQ(h->arch_suffix, 'a');
  h = ReadPtxHeader(".version 9.0\n.target sm_100f, texmode_independent\n");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->sm_arch, 100u);
  EXPECT_EQ(h->arch_suffix, 'f');
  h = ReadPtxHeader(".version 9.0\n.address_size 64\n");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->sm_arch, 0u);
  EXPECT_THAT(ReadPtxHeader("// only a comment").status().message(),
              HasSubstr("expected a .version directive at offset 0x11"));
  EXPECT_THAT(ReadPtxHeader(".version x\n").status().message(),
              HasSubstr(".version at offset 0x0 is not MAJOR.MINOR"));
  EXPECT_THAT(ReadPtxHeader(".version 1.99999999\n").status().message(),
              HasSubstr("is not MAJOR.MINOR"));
}

TEST(ReadImageTest, UnrecognizedAndWrapperBytes) {
  EXPECT_THAT(ReadImage({}).status().message(), HasSubstr("image is empty"));
  const uint8_t junk[] = {1, 2, 3, 4, 5};
  EXPECT_THAT(ReadImage(junk).status().message(),
              HasSubstr("image of 0x5 bytes is not a fatbin wrapper, fatbin, cubin or PTX "
                        "(first bytes 01 02 03 04 05)"));
  const uint8_t text[] = "// a comment but no directive";
  EXPECT_THAT(ReadImage(text).status().message(), HasSubstr("expected a .version directive"));

  // A real wrapper as nvcc lays it out in a host executable's .nvFatBinSegment.
  std::vector<uint8_t> host = ReadFixture("host_app");
  absl::StatusOr<ElfFile> elf = ElfFile::Parse(host);
  ASSERT_TRUE(elf.ok()) << elf.status();
  const ElfSection* segment = elf->FindSection(".nvFatBinSegment");
  ASSERT_NE(segment, nullptr);
  absl::StatusOr<absl::Span<const uint8_t>> wrappers = elf->SectionData(*segment);
  ASSERT_TRUE(wrappers.ok());
  absl::StatusOr<Image> image = ReadImage(*wrappers);
  ASSERT_FALSE(image.ok());
  EXPECT_THAT(image.status().message(),
              HasSubstr("is a fatbin wrapper (magic 0x466243b1, version"));
  EXPECT_THAT(image.status().message(), HasSubstr("cannot be followed in a byte buffer"));
}

// Each 24-byte record of .nvFatBinSegment is a wrapper whose data pointer is
// the address of a container of .nv_fatbin: the wrapper layout, from real data.
TEST(ReadImageTest, HostWrappersPointAtTheFatbinContainers) {
  std::vector<uint8_t> host = ReadFixture("host_app");
  absl::StatusOr<ElfFile> elf = ElfFile::Parse(host);
  ASSERT_TRUE(elf.ok()) << elf.status();
  const ElfSection* segment = elf->FindSection(".nvFatBinSegment");
  const ElfSection* fatbin = elf->FindSection(".nv_fatbin");
  ASSERT_TRUE(segment != nullptr && fatbin != nullptr);
  absl::StatusOr<std::vector<HostFatbin>> found = FindFatbinsInHostElf(host);
  ASSERT_TRUE(found.ok()) << found.status();
  absl::StatusOr<absl::Span<const uint8_t>> records = elf->SectionData(*segment);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size() % sizeof(FatbinWrapper), 0u);
  ASSERT_GT(records->size(), 0u);
  for (size_t at = 0; at < records->size(); at += sizeof(FatbinWrapper)) {
    FatbinWrapper w;
    std::memcpy(&w, records->data() + at, sizeof w);
    EXPECT_EQ(static_cast<uint32_t>(w.magic), kFatbinWrapperMagic);
    EXPECT_TRUE(w.version == 1 || w.version == 2) << w.version;
    const uint64_t address = reinterpret_cast<uintptr_t>(w.data);
    bool points_at_container = false;
    for (const HostFatbin& c : *found) {
      points_at_container |= address == fatbin->addr + (c.offset - fatbin->offset);
    }
    EXPECT_TRUE(points_at_container) << std::hex << address;
  }
}

TEST(ReadImageAtTest, FollowsAWrapperToItsFatbin) {
  const std::vector<uint8_t> bytes = ReadFixture("multi_default.fatbin");
  std::unique_ptr<uint8_t[]> fatbin = ExactCopy(bytes);
  const __fatBinC_Wrapper_t wrapper = {FATBINC_MAGIC, FATBINC_VERSION,
                                       reinterpret_cast<const unsigned long long*>(fatbin.get()),
                                       nullptr};
  absl::StatusOr<Image> image = ReadImageAt(&wrapper);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->wrapper_version, 1);
  EXPECT_EQ(image->format, ImageFormat::kFatbin);
  EXPECT_EQ(image->bytes.data(), fatbin.get());
  EXPECT_EQ(image->bytes.size(), bytes.size());
  EXPECT_EQ(image->entries.size(), 6u);
  const ImageEntry* ptx = PickPtxFor(*image, 90);
  ASSERT_NE(ptx, nullptr);
  absl::StatusOr<std::string> text = ExtractPtx(*ptx);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, MinifyLikeFatbinary(ReadFixtureText("kernels_sm90.ptx")));

  // The bare container, without the wrapper.
  image = ReadImageAt(fatbin.get());
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->wrapper_version, 0);
  EXPECT_EQ(image->entries.size(), 6u);
}

TEST(ReadImageAtTest, ReadsOneContainerEvenIfMoreFollow) {
  std::vector<uint8_t> a = ReadFixture("multi_default.fatbin");
  const std::vector<uint8_t> b = ReadFixture("debug_sm90.fatbin");
  a.insert(a.end(), b.begin(), b.end());
  std::unique_ptr<uint8_t[]> chain = ExactCopy(a);
  absl::StatusOr<Image> image = ReadImageAt(chain.get());
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->containers.size(), 1u);  // the driver, too, reads one
}

TEST(ReadImageAtTest, BadWrappers) {
  const std::vector<uint8_t> bytes = ReadFixture("multi_default.fatbin");
  std::unique_ptr<uint8_t[]> fatbin = ExactCopy(bytes);
  FatbinWrapper w{static_cast<int32_t>(kFatbinWrapperMagic), 3, fatbin.get(), nullptr};
  EXPECT_THAT(ReadImageAt(&w).status().message(), HasSubstr("has version 3 (expected 1 or 2)"));
  w.version = 2;
  w.data = nullptr;
  EXPECT_THAT(ReadImageAt(&w).status().message(), HasSubstr("data pointer is null"));
  const char not_fatbin[] = "hello, world";
  w.data = not_fatbin;
  EXPECT_THAT(ReadImageAt(&w).status().message(),
              HasSubstr("which does not start with the fatbin magic 0xba55ed50"));
  EXPECT_THAT(ReadImageAt(nullptr).status().message(), HasSubstr("null"));
}

TEST(ReadImageAtTest, PtxAndShortStrings) {
  const std::string ptx = ReadFixtureText("kernels_sm120.ptx");
  absl::StatusOr<Image> image = ReadImageAt(ptx.c_str());
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->format, ImageFormat::kPtx);
  EXPECT_EQ(image->entries[0].sm_arch, 120u);
  EXPECT_EQ(image->bytes.size(), ptx.size());
  // Strings shorter than any magic: the magic checks stop at the NUL.
  for (const char* s : {"", "\x7f", "\x7f" "E", "\x50\xed", "\xb1\x43\x62"}) {
    std::unique_ptr<char[]> exact(new char[std::strlen(s) + 1]);
    std::memcpy(exact.get(), s, std::strlen(s) + 1);
    EXPECT_FALSE(ReadImageAt(exact.get()).ok());
  }
}

TEST(PickPtxForTest, HighestArchAtOrBelowTheDevice) {
  const std::vector<uint8_t> bytes = ReadFixture("multi_default.fatbin");  // PTX 80, 90, 120
  absl::StatusOr<Image> image = ReadImage(bytes);
  ASSERT_TRUE(image.ok()) << image.status();
  const auto picked = [&](uint32_t sm) -> uint32_t {
    const ImageEntry* e = PickPtxFor(*image, sm);
    if (e != nullptr) {
      EXPECT_TRUE(e->is_ptx());
    }
    return e == nullptr ? 0 : e->sm_arch;
  };
  EXPECT_EQ(picked(75), 0u);
  EXPECT_EQ(picked(80), 80u);
  EXPECT_EQ(picked(86), 80u);
  EXPECT_EQ(picked(89), 80u);
  EXPECT_EQ(picked(90), 90u);
  EXPECT_EQ(picked(100), 90u);
  EXPECT_EQ(picked(103), 90u);
  EXPECT_EQ(picked(120), 120u);
  EXPECT_EQ(picked(121), 120u);
}

TEST(PickPtxForTest, ArchAndFamilySpecificPtx) {
  const std::vector<uint8_t> bytes = ReadFixture("archspec.fatbin");  // PTX 90a, 100f
  absl::StatusOr<Image> image = ReadImage(bytes);
  ASSERT_TRUE(image.ok()) << image.status();
  const auto picked = [&](uint32_t sm) -> uint32_t {
    const ImageEntry* e = PickPtxFor(*image, sm);
    return e == nullptr ? 0 : e->sm_arch;
  };
  EXPECT_EQ(picked(89), 0u);
  EXPECT_EQ(picked(90), 90u);    // sm_90a runs on sm_90 only
  EXPECT_EQ(picked(100), 100u);  // sm_100f on the sm_10x family
  EXPECT_EQ(picked(103), 100u);
  EXPECT_EQ(picked(110), 0u);
  EXPECT_EQ(picked(120), 0u);

  // Ties: the more specific PTX, then the newer ISA.
  Image mixed;
  ImageEntry generic;
  generic.kind = EntryKind::kPtx;
  generic.sm_arch = 90;
  generic.version_major = 8;
  ImageEntry newer = generic;
  newer.version_major = 9;
  ImageEntry specific = generic;
  specific.flags = kEntryFlagArchSpecific;
  ImageEntry elf = generic;
  elf.kind = EntryKind::kElf;
  elf.sm_arch = 120;
  mixed.entries = {generic, newer, elf};
  EXPECT_EQ(PickPtxFor(mixed, 120), &mixed.entries[1]);
  mixed.entries.push_back(specific);
  EXPECT_EQ(PickPtxFor(mixed, 90), &mixed.entries[3]);
  EXPECT_EQ(PickPtxFor(mixed, 100), &mixed.entries[1]);
}

TEST(HostElfTest, FindsAndListsTheFatbins) {
  for (const char* name : {"host_app", "host_lib.so"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> host = ReadFixture(name);
    absl::StatusOr<ElfFile> elf = ElfFile::Parse(host);
    ASSERT_TRUE(elf.ok()) << elf.status();
    EXPECT_EQ(elf->machine(), kEmX86_64);
    absl::StatusOr<std::vector<HostFatbin>> found = FindFatbinsInHostElf(host);
    ASSERT_TRUE(found.ok()) << found.status();
    // cudart_static brings a container of its own; ours holds the four kernels.
    ASSERT_GE(found->size(), 1u);
    int ours = 0;
    for (const HostFatbin& c : *found) {
      absl::StatusOr<Image> image =
          ReadImage(absl::MakeConstSpan(host).subspan(c.offset, c.size));
      ASSERT_TRUE(image.ok()) << image.status();
      for (const ImageEntry& e : image->entries) {
        if (!e.is_elf()) continue;
        absl::StatusOr<std::vector<std::string>> names = KernelNames(e);
        ASSERT_TRUE(names.ok()) << names.status();
        if (std::find(names->begin(), names->end(), "_Z7add_onePfi") != names->end()) {
          ++ours;
          break;
        }
      }
      if (std::string(name) == "host_app" && image->entries.size() == 6) {
        // The same five code objects as multi_*.fatbin (-gencode list).
        auto listed = KindsAndArchs(*image);
        std::sort(listed.begin(), listed.end());
        EXPECT_THAT(listed, ElementsAre(Pair(EntryKind::kPtx, 80u), Pair(EntryKind::kPtx, 90u),
                                        Pair(EntryKind::kPtx, 120u), Pair(EntryKind::kElf, 75u),
                                        Pair(EntryKind::kElf, 90u),
                                        Pair(EntryKind::kElf, 100u)));
      }
    }
    EXPECT_EQ(ours, 1);
  }
}

TEST(HostElfTest, ScansWhenThereIsNoNvFatbinSection) {
  const std::vector<uint8_t> host = ReadFixture("host_app");
  const std::vector<uint8_t> renamed = ReadFixture("host_app_renamed");
  absl::StatusOr<ElfFile> elf = ElfFile::Parse(renamed);
  ASSERT_TRUE(elf.ok());
  ASSERT_EQ(elf->FindSection(".nv_fatbin"), nullptr);
  absl::StatusOr<std::vector<HostFatbin>> by_section = FindFatbinsInHostElf(host);
  absl::StatusOr<std::vector<HostFatbin>> by_scan = FindFatbinsInHostElf(renamed);
  ASSERT_TRUE(by_section.ok() && by_scan.ok());
  ASSERT_EQ(by_scan->size(), by_section->size());
  for (size_t i = 0; i < by_scan->size(); ++i) {
    EXPECT_EQ((*by_scan)[i].size, (*by_section)[i].size);
    const auto a = absl::MakeConstSpan(renamed).subspan((*by_scan)[i].offset, (*by_scan)[i].size);
    const auto b =
        absl::MakeConstSpan(host).subspan((*by_section)[i].offset, (*by_section)[i].size);
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
  }
}

TEST(HostElfTest, Errors) {
  const uint8_t junk[100] = {1};
  EXPECT_THAT(FindFatbinsInHostElf(junk).status().message(), HasSubstr("not an ELF file"));
  const std::vector<uint8_t> cubin = ReadFixture("kernels_sm90.cubin");
  EXPECT_THAT(FindFatbinsInHostElf(cubin).status().message(), HasSubstr("is a cubin"));
  // A .nv_fatbin section that is cut short.
  std::vector<uint8_t> host = ReadFixture("host_app");
  absl::StatusOr<ElfFile> elf = ElfFile::Parse(host);
  ASSERT_TRUE(elf.ok());
  const ElfSection* s = elf->FindSection(".nv_fatbin");
  ASSERT_NE(s, nullptr);
  host[s->offset] ^= 1;  // break the first container's magic
  EXPECT_THAT(FindFatbinsInHostElf(host).status().message(),
              HasSubstr(absl::StrCat("section .nv_fatbin at file offset 0x",
                                     absl::Hex(s->offset), ": fatbin at offset 0x0: magic is")));
}

// Every prefix of a real fatbin is an error, never a crash or an over-read.
TEST(TruncationTest, EveryPrefixOfAFatbin) {
  for (const char* name : {"multi_default.fatbin", "debug_sm90.fatbin"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> good = ReadFixture(name);
    ASSERT_TRUE(ReadImage(good).ok());
    for (size_t len = 0; len < good.size(); ++len) {
      // An exact-size copy: ASan reports any read past the cut.
      const std::vector<uint8_t> cut(good.begin(), good.begin() + len);
      absl::StatusOr<Image> image = ReadImage(cut);
      ASSERT_FALSE(image.ok()) << "length " << len;
      if (len >= 16) {
        EXPECT_THAT(image.status().message(), HasSubstr("fatbin at offset 0x0: ")) << len;
      }
    }
  }
}

// A host ELF cut inside its .nv_fatbin loses its section headers (they sit at
// the end of the file), so the reader scans; whatever it reports must be a
// whole container inside the cut.
TEST(TruncationTest, EveryPrefixOfAHostFatbinSection) {
  const std::vector<uint8_t> host = ReadFixture("host_lib.so");
  absl::StatusOr<ElfFile> elf = ElfFile::Parse(host);
  ASSERT_TRUE(elf.ok());
  const ElfSection* s = elf->FindSection(".nv_fatbin");
  ASSERT_NE(s, nullptr);
  absl::StatusOr<std::vector<HostFatbin>> whole = FindFatbinsInHostElf(host);
  ASSERT_TRUE(whole.ok()) << whole.status();
  // The ELF header (its e_shoff now points past the end) + the section, cut.
  size_t max_found = 0;
  for (uint64_t len = 0; len <= s->size; ++len) {
    std::vector<uint8_t> cut(host.begin(), host.begin() + 64);
    cut.insert(cut.end(), host.begin() + s->offset, host.begin() + s->offset + len);
    absl::StatusOr<std::vector<HostFatbin>> found = FindFatbinsInHostElf(cut);
    ASSERT_TRUE(found.ok()) << found.status();
    for (const HostFatbin& c : *found) {
      ASSERT_LE(c.offset + c.size, cut.size());
      EXPECT_TRUE(ReadImage(absl::MakeConstSpan(cut).subspan(c.offset, c.size)).ok());
    }
    max_found = std::max(max_found, found->size());
    if (len == s->size) {
      EXPECT_EQ(found->size(), whole->size());
    }
  }
  EXPECT_EQ(max_found, whole->size());
}

}  // namespace
}  // namespace cuprobe
