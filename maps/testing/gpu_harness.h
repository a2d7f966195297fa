// File: maps/testing/gpu_harness.h
//
// What the GPU tests and the benchmark of the maps need from the driver,
// without the hook: a context on device 0, modules linked at run time with
// the GPU helper library by nvJitLink (so the PTX artifact itself is what
// runs), the map table and pid global filled as the hook fills them, and
// timed launches.
//
//   // The driver table from the seam (cupti_hook/real_seam.h):
//   CUPROBE_ASSIGN_OR_RETURN(auto gpu, GpuHarness::Create(LoadCudaDriver()));  // UNAVAILABLE: no GPU
//   CUPROBE_ASSIGN_OR_RETURN(GpuModule m, gpu->Load(kernels_ptx));
//   CUPROBE_RETURN_IF_ERROR(gpu->SetMapTable(m, maps.table()));
//   void* args[] = {&n};
//   CUPROBE_RETURN_IF_ERROR(gpu->Launch(m, "array_add", 4096, 256, args));
#ifndef CUPROBE_MAPS_TESTING_GPU_HARNESS_H_
#define CUPROBE_MAPS_TESTING_GPU_HARNESS_H_

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "maps/cuda_device_memory.h"

namespace cuprobe::testing {

struct GpuModule {
  CUmodule module = nullptr;
};

class GpuHarness {
 public:
  // UNAVAILABLE when there is no driver (`driver`'s error) or no device.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<GpuHarness>> Create(
      absl::StatusOr<const CudaDriver*> driver);
  ~GpuHarness();

  [[nodiscard]] const CudaDriver& driver() const { return *driver_; }
  [[nodiscard]] CudaDeviceMemory& memory() { return *memory_; }
  [[nodiscard]] int sm_count() const { return sm_count_; }

  // Links `ptx` (compiled with -rdc, calling the helpers) with the helper
  // library PTX into an sm_XX cubin for this device and loads it.
  [[nodiscard]] absl::StatusOr<GpuModule> Load(std::string_view ptx);
  // Fills the module's __cuprobe_map_table (which it must define).
  [[nodiscard]] absl::Status SetMapTable(GpuModule m, const std::vector<uint64_t>& table);
  [[nodiscard]] absl::Status SetPidTgid(GpuModule m, uint64_t value);
  // Launches and waits. Returns the kernel's time in ms (CUDA events).
  [[nodiscard]] absl::StatusOr<float> Launch(GpuModule m, std::string_view kernel, uint32_t grid,
                                             uint32_t block, void** args);
  // Launches without waiting (on the default stream); Synchronize waits.
  [[nodiscard]] absl::Status LaunchAsync(GpuModule m, std::string_view kernel, uint32_t grid,
                                         uint32_t block, void** args);
  [[nodiscard]] absl::Status Synchronize();

  // Plain device buffers for kernel outputs.
  [[nodiscard]] absl::StatusOr<uint64_t> Alloc(uint64_t bytes);
  [[nodiscard]] absl::Status Download(void* dst, uint64_t src, uint64_t bytes);
  [[nodiscard]] absl::Status Upload(uint64_t dst, const void* src, uint64_t bytes);

 private:
  GpuHarness() = default;
  const CudaDriver* driver_ = nullptr;
  CUcontext context_ = nullptr;
  int sm_ = 90;
  int sm_count_ = 0;
  std::unique_ptr<CudaDeviceMemory> memory_;
  std::vector<CUmodule> modules_;
  std::vector<uint64_t> buffers_;
};

}  // namespace cuprobe::testing

#endif  // CUPROBE_MAPS_TESTING_GPU_HARNESS_H_
