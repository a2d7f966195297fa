// bench/hook_bench.cc: what the hook's own code costs one traced launch on
// the CPU, apart from CUPTI. The launch callback (ENTER, then EXIT) is
// called as CUPTI calls it, on a Hook in READY whose records go to a real
// session segment that a consumer thread drains every millisecond, as
// `cuprobe trace` does. The seam is the test fake: its timestamps are a
// plain load, so CUPTI's own dispatch and cuptiGetTimestamp (two per
// launch) are not counted; on the GPU machine the whole per-launch cost is
// `cuprobe trace --trace launches` against native in bench/run.sh.
//
//   hook_bench [LAUNCHES] [THREADS]     (default 2,000,000 launches, 1 thread)
//
// Prints ns per launch (the median of 5 rounds) and the launch records the
// consumer received. A dropped record skips its copy and would flatter the
// figure: the ring is large (the CLI's default, 64 MiB), and any drop makes
// the run fail with the count.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cupti_hook/hook.h"
#include "cupti_hook/outputs.h"
#include "cupti_hook/testing/fake_seam.h"
#include "maps/segment.h"
#include "probe/trace_records.h"

namespace cuprobe {
namespace {

int Main(long launches, int threads) {
  absl::StatusOr<Session> session = Session::Create();
  if (!session.ok()) {
    std::fprintf(stderr, "hook_bench: %s\n", session.status().ToString().c_str());
    return 1;
  }
  FakeSeam seam;
  int kernel = 0;
  seam.names[&kernel] = "_Z5emptyv";
  HookConfig config;
  config.pid = 4242;
  config.program = "hook_bench";
  config.interval_ms = 100;
  config.late_attach = false;
  const std::string name = session->name();
  Hook hook(seam, config, [&name](const HookConfig& c) { return SessionOutput::Open(name, c.pid); });
  if (hook.Start() != HookState::kReady) {
    std::fprintf(stderr, "hook_bench: the hook did not start\n");
    (void)session->Remove();
    return 1;
  }

  std::atomic<bool> done{false};
  std::atomic<uint64_t> launch_records{0};
  std::thread consumer([&] {
    auto drain = [&] {
      session->ring().Drain([&](uint16_t type, absl::Span<const uint8_t>) {
        if (type == static_cast<uint16_t>(RecordType::kLaunch)) {
          launch_records.fetch_add(1, std::memory_order_relaxed);
        }
      });
    };
    while (!done.load(std::memory_order_acquire)) {
      drain();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    drain();
  });

  auto launch_loop = [&](long n, uint32_t first_correlation) {
    cuLaunchKernel_params p = {};
    p.f = reinterpret_cast<CUfunction>(&kernel);
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = 32;
    p.blockDimY = p.blockDimZ = 1;
    CUresult result = CUDA_SUCCESS;
    uint64_t scratch = 0;
    CUpti_CallbackData data = {};
    data.functionName = "cuLaunchKernel";
    data.functionParams = &p;
    data.functionReturnValue = &result;
    data.correlationData = &scratch;
    for (long i = 0; i < n; ++i) {
      data.correlationId = first_correlation + static_cast<uint32_t>(i);
      data.callbackSite = CUPTI_API_ENTER;
      Hook::Callback(&hook, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                     &data);
      data.callbackSite = CUPTI_API_EXIT;
      Hook::Callback(&hook, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                     &data);
    }
  };

  std::vector<double> ns_per_launch;
  const long per_thread = launches / threads;
  uint32_t correlation = 1;
  for (int round = 0; round < 5; ++round) {
    std::vector<std::thread> workers;
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back(launch_loop, per_thread, correlation);
      correlation += static_cast<uint32_t>(per_thread);
    }
    for (std::thread& w : workers) w.join();
    const double ns = std::chrono::duration<double, std::nano>(
                          std::chrono::steady_clock::now() - start).count();
    ns_per_launch.push_back(ns / static_cast<double>(per_thread));
  }
  const uint64_t dropped = hook.tracer()->stats().records_dropped;
  hook.Stop();
  done.store(true, std::memory_order_release);
  consumer.join();
  (void)session->Remove();

  std::sort(ns_per_launch.begin(), ns_per_launch.end());
  const uint64_t expected = 5ull * static_cast<uint64_t>(per_thread) * threads;
  std::printf("hook_bench: %d thread(s), %ld launches each per round: %.1f ns per launch "
              "(median of 5; fastest %.1f); %llu of %llu launch records received, %llu dropped\n",
              threads, per_thread, ns_per_launch[2], ns_per_launch[0],
              static_cast<unsigned long long>(launch_records.load()),
              static_cast<unsigned long long>(expected), static_cast<unsigned long long>(dropped));
  if (launch_records.load() != expected || dropped != 0) {
    std::fprintf(stderr, "hook_bench: records were lost; the figure above is not valid (the "
                         "consumer fell behind: fewer threads, or a quieter machine)\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace cuprobe

int main(int argc, char** argv) {
  const long launches = argc > 1 ? std::atol(argv[1]) : 2000000;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  if (launches <= 0 || threads <= 0 || launches < threads) {
    std::fprintf(stderr, "usage: hook_bench [LAUNCHES > 0] [THREADS > 0, at most LAUNCHES]\n");
    return 2;
  }
  return cuprobe::Main(launches, threads);
}
