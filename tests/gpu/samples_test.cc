// GPU tier: the samples of samples/<name>/ end to end. Each runs its probe
// bundle (build/probes/<name>.cpb) with `cuprobe run` on its workload and
// checks exact values computed from the workload; the programs' own output
// (which checks every result) must equal the native run's. Skips without a GPU.
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gpu/map_lines.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::string Cuprobe() { return BuildDir() + "/bin/cuprobe"; }
// The bundles the build compiled: the GPU machine has no clang-19.
std::string Probe(const std::string& name) { return BuildDir() + "/probes/" + name + ".cpb"; }

class Samples : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine";
    char tmpl[] = "/tmp/cuprobe-samples-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  // Runs `cuprobe run -p <sample's bundle> [extra] -- app`, checks the app's
  // stdout against its native run, and returns the final maps text.
  std::string RunSample(const std::string& sample, const std::vector<std::string>& app,
                        const std::vector<std::string>& extra = {}) {
    ProcessResult native = RunProcess(app);
    EXPECT_EQ(native.exit_code, 0) << native.err;
    prefix_ = dir_ + "/" + sample;
    std::vector<std::string> argv = {Cuprobe(), "run", "-p", Probe(sample), "-o", prefix_,
                                     "--format", "json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("--");
    argv.insert(argv.end(), app.begin(), app.end());
    last_ = RunProcess(argv, {{"CUPROBE_LOG", "info"}}, 300);
    EXPECT_EQ(last_.exit_code, 0) << last_.err;
    EXPECT_EQ(last_.out, native.out) << "the program's results must not change";
    EXPECT_THAT(last_.err, HasSubstr("instrumented")) << last_.err;
    return ReadWholeFile(prefix_ + ".maps.txt");
  }
  std::string dir_, prefix_;
  ProcessResult last_;
};

// "@name[K]: V" lines of a map with a scalar key: K -> V.
std::map<uint64_t, uint64_t> ScalarMap(const std::string& maps, const std::string& name) {
  std::map<uint64_t, uint64_t> out;
  std::regex line("(^|\n)@" + name + R"(\[(\d+)\]: (\d+))");
  for (auto it = std::sregex_iterator(maps.begin(), maps.end(), line); it != std::sregex_iterator();
       ++it) {
    out[std::stoull((*it)[2].str())] = std::stoull((*it)[3].str());
  }
  return out;
}

uint64_t Sum(const std::map<uint64_t, uint64_t>& m) {
  uint64_t sum = 0;
  for (const auto& [k, v] : m) sum += v;
  return sum;
}

// The buckets of histogram @name: label ("[0, 1)", "[2K, 4K)", ...) -> count.
std::map<std::string, uint64_t> Histogram(const std::string& maps, const std::string& name) {
  std::map<std::string, uint64_t> out;
  const std::string head = "@" + name + ":\n";
  size_t at = maps.find(head);
  if (at == std::string::npos) return out;
  at += head.size();
  const size_t end = maps.find("\n\n", at);
  absl::string_view body(maps.data() + at, (end == std::string::npos ? maps.size() : end) - at);
  std::regex line(R"(^(\S.*?)\s+(\d+) \|)");
  for (absl::string_view l : absl::StrSplit(body, '\n', absl::SkipEmpty())) {
    std::string s(l);
    std::smatch m;
    if (std::regex_search(s, m, line)) out[m[1].str()] = std::stoull(m[2].str());
  }
  return out;
}

uint64_t Sum(const std::map<std::string, uint64_t>& m) {
  uint64_t sum = 0;
  for (const auto& [k, v] : m) sum += v;
  return sum;
}

// The low bound of a linear histogram's label "[lo, hi)" or "[lo, ...)".
int64_t LowBound(const std::string& label) {
  int64_t lo = -1;
  std::smatch m;
  std::regex re(R"(^\[(-?\d+), )");
  if (std::regex_search(label, m, re)) lo = std::stoll(m[1].str());
  return lo;
}

