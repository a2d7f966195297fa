// multistream: 4 host threads, each launching on its own stream, with known
// launch counts, then a clean exit while nothing is left running.
//
//   multistream [threads] [launches-per-thread] [seconds] [pause-ms]
//                                                (defaults: 4, 50, 0, 0)
//
// Each thread launches `work` N times and `tail` once and checks its result,
// so a tracer must count exactly threads*N `work` and `threads` `tail`. With
// seconds > 0 each thread launches `work` in batches of N until that much
// time has passed (sleeping pause-ms after each batch), and the line
// printed at the end gives the total.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <thread>
#include <vector>

__global__ void work(unsigned long long* counter, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(counter, 1ull);
}

__global__ void tail(unsigned long long* counter, unsigned long long* out) { *out = *counter; }

// Launches `work` `launches` times (in batches of `launches` for `seconds`
// when seconds > 0), then `tail`; *launched: how many `work`s.
int RunThread(int id, int launches, int seconds, int pause_ms, long long* launched) {
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 1;
  unsigned long long *counter = nullptr, *out = nullptr;
  if (cudaMalloc(&counter, sizeof(*counter)) != cudaSuccess) return 1;
  if (cudaMalloc(&out, sizeof(*out)) != cudaSuccess) return 1;
  cudaMemsetAsync(counter, 0, sizeof(*counter), stream);
  const int n = 1024;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  long long total = 0;
  do {
    for (int i = 0; i < launches; ++i) work<<<n / 256, 256, 0, stream>>>(counter, n);
    total += launches;
    // Keeps at most a few batches in flight, so the end is on time.
    if (seconds > 0) cudaStreamSynchronize(stream);
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  } while (seconds > 0 && std::chrono::steady_clock::now() < deadline);
  *launched = total;
  tail<<<1, 1, 0, stream>>>(counter, out);
  unsigned long long host = 0;
  cudaMemcpyAsync(&host, out, sizeof(host), cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  cudaFree(counter);
  cudaFree(out);
  cudaStreamDestroy(stream);
  if (host != static_cast<unsigned long long>(n) * total) {
    std::fprintf(stderr, "multistream: thread %d counted %llu, want %lld\n", id, host, n * total);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 4;
  int launches = argc > 2 ? std::atoi(argv[2]) : 50;
  int seconds = argc > 3 ? std::atoi(argv[3]) : 0;
  int pause_ms = argc > 4 ? std::atoi(argv[4]) : 0;
  if (threads <= 0 || launches <= 0 || seconds < 0 || pause_ms < 0) {
    std::fprintf(stderr,
                 "usage: multistream [threads > 0] [launches > 0] [seconds >= 0] [pause-ms >= 0]\n");
    return 64;
  }
  if (cudaFree(nullptr) != cudaSuccess) {  // initialize CUDA before the threads race
    std::fprintf(stderr, "multistream: no usable CUDA device\n");
    return 2;
  }
  std::vector<int> results(threads, 1);
  std::vector<long long> launched(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] { results[t] = RunThread(t, launches, seconds, pause_ms, &launched[t]); });
  }
  for (auto& t : pool) t.join();
  for (int r : results) {
    if (r != 0) return 1;
  }
  long long work = 0;
  for (long long l : launched) work += l;
  if (seconds > 0) {
    std::printf("multistream: OK threads=%d seconds=%d work=%lld tail=%d\n", threads, seconds,
                work, threads);
  } else {
    std::printf("multistream: OK threads=%d launches=%d work=%lld tail=%d\n", threads, launches,
                work, threads);
  }
  return 0;
}
