// File: maps/device_memory.cc
#include "maps/device_memory.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_format.h"

namespace cuprobe {

HostDeviceMemory::HostDeviceMemory(void* arena, uint64_t bytes)
    : arena_(static_cast<uint8_t*>(arena)), arena_bytes_(bytes) {}

HostDeviceMemory::~HostDeviceMemory() {
  if (arena_ != nullptr) return;
  for (const auto& [address, bytes] : allocations_) {
    ::operator delete[](reinterpret_cast<void*>(address), std::align_val_t{256});
  }
}

absl::StatusOr<uint64_t> HostDeviceMemory::Allocate(uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("device allocation of 0 bytes");
  uint64_t address;
  if (arena_ != nullptr) {
    const uint64_t start = (arena_used_ + 255) / 256 * 256;
    if (start > arena_bytes_ || bytes > arena_bytes_ - start) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "host device memory arena: %d bytes requested, %d left", bytes,
          arena_bytes_ > start ? arena_bytes_ - start : 0));
    }
    arena_used_ = start + bytes;
    address = reinterpret_cast<uintptr_t>(arena_ + start);
  } else {
    void* p = ::operator new[](bytes, std::align_val_t{256}, std::nothrow);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("host device memory: cannot allocate %d bytes", bytes));
    }
    address = reinterpret_cast<uintptr_t>(p);
  }
  // Unspecified contents, like cuMemAlloc: poison them so that code relying
  // on zeroed memory fails the tests.
  std::memset(reinterpret_cast<void*>(address), 0xa5, bytes);
  allocations_[address] = bytes;
  return address;
}

absl::Status HostDeviceMemory::Free(uint64_t address) {
  auto it = allocations_.find(address);
  if (it == allocations_.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("free of 0x%x, which is not a live allocation", address));
  }
  allocations_.erase(it);
  if (arena_ == nullptr) {
    ::operator delete[](reinterpret_cast<void*>(address), std::align_val_t{256});
  }
  return absl::OkStatus();
}

absl::Status HostDeviceMemory::CheckRange(uint64_t address, uint64_t bytes) const {
  auto it = allocations_.upper_bound(address);
  if (it != allocations_.begin()) {
    --it;
    if (address - it->first <= it->second && bytes <= it->second - (address - it->first)) {
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "device range [0x%x, +%d) is not inside one live allocation", address, bytes));
}

absl::Status HostDeviceMemory::CopyToDevice(uint64_t dst, const void* src, uint64_t bytes) {
  if (absl::Status s = CheckRange(dst, bytes); !s.ok()) return s;
  if (bytes > 0) std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return absl::OkStatus();
}

absl::Status HostDeviceMemory::CopyFromDevice(void* dst, uint64_t src, uint64_t bytes) {
  if (absl::Status s = CheckRange(src, bytes); !s.ok()) return s;
  if (bytes > 0) std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return absl::OkStatus();
}

absl::Status HostDeviceMemory::Zero(uint64_t dst, uint64_t bytes) {
  if (absl::Status s = CheckRange(dst, bytes); !s.ok()) return s;
  if (bytes > 0) std::memset(reinterpret_cast<void*>(dst), 0, bytes);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> HostDeviceMemory::MapHost(void* host, uint64_t bytes) {
  const uint64_t address = reinterpret_cast<uintptr_t>(host);
  if (host_mappings_.count(address) != 0) {
    return absl::AlreadyExistsError(
        absl::StrFormat("host memory at 0x%x is already mapped for the device", address));
  }
  host_mappings_[address] = bytes;
  return address;
}

absl::Status HostDeviceMemory::UnmapHost(void* host) {
  if (host_mappings_.erase(reinterpret_cast<uintptr_t>(host)) == 0) {
    return absl::InvalidArgumentError("unmapping host memory that was not mapped");
  }
  return absl::OkStatus();
}

}  // namespace cuprobe