// The records of ring @map in a `--events json` file, as bytes.
std::vector<std::string> RingRecords(const std::string& events, const std::string& map) {
  std::vector<std::string> out;
  std::regex re("^\\{\"map\":\"" + map + "\".*\"hex\":\"([0-9a-f]*)\"\\}$");
  for (absl::string_view l : absl::StrSplit(events, '\n', absl::SkipEmpty())) {
    std::string s(l);
    std::smatch m;
    if (!std::regex_match(s, m, re)) continue;
    const std::string hex = m[1].str();
    std::string bytes(hex.size() / 2, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) {
      bytes[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    }
    out.push_back(std::move(bytes));
  }
  return out;
}

// samples/kernelretsnoop: struct thread_exit of the probe.
struct ThreadExit {
  uint64_t timestamp_ns;
  uint32_t kernel_id;
  uint32_t block[3];
  uint32_t thread[3];
  uint32_t reserved;
};
static_assert(sizeof(ThreadExit) == 40);

TEST_F(Samples, KernelretsnoopGivesOneEventPerThread) {
  const int n = 32768, iterations = 3, threads = 256, blocks = n / threads;
  std::string maps = RunSample("kernelretsnoop",
                               {SamplePath("vec_add"), std::to_string(n),
                                std::to_string(iterations)},
                               {"--events", "json", "--quiet"});
  std::map<std::string, uint32_t> ids = KernelIds(maps);
  ASSERT_TRUE(ids.count("vec_add")) << maps;
  EXPECT_FALSE(ids.count("scale")) << "the probe selects vec_add only: " << maps;
  std::vector<std::string> records = RingRecords(ReadWholeFile(prefix_ + ".events"), "exits");
  // Every one of the n threads leaves each of the `iterations` launches once.
  ASSERT_EQ(records.size(), size_t{n} * iterations);
  std::vector<int> seen(n, 0);
  int bad = 0;
  for (const std::string& r : records) {
    ASSERT_EQ(r.size(), sizeof(ThreadExit));
    ThreadExit e;
    std::memcpy(&e, r.data(), sizeof(e));
    if (e.kernel_id != ids["vec_add"] || e.timestamp_ns == 0 || e.block[0] >= uint32_t{blocks} ||
        e.block[1] != 0 || e.block[2] != 0 || e.thread[0] >= uint32_t{threads} ||
        e.thread[1] != 0 || e.thread[2] != 0) {
      if (++bad < 5) ADD_FAILURE() << "bad event: kernel " << e.kernel_id << " block " << e.block[0];
      continue;
    }
    ++seen[e.block[0] * threads + e.thread[0]];
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), iterations), n) << "each thread once per launch";
  EXPECT_THAT(maps, HasSubstr(absl::StrCat("@exits: ring of 16777216 bytes: ",
                                           int64_t{n} * iterations, " records delivered, 0 dropped")))
      << maps;
}

TEST_F(Samples, CudaCounterCountsCallsAndBlocksExactly) {
  const int n = 65536, iterations = 7, blocks = n / 256;
  std::string maps = RunSample("cuda_counter", {SamplePath("vec_add"), std::to_string(n),
                                                std::to_string(iterations)});
  std::map<std::string, uint32_t> ids = KernelIds(maps);
  ASSERT_TRUE(ids.count("vec_add") && ids.count("scale")) << maps;
  const uint32_t vec_add = ids["vec_add"], scale = ids["scale"];
  // vec_add runs `iterations` times, scale once, each on n / 256 blocks.
  std::map<uint64_t, uint64_t> calls = ScalarMap(maps, "calls");
  EXPECT_EQ(calls[vec_add], uint64_t{iterations}) << maps;
  EXPECT_EQ(calls[scale], 1u) << maps;
  EXPECT_EQ(calls.size(), 2u) << maps;
  std::map<uint64_t, uint64_t> ran = ScalarMap(maps, "blocks");
  EXPECT_EQ(ran[vec_add], uint64_t{blocks} * iterations) << maps;
  EXPECT_EQ(ran[scale], uint64_t{blocks}) << maps;
  EXPECT_EQ(ran.size(), 2u) << maps;
  std::map<uint64_t, uint64_t> ns = ScalarMap(maps, "block_ns");
  EXPECT_GT(ns[vec_add], 0u) << maps;
  EXPECT_GT(ns[scale], 0u) << maps;
  EXPECT_EQ(Sum(Histogram(maps, "block_time")), uint64_t{blocks} * (iterations + 1)) << maps;
}

