// File: maps/testing/gpu_harness.cc
#include "maps/testing/gpu_harness.h"

#include <nvJitLink.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "maps/gpu/helpers_ptx.h"
#include "support/status_macros.h"

namespace cuprobe::testing {
namespace {

absl::StatusOr<std::vector<char>> LinkWithHelpers(std::string_view ptx, int sm) {
  const std::string arch = absl::StrCat("-arch=sm_", sm);
  const char* options[] = {arch.c_str(), "-O3"};
  nvJitLinkHandle h = nullptr;
  if (nvJitLinkCreate(&h, 2, options) != NVJITLINK_SUCCESS) {
    return absl::InternalError("nvJitLinkCreate failed");
  }
  std::string log;
  auto error = [&](std::string_view what) {
    size_t size = 0;
    if (nvJitLinkGetErrorLogSize(h, &size) == NVJITLINK_SUCCESS && size > 1) {
      log.resize(size);
      (void)nvJitLinkGetErrorLog(h, log.data());
    }
    nvJitLinkDestroy(&h);
    return absl::InternalError(absl::StrCat("nvJitLink: ", what, ": ", log));
  };
  const std::string_view helpers = HelpersPtx();
  if (nvJitLinkAddData(h, NVJITLINK_INPUT_PTX, ptx.data(), ptx.size(), "kernels.ptx") !=
      NVJITLINK_SUCCESS) {
    return error("adding the kernels");
  }
  if (nvJitLinkAddData(h, NVJITLINK_INPUT_PTX, helpers.data(), helpers.size(),
                       "cuprobe_helpers.ptx") != NVJITLINK_SUCCESS) {
    return error("adding the helper library");
  }
  if (nvJitLinkComplete(h) != NVJITLINK_SUCCESS) return error("linking");
  size_t size = 0;
  if (nvJitLinkGetLinkedCubinSize(h, &size) != NVJITLINK_SUCCESS) return error("cubin size");
  std::vector<char> cubin(size);
  if (nvJitLinkGetLinkedCubin(h, cubin.data()) != NVJITLINK_SUCCESS) return error("cubin");
  nvJitLinkDestroy(&h);
  return cubin;
}

}  // namespace

#define CUPROBE_DRIVER_CALL(call) driver_->Check(driver_->call, #call)

absl::StatusOr<std::unique_ptr<GpuHarness>> GpuHarness::Create(
    absl::StatusOr<const CudaDriver*> loaded) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, std::move(loaded));
  std::unique_ptr<GpuHarness> h(new GpuHarness());
  h->driver_ = driver;
  if (driver->Init(0) != CUDA_SUCCESS) return absl::UnavailableError("cuInit failed: no GPU?");
  int count = 0;
  if (driver->DeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    return absl::UnavailableError("no CUDA device");
  }
  CUdevice device = 0;
  CUPROBE_RETURN_IF_ERROR(driver->Check(driver->DeviceGet(&device, 0), "cuDeviceGet"));
  int major = 0, minor = 0;
  CUPROBE_RETURN_IF_ERROR(driver->Check(
      driver->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
      "cuDeviceGetAttribute(major)"));
  CUPROBE_RETURN_IF_ERROR(driver->Check(
      driver->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
      "cuDeviceGetAttribute(minor)"));
  CUPROBE_RETURN_IF_ERROR(driver->Check(
      driver->DeviceGetAttribute(&h->sm_count_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device),
      "cuDeviceGetAttribute(SMs)"));
  h->sm_ = major * 10 + minor;
  if (h->sm_ < 90) {
    return absl::UnavailableError(
        absl::StrFormat("device is sm_%d; the helper library is built for sm_90", h->sm_));
  }
  CUPROBE_RETURN_IF_ERROR(driver->Check(driver->DevicePrimaryCtxRetain(&h->context_, device),
                                        "cuDevicePrimaryCtxRetain"));
  CUPROBE_RETURN_IF_ERROR(driver->Check(driver->CtxSetCurrent(h->context_), "cuCtxSetCurrent"));
  CUPROBE_ASSIGN_OR_RETURN(h->memory_, CudaDeviceMemory::Create(driver));
  return h;
}

GpuHarness::~GpuHarness() {
  if (driver_ == nullptr || context_ == nullptr) return;
  (void)driver_->CtxSynchronize();
  for (uint64_t b : buffers_) (void)driver_->MemFree(static_cast<CUdeviceptr>(b));
  for (CUmodule m : modules_) (void)driver_->ModuleUnload(m);
  memory_.reset();
  // The primary context stays retained: the process is about to end, and
  // releasing it would invalidate anything a test still holds.
}

