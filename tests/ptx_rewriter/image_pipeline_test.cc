// The image pipeline (ptx_rewriter/image_pipeline.h) on nvcc-built
// fixtures: an image in memory or in a file, a bundle that selects some of
// its kernels or none, a cubin without PTX with and without a finder, and
// Triton's cache as that finder.
#include "ptx_rewriter/image_pipeline.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/gpu/helpers_ptx.h"
#include "ptx_rewriter/builtin_probes.h"
#include "tests/ptx_rewriter/fixtures.h"

namespace cuprobe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

class CountingIds : public KernelIds {
 public:
  uint32_t IdOf(const std::string& mangled) override {
    auto [it, inserted] = ids.try_emplace(mangled, next);
    if (inserted) ++next;
    return it->second;
  }
  uint32_t FirstUnnamedId() override { return 1000; }
  std::map<std::string, uint32_t> ids;
  uint32_t next = 7;
};

ProbeBundle CountEntries(const std::string& glob) {
  BuiltinBundleOptions options;
  options.kernel_glob = glob;
  options.entry = true;
  absl::StatusOr<ProbeBundle> bundle = BuiltinBundle("builtin:count", options);
  EXPECT_TRUE(bundle.ok()) << bundle.status();
  return *bundle;
}

class ImagePipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cuprobe-pipeline-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  ImagePipeline Pipeline(const ProbeBundle& bundle, PtxSourceFinder find = {}) {
    return ImagePipeline{&bundle, HelpersPtx(), &cache_, std::move(find)};
  }
  std::string dir_;
  CompileCache cache_ = CompileCache::Disabled();
  CountingIds ids_;
};

TEST_F(ImagePipelineTest, AFatbinInMemoryGetsItsSelectedKernelsRewritten) {
  const ProbeBundle bundle = CountEntries("add_one");
  const std::vector<uint8_t> fatbin = testing::ReadFixture("multi_default.fatbin");
  absl::StatusOr<std::optional<InstrumentedImage>> out =
      InstrumentImage(ImageSource{.live = fatbin.data()}, 90, Pipeline(bundle), ids_);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->has_value());
  const InstrumentedImage& image = **out;
  EXPECT_THAT(image.kernels, ElementsAre(Pair("_Z7add_onePfi", 7u)));
  ASSERT_GE(image.cubin.size(), 4u);
  EXPECT_EQ(std::string(image.cubin.begin(), image.cubin.begin() + 4), "\x7f" "ELF");
  EXPECT_EQ(image.map_table_entries, bundle.maps.size());
  // Reloaded: the same id.
  out = InstrumentImage(ImageSource{.live = fatbin.data()}, 90, Pipeline(bundle), ids_);
  ASSERT_TRUE(out.ok() && out->has_value()) << out.status();
  EXPECT_THAT((*out)->kernels, ElementsAre(Pair("_Z7add_onePfi", 7u)));
}

TEST_F(ImagePipelineTest, AnImageNoProbeSelectsIsLeftAlone) {
  const ProbeBundle bundle = CountEntries("no_such_kernel");
  const std::vector<uint8_t> fatbin = testing::ReadFixture("multi_default.fatbin");
  absl::StatusOr<std::optional<InstrumentedImage>> out =
      InstrumentImage(ImageSource{.live = fatbin.data()}, 90, Pipeline(bundle), ids_);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->has_value());
  EXPECT_TRUE(ids_.ids.empty());
}

TEST_F(ImagePipelineTest, AFileIsReadAndAMissingOneIsAnError) {
  const ProbeBundle bundle = CountEntries("add_one");
  const std::string path = dir_ + "/k.ptx";
  std::ofstream(path) << testing::ReadFixtureText("kernels_sm90.ptx");
  absl::StatusOr<std::optional<InstrumentedImage>> out =
      InstrumentImage(ImageSource{.path = path}, 90, Pipeline(bundle), ids_);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->has_value());
  EXPECT_THAT((*out)->kernels, ElementsAre(Pair("_Z7add_onePfi", 7u)));
  out = InstrumentImage(ImageSource{.path = dir_ + "/absent.cubin"}, 90, Pipeline(bundle), ids_);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("cannot open"));
}

// A cubin without PTX: named as not instrumented, unless the finder has its
// PTX (Triton's cache: <root>/<hash>/<kernel>.cubin beside <kernel>.ptx).
TEST_F(ImagePipelineTest, ACubinWithoutPtxTakesTheFindersPtx) {
  const ProbeBundle bundle = CountEntries("add_one");
  const std::vector<uint8_t> cubin = testing::ReadFixture("kernels_sm90.cubin");
  absl::StatusOr<std::optional<InstrumentedImage>> out =
      InstrumentImage(ImageSource{.live = cubin.data()}, 90, Pipeline(bundle), ids_);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->has_value());
  EXPECT_TRUE((*out)->cubin.empty());
  EXPECT_THAT((*out)->not_instrumented, ElementsAre(HasSubstr("_Z7add_onePfi (no PTX for sm_90")));

  const std::string hash = dir_ + "/triton/abc123";
  std::filesystem::create_directories(hash);
  std::ofstream(hash + "/k.cubin", std::ios::binary)
      .write(reinterpret_cast<const char*>(cubin.data()), static_cast<std::streamsize>(cubin.size()));
  std::ofstream(hash + "/k.ptx") << testing::ReadFixtureText("kernels_sm90.ptx");
  out = InstrumentImage(ImageSource{.live = cubin.data()}, 90,
                        Pipeline(bundle, TritonCacheFinder({dir_ + "/triton"})), ids_);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->has_value());
  EXPECT_THAT((*out)->kernels, ElementsAre(Pair("_Z7add_onePfi", 7u)));
  EXPECT_FALSE((*out)->cubin.empty());
}

TEST(TritonCacheFinder, FindsTheCubinWithTheseBytesTwoLevelsDownAtMost) {
  char tmpl[] = "/tmp/cuprobe-triton-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  const std::vector<uint8_t> bytes = {1, 2, 3, 4};
  auto put = [&](const std::string& dir, const std::vector<uint8_t>& cubin, const char* ptx) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/k.cubin", std::ios::binary)
        .write(reinterpret_cast<const char*>(cubin.data()), static_cast<std::streamsize>(cubin.size()));
    std::ofstream(dir + "/k.ptx") << ptx;
  };
  put(root + "/other", {1, 2, 3, 5}, "other");
  put(root + "/a/b/c/d", bytes, "too deep");
  PtxSourceFinder find = TritonCacheFinder({"/nonexistent", root});
  EXPECT_EQ(find(bytes), std::nullopt);
  put(root + "/hash", bytes, "the ptx");
  EXPECT_EQ(find(bytes), "the ptx");
  EXPECT_EQ(TritonCacheFinder({})(bytes), std::nullopt);
  std::filesystem::remove_all(root);
}

TEST(PtxEntryNames, ScansTheEntries) {
  EXPECT_THAT(PtxEntryNames(".visible .entry _Z3fooPi(\n.param .u64 a)\n{}\n"
                            ".entry\tbar$1 ()\n.func notme()\n.entryx no()"),
              ElementsAre("_Z3fooPi", "bar$1"));
}

}  // namespace
}  // namespace cuprobe
