// File: tests/ptx_rewriter/compile_test.cc
//
// Compilation through nvJitLink (loaded with dlopen: the binary must not
// depend on it), the content hash and the on-disk compile cache (hits,
// misses, permissions, corrupt entries, concurrent writers, degradation),
// and InstrumentAndCompile on top of them.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/gpu/helpers_ptx.h"
#include "ptx_rewriter/builtin_probes.h"
#include "probe/bundle.h"
#include "ptx_rewriter/compile.h"
#include "ptx_rewriter/settings.h"
#include "ptx_rewriter/compile_cache.h"
#include "ptx_rewriter/content_hash.h"
#include "ptx_rewriter/nvjitlink.h"
#include "tests/ptx_rewriter/fixtures.h"
#include "tests/ptx_rewriter/ptx_test_util.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class TempDir {
 public:
  TempDir() : path_(testing::MakeTempDir()) {}
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ContentHashTest, StableDistinctAndFramed) {
  EXPECT_EQ(HashBytes("abc"), HashBytes("abc"));
  EXPECT_FALSE(HashBytes("abc") == HashBytes("abd"));
  EXPECT_FALSE(HashBytes("abc") == HashBytes("abc", 1));
  EXPECT_FALSE(HashBytes("") == HashBytes(std::string(1, '\0')));
  // Every length through the tail loops and the 32-byte lanes differs.
  std::string s;
  std::vector<Hash128> seen;
  for (int i = 0; i < 100; ++i) {
    seen.push_back(HashBytes(s));
    s.push_back('x');
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    for (size_t j = i + 1; j < seen.size(); ++j) EXPECT_FALSE(seen[i] == seen[j]) << i << " " << j;
  }
  CacheKeyBuilder a, b;
  a.Add("x", "ab");
  a.Add("y", "c");
  b.Add("x", "a");
  b.Add("y", "bc");
  EXPECT_NE(a.Hex(), b.Hex());
  EXPECT_EQ(a.Hex().size(), 32u);
}

TEST(NvJitLinkTest, FingerprintIsTheSameBeforeAndAfterLoading) {
  // ctest runs each test in its own process: nvJitLink is not loaded yet
  // here (unless --gtest_filter ran another test first in this process).
  absl::StatusOr<std::string> before = NvJitLinkFingerprint();
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE(LoadNvJitLink().ok());
  absl::StatusOr<std::string> after = NvJitLinkFingerprint();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(*before, *after) << "cache keys would change once nvJitLink is loaded";
}

TEST(NvJitLinkTest, IsLoadedAtRunTimeNotLinked) {
  std::string out;
  ASSERT_EQ(testing::RunCommand("readelf -d /proc/" + std::to_string(getpid()) + "/exe", &out), 0);
  EXPECT_THAT(out, ::testing::Not(HasSubstr("nvJitLink"))) << out;
  absl::StatusOr<NvJitLinkLibrary> lib = LoadNvJitLink();
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_EQ(lib->major, 13u);
  EXPECT_THAT(lib->path, HasSubstr("libnvJitLink.so.13"));
  absl::StatusOr<std::string> fp = NvJitLinkFingerprint();
  ASSERT_TRUE(fp.ok()) << fp.status();
  EXPECT_THAT(*fp, HasSubstr("libnvJitLink.so.13:"));
}

TEST(NvJitLinkTest, CompilesAndReportsResources) {
  CompileOptions o;
  o.sm = 90;
  o.verbose = true;
  absl::StatusOr<CompiledCubin> c =
      CompilePtxWithNvJitLink(testing::ReadFixtureText("kernels_sm90.ptx"), o);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_GT(c->cubin.size(), 64u);
  EXPECT_EQ(std::string(c->cubin.begin(), c->cubin.begin() + 4), "\x7f" "ELF");
  std::vector<FunctionResources> r = ParseResourceUsage(c->info_log);
  ASSERT_EQ(r.size(), 4u) << c->info_log;
  for (const FunctionResources& f : r) {
    EXPECT_GT(f.registers, 0u) << f.name;
    EXPECT_EQ(f.stack_bytes, 0u) << f.name;
  }
}