absl::StatusOr<GpuModule> GpuHarness::Load(std::string_view ptx) {
  CUPROBE_ASSIGN_OR_RETURN(std::vector<char> cubin, LinkWithHelpers(ptx, sm_));
  GpuModule m;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_DRIVER_CALL(ModuleLoadData(&m.module, cubin.data())));
  modules_.push_back(m.module);
  return m;
}

absl::Status GpuHarness::SetMapTable(GpuModule m, const std::vector<uint64_t>& table) {
  CUdeviceptr address = 0;
  size_t bytes = 0;
  CUPROBE_RETURN_IF_ERROR(
      CUPROBE_DRIVER_CALL(ModuleGetGlobal(&address, &bytes, m.module, "__cuprobe_map_table")));
  if (bytes < table.size() * 8) {
    return absl::InvalidArgumentError(
        absl::StrFormat("__cuprobe_map_table has %d bytes, %d maps need %d", bytes, table.size(),
                        table.size() * 8));
  }
  return CUPROBE_DRIVER_CALL(MemcpyHtoD(address, table.data(), table.size() * 8));
}

absl::Status GpuHarness::SetPidTgid(GpuModule m, uint64_t value) {
  CUdeviceptr address = 0;
  size_t bytes = 0;
  CUPROBE_RETURN_IF_ERROR(
      CUPROBE_DRIVER_CALL(ModuleGetGlobal(&address, &bytes, m.module, "__cuprobe_pid_tgid_value")));
  return CUPROBE_DRIVER_CALL(MemcpyHtoD(address, &value, sizeof(value)));
}

absl::Status GpuHarness::LaunchAsync(GpuModule m, std::string_view kernel, uint32_t grid,
                                     uint32_t block, void** args) {
  CUfunction f = nullptr;
  const std::string name(kernel);
  CUPROBE_RETURN_IF_ERROR(driver_->Check(driver_->ModuleGetFunction(&f, m.module, name.c_str()),
                                         absl::StrCat("cuModuleGetFunction(", name, ")")));
  return driver_->Check(
      driver_->LaunchKernel(f, grid, 1, 1, block, 1, 1, 0, nullptr, args, nullptr),
      absl::StrCat("cuLaunchKernel(", name, ")"));
}

absl::StatusOr<float> GpuHarness::Launch(GpuModule m, std::string_view kernel, uint32_t grid,
                                         uint32_t block, void** args) {
  CUevent start = nullptr, stop = nullptr;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_DRIVER_CALL(EventCreate(&start, CU_EVENT_DEFAULT)));
  CUPROBE_RETURN_IF_ERROR(CUPROBE_DRIVER_CALL(EventCreate(&stop, CU_EVENT_DEFAULT)));
  absl::Status s = CUPROBE_DRIVER_CALL(EventRecord(start, nullptr));
  if (s.ok()) s = LaunchAsync(m, kernel, grid, block, args);
  if (s.ok()) s = CUPROBE_DRIVER_CALL(EventRecord(stop, nullptr));
  if (s.ok()) s = CUPROBE_DRIVER_CALL(EventSynchronize(stop));
  float ms = 0;
  if (s.ok()) s = CUPROBE_DRIVER_CALL(EventElapsedTime(&ms, start, stop));
  (void)driver_->EventDestroy(start);
  (void)driver_->EventDestroy(stop);
  if (!s.ok()) return s;
  return ms;
}

absl::Status GpuHarness::Synchronize() { return CUPROBE_DRIVER_CALL(CtxSynchronize()); }

absl::StatusOr<uint64_t> GpuHarness::Alloc(uint64_t bytes) {
  CUdeviceptr p = 0;
  CUPROBE_RETURN_IF_ERROR(CUPROBE_DRIVER_CALL(MemAlloc(&p, bytes)));
  buffers_.push_back(p);
  return static_cast<uint64_t>(p);
}

absl::Status GpuHarness::Download(void* dst, uint64_t src, uint64_t bytes) {
  return CUPROBE_DRIVER_CALL(MemcpyDtoH(dst, static_cast<CUdeviceptr>(src), bytes));
}

absl::Status GpuHarness::Upload(uint64_t dst, const void* src, uint64_t bytes) {
  return CUPROBE_DRIVER_CALL(MemcpyHtoD(static_cast<CUdeviceptr>(dst), src, bytes));
}

}  // namespace cuprobe::testing
