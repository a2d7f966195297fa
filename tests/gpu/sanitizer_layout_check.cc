// Checks cupti_hook/sanitizer_api.h against NVIDIA's real Compute Sanitizer
// headers: every struct's size and every field's offset, every enum value
// and entry point signature cuprobe declares. It only compiles where those
// headers exist (the GPU machine); scripts/device-test.sh builds it there:
//
//   g++ -std=c++20 -I. -I/usr/local/cuda/include
//       -I/usr/local/cuda/compute-sanitizer/include
//       tests/gpu/sanitizer_layout_check.cc -o sanitizer_layout_check
//
// A mismatch is a compile error naming the field; the program prints "ok".
#include <cupti_driver_cbid.h>
#include <sanitizer.h>

#include <cstddef>
#include <cstdio>
#include <type_traits>

#include "cupti_hook/sanitizer_api.h"

namespace san = cuprobe::sanitizer;

#define SAME_LAYOUT(ours, theirs) \
  static_assert(sizeof(ours) == sizeof(theirs), #ours " size"); \
  static_assert(alignof(ours) == alignof(theirs), #ours " alignment")
#define SAME_FIELD(ours, theirs, field) \
  static_assert(offsetof(ours, field) == offsetof(theirs, field), #ours "::" #field); \
  static_assert(sizeof(ours::field) == sizeof(theirs::field), #ours "::" #field " size")
#define SAME_VALUE(ours, theirs) static_assert(static_cast<long>(ours) == static_cast<long>(theirs), #ours)

SAME_LAYOUT(san::CallbackData, Sanitizer_CallbackData);
SAME_FIELD(san::CallbackData, Sanitizer_CallbackData, callbackSite);
SAME_FIELD(san::CallbackData, Sanitizer_CallbackData, functionName);
SAME_FIELD(san::CallbackData, Sanitizer_CallbackData, functionParams);
SAME_FIELD(san::CallbackData, Sanitizer_CallbackData, functionReturnValue);
SAME_FIELD(san::CallbackData, Sanitizer_CallbackData, symbolName);
SAME_FIELD(san::CallbackData, Sanitizer_CallbackData, context);
SAME_VALUE(san::kApiEnter, SANITIZER_API_ENTER);
SAME_VALUE(san::kApiExit, SANITIZER_API_EXIT);

SAME_LAYOUT(san::ResourceContextData, Sanitizer_ResourceContextData);
SAME_FIELD(san::ResourceContextData, Sanitizer_ResourceContextData, context);
SAME_FIELD(san::ResourceContextData, Sanitizer_ResourceContextData, device);

SAME_LAYOUT(san::ResourceModuleData, Sanitizer_ResourceModuleData);
SAME_FIELD(san::ResourceModuleData, Sanitizer_ResourceModuleData, context);
SAME_FIELD(san::ResourceModuleData, Sanitizer_ResourceModuleData, module);
SAME_FIELD(san::ResourceModuleData, Sanitizer_ResourceModuleData, cubinSize);
SAME_FIELD(san::ResourceModuleData, Sanitizer_ResourceModuleData, pCubin);
SAME_FIELD(san::ResourceModuleData, Sanitizer_ResourceModuleData, library);

SAME_LAYOUT(san::SynchronizeData, Sanitizer_SynchronizeData);
SAME_FIELD(san::SynchronizeData, Sanitizer_SynchronizeData, context);
SAME_FIELD(san::SynchronizeData, Sanitizer_SynchronizeData, stream);
SAME_FIELD(san::SynchronizeData, Sanitizer_SynchronizeData, hStream);

SAME_LAYOUT(san::LaunchData, Sanitizer_LaunchData);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, context);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, stream);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, hStream);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, module);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, function);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, functionName);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, gridDim_x);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, gridDim_y);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, gridDim_z);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, blockDim_x);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, blockDim_y);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, blockDim_z);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, clusterDim_x);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, clusterDim_z);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, gridId);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, hLaunch);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, device);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, apiContext);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, apiStream);
SAME_FIELD(san::LaunchData, Sanitizer_LaunchData, hApiStream);

