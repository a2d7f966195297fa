// Corpus for the PTX rewriter (tests/ptx_rewriter/corpus_test.cc): CCCL's CUB
// device algorithms instantiated for several key/value types (few enough
// that the corpus test stays within its time budget on two cores). Only the PTX
// nvcc emits for these kernels matters; the host code is never run.
#include <cub/device/device_histogram.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include <cstdint>

namespace {

struct IsOdd {
  __host__ __device__ bool operator()(int x) const { return (x & 1) != 0; }
};

template <typename Key, typename Value>
void SortPairs(Key* k_in, Key* k_out, Value* v_in, Value* v_out, int n) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, k_in, k_out, v_in, v_out, n);
  cub::DeviceRadixSort::SortPairsDescending(nullptr, bytes, k_in, k_out, v_in, v_out, n);
}

template <typename T>
void Reduce(T* in, T* out, int n) {
  size_t bytes = 0;
  cub::DeviceReduce::Sum(nullptr, bytes, in, out, n);
  cub::DeviceReduce::Max(nullptr, bytes, in, out, n);
}

template <typename T>
void Scan(T* in, T* out, int n) {
  size_t bytes = 0;
  cub::DeviceScan::InclusiveSum(nullptr, bytes, in, out, n);
  cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, n);
}

}  // namespace

void Instantiate(void** p, int n) {
  SortPairs(static_cast<float*>(p[0]), static_cast<float*>(p[1]), static_cast<int*>(p[2]),
            static_cast<int*>(p[3]), n);
  size_t bytes = 0;
  cub::DeviceRadixSort::SortKeys(nullptr, bytes, static_cast<uint64_t*>(p[0]),
                                 static_cast<uint64_t*>(p[1]), n);

  Reduce(static_cast<int*>(p[0]), static_cast<int*>(p[1]), n);
  Reduce(static_cast<double*>(p[0]), static_cast<double*>(p[1]), n);

  Scan(static_cast<float*>(p[0]), static_cast<float*>(p[1]), n);
  Scan(static_cast<int64_t*>(p[0]), static_cast<int64_t*>(p[1]), n);

  cub::DeviceHistogram::HistogramEven(nullptr, bytes, static_cast<float*>(p[0]),
                                      static_cast<int*>(p[1]), 65, 0.f, 1.f, n);
  cub::DeviceHistogram::HistogramEven(nullptr, bytes, static_cast<uint8_t*>(p[0]),
                                      static_cast<unsigned*>(p[1]), 257, 0, 256, n);

  cub::DeviceSelect::If(nullptr, bytes, static_cast<int*>(p[0]), static_cast<int*>(p[1]),
                        static_cast<int*>(p[2]), n, IsOdd());
  cub::DeviceSelect::Flagged(nullptr, bytes, static_cast<float*>(p[0]),
                             static_cast<char*>(p[1]), static_cast<float*>(p[2]),
                             static_cast<int*>(p[3]), n);
  cub::DeviceSelect::Unique(nullptr, bytes, static_cast<int*>(p[0]), static_cast<int*>(p[1]),
                            static_cast<int*>(p[2]), n);
}
