// File: tests/ptx_rewriter/elf_test.cc
//
// Cubin reading on nvcc-built cubins: SM from e_flags, kernel names from the
// symbol table, and rejection of broken headers.
#include "ptx_rewriter/elf.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ptx_rewriter/image.h"
#include "tests/ptx_rewriter/fixtures.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::PokeLe;
using ::cuprobe::testing::ReadFixture;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

// The mangled names of the kernels of testdata/kernels.cu.
const std::vector<std::string>& SourceKernels() {
  static const auto* names = new std::vector<std::string>{
      "_Z7add_onePfi", "_ZN2ns5scaleIfEEvPT_S1_", "plain_c", "_Z11uses_helperPi"};
  return *names;
}

TEST(CubinTest, KernelNamesEqualTheSourcesMangledNames) {
  for (const char* name : {"kernels_sm90.cubin", "kernels_sm100.cubin",
                           "kernels_rdc_sm90.cubin"}) {
    SCOPED_TRACE(name);
    std::vector<uint8_t> bytes = ReadFixture(name);
    absl::StatusOr<CubinInfo> info = ReadCubin(bytes);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_THAT(info->KernelNames(), UnorderedElementsAreArray(SourceKernels()));
    for (const CubinFunction& f : info->functions) {
      if (f.is_kernel) {
        EXPECT_EQ(f.section_name, ".text." + f.name);
        EXPECT_GT(f.size, 0u);
      }
    }
  }
}

TEST(CubinTest, DeviceFunctionsAreFunctionsButNotKernels) {
  // Whole program: the non-inlined helper is a LOCAL function inside the
  // calling kernel's section.
  std::vector<uint8_t> whole = ReadFixture("kernels_sm90.cubin");
  absl::StatusOr<CubinInfo> info = ReadCubin(whole);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->elf_type, 2);  // ET_EXEC
  bool saw_helper = false;
  for (const CubinFunction& f : info->functions) {
    if (f.name.find("_Z6helperi") == std::string::npos) continue;
    saw_helper = true;
    EXPECT_FALSE(f.is_kernel);
    EXPECT_TRUE(f.is_local);
    EXPECT_EQ(f.section_name, ".text._Z11uses_helperPi");
  }
  EXPECT_TRUE(saw_helper);

  // -rdc: the helper has its own ".text._Z6helperi", like a kernel; only
  // st_other tells them apart.
  std::vector<uint8_t> rdc = ReadFixture("kernels_rdc_sm90.cubin");
  info = ReadCubin(rdc);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->elf_type, 1);  // ET_REL
  const CubinFunction* helper = nullptr;
  for (const CubinFunction& f : info->functions) {
    if (f.name == "_Z6helperi") helper = &f;
  }
  ASSERT_NE(helper, nullptr);
  EXPECT_FALSE(helper->is_kernel);
  EXPECT_FALSE(helper->is_local);
  EXPECT_EQ(helper->section_name, ".text._Z6helperi");
}

TEST(CubinTest, SmFromFlags) {
  std::vector<uint8_t> sm90 = ReadFixture("kernels_sm90.cubin");
  std::vector<uint8_t> sm100 = ReadFixture("kernels_sm100.cubin");
  absl::StatusOr<CubinInfo> a = ReadCubin(sm90);
  absl::StatusOr<CubinInfo> b = ReadCubin(sm100);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->sm_arch, 90u);
  EXPECT_EQ(b->sm_arch, 100u);
  EXPECT_EQ(a->abi_version, 8);
  EXPECT_EQ(CubinSmFromFlags(0x6005a04, 8), 90u);   // CUDA 13, sm_90
  EXPECT_EQ(CubinSmFromFlags(0x4b004b, 7), 75u);    // older ABI: SM in the low byte
}

TEST(CubinTest, EveryFatbinElfEntryNamesTheKernels) {
  for (const char* name : {"multi_default.fatbin", "multi_zstd_all.fatbin", "multi_lz4.fatbin",
                           "debug_sm90.fatbin"}) {
    SCOPED_TRACE(name);
    std::vector<uint8_t> bytes = ReadFixture(name);
    absl::StatusOr<Image> image = ReadImage(bytes);
    ASSERT_TRUE(image.ok()) << image.status();
    int elf_entries = 0;
    for (const ImageEntry& e : image->entries) {
      if (!e.is_elf()) {
        EXPECT_FALSE(KernelNames(e).ok());
        continue;
      }
      ++elf_entries;
      absl::StatusOr<std::vector<std::string>> names = KernelNames(e);
      ASSERT_TRUE(names.ok()) << names.status();
      EXPECT_THAT(*names, UnorderedElementsAreArray(SourceKernels())) << DescribeEntry(e);
    }
    EXPECT_GT(elf_entries, 0);
  }
}

