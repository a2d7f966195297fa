// File: support/cuda_status.h
//
// Converts the result codes of the CUDA driver, CUPTI and nvJitLink into
// absl::Status, keeping the text of the call that failed, e.g.
//
//   INTERNAL: cuptiSubscribe_v2(&subscriber, ...) failed: CUPTI_ERROR_UNKNOWN (999)
//
// Only headers of the toolkit are used here; nothing links the driver. The
// seam wraps each call it makes:
//
//   CUPROBE_RETURN_IF_ERROR(CUPROBE_CUPTI_CALL(cuptiUnsubscribe(subscriber_)));
#ifndef CUPROBE_SUPPORT_CUDA_STATUS_H_
#define CUPROBE_SUPPORT_CUDA_STATUS_H_

#include <cuda.h>
#include <cupti_result.h>
#include <nvJitLink.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace cuprobe {

// "CUDA_ERROR_INVALID_VALUE", or "CUresult 12345" for a code this build does
// not know.
[[nodiscard]] std::string CuResultName(CUresult result);
[[nodiscard]] std::string CuptiResultName(CUptiResult result);
[[nodiscard]] std::string NvJitLinkResultName(nvJitLinkResult result);

// OK for success; otherwise a status whose code follows the failure's kind
// (e.g. CUDA_ERROR_OUT_OF_MEMORY -> RESOURCE_EXHAUSTED) and whose message
// names `call` and the result.
[[nodiscard]] absl::Status CuResultToStatus(CUresult result, std::string_view call);
[[nodiscard]] absl::Status CuptiResultToStatus(CUptiResult result, std::string_view call);
[[nodiscard]] absl::Status NvJitLinkResultToStatus(nvJitLinkResult result,
                                                   std::string_view call);

}  // namespace cuprobe

#define CUPROBE_CU_CALL(call) ::cuprobe::CuResultToStatus((call), #call)
#define CUPROBE_CUPTI_CALL(call) ::cuprobe::CuptiResultToStatus((call), #call)
#define CUPROBE_NVJITLINK_CALL(call) ::cuprobe::NvJitLinkResultToStatus((call), #call)

#endif  // CUPROBE_SUPPORT_CUDA_STATUS_H_