TEST(NvJitLinkTest, ErrorsCarryPtxasMessages) {
  CompileOptions o;
  o.input_name = "broken.ptx";
  absl::StatusOr<CompiledCubin> c = CompilePtxWithNvJitLink(
      ".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tadd.s32 %r1, %r2, "
      "1;\n\tret;\n}\n",
      o);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("nvJitLinkAddData(broken.ptx)"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("line 6; error"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("Unknown symbol '%r1'"));
}

// CompilePtx prefers the toolkit's ptxas (whole program): the same machine
// code as nvcc for an unchanged module, resources from `ptxas -v`.
TEST(PtxasCompileTest, WholeProgramLikeNvccAndReportsResources) {
  if (PtxCompilerName().rfind("ptxas", 0) != 0) GTEST_SKIP() << "no ptxas: " << PtxCompilerName();
  CompileOptions o;
  o.sm = 90;
  o.verbose = true;
  absl::StatusOr<CompiledCubin> c = CompilePtx(testing::ReadFixtureText("kernels_sm90.ptx"), o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(std::string(c->cubin.begin(), c->cubin.begin() + 4), "\x7f" "ELF");
  std::vector<FunctionResources> r = ParseResourceUsage(c->info_log);
  int entries = 0;
  for (const FunctionResources& f : r) entries += f.registers > 0;
  EXPECT_GE(entries, 4) << c->info_log;
  absl::StatusOr<CompiledCubin> broken = CompilePtx(
      ".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tadd.s32 %r1, %r2, "
      "1;\n\tret;\n}\n",
      CompileOptions{.input_name = "broken.ptx"});
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("ptxas failed on broken.ptx"));
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("Unknown symbol '%r1'"));
}

TEST(ResourceUsageTest, ParsesPtxasVerboseLines) {
  std::vector<FunctionResources> r = ParseResourceUsage(
      "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90'\n"
      "ptxas info    : Function properties for _Z1kPf\n"
      "    24 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 42 registers, used 1 barriers, 2048 bytes smem, 360 bytes cmem[0]\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].name, "_Z1kPf");
  EXPECT_EQ(r[0].registers, 42u);
  EXPECT_EQ(r[0].barriers, 1u);
  EXPECT_EQ(r[0].stack_bytes, 24u);
  EXPECT_EQ(r[0].shared_bytes, 2048u);
}

TEST(ResourceUsageTest, ParsesNvJitLinkInfoLines) {
  std::vector<FunctionResources> r = ParseResourceUsage(
      "info    : 0 bytes gmem\n"
      "info    : Function properties for 'k1':\n"
      "info    : used 35 registers, used 1 barriers, 8 stack, 1024 bytes smem, 540 bytes "
      "cmem[0], 16 bytes lmem\n"
      "info    : Function properties for 'k2':\n"
      "info    : used 8 registers, used 0 barriers, 0 stack, 0 bytes smem, 536 bytes cmem[0], 0 "
      "bytes lmem\n");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].name, "k1");
  EXPECT_EQ(r[0].registers, 35u);
  EXPECT_EQ(r[0].barriers, 1u);
  EXPECT_EQ(r[0].stack_bytes, 8u);
  EXPECT_EQ(r[0].shared_bytes, 1024u);
  EXPECT_EQ(r[0].local_bytes, 16u);
  EXPECT_EQ(r[1].registers, 8u);
}

constexpr char kKey[] = "0123456789abcdef0123456789abcdef";