TEST_F(Samples, MemRegionsCountEveryAccessInTheBufferItTouches) {
  const uint64_t n = 1 << 20, iterations = 3;  // 4 MiB per buffer
  std::string maps = RunSample("mem_regions", {SamplePath("vec_add"), std::to_string(n),
                                               std::to_string(iterations)});
  std::map<std::string, uint32_t> ids = KernelIds(maps);
  ASSERT_TRUE(ids.count("vec_add") && ids.count("scale")) << maps;
  // (kernel, kind) -> region -> accesses.
  std::map<std::pair<uint32_t, uint32_t>, std::map<std::string, uint64_t>> rows;
  std::regex line(
      R"(@regions\[\{kernel_id: (\d+), kind: (\d+), region: (0x[0-9a-f]+|\d+)\}\]: (\d+))");
  for (auto it = std::sregex_iterator(maps.begin(), maps.end(), line);
       it != std::sregex_iterator(); ++it) {
    rows[{std::stoul((*it)[1].str()), std::stoul((*it)[2].str())}][(*it)[3].str()] =
        std::stoull((*it)[4].str());
  }
  auto total = [&](uint32_t kernel, uint32_t kind) {
    uint64_t sum = 0;
    for (const auto& [region, count] : rows[{kernel, kind}]) sum += count;
    return sum;
  };
  constexpr uint32_t kLoad = 1, kStore = 2;  // CUPROBE_ACCESS_LOAD, _STORE
  const uint32_t vec_add = ids["vec_add"], scale = ids["scale"];
  // vec_add: c[i] = a[i] + b[i], `iterations` times; scale: c[i] *= f, once.
  EXPECT_EQ(total(vec_add, kLoad), 2 * n * iterations) << maps;
  EXPECT_EQ(total(vec_add, kStore), n * iterations) << maps;
  EXPECT_EQ(total(scale, kLoad), n) << maps;
  EXPECT_EQ(total(scale, kStore), n) << maps;
  EXPECT_EQ(rows.size(), 4u) << maps;
  // A 4 MiB buffer spans two or three 2 MiB regions; scale touches exactly
  // the buffer vec_add writes.
  const auto& c = rows[{vec_add, kStore}];
  EXPECT_GE(c.size(), 2u) << maps;
  EXPECT_LE(c.size(), 3u) << maps;
  std::vector<std::string> c_regions, scale_loads, scale_stores;
  for (const auto& [r, count] : c) c_regions.push_back(r);
  for (const auto& [r, count] : rows[{scale, kLoad}]) scale_loads.push_back(r);
  for (const auto& [r, count] : rows[{scale, kStore}]) scale_stores.push_back(r);
  EXPECT_EQ(scale_loads, c_regions) << maps;
  EXPECT_EQ(scale_stores, c_regions) << maps;
  const auto& scaled = rows[{scale, kStore}];
  for (const auto& [r, count] : c) {
    const auto at = scaled.find(r);
    ASSERT_NE(at, scaled.end()) << "region " << r;
    EXPECT_EQ(at->second * iterations, count) << "region " << r;
  }
}

TEST_F(Samples, CudagraphCountsEveryThreadAndBlockOfTheGraphsKernels) {
  const uint64_t n = 65536, launches = 20, blocks = n / 256;
  std::string maps = RunSample("cudagraph", {SamplePath("cudagraph"), std::to_string(n),
                                             std::to_string(launches)});
  std::map<std::string, uint32_t> ids = KernelIds(maps);
  ASSERT_TRUE(ids.count("scale_add") && ids.count("bump")) << maps;
  // Each graph launch runs scale_add twice and bump once, n threads each.
  std::map<uint64_t, uint64_t> threads = ScalarMap(maps, "threads");
  std::map<uint64_t, uint64_t> ran = ScalarMap(maps, "blocks");
  EXPECT_EQ(threads[ids["scale_add"]], 2 * n * launches) << maps;
  EXPECT_EQ(threads[ids["bump"]], n * launches) << maps;
  EXPECT_EQ(ran[ids["scale_add"]], 2 * blocks * launches) << maps;
  EXPECT_EQ(ran[ids["bump"]], blocks * launches) << maps;
  EXPECT_EQ(Sum(threads), 3 * n * launches) << maps;
  EXPECT_EQ(Sum(ran), 3 * blocks * launches) << maps;
}

TEST_F(Samples, ThreadschedulingTotalsAreExact) {
  const uint64_t blocks = 264, iterations = 5, warps = 8 * blocks * iterations;
  std::string maps = RunSample("threadscheduling", {SamplePath("threadscheduling"),
                                                    std::to_string(blocks),
                                                    std::to_string(iterations)});
  ASSERT_TRUE(KernelIds(maps).count("place")) << maps;
  std::map<uint64_t, uint64_t> per_sm = ScalarMap(maps, "blocks_per_sm");
  std::map<uint64_t, uint64_t> warps_per_sm = ScalarMap(maps, "warps_per_sm");
  EXPECT_EQ(Sum(per_sm), blocks * iterations) << maps;
  EXPECT_EQ(Sum(warps_per_sm), warps) << maps;
  // A block's 8 warps all run on its SM.
  for (const auto& [sm, b] : per_sm) EXPECT_EQ(warps_per_sm[sm], 8 * b) << "SM " << sm;
  EXPECT_EQ(warps_per_sm.size(), per_sm.size()) << maps;
  std::map<std::string, uint64_t> slots = Histogram(maps, "warp_slot");
  EXPECT_EQ(Sum(slots), warps) << maps;
  for (const auto& [label, count] : slots) {
    EXPECT_GE(LowBound(label), 0) << label;
    EXPECT_LT(LowBound(label), 64) << label;
  }
  // Every warp has lanes 0-31: each lane bucket counts every warp.
  std::map<std::string, uint64_t> lanes = Histogram(maps, "lane");
  EXPECT_EQ(lanes.size(), 32u) << maps;
  for (int lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(lanes[absl::StrCat("[", lane, ", ", lane + 1, ")")], warps) << "lane " << lane;
  }
}