// The driver callback ids the patch backend decodes (cupti_hook/cupti_launch.h)
// are CUPTI's.
SAME_VALUE(SANITIZER_CBID_DRIVER_API_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
SAME_VALUE(SANITIZER_CBID_DRIVER_API_cuLaunchKernel_ptsz, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz);
SAME_VALUE(SANITIZER_CBID_DRIVER_API_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx);
SAME_VALUE(SANITIZER_CBID_DRIVER_API_cuLaunchKernelEx_ptsz,
           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz);
SAME_VALUE(SANITIZER_CBID_DRIVER_API_cuLaunchCooperativeKernel,
           CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel);
SAME_VALUE(SANITIZER_CBID_DRIVER_API_cuLaunchCooperativeKernel_ptsz,
           CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz);
SAME_VALUE(san::kSuccess, SANITIZER_SUCCESS);
SAME_VALUE(san::kErrorNotInitialized, SANITIZER_ERROR_NOT_INITIALIZED);
SAME_VALUE(san::kDomainDriverApi, SANITIZER_CB_DOMAIN_DRIVER_API);
SAME_VALUE(san::kDomainResource, SANITIZER_CB_DOMAIN_RESOURCE);
SAME_VALUE(san::kDomainSynchronize, SANITIZER_CB_DOMAIN_SYNCHRONIZE);
SAME_VALUE(san::kDomainLaunch, SANITIZER_CB_DOMAIN_LAUNCH);
SAME_VALUE(san::kResourceContextCreationFinished, SANITIZER_CBID_RESOURCE_CONTEXT_CREATION_FINISHED);
SAME_VALUE(san::kResourceContextDestroyStarting, SANITIZER_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
SAME_VALUE(san::kResourceModuleLoaded, SANITIZER_CBID_RESOURCE_MODULE_LOADED);
SAME_VALUE(san::kResourceModuleUnloadStarting, SANITIZER_CBID_RESOURCE_MODULE_UNLOAD_STARTING);
SAME_VALUE(san::kLaunchBegin, SANITIZER_CBID_LAUNCH_BEGIN);
SAME_VALUE(san::kLaunchEnd, SANITIZER_CBID_LAUNCH_END);
SAME_VALUE(san::kStreamSynchronized, SANITIZER_CBID_SYNCHRONIZE_STREAM_SYNCHRONIZED);
SAME_VALUE(san::kContextSynchronized, SANITIZER_CBID_SYNCHRONIZE_CONTEXT_SYNCHRONIZED);
SAME_VALUE(san::kBlockEnter, SANITIZER_INSTRUCTION_BLOCK_ENTER);
SAME_VALUE(san::kBlockExit, SANITIZER_INSTRUCTION_BLOCK_EXIT);
SAME_VALUE(san::kGlobalMemoryAccess, SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS);
SAME_VALUE(san::kSharedMemoryAccess, SANITIZER_INSTRUCTION_SHARED_MEMORY_ACCESS);
SAME_VALUE(san::kLocalMemoryAccess, SANITIZER_INSTRUCTION_LOCAL_MEMORY_ACCESS);
SAME_VALUE(san::kMemcpyAsync, SANITIZER_INSTRUCTION_MEMCPY_ASYNC);

SAME_VALUE(san::kMemoryRead, SANITIZER_MEMORY_DEVICE_FLAG_READ);
SAME_VALUE(san::kMemoryWrite, SANITIZER_MEMORY_DEVICE_FLAG_WRITE);
SAME_VALUE(san::kMemoryAtomSys, SANITIZER_MEMORY_DEVICE_FLAG_ATOMSYS);
SAME_VALUE(san::kMemoryPrefetch, SANITIZER_MEMORY_DEVICE_FLAG_PREFETCH);

// The enums cuprobe passes by value have the size of the real ones.
static_assert(sizeof(san::Domain) == sizeof(Sanitizer_CallbackDomain));
static_assert(sizeof(san::Instruction) == sizeof(Sanitizer_InstructionId));
static_assert(sizeof(san::Result) == sizeof(SanitizerResult));
static_assert(sizeof(Sanitizer_CallbackId) == sizeof(uint32_t));

// The entry points: ours must be callable where theirs are (same parameter
// and result types, up to cuprobe's names for the same types).
template <typename T>
constexpr size_t kSize = sizeof(T);
template <>
constexpr size_t kSize<void> = 0;
template <typename Ours, typename Theirs>
constexpr bool kSameArity = false;
template <typename R1, typename... A1, typename R2, typename... A2>
constexpr bool kSameArity<R1 (*)(A1...), R2 (*)(A2...)> =
    sizeof...(A1) == sizeof...(A2) && kSize<R1> == kSize<R2> &&
    ((sizeof(A1) == sizeof(A2)) && ...);
#define SAME_ENTRY(field, real) \
  static_assert(kSameArity<decltype(san::Api::field), decltype(&real)>, #real)
SAME_ENTRY(Subscribe, sanitizerSubscribe);
SAME_ENTRY(Unsubscribe, sanitizerUnsubscribe);
SAME_ENTRY(EnableCallback, sanitizerEnableCallback);
SAME_ENTRY(EnableDomain, sanitizerEnableDomain);
SAME_ENTRY(GetResultString, sanitizerGetResultString);
SAME_ENTRY(AddPatches, sanitizerAddPatches);
SAME_ENTRY(PatchInstructions, sanitizerPatchInstructions);
SAME_ENTRY(PatchModule, sanitizerPatchModule);
SAME_ENTRY(SetCallbackData, sanitizerSetCallbackData);
SAME_ENTRY(SetLaunchCallbackData, sanitizerSetLaunchCallbackData);
SAME_ENTRY(MemcpyHostToDeviceAsync, sanitizerMemcpyHostToDeviceAsync);
static_assert(kSameArity<san::CallbackFunc, Sanitizer_CallbackFunc>, "Sanitizer_CallbackFunc");

// The callback signatures the adapters of ptx_rewriter/patch_adapters.cc
// are written for (.b64 pointers and pcs, .b32 sizes and flags).
static_assert(std::is_same_v<SanitizerCallbackBlockEnter, SanitizerPatchResult (*)(void*, uint64_t)>);
static_assert(std::is_same_v<SanitizerCallbackBlockExit, SanitizerPatchResult (*)(void*, uint64_t)>);
static_assert(std::is_same_v<SanitizerCallbackMemoryAccess,
                             SanitizerPatchResult (*)(void*, uint64_t, void*, uint32_t, uint32_t,
                                                      const void*)>);
static_assert(std::is_same_v<SanitizerCallbackMemcpyAsync,
                             SanitizerPatchResult (*)(void*, uint64_t, void*, uint32_t, uint32_t)>);
static_assert(sizeof(SanitizerPatchResult) == 4);

int main() {
  std::printf("ok: cupti_hook/sanitizer_api.h matches the Compute Sanitizer headers\n");
  return 0;
}