TEST(CompileCacheTest, StoresAndFindsWithPrivatePermissions) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/a/cache";
  CompileCache cache(dir);
  EXPECT_FALSE(cache.Lookup(kKey).has_value());
  ASSERT_TRUE(cache.Store(kKey, "value bytes"));
  EXPECT_EQ(cache.Lookup(kKey), "value bytes");
  struct stat st {};
  ASSERT_EQ(stat(cache.PathFor(kKey).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat((dir + "/01").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // No temporary files are left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/01")) {
    ++files;
    EXPECT_EQ(e.path().filename().string().rfind(".tmp", 0), std::string::npos) << e.path();
  }
  EXPECT_EQ(files, 1);
  // Keys that are not hex digits are never looked up on disk.
  EXPECT_FALSE(cache.Store("../../etc/passwd", "x"));
}

// Issue 9: a cache directory that is not this user's own and private is
// not read (its cubins would be loaded into the program) nor written.
TEST(CompileCacheTest, ADirectoryOthersCanWriteOrALinkIsNotTrusted) {
  TempDir tmp;
  const std::string open_dir = tmp.path() + "/open";
  ASSERT_EQ(mkdir(open_dir.c_str(), 0700), 0);
  {
    CompileCache mine(open_dir);
    ASSERT_TRUE(mine.Store(kKey, "from me"));
  }
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  CompileCache open(open_dir);
  EXPECT_FALSE(open.Lookup(kKey).has_value()) << "an entry in a world-writable cache is not used";
  EXPECT_FALSE(open.enabled());
  EXPECT_FALSE(open.Store(kKey, "x"));

  const std::string real = tmp.path() + "/real";
  ASSERT_EQ(mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(symlink(real.c_str(), (tmp.path() + "/link").c_str()), 0);
  CompileCache linked(tmp.path() + "/link");
  EXPECT_FALSE(linked.Store(kKey, "x"));
  EXPECT_FALSE(linked.enabled());

  if (geteuid() == 0) {  // as root, a directory of another user can be made
    const std::string theirs = tmp.path() + "/theirs";
    ASSERT_EQ(mkdir(theirs.c_str(), 0700), 0);
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
    CompileCache other(theirs);
    EXPECT_FALSE(other.Lookup(kKey).has_value());
    EXPECT_FALSE(other.enabled());
  }
  // A private directory of this user, made beforehand, is used.
  CompileCache own(real);
  EXPECT_TRUE(own.Store(kKey, "v"));
  EXPECT_EQ(own.Lookup(kKey), "v");
}

TEST(CompileCacheTest, CorruptEntriesAreMissesAndRemoved) {
  TempDir tmp;
  CompileCache cache(tmp.path());
  ASSERT_TRUE(cache.Store(kKey, std::string(1000, 'v')));
  const std::string path = cache.PathFor(kKey);
  // Truncated.
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  EXPECT_FALSE(cache.Lookup(kKey).has_value());
  EXPECT_FALSE(std::filesystem::exists(path));
  // One flipped byte of the value.
  ASSERT_TRUE(cache.Store(kKey, std::string(1000, 'v')));
  std::string bytes = testing::ReadTextFile(path);
  bytes[bytes.size() - 5] = 'w';
  testing::WriteTextFile(path, bytes);
  EXPECT_FALSE(cache.Lookup(kKey).has_value());
  // An entry stored under another key (a renamed file).
  const std::string other = "fedcba9876543210fedcba9876543210";
  ASSERT_TRUE(cache.Store(other, "x"));
  std::filesystem::create_directories(std::filesystem::path(cache.PathFor(kKey)).parent_path());
  std::filesystem::rename(cache.PathFor(other), path);
  EXPECT_FALSE(cache.Lookup(kKey).has_value());
}

TEST(CompileCacheTest, UnwritableCacheDegradesToNoCache) {
  TempDir tmp;
  // A regular file where a directory should be: mkdir fails (as root too).
  testing::WriteTextFile(tmp.path() + "/file", "x");
  CompileCache cache(tmp.path() + "/file/cache");
  EXPECT_TRUE(cache.enabled());
  EXPECT_FALSE(cache.Store(kKey, "v"));
  EXPECT_FALSE(cache.enabled());
  EXPECT_FALSE(cache.Store(kKey, "v"));
  EXPECT_FALSE(cache.Lookup(kKey).has_value());
  EXPECT_FALSE(CompileCache::Disabled().enabled());
}

// A disk that fills up during a write (issue 9): the file-size limit makes
// write() fail with EFBIG part way, as ENOSPC would. Checked in a child, so
// the limit stays there. The store fails, no torn entry is ever served,
// the cache turns itself off, and compiling still works without it.
TEST(CompileCacheTest, DiskFullDuringAWriteLeavesNoEntryAndCompilingGoesOn) {
  TempDir tmp;
  const std::string small(1000, 's');
  {
    CompileCache cache(tmp.path());
    ASSERT_TRUE(cache.Store(kKey, small));  // an entry from before the disk filled
  }
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = {64 * 1024, 64 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    CompileCache cache(tmp.path());
    const std::string big(1 << 20, 'b');
    int failures = 0;
    if (cache.Store(kKey, big)) failures |= 1;                  // must fail
    std::optional<std::string> v = CompileCache(tmp.path()).Lookup(kKey);
    if (!v.has_value() || *v != small) failures |= 2;           // the old entry, whole
    if (cache.enabled()) failures |= 4;                         // off after the failure
    // Compiling goes on without the cache.
    const std::string ptx = testing::ReadFixtureText("kernels_sm90.ptx");
    const std::string helpers = testing::ReadFixtureText("test_helpers.ptx");
    BuiltinBundleOptions bo;
    bo.entry = true;
    absl::StatusOr<ProbeBundle> bundle = BuiltinBundle("builtin:count", bo);
    InstrumentOptions options;
    options.helper_ptx = helpers;
    absl::StatusOr<InstrumentedModule> m =
        bundle.ok() ? InstrumentAndCompile(ptx, *bundle, options, cache)
                    : absl::StatusOr<InstrumentedModule>(bundle.status());
    if (!m.ok() || m->cubin.empty()) failures |= 8;
    ::_exit(failures);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bits: 1 stored, 2 old entry lost or torn, 4 cache still "
                                       "on, 8 compile failed";
  // No temporary file was left behind either.
  for (const auto& e : std::filesystem::recursive_directory_iterator(tmp.path())) {
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
  }
}

TEST(CompileCacheTest, ConcurrentWritersNeverTearAnEntry) {
  TempDir tmp;
  CompileCache cache(tmp.path());
  const std::string a(200000, 'a'), b(300000, 'b');
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        EXPECT_TRUE(cache.Store(kKey, (t + i) % 2 ? a : b));
        std::optional<std::string> v = cache.Lookup(kKey);
        // Each thread stored before looking, so an entry exists; rename()
        // replaces it whole, so it is one of the two values, never a mix.
        if (!v.has_value() || (*v != a && *v != b)) ++bad;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::recursive_directory_iterator(tmp.path())) {
    ++files;
  }
  EXPECT_EQ(files, 2);  // the 01/ directory and one entry
}

TEST(CompileCacheTest, EnvironmentChoosesTheDirectory) {
  std::map<std::string, std::string> env;
  auto settings = [&] {
    return RewriterSettings::FromEnvironment([&](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  };
  env["CUPROBE_CACHE_DIR"] = "off";
  EXPECT_FALSE(CompileCache(settings().cache_dir).enabled());
  env["CUPROBE_CACHE_DIR"] = "/tmp/somewhere/";
  EXPECT_EQ(CompileCache(settings().cache_dir).dir(), "/tmp/somewhere");
  env.erase("CUPROBE_CACHE_DIR");
  env["XDG_CACHE_HOME"] = "/tmp/xdg";
  EXPECT_EQ(CompileCache(settings().cache_dir).dir(), "/tmp/xdg/cuprobe");
  env.erase("XDG_CACHE_HOME");
  env["HOME"] = "/tmp/home";
  EXPECT_EQ(CompileCache(settings().cache_dir).dir(), "/tmp/home/.cache/cuprobe");
}

// The other settings, each from its variable; defaults when unset.
TEST(RewriterSettingsTest, ReadsEachVariable) {
  const RewriterSettings none = RewriterSettings::FromEnvironment([](const char*) -> const char* {
    return nullptr;
  });
  EXPECT_TRUE(none.site_counters && none.inline_probes && none.register_cap && none.use_ptxas);
  EXPECT_EQ(none.tmp_dir, "/tmp");
  const std::map<std::string, std::string> env = {
      {"CUPROBE_SITE_COUNTERS", "0"}, {"CUPROBE_INLINE", "0"}, {"CUPROBE_REGISTER_CAP", "0"},
      {"CUPROBE_PTX_COMPILER", "nvjitlink"}, {"CUDA_HOME", "/opt/cuda"},
      {"LD_LIBRARY_PATH", "/a::/b"}, {"TMPDIR", "/scratch"}};
  const RewriterSettings s = RewriterSettings::FromEnvironment([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  EXPECT_FALSE(s.site_counters || s.inline_probes || s.register_cap || s.use_ptxas);
  EXPECT_EQ(s.cuda_home, "/opt/cuda");
  EXPECT_THAT(s.library_path, ::testing::ElementsAre("/a", "/b"));
  EXPECT_EQ(s.tmp_dir, "/scratch");
}

TEST(InstrumentAndCompileTest, MissThenHitWithTheSameResult) {
  TempDir tmp;
  CompileCache cache(tmp.path());
  const std::string ptx = testing::ReadFixtureText("kernels_sm90.ptx");
  const std::string helpers = testing::ReadFixtureText("test_helpers.ptx");
  BuiltinBundleOptions bo;
  bo.entry = bo.exit = bo.memory = true;
  absl::StatusOr<ProbeBundle> bundle = BuiltinBundle("builtin:count", bo);
  ASSERT_TRUE(bundle.ok());
  InstrumentOptions options;
  options.helper_ptx = helpers;
  options.first_kernel_id = 5;
  absl::StatusOr<InstrumentedModule> cold = InstrumentAndCompile(ptx, *bundle, options, cache);
  ASSERT_TRUE(cold.ok()) << cold.status();
  EXPECT_FALSE(cold->cache_hit);
  ASSERT_EQ(cold->instrumented.size(), 4u);
  EXPECT_EQ(cold->instrumented[0].kernel_id, 5u);
  EXPECT_GT(cold->cubin.size(), 0u);

  // The best of five hits: one preemption on a loaded machine is not a slow
  // cache.
  double ms = 1e9;
  absl::StatusOr<InstrumentedModule> hit = absl::UnknownError("not run");
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    hit = InstrumentAndCompile(ptx, *bundle, options, cache);
    ms = std::min(ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                t0)
                          .count());
    ASSERT_TRUE(hit.ok()) << hit.status();
  }
  EXPECT_TRUE(hit->cache_hit);
  EXPECT_EQ(hit->cubin, cold->cubin);
  EXPECT_EQ(hit->cache_key, cold->cache_key);
  ASSERT_EQ(hit->instrumented.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(hit->instrumented[i].name, cold->instrumented[i].name);
    EXPECT_EQ(hit->instrumented[i].kernel_id, cold->instrumented[i].kernel_id);
    EXPECT_EQ(hit->instrumented[i].stats.memory_sites, cold->instrumented[i].stats.memory_sites);
  }
  // The target is 2 ms (a miss runs ptxas: hundreds of ms); the bound leaves
  // room for a loaded CI machine (bench/rewrite_bench measures the figure).
  EXPECT_LT(ms, 50.0);
  std::printf("cache hit: %.3f ms\n", ms);

  // Any input change is a different key.
  InstrumentOptions other = options;
  other.first_kernel_id = 6;
  absl::StatusOr<std::string> k1 = InstrumentCacheKey(ptx, *bundle, options, {});
  absl::StatusOr<std::string> k2 = InstrumentCacheKey(ptx, *bundle, other, {});
  absl::StatusOr<std::string> k3 = InstrumentCacheKey(ptx + " ", *bundle, options, {});
  ProbeBundle b2 = *bundle;
  b2.programs[0].kernel_glob = "add*";
  absl::StatusOr<std::string> k4 = InstrumentCacheKey(ptx, b2, options, {});
  ASSERT_TRUE(k1.ok() && k2.ok() && k3.ok() && k4.ok());
  EXPECT_NE(*k1, *k2);
  EXPECT_NE(*k1, *k3);
  EXPECT_NE(*k1, *k4);
  // The maps' sizes, entries and ids per key shape site counters (a
  // thread-range counter's ids are in its code): each is in the key.
  if (!bundle->maps.empty()) {
    for (int field = 0; field < 3; ++field) {
      ProbeBundle b = *bundle;
      MapSpec& m = b.maps[0];
      if (field == 0) m.map_extra += 64;
      if (field == 1) m.max_entries += 1;
      if (field == 2) m.value_size += 8;
      absl::StatusOr<std::string> k = InstrumentCacheKey(ptx, b, options, {});
      ASSERT_TRUE(k.ok());
      EXPECT_NE(*k1, *k) << "field " << field;
    }
  } else {
    ADD_FAILURE() << "the test's bundle needs a map";
  }
}

TEST(InstrumentAndCompileTest, LazyExtractsThePtxOnlyOnAMiss) {
  TempDir tmp;
  CompileCache cache(tmp.path());
  const std::string ptx = testing::ReadFixtureText("kernels_sm90.ptx");
  const std::string helpers = testing::ReadFixtureText("test_helpers.ptx");
  BuiltinBundleOptions bo;
  bo.entry = true;
  absl::StatusOr<ProbeBundle> bundle = BuiltinBundle("builtin:count", bo);
  ASSERT_TRUE(bundle.ok());
  InstrumentOptions options;
  options.helper_ptx = helpers;
  int extracted = 0;
  auto extract = [&]() -> absl::StatusOr<std::string> {
    ++extracted;
    return ptx;
  };
  const std::string id = "fatbin-entry:" + HashHex(HashBytes(ptx));
  absl::StatusOr<InstrumentedModule> cold =
      InstrumentAndCompileLazy(id, extract, *bundle, options, cache);
  ASSERT_TRUE(cold.ok()) << cold.status();
  EXPECT_FALSE(cold->cache_hit);
  EXPECT_EQ(extracted, 1);
  absl::StatusOr<InstrumentedModule> hit =
      InstrumentAndCompileLazy(id, extract, *bundle, options, cache);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_TRUE(hit->cache_hit);
  EXPECT_EQ(extracted, 1);
  EXPECT_TRUE(hit->cubin == cold->cubin);
  // An identity is not a PTX text: the two kinds of key never meet.
  absl::StatusOr<InstrumentedModule> by_text = InstrumentAndCompile(id, *bundle, options, cache);
  EXPECT_FALSE(by_text.ok());  // `id` is not PTX: a miss, then a parse error
  // Extraction errors come back as they are.
  absl::StatusOr<InstrumentedModule> bad = InstrumentAndCompileLazy(
      "other", [] { return absl::StatusOr<std::string>(absl::DataLossError("zstd: corrupt")); },
      *bundle, options, cache);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "zstd: corrupt");
}

// ptxas refusing one kernel's instrumented code costs that kernel only
// (issue 9): it is left as it was, with ptxas' reason, and the others are
// instrumented and compiled.
TEST(InstrumentAndCompileTest, PtxasRefusingOneKernelLeavesTheOthersInstrumented) {
  BuiltinBundleOptions bo;
  bo.entry = true;
  absl::StatusOr<ProbeBundle> bundle = BuiltinBundle("builtin:count", bo);
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  const std::string ptx = R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry first()
{
ret;
}
.visible .entry second()
{
ret;
}
.visible .entry third()
{
ret;
}
)";
  const std::string helpers = testing::ReadFixtureText("test_helpers.ptx");
  InstrumentOptions options;
  options.helper_ptx = helpers;
  options.fault_kernel = "second";
  absl::StatusOr<CompiledInstrumentation> c =
      InstrumentAndCompileUncached(ptx, *bundle, options, CompileOptions{});
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<std::string> names;
  for (const InstrumentedKernel& k : c->result.instrumented) names.push_back(k.name);
  EXPECT_THAT(names, ::testing::ElementsAre("first", "third"));
  ASSERT_EQ(c->result.skipped.size(), 1u);
  EXPECT_EQ(c->result.skipped[0].name, "second");
  EXPECT_THAT(c->result.skipped[0].reason, HasSubstr("ptxas rejected its instrumented code"));
  EXPECT_THAT(c->result.skipped[0].reason, HasSubstr("for instruction 'mov'"));
  EXPECT_FALSE(c->compiled.cubin.empty());
  // Every kernel refused: nothing instrumented, no error (the original loads).
  options.fault_kernel.clear();
  ProbeBundle broken = *bundle;
  absl::StatusOr<CompiledInstrumentation> one =
      InstrumentAndCompileUncached(R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry only()
{
ret;
}
)", broken, [&] { InstrumentOptions o = options; o.fault_kernel = "only"; return o; }(),
                                   CompileOptions{});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(one->result.instrumented.empty());
  EXPECT_TRUE(one->compiled.cubin.empty());
}

// The occupancy guard: kernel_trace's block-leader ring reserve takes
// vec_add from 12 registers to over 32 (6 resident blocks of 256 per SM
// instead of 8); the kernel is compiled again under `.maxnreg 32` without
// spills. A kernel that bounds its own registers keeps its bounds, and
// CUPROBE_REGISTER_CAP=0 turns the guard off.
TEST(InstrumentAndCompileTest, ProbesDoNotLowerTheOccupancyRegistersAllow) {
  const ProbeBundle bundle = testing::CompiledProbeBundle("kernel_trace");
  ASSERT_FALSE(bundle.programs.empty());
  const std::string ptx = R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry add(
.param .u64 add_param_0,
.param .u32 add_param_1
)
{
.reg .pred %p<2>;
.reg .f32 %f<3>;
.reg .b32 %r<5>;
.reg .b64 %rd<4>;
ld.param.u64 %rd1, [add_param_0];
ld.param.u32 %r1, [add_param_1];
mov.u32 %r2, %ctaid.x;
mov.u32 %r3, %ntid.x;
mov.u32 %r4, %tid.x;
mad.lo.s32 %r2, %r2, %r3, %r4;
setp.ge.s32 %p1, %r2, %r1;
@%p1 ret;
cvta.to.global.u64 %rd2, %rd1;
mul.wide.s32 %rd3, %r2, 4;
add.s64 %rd2, %rd2, %rd3;
ld.global.f32 %f1, [%rd2];
add.f32 %f2, %f1, 0f3F800000;
st.global.f32 [%rd2], %f2;
ret;
}
)";
  InstrumentOptions options;
  options.helper_ptx = HelpersPtx();  // a view: the text is static
  auto registers = [](const CompiledInstrumentation& c, std::string_view name) {
    for (const FunctionResources& f : ParseResourceUsage(c.compiled.info_log)) {
      if (f.name == name) return f.registers;
    }
    return 0u;
  };
  absl::StatusOr<CompiledInstrumentation> c =
      InstrumentAndCompileUncached(ptx, bundle, options, CompileOptions{});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->result.instrumented.size(), 1u);
  EXPECT_THAT(c->result.ptx, HasSubstr(".maxnreg 32")) << c->result.ptx;
  EXPECT_GT(registers(*c, "add"), 0u);
  EXPECT_LE(registers(*c, "add"), 32u);
  // The kernel spills nothing; the ring reserve helper (the block leader's
  // path) may spill a little under the cap.
  for (const FunctionResources& f : ParseResourceUsage(c->compiled.info_log)) {
    if (f.name == "add") {
      EXPECT_EQ(f.spill_bytes, 0u);
    } else {
      EXPECT_TRUE(absl::StartsWith(f.name, "__cuprobe_")) << f.name;
      EXPECT_LE(f.spill_bytes, 64u) << f.name;
    }
  }

  const RewriterSettings saved = CurrentRewriterSettings();
  RewriterSettings no_cap = saved;
  no_cap.register_cap = false;
  SetRewriterSettings(no_cap);
  absl::StatusOr<CompiledInstrumentation> off =
      InstrumentAndCompileUncached(ptx, bundle, options, CompileOptions{});
  SetRewriterSettings(saved);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_THAT(off->result.ptx, Not(HasSubstr(".maxnreg"))) << off->result.ptx;
  EXPECT_GT(registers(*off, "add"), 32u) << "the probe no longer needs the guard: update the test";

  // Bounds of its own: kept as they are.
  std::string bounded = ptx;
  bounded.replace(bounded.find(")\n{"), 3, ")\n.maxnreg 40\n{");
  absl::StatusOr<CompiledInstrumentation> own =
      InstrumentAndCompileUncached(bounded, bundle, options, CompileOptions{});
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_THAT(own->result.ptx, Not(HasSubstr(".maxnreg 32")));
  EXPECT_THAT(own->result.ptx, HasSubstr(".maxnreg 40"));
}