TEST_F(Samples, DivergenceAccountsForEveryLaneExactly) {
  const uint64_t warps = 1024, iterations = 3, quarter = warps / 4 * iterations;
  std::string maps = RunSample("divergence", {SamplePath("divergence"), std::to_string(warps),
                                              std::to_string(iterations)});
  std::map<std::string, uint32_t> ids = KernelIds(maps);
  ASSERT_TRUE(ids.count("diverge")) << maps;
  const uint32_t id = ids["diverge"];
  // (kind, site) -> lanes -> count.
  std::map<std::pair<uint32_t, uint32_t>, std::map<uint32_t, uint64_t>> seen;
  std::regex line(
      R"(@lanes\[\{kernel_id: (\d+), kind: (\d+), site: (\d+), lanes: (\d+)\}\]: (\d+))");
  for (auto it = std::sregex_iterator(maps.begin(), maps.end(), line); it != std::sregex_iterator();
       ++it) {
    EXPECT_EQ(std::stoul((*it)[1].str()), id);
    const auto kind = static_cast<uint32_t>(std::stoul((*it)[2].str()));
    const auto site = static_cast<uint32_t>(std::stoul((*it)[3].str()));
    const auto active = static_cast<uint32_t>(std::stoul((*it)[4].str()));
    seen[{kind, site}][active] = std::stoull((*it)[5].str());
  }
  ASSERT_EQ(seen.size(), 3u) << "the entry and the kernel's two exit sites: " << maps;
  // Every warp enters whole.
  EXPECT_THAT((seen[{1, 0}]), ElementsAre(Pair(32u, warps * iterations))) << maps;
  // In warp w the lowest 8 * (w % 4) lanes leave at the early `exit`, the
  // others at the final `ret`. Which lanes run an exit probe together is the
  // hardware's choice once a warp diverged (on the H200 the lowest lane of a
  // part often runs it alone, then the rest), so each site is checked by the
  // lanes that passed it: the sum of lanes x count, exact whatever the split.
  std::vector<uint64_t> lanes_through;
  uint64_t partial = 0;
  for (const auto& [where, counts] : seen) {
    if (where.first != 2) continue;
    uint64_t through = 0;
    for (const auto& [active, count] : counts) {
      through += active * count;
      if (active < 32) partial += count;
    }
    lanes_through.push_back(through);
  }
  std::sort(lanes_through.begin(), lanes_through.end());
  EXPECT_THAT(lanes_through, ElementsAre(quarter * (0 + 8 + 16 + 24),
                                         quarter * (32 + 24 + 16 + 8)))
      << maps;
  // Every report with fewer than 32 lanes was counted as a partial exit.
  EXPECT_THAT(ScalarMap(maps, "partial_exits"), ElementsAre(Pair(uint64_t{id}, partial))) << maps;
  EXPECT_GE(partial, 6 * quarter) << "at least the three diverged parts at each site";
}

