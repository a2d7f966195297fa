// File: maps/cuda_device_memory.h
//
// DeviceMemory (maps/device_memory.h) over the CUDA driver's table
// (support/cuda_driver.h), which the GPU seam loads and hands in (the hook:
// CuptiSeam::Driver; GPU tests: LoadCudaDriver).
//
//   const CudaDriver* driver = ...;  // from the seam
//   // ... a context is current on this thread (the application's, in the hook) ...
//   CUPROBE_ASSIGN_OR_RETURN(auto memory, CudaDeviceMemory::Create(driver));
//   CUPROBE_ASSIGN_OR_RETURN(MapSet maps, MapSet::Create(specs, memory.get(), &region));
//
// Hazards:
//  - Every call uses the context current on the calling thread; the hook's
//    watcher must make the application's context current before Publish.
//  - Copies go through a private non-blocking stream: a synchronous
//    cuMemcpy on the legacy default stream would wait for the application's
//    kernels on blocking streams (and make the watcher stall the program).
//    The copy still sees device memory that running kernels are updating:
//    see docs/MAPS.md for what a snapshot means then.
//  - Destroy the CudaDeviceMemory (which destroys its stream) while the
//    stream's context is alive (MoveStream moves it to another).
//  - Allocations are made with the virtual memory management API
//    (cuMemCreate + cuMemMap) where the device supports it: such memory
//    belongs to no context (cuCtxDestroy leaves it), is mapped for the whole
//    device, and so is usable by kernels of every context of the process on
//    that device (measured on the H200: docs/MAPS.md, "Several contexts").
//    Mappings come in the allocation granularity (2 MiB there): requests
//    under half of it are carved, 256-byte aligned, out of shared chunks (a
//    chunk is given back when its last piece is freed); larger ones get
//    mappings of their own, rounded up.
//    Where it is not supported, cuMemAlloc: the memory dies with its
//    context. context_independent() says which.
//  - Host memory made visible with MapHost (cuMemHostRegister) stays tied to
//    the context current at the call: its registration ends when that
//    context is destroyed, even with CU_MEMHOSTREGISTER_PORTABLE.
#ifndef CUPROBE_MAPS_CUDA_DEVICE_MEMORY_H_
#define CUPROBE_MAPS_CUDA_DEVICE_MEMORY_H_

#include <cuda.h>

#include <map>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "maps/device_memory.h"
#include "support/cuda_driver.h"

namespace cuprobe {

class CudaDeviceMemory final : public DeviceMemory {
 public:
  // Needs a current context (FAILED_PRECONDITION otherwise): allocations go
  // to its device, copies through a stream made in it.
  // `allow_context_independent` false: cuMemAlloc even where virtual memory
  // management is supported.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> Create(
      const CudaDriver* driver, bool allow_context_independent = true);
  ~CudaDeviceMemory() override;

  absl::StatusOr<uint64_t> Allocate(uint64_t bytes) override;
  absl::Status Free(uint64_t address) override;
  absl::Status CopyToDevice(uint64_t dst, const void* src, uint64_t bytes) override;
  absl::Status CopyFromDevice(void* dst, uint64_t src, uint64_t bytes) override;
  absl::Status Zero(uint64_t dst, uint64_t bytes) override;
  absl::StatusOr<uint64_t> MapHost(void* host, uint64_t bytes) override;
  absl::Status UnmapHost(void* host) override;

  // The private stream every copy goes through (the hook keeps its copies
  // out of the program's trace by this stream's CUPTI id).
  [[nodiscard]] CUstream stream() const { return stream_; }
  // The device every allocation is on.
  [[nodiscard]] CUdevice device() const { return device_; }
  // Whether allocations outlive the context they were made in, and are
  // usable from every context on device() (see the file comment).
  [[nodiscard]] bool context_independent() const { return granularity_ != 0; }

  // Moves the copy stream into `to` (on the same device): the old stream is
  // destroyed in `from`, its context, which must still exist (null: just
  // make a new one), and a new one is made in `to`. For memory that
  // outlives the context it was made in. On failure no stream is left:
  // copies fail until a later move succeeds. Changes the current context.
  [[nodiscard]] absl::Status MoveStream(CUcontext from, CUcontext to);

 private:
  struct Mapping {
    CUmemGenericAllocationHandle handle;
    uint64_t bytes;
  };
  struct Chunk {
    uint64_t used = 0;  // bytes handed out from its start (bump allocation)
    uint64_t live = 0;  // pieces not yet freed
  };
  CudaDeviceMemory(const CudaDriver* driver, CUstream stream, CUdevice device,
                   uint64_t granularity)
      : driver_(driver), stream_(stream), device_(device), granularity_(granularity) {}
  [[nodiscard]] absl::Status NeedStream() const;
  // A mapping of its own, `bytes` rounded up to the granularity.
  absl::StatusOr<uint64_t> AllocateMapped(uint64_t bytes);
  absl::Status ReleaseMapping(uint64_t address);

  const CudaDriver* driver_;
  CUstream stream_;
  const CUdevice device_;
  const uint64_t granularity_;  // 0: cuMemAlloc
  std::map<uint64_t, Mapping> mappings_;  // address -> its physical allocation
  std::map<uint64_t, Chunk> chunks_;      // mappings carved into pieces, by address
  uint64_t open_chunk_ = 0;               // the chunk new pieces come from (0: none)
  std::map<uint64_t, uint64_t> pieces_;   // piece address -> its chunk's address
};

}  // namespace cuprobe

#endif  // CUPROBE_MAPS_CUDA_DEVICE_MEMORY_H_
