#include "tests/unit/fake_cuda_driver.h"

#include <cstring>

#include "gtest/gtest.h"

namespace cuprobe::testing {
namespace {

FakeCudaState* active = nullptr;  // the live FakeCudaDriver's state

CudaDriver Table() {
  CudaDriver d{};
  d.CtxGetCurrent = [](CUcontext* c) -> CUresult {
    *c = active->current;
    return CUDA_SUCCESS;
  };
  d.CtxSetCurrent = [](CUcontext c) -> CUresult {
    if (active->destroyed.contains(c)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    active->current = c;
    return CUDA_SUCCESS;
  };
  d.CtxGetDevice = [](CUdevice* device) -> CUresult {
    auto it = active->devices.find(active->current);
    *device = it != active->devices.end() ? it->second : 0;
    return CUDA_SUCCESS;
  };
  d.DeviceGetAttribute = [](int* value, CUdevice_attribute attribute, CUdevice) -> CUresult {
    *value = attribute == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ? active->vmm : 0;
    return CUDA_SUCCESS;
  };
  d.MemGetAllocationGranularity = [](size_t* g, const CUmemAllocationProp*,
                                     CUmemAllocationGranularity_flags) -> CUresult {
    *g = kFakeGranularity;
    return CUDA_SUCCESS;
  };
  d.StreamCreate = [](CUstream* s, unsigned int) -> CUresult {
    if (active->destroyed.contains(active->current)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *s = reinterpret_cast<CUstream>(active->next_stream++);
    active->streams_created.emplace_back(active->current, *s);
    return CUDA_SUCCESS;
  };
  d.StreamDestroy = [](CUstream s) -> CUresult {
    active->streams_destroyed.push_back(s);
    return CUDA_SUCCESS;
  };
  d.StreamSynchronize = [](CUstream) -> CUresult { return CUDA_SUCCESS; };
  d.MemcpyHtoDAsync = [](CUdeviceptr, const void*, size_t, CUstream) -> CUresult {
    return CUDA_SUCCESS;
  };
  d.MemcpyDtoHAsync = [](void* dst, CUdeviceptr, size_t bytes, CUstream) -> CUresult {
    std::memset(dst, 0, bytes);
    return CUDA_SUCCESS;
  };
  d.MemsetD8Async = [](CUdeviceptr, unsigned char, size_t, CUstream) -> CUresult {
    return CUDA_SUCCESS;
  };
  d.MemCreate = [](CUmemGenericAllocationHandle* h, size_t bytes, const CUmemAllocationProp*,
                   unsigned long long) -> CUresult {
    *h = active->next_handle++;
    active->handles[*h] = bytes;
    active->created_sizes.push_back(bytes);
    return CUDA_SUCCESS;
  };
  d.MemRelease = [](CUmemGenericAllocationHandle h) -> CUresult {
    return active->handles.erase(h) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  };
  d.MemAddressReserve = [](CUdeviceptr* p, size_t bytes, size_t alignment, CUdeviceptr,
                           unsigned long long) -> CUresult {
    EXPECT_EQ(alignment, kFakeGranularity);
    *p = active->next_address;
    active->reserved[*p] = bytes;
    active->next_address += bytes + kFakeGranularity;
    return CUDA_SUCCESS;
  };
  d.MemAddressFree = [](CUdeviceptr p, size_t bytes) -> CUresult {
    auto it = active->reserved.find(p);
    if (it == active->reserved.end() || it->second != bytes) return CUDA_ERROR_INVALID_VALUE;
    active->reserved.erase(it);
    return CUDA_SUCCESS;
  };
  d.MemMap = [](CUdeviceptr p, size_t, size_t, CUmemGenericAllocationHandle h,
                unsigned long long) -> CUresult {
    if (active->map_failures > 0) {
      --active->map_failures;
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    active->mapped[p] = h;
    return CUDA_SUCCESS;
  };
  d.MemUnmap = [](CUdeviceptr p, size_t) -> CUresult {
    return active->mapped.erase(p) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  };
  d.MemSetAccess = [](CUdeviceptr, size_t, const CUmemAccessDesc* desc, size_t count) -> CUresult {
    EXPECT_EQ(count, 1u);
    EXPECT_EQ(desc->flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    return CUDA_SUCCESS;
  };
  d.MemAlloc = [](CUdeviceptr* p, size_t) -> CUresult {
    ++active->allocs;
    *p = 0x100000 * static_cast<CUdeviceptr>(active->allocs);
    return CUDA_SUCCESS;
  };
  d.MemFree = [](CUdeviceptr) -> CUresult {
    ++active->frees;
    return CUDA_SUCCESS;
  };
  d.MemHostRegister = [](void* p, size_t, unsigned int) -> CUresult {
    return active->host_registered.insert(p).second ? CUDA_SUCCESS
                                                     : CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  };
  d.MemHostGetDevicePointer = [](CUdeviceptr* device, void* p, unsigned int) -> CUresult {
    *device = reinterpret_cast<CUdeviceptr>(p);
    return CUDA_SUCCESS;
  };
  d.FuncGetParamInfo = [](CUfunction, size_t index, size_t* offset, size_t* size) -> CUresult {
    if (index >= active->param_sizes.size()) return CUDA_ERROR_INVALID_VALUE;
    *offset = 0;
    *size = active->param_sizes[index];
    return CUDA_SUCCESS;
  };
  d.MemHostUnregister = [](void* p) -> CUresult {
    return active->host_registered.erase(p) == 1 ? CUDA_SUCCESS
                                                 : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  };
  return d;
}

}  // namespace

FakeCudaDriver::FakeCudaDriver() : table_(Table()) {
  EXPECT_EQ(active, nullptr) << "one FakeCudaDriver at a time";
  active = &state;
}

FakeCudaDriver::~FakeCudaDriver() { active = nullptr; }

}  // namespace cuprobe::testing