TEST_F(Samples, ArgloggerLogsWhatTheWorkloadPassed) {
  const int n = 4096, iterations = 3;
  std::string maps = RunSample("arglogger", {SamplePath("arglogger"), std::to_string(n),
                                             std::to_string(iterations)});
  std::map<std::string, uint32_t> ids = KernelIds(maps);
  ASSERT_TRUE(ids.count("axpy") && ids.count("stamp")) << maps;
  // The device pointers, as the workload printed them (%p: 0x...).
  std::smatch m;
  std::regex pointers(R"(arglogger: x=(0x[0-9a-f]+) y=(0x[0-9a-f]+) out=(0x[0-9a-f]+))");
  ASSERT_TRUE(std::regex_search(last_.err, m, pointers)) << last_.err;
  const std::string x = m[1].str(), y = m[2].str(), out = m[3].str();
  const std::string axpy = absl::StrCat("kernel ", ids["axpy"]);
  const std::string stamp = absl::StrCat("kernel ", ids["stamp"]);
  const std::vector<std::string> launch = {
      axpy + ": 4 args",
      axpy + " arg0 = 0x40200000",  // 2.5f
      axpy + " arg1 = " + x,
      axpy + " arg2 = " + y,
      axpy + " arg3 = 0x1000",  // n
      stamp + ": 6 args",
      stamp + " arg0 = " + out,
      stamp + " arg1 = 0x123456789abcdef",
      stamp + " arg2 = 0xfffffffd",  // -3, zero-extended
      stamp + " arg3 = 0x7f",
      stamp + " arg4 = 0x3fe0000000000000",  // 0.5
      stamp + " arg5 = 0x1000",
  };
  std::vector<std::string> want;
  for (int i = 0; i < iterations; ++i) want.insert(want.end(), launch.begin(), launch.end());
  std::vector<std::string> lines =
      absl::StrSplit(ReadWholeFile(prefix_ + ".events"), '\n', absl::SkipEmpty());
  EXPECT_EQ(lines, want);
  // The last value of each argument, in decimal.
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> last;
  std::regex line(R"(@last_arg\[\{kernel_id: (\d+), index: (\d+)\}\]: (\d+))");
  for (auto it = std::sregex_iterator(maps.begin(), maps.end(), line); it != std::sregex_iterator();
       ++it) {
    const auto kernel = static_cast<uint32_t>(std::stoul((*it)[1].str()));
    const auto index = static_cast<uint32_t>(std::stoul((*it)[2].str()));
    last[{kernel, index}] = std::stoull((*it)[3].str());
  }
  const uint32_t a = ids["axpy"], s = ids["stamp"];
  EXPECT_EQ(last.size(), 10u) << maps;
  EXPECT_EQ((last[{a, 0}]), 0x40200000u);
  EXPECT_EQ((last[{a, 1}]), std::stoull(x, nullptr, 16));
  EXPECT_EQ((last[{a, 2}]), std::stoull(y, nullptr, 16));
  EXPECT_EQ((last[{a, 3}]), uint64_t{n});
  EXPECT_EQ((last[{s, 0}]), std::stoull(out, nullptr, 16));
  EXPECT_EQ((last[{s, 1}]), 0x0123456789abcdefu);
  EXPECT_EQ((last[{s, 2}]), 0xfffffffdu);
  EXPECT_EQ((last[{s, 3}]), 0x7fu);
  EXPECT_EQ((last[{s, 4}]), 0x3fe0000000000000u);
  EXPECT_EQ((last[{s, 5}]), uint64_t{n});
}

TEST_F(Samples, WarpOccupancyCountsEveryWarp) {
  const uint64_t n = 256, iterations = 4, per_launch = (n / 16) * (n / 16) * 8;
  const uint64_t warps = per_launch * iterations;
  std::string maps = RunSample("warp_occupancy", {SamplePath("matmul"), std::to_string(n),
                                                  std::to_string(iterations)});
  ASSERT_TRUE(KernelIds(maps).count("matmul_tiled")) << maps;
  EXPECT_EQ(Sum(Histogram(maps, "started")), warps) << maps;
  EXPECT_EQ(Sum(Histogram(maps, "ended")), warps) << maps;
  EXPECT_EQ(Sum(ScalarMap(maps, "warps_per_sm")), warps) << maps;
  std::map<std::string, uint64_t> resident = Histogram(maps, "resident");
  EXPECT_EQ(Sum(resident), warps) << maps;
  // Launches on one stream do not overlap: never more than one launch's warps.
  for (const auto& [label, count] : resident) {
    EXPECT_GE(LowBound(label), 0) << label;
    EXPECT_LE(LowBound(label), static_cast<int64_t>(per_launch)) << label;
  }
}

// launchlate: the launch-latency table and histogram of `cuprobe trace`
// (CPU launch call to GPU kernel start, both on CUPTI's clock): every one of
// the 50 vec_add launches is matched to its kernel, and the latencies are
// ordered (min <= median <= p99 <= max, min above zero).
TEST_F(Samples, LaunchlateMatchesEveryLaunchToItsKernel) {
  const std::string prefix = dir_ + "/launchlate";
  ProcessResult r = RunProcess({Cuprobe(), "trace", "-o", prefix, "--format", "table,json", "--",
                                SamplePath("vec_add"), "65536", "50"},
                               {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("CUDA launch latency histogram (ns, every kernel):")) << r.err;
  const std::string json = ReadWholeFile(prefix + ".json");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      json, m,
      std::regex(R"re(\{"name":"vec_add[^"]*","raw_name":"[^"]*","kernels":(\d+),"total_ns":\d+,"avg_ns":[\d.]+,"median_ns":([\d.]+),"min_ns":(\d+),"max_ns":(\d+),"stddev_ns":[\d.]+,"p99_ns":(\d+)\})re")))
      << json;
  EXPECT_EQ(std::stoul(m[1]), 50u);
  const double median = std::stod(m[2]);
  const uint64_t min = std::stoull(m[3]), max = std::stoull(m[4]), p99 = std::stoull(m[5]);
  EXPECT_GT(min, 0u);
  EXPECT_LE(static_cast<double>(min), median);
  EXPECT_LE(median, static_cast<double>(p99));
  EXPECT_LE(p99, max);
}

