// File: cupti_hook/sanitizer_api.h
//
// The part of NVIDIA's Compute Sanitizer API (compute-sanitizer/include/
// sanitizer*.h, CUDA 13) that cuprobe uses, declared here because the build
// machines have neither those headers nor libsanitizer-public.so: the seam
// loads the library with dlopen (sanitizer_seam.h) and calls it through
// SanitizerApi. Every struct mirrors the real one field for field;
// tests/gpu/sanitizer_layout_check.cc compiles on the GPU machine against
// the real headers and checks each size, offset and enum value used here.
//
// Names are cuprobe's (namespace cuprobe::sanitizer), so this header and
// the real one can be included together by that check.
#ifndef CUPROBE_CUPTI_HOOK_SANITIZER_API_H_
#define CUPROBE_CUPTI_HOOK_SANITIZER_API_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace cuprobe::sanitizer {

// SanitizerResult; 0 is SANITIZER_SUCCESS.
using Result = int;
inline constexpr Result kSuccess = 0;
inline constexpr Result kErrorNotInitialized = 13;

// Sanitizer_CallbackDomain.
enum Domain : int {
  kDomainDriverApi = 1,
  kDomainResource = 3,
  kDomainSynchronize = 4,
  kDomainLaunch = 5,
};

// Sanitizer_ApiCallbackSite.
enum ApiCallbackSite : int {
  kApiEnter = 0,
  kApiExit = 1,
};

// Sanitizer_CallbackData (the driver and runtime API domains); the driver
// callback ids are CUPTI's.
struct CallbackData {
  ApiCallbackSite callbackSite;
  const char* functionName;
  const void* functionParams;
  const void* functionReturnValue;
  const char* symbolName;
  CUcontext context;
};

// Sanitizer_CallbackIdResource.
enum ResourceCbid : uint32_t {
  kResourceContextCreationFinished = 3,
  kResourceContextDestroyStarting = 4,
  kResourceModuleLoaded = 9,
  kResourceModuleUnloadStarting = 10,
};

// Sanitizer_CallbackIdLaunch.
enum LaunchCbid : uint32_t {
  kLaunchBegin = 1,
  kLaunchEnd = 3,
};

// Sanitizer_CallackIdSync.
enum SyncCbid : uint32_t {
  kStreamSynchronized = 1,
  kContextSynchronized = 2,
};

// Sanitizer_InstructionId: the patch points cuprobe uses.
enum Instruction : uint32_t {
  kBlockEnter = 1,
  kBlockExit = 2,
  kGlobalMemoryAccess = 3,
  kSharedMemoryAccess = 4,
  kLocalMemoryAccess = 5,
  kMemcpyAsync = 14,
};

// Sanitizer_DeviceMemoryFlags (the flags of a memory-access patch call).
enum DeviceMemoryFlag : uint32_t {
  kMemoryRead = 0x1,
  kMemoryWrite = 0x2,
  kMemoryAtomSys = 0x4,
  kMemoryPrefetch = 0x8,
};

using SubscriberHandle = struct SubscriberSt*;      // Sanitizer_SubscriberHandle
using StreamHandle = struct StreamSt*;              // Sanitizer_StreamHandle
using LaunchHandle = struct LaunchSt*;              // Sanitizer_LaunchHandle

// Sanitizer_ResourceContextData.
struct ResourceContextData {
  CUcontext context;
  CUdevice device;
};

// Sanitizer_ResourceModuleData.
struct ResourceModuleData {
  CUcontext context;
  CUmodule module;
  size_t cubinSize;
  const char* pCubin;
  CUlibrary library;
};

// Sanitizer_SynchronizeData.
struct SynchronizeData {
  CUcontext context;
  CUstream stream;
  StreamHandle hStream;
};

// Sanitizer_LaunchData.
struct LaunchData {
  CUcontext context;
  CUstream stream;
  StreamHandle hStream;
  CUmodule module;
  CUfunction function;
  const char* functionName;
  uint32_t gridDim_x;
  uint32_t gridDim_y;
  uint32_t gridDim_z;
  uint32_t blockDim_x;
  uint32_t blockDim_y;
  uint32_t blockDim_z;
  uint32_t clusterDim_x;
  uint32_t clusterDim_y;
  uint32_t clusterDim_z;
  uint64_t gridId;
  LaunchHandle hLaunch;
  CUdevice device;
  CUcontext apiContext;
  CUstream apiStream;
  StreamHandle hApiStream;
};

// Sanitizer_CallbackFunc.
using CallbackFunc = void (*)(void* userdata, Domain domain, uint32_t cbid, const void* cbdata);

// The entry points, resolved from libsanitizer-public.so.
struct Api {
  Result (*Subscribe)(SubscriberHandle* subscriber, CallbackFunc callback, void* userdata);
  Result (*Unsubscribe)(SubscriberHandle subscriber);
  Result (*EnableCallback)(uint32_t enable, SubscriberHandle subscriber, Domain domain,
                           uint32_t cbid);
  Result (*EnableDomain)(uint32_t enable, SubscriberHandle subscriber, Domain domain);
  Result (*GetResultString)(Result result, const char** str);
  Result (*AddPatches)(const void* image, CUcontext context);
  Result (*PatchInstructions)(Instruction instruction, CUmodule module, const char* callback);
  Result (*PatchModule)(CUmodule module);
  Result (*SetCallbackData)(CUfunction kernel, const void* userdata);
  Result (*SetLaunchCallbackData)(LaunchHandle launch, CUfunction kernel, StreamHandle stream,
                                  const void* userdata);
  Result (*MemcpyHostToDeviceAsync)(void* dst, void* src, size_t count, StreamHandle stream);
};

}  // namespace cuprobe::sanitizer

#endif  // CUPROBE_CUPTI_HOOK_SANITIZER_API_H_
