// Does the driver load the image a Compute Sanitizer driver-API callback
// swaps in at a load's ENTER, as it does for CUPTI's (DESIGN.md)? The patch
// backend could then still rewrite kernels that carry PTX. Built twice by
// scripts/device-test.sh on the GPU machine, against the real headers:
//
//   g++ -std=c++20 -shared -fPIC -DSWAP_INJECTION ... -o libswap.so -lsanitizer-public
//   g++ -std=c++20 ... -o swap_app -lcuda
//   CUDA_INJECTION64_PATH=libswap.so swap_app   # prints module=N library=N
//
// The app loads a PTX kernel that stores 1, through cuModuleLoadData and
// through cuLibraryLoadData; the injection swaps each image for one that
// stores 2. "module=2 library=2": the swap took.
#include <cuda.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

std::string KernelPtx(int value) {
  return ".version 8.0\n.target sm_90\n.address_size 64\n"
         ".visible .entry store_value(.param .u64 out)\n{\n"
         "\t.reg .b64 %rd<3>;\n\t.reg .b32 %r<2>;\n"
         "\tld.param.u64 %rd1, [out];\n\tcvta.to.global.u64 %rd2, %rd1;\n"
         "\tmov.u32 %r1, " + std::to_string(value) + ";\n"
         "\tst.global.u32 [%rd2], %r1;\n\tret;\n}\n";
}

}  // namespace

#ifdef SWAP_INJECTION
#include <cupti_driver_cbid.h>
#include <sanitizer.h>  // with the driver's *_params structs

namespace {

const std::string& Swapped() {
  static const std::string* ptx = new std::string(KernelPtx(2));
  return *ptx;
}

// The heads of CUPTI's cuModuleLoadData_params and cuLibraryLoadData_params
// (the Sanitizer's headers lack them): the out-pointer, then the image.
struct ModuleLoadDataParams {
  CUmodule* module;
  const void* image;
};
struct LibraryLoadDataParams {
  CUlibrary* library;
  const void* code;
};

bool IsOurs(const void* image) {
  return image != nullptr && std::strstr(static_cast<const char*>(image), "store_value") != nullptr &&
         std::strstr(static_cast<const char*>(image), "mov.u32 %r1, 1;") != nullptr;
}

void SANITIZERAPI OnCallback(void*, Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid,
                             const void* cbdata) {
  if (domain == SANITIZER_CB_DOMAIN_RESOURCE && cbid == SANITIZER_CBID_RESOURCE_MODULE_LOADED) {
    const auto* m = static_cast<const Sanitizer_ResourceModuleData*>(cbdata);
    std::fprintf(stderr, "swap: module loaded, image of %zu bytes\n", m->cubinSize);
    return;
  }
  if (domain != SANITIZER_CB_DOMAIN_DRIVER_API) return;
  const auto* d = static_cast<const Sanitizer_CallbackData*>(cbdata);
  if (d->callbackSite != SANITIZER_API_ENTER || d->functionParams == nullptr) return;
  void* params = const_cast<void*>(d->functionParams);
  const void** image = nullptr;
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData) {
    image = &static_cast<ModuleLoadDataParams*>(params)->image;
  } else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData) {
    image = &static_cast<LibraryLoadDataParams*>(params)->code;
  }
  if (image == nullptr || !IsOurs(*image)) return;
  *image = Swapped().c_str();
  std::fprintf(stderr, "swap: %s image swapped at ENTER\n", d->functionName);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  Sanitizer_SubscriberHandle handle;
  if (sanitizerSubscribe(&handle, OnCallback, nullptr) != SANITIZER_SUCCESS) return 0;
  sanitizerEnableCallback(1, handle, SANITIZER_CB_DOMAIN_DRIVER_API,
                          CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData);
  sanitizerEnableCallback(1, handle, SANITIZER_CB_DOMAIN_DRIVER_API,
                          CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData);
  sanitizerEnableCallback(1, handle, SANITIZER_CB_DOMAIN_RESOURCE,
                          SANITIZER_CBID_RESOURCE_MODULE_LOADED);
  return 1;
}

#else

namespace {

#define CHECK(call)                                                   \
  do {                                                                \
    CUresult r = (call);                                              \
    if (r != CUDA_SUCCESS) {                                          \
      std::fprintf(stderr, "%s failed: %d\n", #call, static_cast<int>(r)); \
      return -1;                                                      \
    }                                                                 \
  } while (0)

int Run(CUfunction f, CUdeviceptr out) {
  void* args[] = {&out};
  CHECK(cuMemsetD32(out, 0, 1));
  CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
  int value = 0;
  CHECK(cuMemcpyDtoH(&value, out, sizeof(value)));
  return value;
}

}  // namespace

int main() {
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr out;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuMemAlloc(&out, sizeof(int)));
  const std::string ptx = KernelPtx(1);
  CUmodule module;
  CUfunction f;
  CHECK(cuModuleLoadData(&module, ptx.c_str()));
  CHECK(cuModuleGetFunction(&f, module, "store_value"));
  const int from_module = Run(f, out);
  CUlibrary library;
  CUkernel kernel;
  CHECK(cuLibraryLoadData(&library, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CHECK(cuLibraryGetKernel(&kernel, library, "store_value"));
  const int from_library = Run(reinterpret_cast<CUfunction>(kernel), out);
  std::printf("module=%d library=%d\n", from_module, from_library);
  return 0;
}

#endif