// launchlate's probe: block (0,0,0) of each launch sends one event with the
// launch's grid id (cuprobe_grid_id(), %gridid) and every block leader counts
// itself under that id. vec_add 65536 20: 21 launches (20 vec_add, 1 scale)
// of 256 blocks. Each launch has one event and a count of exactly 256; the
// grid ids are distinct and are exactly the `grid id`s of the timeline's
// kernels (CUPTI's gridId), so samples/launchlate/launchlate.py joins every
// launch to its kernel and launch call.
struct LaunchStart {
  uint64_t grid_id;
  uint64_t timestamp_ns;
  uint32_t kernel_id;
  uint32_t blocks;
};
static_assert(sizeof(LaunchStart) == 24);

TEST_F(Samples, LaunchlateProbeJoinsEveryLaunchByGridId) {
  constexpr int kLaunches = 21;
  constexpr uint32_t kBlocks = 256;
  std::string maps = RunSample("launchlate", {SamplePath("vec_add"), "65536", "20"},
                               {"--events", "json", "--quiet", "--format", "json,chrome"});
  std::vector<std::string> records =
      RingRecords(ReadWholeFile(prefix_ + ".events"), "launch_starts");
  ASSERT_EQ(records.size(), size_t{kLaunches}) << maps;
  std::set<uint64_t> grids;
  for (const std::string& r : records) {
    ASSERT_EQ(r.size(), sizeof(LaunchStart));
    LaunchStart e;
    std::memcpy(&e, r.data(), sizeof(e));
    EXPECT_EQ(e.blocks, kBlocks);
    EXPECT_GT(e.timestamp_ns, 0u);
    grids.insert(e.grid_id);
  }
  EXPECT_EQ(grids.size(), size_t{kLaunches}) << "one grid id per launch";
  std::map<uint64_t, uint64_t> blocks = ScalarMap(maps, "launch_blocks");
  EXPECT_EQ(blocks.size(), size_t{kLaunches}) << maps;
  for (const auto& [grid, count] : blocks) {
    EXPECT_TRUE(grids.count(grid)) << grid;
    EXPECT_EQ(count, kBlocks) << "grid " << grid;
  }
  // The timeline's kernels carry the same ids.
  const std::string trace = ReadWholeFile(prefix_ + ".trace.json");
  std::set<uint64_t> traced;
  std::regex kernel(R"re("cat":"kernel".*?"grid id":(\d+))re");
  for (auto it = std::sregex_iterator(trace.begin(), trace.end(), kernel);
       it != std::sregex_iterator(); ++it) {
    traced.insert(std::stoull((*it)[1].str()));
  }
  EXPECT_EQ(traced, grids) << "CUPTI's gridId is the probe's %gridid";
  ProcessResult joined =
      RunProcess({"python3", SourceDir() + "/samples/launchlate/launchlate.py", prefix_});
  ASSERT_EQ(joined.exit_code, 0) << joined.err;
  EXPECT_THAT(joined.out, HasSubstr("21 launch events, 21 joined to their kernel and launch call"))
      << joined.out;
  std::printf("%s", joined.out.c_str());  // the README's figures
}