// ptxas refusing the module with its probes inlined: the probes are
// called instead, with one warning, and the kernels stay instrumented.
TEST(InstrumentAndCompileTest, RefusedInlinedProbesFallBackToCalls) {
  const ProbeBundle bundle = testing::CompiledProbeBundle("kernel_trace");
  ASSERT_FALSE(bundle.programs.empty());
  const std::string ptx = R"(.version 8.0
.target sm_90
.address_size 64
.visible .entry k()
{
ret;
}
)";
  InstrumentOptions options;
  options.helper_ptx = HelpersPtx();
  absl::StatusOr<CompiledInstrumentation> inlined =
      InstrumentAndCompileUncached(ptx, bundle, options, CompileOptions{});
  ASSERT_TRUE(inlined.ok()) << inlined.status();
  EXPECT_TRUE(inlined->result.warnings.empty());
  EXPECT_THAT(inlined->result.ptx, Not(HasSubstr("call (__cp_ret)")));

  options.fault_inlined = true;
  absl::StatusOr<CompiledInstrumentation> c =
      InstrumentAndCompileUncached(ptx, bundle, options, CompileOptions{});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->result.instrumented.size(), 1u);
  EXPECT_FALSE(c->compiled.cubin.empty());
  EXPECT_THAT(c->result.ptx, HasSubstr("call (__cp_ret)"));
  EXPECT_THAT(c->result.ptx, Not(HasSubstr("__cp_fault")));
  ASSERT_EQ(c->result.warnings.size(), 1u);
  EXPECT_THAT(c->result.warnings[0], HasSubstr("could not be inlined"));
}

