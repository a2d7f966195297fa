// File: cupti_hook/cupti_launch.h
//
// What a CUPTI launch callback's parameters say about the launch: the
// launch handle, grid and block, shared memory and stream, for each launch
// API the hook watches (Tracer::kLaunchCallbacks), and which API a driver
// or runtime callback id stands for.
//
//   LaunchShape shape;
//   if (ReadShape(cbid, data->functionParams, &shape)) use(shape.handle, shape.stream);
#ifndef CUPROBE_CUPTI_HOOK_CUPTI_LAUNCH_H_
#define CUPROBE_CUPTI_HOOK_CUPTI_LAUNCH_H_

#include <cupti.h>

#include <cstdint>

#include "probe/trace_records.h"

namespace cuprobe {

// The dimensions and stream of a launch, read from the API's parameters.
struct LaunchShape {
  const void* handle = nullptr;
  uint32_t grid[3] = {0, 0, 0};
  uint32_t block[3] = {0, 0, 0};
  uint32_t shared = 0;
  uint64_t stream = 0;
  LaunchApi api = LaunchApi::kLaunchKernel;
};


// The launch API a driver launch callback id stands for; false for other ids.
[[nodiscard]] bool LaunchApiOf(CUpti_CallbackId cbid, LaunchApi* api);
// The same for the runtime's launch calls (runtime API activity).
[[nodiscard]] bool RuntimeLaunchApiOf(CUpti_CallbackId cbid, LaunchApi* api);
// The shape of a driver launch callback's launch (`params`: its
// functionParams); false for other ids or no parameters. A graph launch has
// a stream and no handle.
[[nodiscard]] bool ReadShape(CUpti_CallbackId cbid, const void* params, LaunchShape* shape);
// The launch's kernelParams (one pointer per kernel parameter, to its
// value), or null: other ids, graph launches, arguments passed through
// `extra`. The Compute Sanitizer's driver callback ids are CUPTI's
// (tests/gpu/sanitizer_layout_check.cc), so its callbacks decode here too.
[[nodiscard]] void* const* KernelParams(CUpti_CallbackId cbid, const void* params);

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_CUPTI_LAUNCH_H_
