// File: bench/maps_bench.cc
//
// Throughput of each map operation of the GPU helper library against a
// hand-written kernel doing the same with a plain atomicAdd / store on device
// memory, with the same access pattern, measured side by side in one run
// (CUDA events, median of the rounds); and ring-buffer events per second
// reaching a host consumer. Prints a markdown table (and writes it to --out).
//
//   build/bench/maps_bench [--rounds N] [--out FILE]
//
// Kernels: tests/maps/gpu/map_kernels.cu (PTX in the build folder), linked
// with the helper library PTX by nvJitLink, as instrumented modules are.
// Targets (issue 6), on the specialized entry points: hash update >= 50% of
// atomicAdd on uniform keys (at a hashed index, the map's access pattern);
// per-thread and histogram maps within 1.2x of the hand-written kernel; ring
// buffer >= 10M events/s sustained, no loss below capacity.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "cupti_hook/real_seam.h"
#include "maps/map_set.h"
#include "maps/segment.h"
#include "maps/testing/gpu_harness.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::GpuHarness;
using ::cuprobe::testing::GpuModule;

constexpr uint32_t kBlocks = 4096;
constexpr uint32_t kThreads = 256;
constexpr uint64_t kN = uint64_t{kBlocks} * kThreads;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

MapSpec Spec(std::string name, uint32_t type, uint32_t key, uint32_t value, uint32_t entries,
             uint64_t extra = 0) {
  MapSpec s;
  s.name = std::move(name);
  s.type = type;
  s.key_size = key;
  s.value_size = value;
  s.max_entries = entries;
  s.map_extra = extra;
  return s;
}

