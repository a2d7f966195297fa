// File: maps/device_memory.h
//
// DeviceMemory: the small seam between the maps runtime (MapSet) and the
// memory the GPU sees. Two implementations:
//  - HostDeviceMemory (here): "device" addresses are host addresses, so the
//    host build of the map algorithms runs on them directly. The CPU tests
//    use it, and so can any tool that simulates probes on the CPU. It can
//    carve its allocations from a caller's arena (e.g. a MAP_SHARED mapping
//    made before fork, for tests with several processes).
//  - CudaDeviceMemory (maps/cuda_device_memory.h): the CUDA driver.
//
//   HostDeviceMemory memory;
//   CUPROBE_ASSIGN_OR_RETURN(MapSet maps, MapSet::Create(specs, &memory, &region));
#ifndef CUPROBE_MAPS_DEVICE_MEMORY_H_
#define CUPROBE_MAPS_DEVICE_MEMORY_H_

#include <cstdint>
#include <map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cuprobe {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // `bytes` of device memory, 256-byte aligned, contents unspecified.
  [[nodiscard]] virtual absl::StatusOr<uint64_t> Allocate(uint64_t bytes) = 0;
  [[nodiscard]] virtual absl::Status Free(uint64_t address) = 0;
  [[nodiscard]] virtual absl::Status CopyToDevice(uint64_t dst, const void* src,
                                                  uint64_t bytes) = 0;
  [[nodiscard]] virtual absl::Status CopyFromDevice(void* dst, uint64_t src, uint64_t bytes) = 0;
  [[nodiscard]] virtual absl::Status Zero(uint64_t dst, uint64_t bytes) = 0;
  // Makes `bytes` of host memory at `host` reachable from the GPU and returns
  // the device address of `host` (cuMemHostRegister + DEVICEMAP).
  [[nodiscard]] virtual absl::StatusOr<uint64_t> MapHost(void* host, uint64_t bytes) = 0;
  [[nodiscard]] virtual absl::Status UnmapHost(void* host) = 0;
};

class HostDeviceMemory final : public DeviceMemory {
 public:
  HostDeviceMemory() = default;
  // Allocations come from [arena, arena + bytes) (bump allocation, never
  // reused); Allocate fails with RESOURCE_EXHAUSTED when it is used up.
  HostDeviceMemory(void* arena, uint64_t bytes);
  ~HostDeviceMemory() override;
  HostDeviceMemory(const HostDeviceMemory&) = delete;
  HostDeviceMemory& operator=(const HostDeviceMemory&) = delete;

  absl::StatusOr<uint64_t> Allocate(uint64_t bytes) override;
  absl::Status Free(uint64_t address) override;
  absl::Status CopyToDevice(uint64_t dst, const void* src, uint64_t bytes) override;
  absl::Status CopyFromDevice(void* dst, uint64_t src, uint64_t bytes) override;
  absl::Status Zero(uint64_t dst, uint64_t bytes) override;
  absl::StatusOr<uint64_t> MapHost(void* host, uint64_t bytes) override;
  absl::Status UnmapHost(void* host) override;

  [[nodiscard]] uint64_t live_allocations() const { return allocations_.size(); }
  [[nodiscard]] uint64_t live_host_mappings() const { return host_mappings_.size(); }

 private:
  // Checks that [address, address + bytes) lies in one live allocation.
  [[nodiscard]] absl::Status CheckRange(uint64_t address, uint64_t bytes) const;

  uint8_t* arena_ = nullptr;
  uint64_t arena_bytes_ = 0;
  uint64_t arena_used_ = 0;
  std::map<uint64_t, uint64_t> allocations_;    // address -> bytes
  std::map<uint64_t, uint64_t> host_mappings_;  // address -> bytes
};

}  // namespace cuprobe

#endif  // CUPROBE_MAPS_DEVICE_MEMORY_H_
