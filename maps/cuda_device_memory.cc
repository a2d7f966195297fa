// File: maps/cuda_device_memory.cc
#include "maps/cuda_device_memory.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "support/cuda_status.h"
#include "support/status_macros.h"

namespace cuprobe {

#define CUPROBE_DRIVER_CALL(call) driver_->Check(driver_->call, #call)

namespace {

CUmemAllocationProp DeviceAllocationProp(CUdevice device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaDeviceMemory>> CudaDeviceMemory::Create(
    const CudaDriver* driver, bool allow_context_independent) {
  CUcontext context = nullptr;
  CUPROBE_RETURN_IF_ERROR(driver->Check(driver->CtxGetCurrent(&context), "cuCtxGetCurrent"));
  if (context == nullptr) {
    return absl::FailedPreconditionError(
        "CudaDeviceMemory needs a current CUDA context on the calling thread");
  }
  CUdevice device = 0;
  CUPROBE_RETURN_IF_ERROR(driver->Check(driver->CtxGetDevice(&device), "cuCtxGetDevice"));
  // Virtual memory management where the device has it (a failed query means
  // no: cuMemAlloc still works).
  size_t granularity = 0;
  int vmm = 0;
  if (allow_context_independent &&
      driver->DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                 device) == CUDA_SUCCESS &&
      vmm != 0) {
    CUmemAllocationProp prop = DeviceAllocationProp(device);
    if (driver->MemGetAllocationGranularity(&granularity, &prop,
                                            CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) {
      granularity = 0;
    }
  }
  CUstream stream = nullptr;
  CUPROBE_RETURN_IF_ERROR(driver->Check(driver->StreamCreate(&stream, CU_STREAM_NON_BLOCKING),
                                        "cuStreamCreate(CU_STREAM_NON_BLOCKING)"));
  return std::unique_ptr<CudaDeviceMemory>(
      new CudaDeviceMemory(driver, stream, device, granularity));
}

CudaDeviceMemory::~CudaDeviceMemory() {
  if (stream_ != nullptr) (void)driver_->StreamDestroy(stream_);
}

absl::Status CudaDeviceMemory::MoveStream(CUcontext from, CUcontext to) {
  // The old handle is never used again, whatever fails below (a stream that
  // could not be destroyed goes with its context).
  CUstream old = std::exchange(stream_, nullptr);
  if (old != nullptr && from != nullptr && driver_->CtxSetCurrent(from) == CUDA_SUCCESS) {
    (void)driver_->StreamDestroy(old);
  }
  CUPROBE_RETURN_IF_ERROR(CUPROBE_DRIVER_CALL(CtxSetCurrent(to)));
  CUstream stream = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_DRIVER_CALL(StreamCreate(&stream, CU_STREAM_NON_BLOCKING)));
  stream_ = stream;
  return absl::OkStatus();
}

absl::Status CudaDeviceMemory::NeedStream() const {
  if (stream_ != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "the maps' copy stream is gone (its context was destroyed and no other took it)");
}

absl::StatusOr<uint64_t> CudaDeviceMemory::AllocateMapped(uint64_t bytes) {
  const uint64_t size = (bytes + granularity_ - 1) / granularity_ * granularity_;
  CUmemAllocationProp prop = DeviceAllocationProp(device_);
  CUmemGenericAllocationHandle handle = 0;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_DRIVER_CALL(MemCreate(&handle, size, &prop, 0)));
  CUdeviceptr address = 0;
  absl::Status s = CUPROBE_DRIVER_CALL(MemAddressReserve(&address, size, granularity_, 0, 0));
  if (!s.ok()) {
    (void)driver_->MemRelease(handle);
    return s;
  }
  s = CUPROBE_DRIVER_CALL(MemMap(address, size, 0, handle, 0));
  if (s.ok()) {
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    s = CUPROBE_DRIVER_CALL(MemSetAccess(address, size, &access, 1));
    if (!s.ok()) (void)driver_->MemUnmap(address, size);
  }
  if (!s.ok()) {
    (void)driver_->MemAddressFree(address, size);
    (void)driver_->MemRelease(handle);
    return s;
  }
  mappings_[static_cast<uint64_t>(address)] = Mapping{handle, size};
  return static_cast<uint64_t>(address);
}

absl::StatusOr<uint64_t> CudaDeviceMemory::Allocate(uint64_t bytes) {
  if (granularity_ == 0) {
    CUdeviceptr p = 0;
    CUPROBE_RETURN_IF_ERROR(CUPROBE_DRIVER_CALL(MemAlloc(&p, bytes)));
    return static_cast<uint64_t>(p);
  }
  constexpr uint64_t kAlignment = 256;
  const uint64_t piece = (std::max<uint64_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  if (piece > granularity_ / 2) return AllocateMapped(bytes);
  if (open_chunk_ == 0 || chunks_[open_chunk_].used + piece > granularity_) {
    CUPROBE_ASSIGN_OR_RETURN(uint64_t base, AllocateMapped(granularity_));
    chunks_[base] = Chunk{};
    open_chunk_ = base;
  }
  Chunk& chunk = chunks_[open_chunk_];
  const uint64_t address = open_chunk_ + chunk.used;
  chunk.used += piece;
  ++chunk.live;
  pieces_[address] = open_chunk_;
  return address;
}

absl::Status CudaDeviceMemory::Free(uint64_t address) {
  if (auto piece = pieces_.find(address); piece != pieces_.end()) {
    const uint64_t base = piece->second;
    pieces_.erase(piece);
    if (--chunks_[base].live > 0) return absl::OkStatus();
    chunks_.erase(base);
    if (open_chunk_ == base) open_chunk_ = 0;
    return ReleaseMapping(base);
  }
  if (mappings_.contains(address)) return ReleaseMapping(address);
  return CUPROBE_DRIVER_CALL(MemFree(static_cast<CUdeviceptr>(address)));
}

absl::Status CudaDeviceMemory::ReleaseMapping(uint64_t address) {
  auto it = mappings_.find(address);
  const auto [handle, size] = it->second;
  mappings_.erase(it);
  const auto ptr = static_cast<CUdeviceptr>(address);
  absl::Status s = CUPROBE_DRIVER_CALL(MemUnmap(ptr, size));
  s.Update(CUPROBE_DRIVER_CALL(MemAddressFree(ptr, size)));
  s.Update(CUPROBE_DRIVER_CALL(MemRelease(handle)));
  return s;
}

absl::Status CudaDeviceMemory::CopyToDevice(uint64_t dst, const void* src, uint64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  CUPROBE_RETURN_IF_ERROR(NeedStream());
  CUPROBE_RETURN_IF_ERROR(
      CUPROBE_DRIVER_CALL(MemcpyHtoDAsync(static_cast<CUdeviceptr>(dst), src, bytes, stream_)));
  return CUPROBE_DRIVER_CALL(StreamSynchronize(stream_));
}

absl::Status CudaDeviceMemory::CopyFromDevice(void* dst, uint64_t src, uint64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  CUPROBE_RETURN_IF_ERROR(NeedStream());
  CUPROBE_RETURN_IF_ERROR(
      CUPROBE_DRIVER_CALL(MemcpyDtoHAsync(dst, static_cast<CUdeviceptr>(src), bytes, stream_)));
  return CUPROBE_DRIVER_CALL(StreamSynchronize(stream_));
}

absl::Status CudaDeviceMemory::Zero(uint64_t dst, uint64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  CUPROBE_RETURN_IF_ERROR(NeedStream());
  CUPROBE_RETURN_IF_ERROR(
      CUPROBE_DRIVER_CALL(MemsetD8Async(static_cast<CUdeviceptr>(dst), 0, bytes, stream_)));
  return CUPROBE_DRIVER_CALL(StreamSynchronize(stream_));
}

absl::StatusOr<uint64_t> CudaDeviceMemory::MapHost(void* host, uint64_t bytes) {
  CUPROBE_RETURN_IF_ERROR(CUPROBE_DRIVER_CALL(
      MemHostRegister(host, bytes, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE)));
  CUdeviceptr device = 0;
  absl::Status s = CUPROBE_DRIVER_CALL(MemHostGetDevicePointer(&device, host, 0));
  if (!s.ok()) {
    (void)driver_->MemHostUnregister(host);
    return s;
  }
  return static_cast<uint64_t>(device);
}

absl::Status CudaDeviceMemory::UnmapHost(void* host) {
  return CUPROBE_DRIVER_CALL(MemHostUnregister(host));
}

}  // namespace cuprobe