#define CHECK_OK(expr)                                                             \
  do {                                                                             \
    const absl::Status _s = (expr);                                                \
    if (!_s.ok()) {                                                                \
      std::fprintf(stderr, "maps_bench: %s: %s\n", #expr, _s.ToString().c_str()); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

template <typename T>
T Value(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "maps_bench: %s: %s\n", what, v.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(v);
}

struct Row {
  std::string op, pattern;
  double cuprobe_ms = 0, baseline_ms = 0;
  std::string target;
  bool pass = true;
};

class Bench {
 public:
  Bench(GpuHarness* gpu, GpuModule module, int rounds)
      : gpu_(gpu), module_(module), rounds_(rounds) {}

  // Median kernel time over the rounds (after one warm-up launch).
  double Time(const char* kernel, std::vector<void*> args) {
    (void)Value(gpu_->Launch(module_, kernel, kBlocks, kThreads, args.data()), kernel);
    std::vector<double> ms;
    for (int r = 0; r < rounds_; ++r) {
      ms.push_back(Value(gpu_->Launch(module_, kernel, kBlocks, kThreads, args.data()), kernel));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

  GpuHarness* gpu() { return gpu_; }
  GpuModule module() { return module_; }

 private:
  GpuHarness* gpu_;
  GpuModule module_;
  int rounds_;
};

std::string Table(const std::vector<Row>& rows, const std::vector<std::string>& notes) {
  std::string out =
      "| operation | access pattern | cuprobe (ms / 1M ops) | plain kernel (ms) | throughput vs "
      "plain | target | met |\n|---|---|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    absl::StrAppendFormat(&out, "| %s | %s | %.4f | %.4f | %.0f%% | %s | %s |\n", r.op, r.pattern,
                          r.cuprobe_ms, r.baseline_ms, 100.0 * r.baseline_ms / r.cuprobe_ms,
                          r.target, r.pass ? "yes" : "**no**");
  }
  for (const std::string& n : notes) out += "\n" + n + "\n";
  return out;
}

MapSpec AddOnly(MapSpec spec) {
  spec.flags |= CUPROBE_MAP_F_ADD_ONLY;
  return spec;
}

int Main(int argc, char** argv) {
  int rounds = 21;
  std::string out_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: maps_bench [--rounds N] [--out FILE]\n");
      return 2;
    }
  }
  std::unique_ptr<GpuHarness> gpu = Value(GpuHarness::Create(LoadCudaDriver()), "GPU");
  const char* build_env = std::getenv("CUPROBE_BUILD_DIR");
  const std::string build = build_env != nullptr && *build_env ? build_env : CUPROBE_BINARY_DIR;
  const std::string ptx = ReadFile(build + "/tests/maps/gpu/map_kernels.ptx");
  if (ptx.empty()) {
    std::fprintf(stderr, "maps_bench: no %s/tests/maps/gpu/map_kernels.ptx\n", build.c_str());
    return 1;
  }
  GpuModule module = Value(gpu->Load(ptx), "linking the kernels with the helper library");
  Bench bench(gpu.get(), module, rounds);

  const std::vector<MapSpec> specs = {
      Spec("array", CUPROBE_MAP_ARRAY, 4, 8, 4096),                        // 0
      Spec("hash", CUPROBE_MAP_HASH, 8, 8, 4096),                          // 1
      Spec("per_thread", CUPROBE_MAP_PERTHREAD, 4, 8, 1, kN),              // 2
      Spec("hist", CUPROBE_MAP_HIST_LOG2, 4, 8, 65),                       // 3
      Spec("hot_hash", CUPROBE_MAP_HASH, 8, 8, 16),                        // 4
      AddOnly(Spec("hash_add_only", CUPROBE_MAP_HASH, 8, 8, 4096)),        // 5
      AddOnly(Spec("hot_hash_add_only", CUPROBE_MAP_HASH, 8, 8, 16)),      // 6
      Spec("events", CUPROBE_MAP_RINGBUF, 0, 0, 16u << 20),                // 7 (last)
  };
  SessionOptions options;
  options.ring_capacity = 4096;
  options.maps = {specs.back()};  // only the ring needs the segment
  Session session = Value(Session::Create(options), "session");
  MapSet ring_set =
      Value(MapSet::Create({specs.back()}, &gpu->memory(), &session.maps()), "ring map");
  std::vector<MapSpec> device_specs(specs.begin(), specs.end() - 1);
  MapSet maps = Value(MapSet::Create(device_specs, &gpu->memory(), nullptr), "maps");
  std::vector<uint64_t> table = maps.table();
  table.push_back(ring_set.table()[0]);
  CHECK_OK(gpu->SetMapTable(module, table));

  const uint64_t counters = Value(gpu->Alloc(kN * 8), "buffer");
  std::vector<uint64_t> keys(4096);
  for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = i * 1000003 + 17;
  const uint64_t keys_dev = Value(gpu->Alloc(keys.size() * 8), "keys");
  CHECK_OK(gpu->Upload(keys_dev, keys.data(), keys.size() * 8));

  std::vector<Row> rows;
  uint64_t* null_rc = nullptr;
  uint64_t counters_ptr = counters, keys_ptr = keys_dev;
  uint32_t mod_uniform = 4096, mod_hot = 1, zero = 0;
  uint32_t map_array = 0, map_hash = 1, map_per_thread = 2, map_hist = 3, map_hot = 4,
           map_hash_add_only = 5, map_hot_add_only = 6, map_ring = 7;
  uint32_t nkeys = 4096, one_key = 1, delta_ones = 0;

  const double base_uniform = bench.Time("baseline_atomic_add", {&counters_ptr, &mod_uniform});
  const double base_hot = bench.Time("baseline_atomic_add", {&counters_ptr, &mod_hot});
  // The generic entry points (key by address, type dispatch) serve call
  // sites whose map differs between paths; the targets are measured on the
  // specialized ones below, which is what the compiler emits otherwise.
  rows.push_back(Row{"HASH map_add", "uniform (4096 keys)",
                     bench.Time("hash_add_keys",
                                {&map_hash, &keys_ptr, &nkeys, &delta_ones, &null_rc}),
                     base_uniform, "-"});
  rows.push_back(Row{"HASH map_add", "one hot key",
                     bench.Time("hash_add_keys", {&map_hot, &keys_ptr, &one_key, &delta_ones,
                                                  &null_rc}),
                     base_hot, "-"});
  rows.push_back(Row{"ARRAY map_add", "uniform (4096 keys)",
                     bench.Time("add_u32_key", {&map_array, &mod_uniform, &null_rc}), base_uniform,
                     "-"});
  rows.push_back(Row{"ARRAY map_add", "one hot key",
                     bench.Time("add_u32_key", {&map_array, &mod_hot, &null_rc}), base_hot, "-"});
  rows.push_back(Row{"PERTHREAD map_add", "per thread",
                     bench.Time("per_id_add", {&map_per_thread}),
                     bench.Time("baseline_per_thread", {&counters_ptr}), "-"});
  rows.push_back(Row{"HIST_LOG2 hist_add", "log2(thread id)",
                     bench.Time("hist_add", {&map_hist, &zero}),
                     bench.Time("baseline_hist_log2", {&counters_ptr}), "-"});
  // The specialized entry points (ABI v3): what the probe compiler emits for
  // a map whose type it knows, keys by value (so no local memory). The rows
  // above are the generic entry points (key by address, type dispatch).
  const double base_per_thread = bench.Time("baseline_per_thread", {&counters_ptr});
  // Against baseline_atomic_add, whose consecutive lanes add to consecutive
  // counters (two lines a warp): a pattern no hash table has, shown for
  // reference; the target is taken against the hashed index below.
  rows.push_back(Row{"HASH map_add_hash_word", "uniform (4096 keys), vs consecutive counters",
                     bench.Time("hash_word_add_keys",
                                {&map_hash, &keys_ptr, &nkeys, &delta_ones, &null_rc}),
                     base_uniform, "-"});
  rows.push_back(Row{"HASH map_add_hash_word", "one hot key",
                     bench.Time("hash_word_add_keys",
                                {&map_hot, &keys_ptr, &one_key, &delta_ones, &null_rc}),
                     base_hot, "-"});
  // The same against atomicAdd at a hashed index (baseline_atomic_add_hashed):
  // a warp's atomics then scatter over lines as a hash map's do, while
  // baseline_atomic_add's consecutive lanes hit consecutive counters.
  const double base_hashed =
      bench.Time("baseline_atomic_add_hashed", {&counters_ptr, &keys_ptr, &nkeys});
  {
    Row r{"HASH map_add_hash_word", "uniform (4096 keys), vs atomicAdd at a hashed index",
          bench.Time("hash_word_add_keys", {&map_hash, &keys_ptr, &nkeys, &delta_ones, &null_rc}),
          base_hashed, ">= 50% of atomicAdd"};
    r.pass = base_hashed / r.cuprobe_ms >= 0.5;
    rows.push_back(r);
  }
  {
    Row r{"HASH map_add_hash_word, add-only map",
          "uniform (4096 keys), vs atomicAdd at a hashed index",
          bench.Time("hash_word_add_keys",
                     {&map_hash_add_only, &keys_ptr, &nkeys, &delta_ones, &null_rc}),
          base_hashed, ">= 50% of atomicAdd"};
    r.pass = base_hashed / r.cuprobe_ms >= 0.5;
    rows.push_back(r);
  }
  {
    // What the compiler emits for a map probes only add to (mem_trace's):
    // values spread over per-SM copies (probe/map_desc.h).
    rows.push_back(Row{"HASH map_add_hash_word, add-only map",
                       "uniform (4096 keys), vs consecutive counters",
                       bench.Time("hash_word_add_keys",
                                  {&map_hash_add_only, &keys_ptr, &nkeys, &delta_ones, &null_rc}),
                       base_uniform, "-"});
  }
  rows.push_back(Row{"HASH map_add_hash_word, add-only map", "one hot key",
                     bench.Time("hash_word_add_keys",
                                {&map_hot_add_only, &keys_ptr, &one_key, &delta_ones, &null_rc}),
                     base_hot, "-"});
  rows.push_back(Row{"ARRAY map_add_array", "uniform (4096 keys)",
                     bench.Time("array_add_index", {&map_array, &mod_uniform, &null_rc}),
                     base_uniform, "-"});
  rows.push_back(Row{"ARRAY map_add_array", "one hot key",
                     bench.Time("array_add_index", {&map_array, &mod_hot, &null_rc}), base_hot,
                     "-"});
  {
    Row r{"PERTHREAD map_add_perthread", "per thread",
          bench.Time("per_thread_add_typed", {&map_per_thread}), base_per_thread, "within 1.2x"};
    r.pass = r.cuprobe_ms <= 1.2 * r.baseline_ms;
    rows.push_back(r);
  }
  {
    uint32_t log2 = 0;
    Row r{"HIST_LOG2 hist_add_log2", "log2(thread id)",
          bench.Time("hist_add_typed", {&map_hist, &zero, &log2}),
          bench.Time("baseline_hist_log2", {&counters_ptr}), "within 1.2x"};
    r.pass = r.cuprobe_ms <= 1.2 * r.baseline_ms;
    rows.push_back(r);
  }

  // Ring buffer: (a) below capacity nothing is lost; (b) sustained events/s
  // reaching a host consumer that runs concurrently with the producers.
  std::vector<std::string> notes;
  MapRing ring = Value(session.maps().Ring(0), "ring");
  std::atomic<uint64_t> delivered{0};
  auto drain = [&] { return ring.Consume([&](absl::Span<const uint8_t>) { ++delivered; }); };
  {
    // 512K records of 24 bytes (12 MiB) into the 16 MiB ring, consumed after.
    const uint32_t blocks = kBlocks / 2;
    const uint64_t records = uint64_t{blocks} * kThreads;
    (void)Value(gpu->Launch(module, "ring_output", blocks, kThreads,
                            std::vector<void*>{&map_ring, &null_rc}.data()),
                "ring_output");
    CHECK_OK(ring_set.Publish(1));
    drain();
    const MapRingStats s = ring.Stats();
    const bool ok = delivered.load() == records && s.dropped == 0;
    notes.push_back(absl::StrFormat(
        "Ring below capacity: %d records of 16 bytes (12 MiB with headers) into a 16 MiB ring, "
        "no consumer running: %d delivered, %d dropped (%s).",
        records, delivered.load(), s.dropped, ok ? "no loss" : "**LOSS**"));
  }
  {
    delivered = 0;
    const uint64_t dropped_before = ring.Stats().dropped;
    std::atomic<bool> done{false};
    std::thread consumer([&] {
      while (!done.load()) {
        if (drain() == 0) std::this_thread::yield();
      }
      drain();
    });
    const int launches = 64;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < launches; ++i) {
      CHECK_OK(gpu->LaunchAsync(module, "ring_output", kBlocks, kThreads,
                                std::vector<void*>{&map_ring, &null_rc}.data()));
    }
    CHECK_OK(gpu->Synchronize());
    done.store(true);
    consumer.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK_OK(ring_set.Publish(2));
    const MapRingStats s = ring.Stats();
    const uint64_t produced = uint64_t{launches} * kN;
    const uint64_t dropped = s.dropped - dropped_before;
    const double rate = delivered.load() / seconds;
    notes.push_back(absl::StrFormat(
        "Ring sustained: %d launches x %d records (16-byte bodies) with a concurrent host "
        "consumer: %.1f M events/s delivered to the host (%d delivered + %d dropped = %d, "
        "produced %d; %s); target >= 10 M events/s: %s.",
        launches, kN, rate / 1e6, delivered.load(), dropped, delivered.load() + dropped,
        produced, delivered.load() + dropped == produced ? "accounted exactly" : "**MISMATCH**",
        rate >= 10e6 ? "met" : "**not met**"));
  }
  notes.push_back(absl::StrFormat(
      "Device: %d SMs; %d rounds per kernel (median); 1M threads (4096 x 256) per launch, one "
      "operation each.",
      gpu->sm_count(), rounds));

  const std::string table_text = Table(rows, notes);
  std::fputs(table_text.c_str(), stdout);
  if (!out_path.empty()) {
    std::ofstream out(out_path);
    out << table_text;
  }
  CHECK_OK(maps.Release());
  CHECK_OK(ring_set.Release());
  (void)session.Remove();
  return 0;
}

}  // namespace
}  // namespace cuprobe

int main(int argc, char** argv) { return cuprobe::Main(argc, argv); }
