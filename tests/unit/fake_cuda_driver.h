// A CudaDriver table (support/cuda_driver.h) whose entry points keep
// their state in memory, for CPU tests of the code that drives CUDA through
// that table: contexts (current, destroyed, their device), streams, virtual
// memory (handles, reservations, mappings), cuMemAlloc, copies that move no
// bytes (a read gives zeros). One FakeCudaDriver at a time per process.
//
//   FakeCudaDriver fake;
//   fake.state.current = some_context;
//   auto memory = CudaDeviceMemory::Create(fake.driver());
#ifndef CUPROBE_TESTS_UNIT_FAKE_CUDA_DRIVER_H_
#define CUPROBE_TESTS_UNIT_FAKE_CUDA_DRIVER_H_

#include <cuda.h>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "maps/cuda_device_memory.h"

namespace cuprobe::testing {

inline constexpr uint64_t kFakeGranularity = 2u << 20;

struct FakeCudaState {
  int vmm = 1;  // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
  CUcontext current = reinterpret_cast<CUcontext>(0xC1);
  std::set<CUcontext> destroyed;            // cuCtxSetCurrent and cuStreamCreate fail there
  std::map<CUcontext, CUdevice> devices;    // device of a context (default 0)
  uint64_t next_address = 0x7000000000;
  uint64_t next_handle = 1;
  std::map<uint64_t, uint64_t> reserved;  // address -> bytes
  std::map<uint64_t, uint64_t> handles;   // handle -> bytes
  std::map<uint64_t, uint64_t> mapped;    // address -> handle
  std::vector<uint64_t> created_sizes;
  int map_failures = 0;  // the next N cuMemMap calls fail
  int allocs = 0, frees = 0;
  std::vector<std::pair<CUcontext, CUstream>> streams_created;
  std::vector<CUstream> streams_destroyed;
  uint64_t next_stream = 0x51;
  std::set<void*> host_registered;
  std::vector<size_t> param_sizes;  // cuFuncGetParamInfo, of every function  // cuMemHostRegister'd (the device sees them at the same address)
};

class FakeCudaDriver {
 public:
  FakeCudaDriver();
  ~FakeCudaDriver();
  FakeCudaDriver(const FakeCudaDriver&) = delete;
  FakeCudaDriver& operator=(const FakeCudaDriver&) = delete;

  [[nodiscard]] const CudaDriver* driver() const { return &table_; }
  FakeCudaState state;

 private:
  CudaDriver table_;
};

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_UNIT_FAKE_CUDA_DRIVER_H_
