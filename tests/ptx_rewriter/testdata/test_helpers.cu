// A stand-in for the GPU helper library (maps/gpu), compiled with
// `nvcc -rdc=true -ptx` at build time: real nvcc output with the helper
// signatures of include/cuprobe/abi.h (extern "C", every argument and the
// result .b64). The map descriptor here is the test's own, minimal one:
// { u64* values; u32 max_entries; u32 value_size } -- the GPU test
// (tests/gpu/instrument_gpu_test.cc) builds it; the real library reads the
// descriptors of probe/map_desc.h instead.
#include <cstdint>

namespace {
struct TestMapDesc {
  unsigned long long* values;
  unsigned int max_entries;
  unsigned int value_size;
};
constexpr unsigned long long kE2Big = static_cast<unsigned long long>(-7);
}  // namespace

// Keys go by address (a u32 index), as with the real helper library.
extern "C" __device__ unsigned long long __cuprobe_map_add(unsigned long long map,
                                                           unsigned long long key_ptr,
                                                           unsigned long long delta) {
  const TestMapDesc* d = reinterpret_cast<const TestMapDesc*>(map);
  if (d == nullptr || key_ptr == 0) return kE2Big;
  const unsigned long long key = *reinterpret_cast<const unsigned*>(key_ptr);
  if (key >= d->max_entries) return kE2Big;
  atomicAdd(d->values + key, delta);
  return 0;
}

extern "C" __device__ unsigned long long __cuprobe_map_lookup(unsigned long long map,
                                                              unsigned long long key_ptr) {
  const TestMapDesc* d = reinterpret_cast<const TestMapDesc*>(map);
  if (d == nullptr || key_ptr == 0) return 0;
  const unsigned long long key = *reinterpret_cast<const unsigned*>(key_ptr);
  if (key >= d->max_entries) return 0;
  return reinterpret_cast<unsigned long long>(d->values + key);
}

// A helper that keeps state in a module global and calls vprintf: the link
// pass must carry both (and a helper named like an application symbol must
// be renamed; see link_pass_test.cc).
__device__ unsigned int g_helper_calls;
extern "C" __device__ unsigned long long __cuprobe_pid_tgid() {
  atomicAdd(&g_helper_calls, 1u);
  return 0;
}