// torch_transformer: two training steps of a small transformer through
// torch.compile. `cuprobe trace` sees every kernel torch.profiler sees
// (Inductor's Triton kernels, cuBLAS, PyTorch's own), launch for launch;
// `cuprobe run -k 'triton_*'` instruments the Triton kernels from Triton's
// cache (cuBLAS and PyTorch kernels are SASS only: named, left alone), the
// losses stay the same digits, and the entries counted equal the threads of
// every Triton launch in the timeline.
TEST_F(Samples, TorchTransformerTraceMatchesTheProfilerAndProbesTritonKernels) {
  if (RunProcess({"python3", "-c", "import torch, triton"}).exit_code != 0) {
    GTEST_SKIP() << "no PyTorch with Triton here";
  }
  const std::string script = SourceDir() + "/samples/torch_transformer/train_step.py";
  const std::vector<std::pair<std::string, std::string>> env = {
      {"TRITON_CACHE_DIR", dir_ + "/triton"}, {"TORCHINDUCTOR_CACHE_DIR", dir_ + "/inductor"}};
  // The first run compiles and fills the caches; the runs compared below all
  // find their kernels there (no compiling or autotuning launches).
  ProcessResult native = RunProcess({"python3", script, "--compile"}, env, 600);
  ASSERT_EQ(native.exit_code, 0) << native.err;
  native = RunProcess({"python3", script, "--compile"}, env, 600);
  ASSERT_EQ(native.exit_code, 0) << native.err;
  EXPECT_THAT(native.out, HasSubstr("step 1: loss "));
  const std::string reference = dir_ + "/profiler.json";
  ProcessResult ref =
      RunProcess({"python3", script, "--compile", "--profile", reference}, env, 600);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  EXPECT_EQ(ref.out, native.out);

  const std::string trace = dir_ + "/trace";
  ProcessResult r = RunProcess({Cuprobe(), "trace", "-o", trace, "--format", "json", "--",
                                "python3", script, "--compile"},
                               env, 600);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, native.out);
  ProcessResult rows = RunProcess(
      {"python3", "-c",
       "import json,sys\n"
       "ref=json.load(open(sys.argv[1]))\n"
       "ours={k['name']:k['instances'] for k in json.load(open(sys.argv[2]))['kernels']}\n"
       "bad=[(k,v,ours.get(k,0)) for k,v in ref.items() if ours.get(k,0)!=v]\n"
       "extra=[(k,v) for k,v in ours.items() if k not in ref]\n"
       "print('kernels=%d launches=%d triton=%d' % (len(ref), sum(ref.values()),"
       " sum(v for k,v in ref.items() if k.startswith('triton_'))))\n"
       "for b in bad: print('MISMATCH %s profiler=%d cuprobe=%d' % b)\n"
       "for e in extra: print('EXTRA %s %d' % e)\n",
       reference, trace + ".json"});
  ASSERT_EQ(rows.exit_code, 0) << rows.err;
  EXPECT_THAT(rows.out, ::testing::Not(HasSubstr("MISMATCH"))) << rows.out;
  EXPECT_THAT(rows.out, ::testing::Not(HasSubstr("EXTRA"))) << rows.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(rows.out, m, std::regex(R"(triton=(\d+))"))) << rows.out;
  EXPECT_GT(std::stoul(m[1]), 10u) << "Inductor made Triton kernels: " << rows.out;

  const std::string run = dir_ + "/run";
  r = RunProcess({Cuprobe(), "run", "-p", Probe("triton_entries"), "-k", "triton_*", "--quiet",
                  "-o", run, "--format", "json,chrome", "--", "python3", script, "--compile"},
                 [&] {
                   auto e = env;
                   e.emplace_back("CUPROBE_LOG", "info");
                   return e;
                 }(),
                 600);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, native.out) << "the losses must not change";
  // Only Inductor's Triton kernels are instrumented (-k): cuBLAS and
  // PyTorch's own kernels are traced and left alone.
  const std::string listed = ReadWholeFile(run + ".maps.txt");
  std::regex listed_kernel(R"(\n  \[\d+\] (\S+))");
  int instrumented = 0;
  for (auto it = std::sregex_iterator(listed.begin(), listed.end(), listed_kernel);
       it != std::sregex_iterator(); ++it, ++instrumented) {
    EXPECT_EQ((*it)[1].str().rfind("triton_", 0), 0u) << (*it)[1].str();
  }
  EXPECT_GT(instrumented, 10) << listed;
  // Threads of every Triton launch, from the timeline.
  ProcessResult threads = RunProcess(
      {"python3", "-c",
       "import json,sys\n"
       "t=n=0\n"
       "for e in json.load(open(sys.argv[1]))['traceEvents']:\n"
       "  if e.get('cat')=='kernel' and e['name'].startswith('triton_'):\n"
       "    g=e['args']['grid']; b=e['args']['block']\n"
       "    t+=g[0]*g[1]*g[2]*b[0]*b[1]*b[2]; n+=g[0]*g[1]*g[2]\n"
       "print(t, n)\n",
       run + ".trace.json"});
  ASSERT_EQ(threads.exit_code, 0) << threads.err;
  const std::string maps = ReadWholeFile(run + ".maps.txt");
  const uint64_t entries = SumOfEntries(maps);
  EXPECT_GT(entries, 0u) << r.err;
  uint64_t want_threads = 0, want_blocks = 0;
  ASSERT_EQ(std::sscanf(threads.out.c_str(), "%" SCNu64 " %" SCNu64, &want_threads, &want_blocks),
            2)
      << threads.out;
  EXPECT_EQ(entries, want_threads) << maps << r.err;
  EXPECT_EQ(SumOfMap(maps, "blocks"), want_blocks) << maps;
}

