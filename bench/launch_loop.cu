// launch_loop: a launch-bound loop of empty kernels, timed on the host.
//
//   launch_loop [launches] [range|ranges:K]     (default 100000)
//
// With "range", the timed loop runs between cudaProfilerStart and
// cudaProfilerStop (what `cuprobe trace -c cudaProfilerApi` traces). With
// "ranges:K", every K launches are a range of their own (a start before
// them, a stop right after them, without waiting for their kernels): what
// opening and closing ranges costs. With "ranges:K",
// LAUNCH_LOOP_RANGE_GAP_US=G sleeps G microseconds after each range's stop
// (the sleep is timed too), so that ranges are not back to back (the hook
// counts ranges less than 1 ms apart as back to back: G >= 1000).
// LAUNCH_LOOP_SLOWEST=N times every step of the loop (a launch, with its
// range's start or stop; not with LAUNCH_LOOP_EVENTS) and prints the N
// slowest: where a one-time cost falls.
// Prints "launch_loop: launches=N seconds=S per_launch_us=U".
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

__global__ void empty_kernel() {}

int main(int argc, char** argv) {
  int launches = argc > 1 ? std::atoi(argv[1]) : 100000;
  const bool range = argc > 2 && std::strcmp(argv[2], "range") == 0;
  const int per_range = argc > 2 && std::strncmp(argv[2], "ranges:", 7) == 0
                            ? std::atoi(argv[2] + 7) : 0;
  if (argc > 2 && !range && per_range <= 0) {
    std::fprintf(stderr, "launch_loop: expected 'range' or 'ranges:K' (K > 0), got '%s'\n", argv[2]);
    return 2;
  }
  if (cudaFree(nullptr) != cudaSuccess) return 2;
  empty_kernel<<<1, 1>>>();  // load the module before timing
  if (cudaDeviceSynchronize() != cudaSuccess) return 2;
  // LAUNCH_LOOP_EVENTS=1|2: a timing event recorded after (and, with 2,
  // before) every launch, from a pool of 4096: what timing each kernel with
  // CUDA events would cost the launching thread.
  const char* ev = std::getenv("LAUNCH_LOOP_EVENTS");
  const int events = ev != nullptr ? std::atoi(ev) : 0;
  cudaEvent_t pool[4096];
  if (events > 0) {
    for (cudaEvent_t& e : pool) {
      if (cudaEventCreate(&e) != cudaSuccess) return 2;
    }
  }
  const char* gap_env = std::getenv("LAUNCH_LOOP_RANGE_GAP_US");
  const std::chrono::microseconds gap(gap_env != nullptr ? std::atoi(gap_env) : 0);
  const char* slowest_env = std::getenv("LAUNCH_LOOP_SLOWEST");
  const int slowest = slowest_env != nullptr ? std::atoi(slowest_env) : 0;
  std::vector<std::pair<double, int>> steps;  // (microseconds, launch index)
  if (slowest > 0) steps.reserve(std::max(launches, 0));
  auto t0 = std::chrono::steady_clock::now();
  if (range && cudaProfilerStart() != cudaSuccess) return 2;
  if (events > 0) {
    for (int i = 0; i < launches; ++i) {
      if (events > 1) cudaEventRecord(pool[(2 * i) % 4096]);
      empty_kernel<<<1, 32>>>();
      cudaEventRecord(pool[(2 * i + 1) % 4096]);
    }
  }
  for (int i = 0; i < launches && events == 0; ++i) {
    const auto step0 = slowest > 0 ? std::chrono::steady_clock::now() : t0;
    if (per_range > 0 && i % per_range == 0 && cudaProfilerStart() != cudaSuccess) return 2;
    empty_kernel<<<1, 32>>>();
    if (per_range > 0 && (i % per_range == per_range - 1 || i == launches - 1) &&
        cudaProfilerStop() != cudaSuccess) {
      return 2;
    }
    if (slowest > 0) {
      steps.emplace_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - step0).count(), i);
    }
    if (per_range > 0 && gap.count() > 0 && i % per_range == per_range - 1) {
      std::this_thread::sleep_for(gap);
    }
  }
  if (cudaDeviceSynchronize() != cudaSuccess) return 2;
  if (range && cudaProfilerStop() != cudaSuccess) return 2;
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "launch_loop: launches=%d seconds=%.6f per_launch_us=%.3f\n", launches, s,
              s * 1e6 / launches);
  const size_t shown = std::min(steps.size(), static_cast<size_t>(std::max(slowest, 0)));
  std::partial_sort(steps.begin(), steps.begin() + shown, steps.end(), std::greater<>());
  for (size_t k = 0; k < shown; ++k) {
    std::fprintf(stderr, "launch_loop: slow step %zu: launch %d took %.1f us\n", k + 1, steps[k].second,
                 steps[k].first);
  }
  return 0;
}
