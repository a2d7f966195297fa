// Corpus for the PTX rewriter: Thrust algorithms (transform, reduce_by_key,
// sort_by_key, copy_if, inclusive_scan) over device vectors of several types.
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/functional.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

struct Saxpy {
  float a;
  __host__ __device__ float operator()(float x, float y) const { return a * x + y; }
};
struct Positive {
  __host__ __device__ bool operator()(double x) const { return x > 0; }
};

void Instantiate(int n) {
  thrust::device_vector<float> x(n), y(n);
  thrust::transform(x.begin(), x.end(), y.begin(), y.begin(), Saxpy{2.f});
  thrust::device_vector<int> keys(n), vals(n), out_keys(n), out_vals(n);
  thrust::reduce_by_key(keys.begin(), keys.end(), vals.begin(), out_keys.begin(),
                        out_vals.begin());
  thrust::sort_by_key(keys.begin(), keys.end(), x.begin());
  thrust::device_vector<double> d(n), e(n);
  thrust::copy_if(d.begin(), d.end(), e.begin(), Positive());
  thrust::inclusive_scan(vals.begin(), vals.end(), out_vals.begin(), thrust::maximum<int>());
}