// directly_run: every probe kind on the harness kernel, whose shape and
// arguments make each result exact: 4 x 64 threads, 3 launches, args 7 and
// 1000; and a second shape through the same bundle.
TEST_F(Samples, DirectlyRunGivesExactResultsForEveryProbeKind) {
  std::string maps =
      RunSample("directly_run", {SamplePath("directly_run"), "4", "64", "3", "7", "1000"});
  EXPECT_THAT(maps, HasSubstr("@launches: 3\n")) << maps;
  EXPECT_THAT(maps, HasSubstr("@args[0]: 21\n@args[1]: 3000\n")) << maps;
  EXPECT_THAT(maps, HasSubstr("@exits: 768\n")) << maps;
  EXPECT_THAT(maps, HasSubstr("@stores: 768\n")) << maps;
  EXPECT_THAT(maps, HasSubstr("@store_bytes: 6144\n")) << maps;
  maps = RunSample("directly_run",
                   {SamplePath("directly_run"), "1000", "1000", "2", "0x100000000", "0"});
  EXPECT_THAT(maps, HasSubstr("@launches: 2\n")) << maps;
  EXPECT_THAT(maps, HasSubstr("@args[0]: 8589934592\n")) << maps;
  EXPECT_THAT(maps, HasSubstr("@exits: 2000000\n")) << maps;
  EXPECT_THAT(maps, HasSubstr("@stores: 2000000\n")) << maps;
}

// coalescing: the harness's 8-byte stores, 4 x 64 threads, 3 launches: 24
// warp requests of 256 bytes; 8 sectors each when neighbouring lanes store
// neighbouring words (efficiency 100%), 32 each with a stride of 4 words
// (every lane its own sector: 25%).
TEST_F(Samples, CoalescingCountsSectorsExactly) {
  for (const char* stride : {"1", "4"}) {
    const std::string maps = RunSample(
        "coalescing", {SamplePath("directly_run"), "4", "64", "3", "7", "1000", stride});
    const uint64_t sectors = std::string(stride) == "1" ? 192 : 768;
    EXPECT_THAT(maps, HasSubstr("@requests[{kernel_id: 0, kind: 2}]: 24\n")) << maps;
    EXPECT_THAT(maps, HasSubstr("@bytes[{kernel_id: 0, kind: 2}]: 6144\n")) << maps;
    EXPECT_THAT(maps, HasSubstr(absl::StrCat("@sectors[{kernel_id: 0, kind: 2}]: ", sectors,
                                             "\n")))
        << "stride " << stride << ": " << maps;
    EXPECT_THAT(maps, ::testing::Not(HasSubstr("kind: 1}"))) << "the harness loads nothing";
  }
}

// gpu_shared_map: samples/gpu_shared_map/run.sh runs the workload in three
// phases of 10 launches x 64 blocks and, between phases, sets the epoch
// with `cuprobe maps --set` from another process. Each write reaches the
// GPU before the next phase starts: every phase's 640 blocks are counted
// under its own epoch, and the GPU's own slot holds the last epoch it saw.
TEST_F(Samples, GpuSharedMapHostWritesReachTheGpuBetweenPhases) {
  ProcessResult r = RunProcess({"bash", SourceDir() + "/samples/gpu_shared_map/run.sh", BuildDir()},
                               {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("gpu_shared_map: OK (16384 values of 16384)")) << r.out;
  EXPECT_THAT(r.err, HasSubstr("@shared[0] = 1 (applied by the hook)")) << r.err;
  EXPECT_THAT(r.err, HasSubstr("@shared[0] = 2 (applied by the hook)")) << r.err;
  const std::string final_maps = r.out.substr(r.out.find("== final maps"));
  EXPECT_THAT(final_maps, HasSubstr("@blocks_per_epoch[0]: 640\n")) << final_maps;
  EXPECT_THAT(final_maps, HasSubstr("@blocks_per_epoch[1]: 640\n")) << final_maps;
  EXPECT_THAT(final_maps, HasSubstr("@blocks_per_epoch[2]: 640\n")) << final_maps;
  EXPECT_THAT(final_maps, HasSubstr("@shared[0]: 2\n@shared[1]: 2\n")) << final_maps;
}

}  // namespace
}  // namespace cuprobe::testing