TEST(CubinTest, BareCubinImage) {
  std::vector<uint8_t> bytes = ReadFixture("kernels_sm90.cubin");
  std::vector<uint8_t> padded = bytes;
  padded.insert(padded.end(), 24, 0);  // trailing padding is trimmed
  absl::StatusOr<Image> image = ReadImage(padded);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->format, ImageFormat::kCubin);
  EXPECT_EQ(image->bytes.size(), bytes.size());
  ASSERT_EQ(image->entries.size(), 1u);
  EXPECT_EQ(image->entries[0].kind, EntryKind::kElf);
  EXPECT_EQ(image->entries[0].sm_arch, 90u);
  EXPECT_EQ(image->entries[0].container_index, -1);
  absl::StatusOr<std::vector<std::string>> names = KernelNames(image->entries[0]);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, UnorderedElementsAreArray(SourceKernels()));
  absl::StatusOr<uint64_t> size = ElfSize(padded);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, bytes.size());
}

TEST(CubinTest, BrokenHeaders) {
  const std::vector<uint8_t> good = ReadFixture("kernels_sm90.cubin");
  std::vector<uint8_t> b = good;
  PokeLe(b, 40, good.size() + 1000, 8);  // e_shoff past the end
  EXPECT_THAT(ReadCubin(b).status().message(),
              HasSubstr(absl::StrCat("section header table at offset 0x",
                                     absl::Hex(good.size() + 1000), " lies outside the file")));
  b = good;
  PokeLe(b, 60, 0xfff0, 2);  // e_shnum far too large
  EXPECT_THAT(ReadCubin(b).status().message(), HasSubstr("claims 65520 entries of 64 bytes"));
  b = good;
  PokeLe(b, 58, 40, 2);
  EXPECT_THAT(ReadCubin(b).status().message(), HasSubstr("e_shentsize is 40, expected 64"));
  b = good;
  b[4] = 1;
  EXPECT_EQ(ReadCubin(b).status().code(), absl::StatusCode::kUnimplemented);
  b = good;
  PokeLe(b, 18, kEmX86_64, 2);
  EXPECT_THAT(ReadCubin(b).status().message(), HasSubstr("not EM_CUDA (190): not a cubin"));
  EXPECT_THAT(ReadImage(b).status().message(), HasSubstr("FindFatbinsInHostElf"));

  // A section whose contents lie beyond the file: find .symtab's header.
  absl::StatusOr<ElfFile> elf = ElfFile::Parse(good);
  ASSERT_TRUE(elf.ok()) << elf.status();
  uint64_t shoff = 0;
  for (int i = 0; i < 8; ++i) shoff |= uint64_t{good[40 + i]} << (8 * i);
  size_t symtab = 0;
  while (elf->sections()[symtab].name != ".symtab") ++symtab;
  const ElfSection& s = elf->sections()[symtab];
  b = good;
  PokeLe(b, shoff + symtab * 64 + 24, 0x7ffffff0, 8);
  EXPECT_THAT(ReadCubin(b).status().message(),
              HasSubstr(absl::StrCat("section '.symtab' claims 0x", absl::Hex(s.size),
                                     " bytes at offset 0x7ffffff0 but the file holds 0x",
                                     absl::Hex(good.size()), " bytes")));
  EXPECT_THAT(ReadImage(b).status().message(),
              HasSubstr(absl::StrCat("contents extend to offset 0x",
                                     absl::Hex(0x7ffffff0 + s.size))));
  // The name of the first function symbol points outside .strtab.
  size_t func = 1;
  while ((good[s.offset + 24 * func + 4] & 0xf) != 2) ++func;
  b = good;
  PokeLe(b, s.offset + 24 * func, 0x100000, 4);
  EXPECT_THAT(ReadCubin(b).status().message(),
              HasSubstr(absl::StrCat("ELF: symbol ", func,
                                     ": string offset 0x100000 lies outside .strtab")));
}

TEST(CubinTest, EveryTruncationIsAnErrorForReadImage) {
  const std::vector<uint8_t> good = ReadFixture("kernels_sm90.cubin");
  for (size_t len = 0; len < good.size(); ++len) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + len);
    EXPECT_FALSE(ReadImage(cut).ok()) << "length " << len;
    (void)ReadCubin(cut);  // may succeed if only unused sections are cut; must not crash
  }
}

TEST(CubinTest, ElfSizeAtReadsOnlyTheImage) {
  const std::vector<uint8_t> good = ReadFixture("kernels_sm100.cubin");
  // An exact-size heap copy: ASan flags any read past its end.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[good.size()]);
  std::copy(good.begin(), good.end(), copy.get());
  absl::StatusOr<uint64_t> size = ElfSizeAt(copy.get());
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, good.size());
  absl::StatusOr<Image> image = ReadImageAt(copy.get());
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->entries[0].sm_arch, 100u);
}

}  // namespace
}  // namespace cuprobe