TEST(ResourceUsageTest, ReadsSpillStores) {
  std::vector<FunctionResources> r = ParseResourceUsage(
      "ptxas info    : Function properties for k\n"
      "    40 bytes stack frame, 12 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 32 registers, used 0 barriers, 360 bytes cmem[0]\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].stack_bytes, 40u);
  EXPECT_EQ(r[0].spill_bytes, 12u);
  EXPECT_EQ(r[0].registers, 32u);
}

TEST(InstrumentAndCompileTest, CacheEntryEncoding) {
  InstrumentedModule m;
  m.cubin = {1, 2, 3};
  m.instrumented.push_back({"k", 9, {"count_entry"}, {1, 2, 3, 4, true, 5}});
  m.skipped.push_back({"s", "why"});
  m.warnings.push_back("w");
  m.site_counters.push_back(SiteCounter{{SiteAdd{1, false, {7, 0, 0, 0, 1, 0, 0, 0}, 1},
                                         SiteAdd{2, true, {9, 0, 0, 0, 0, 0, 0, 0}, 1ull << 40}}});
  m.site_counters.push_back(SiteCounter{});
  const std::string bytes = EncodeInstrumentedModule(m);
  absl::StatusOr<InstrumentedModule> d = DecodeInstrumentedModule(bytes);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->cubin, m.cubin);
  EXPECT_EQ(d->instrumented[0].name, "k");
  EXPECT_EQ(d->instrumented[0].kernel_id, 9u);
  EXPECT_EQ(d->instrumented[0].stats.memory_sites, 3u);
  EXPECT_TRUE(d->instrumented[0].stats.args_copied);
  EXPECT_EQ(d->instrumented[0].stats.counted_calls, 5u);
  EXPECT_EQ(d->site_counters, m.site_counters);
  EXPECT_EQ(d->skipped[0].reason, "why");
  EXPECT_EQ(d->warnings[0], "w");
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeInstrumentedModule(bytes.substr(0, n)).ok()) << n;
  }
  EXPECT_FALSE(DecodeInstrumentedModule(bytes + "x").ok());
}

}  // namespace
}  // namespace cuprobe
