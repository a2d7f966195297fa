#include "support/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace cuprobe {
namespace {

#include "support/cuda_result_names.inc"

std::string NameOr(const char* name, std::string_view type, int code) {
  if (name != nullptr) return name;
  return absl::StrCat(type, " ", code);
}

absl::Status MakeError(absl::StatusCode code, std::string_view call, const std::string& name,
                       int value) {
  return absl::Status(code, absl::StrCat(call, " failed: ", name, " (", value, ")"));
}

}  // namespace

std::string CuResultName(CUresult result) {
  return NameOr(CuResultNameImpl(result), "CUresult", static_cast<int>(result));
}

std::string CuptiResultName(CUptiResult result) {
  return NameOr(CuptiResultNameImpl(result), "CUptiResult", static_cast<int>(result));
}

std::string NvJitLinkResultName(nvJitLinkResult result) {
  return NameOr(NvJitLinkResultNameImpl(result), "nvJitLinkResult", static_cast<int>(result));
}

absl::Status CuResultToStatus(CUresult result, std::string_view call) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (result) {
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case CUDA_ERROR_OUT_OF_MEMORY:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_STUB_LIBRARY:
      code = absl::StatusCode::kFailedPrecondition;
      break;
    case CUDA_ERROR_NOT_FOUND:
      code = absl::StatusCode::kNotFound;
      break;
    case CUDA_ERROR_NOT_SUPPORTED:
      code = absl::StatusCode::kUnimplemented;
      break;
    default:
      break;
  }
  return MakeError(code, call, CuResultName(result), static_cast<int>(result));
}

absl::Status CuptiResultToStatus(CUptiResult result, std::string_view call) {
  if (result == CUPTI_SUCCESS) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (result) {
    case CUPTI_ERROR_INVALID_PARAMETER:
    case CUPTI_ERROR_INVALID_KIND:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case CUPTI_ERROR_OUT_OF_MEMORY:
    case CUPTI_ERROR_MAX_LIMIT_REACHED:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      code = absl::StatusCode::kAlreadyExists;
      break;
    case CUPTI_ERROR_NOT_INITIALIZED:
    case CUPTI_ERROR_DISABLED:
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
      code = absl::StatusCode::kFailedPrecondition;
      break;
    case CUPTI_ERROR_NOT_SUPPORTED:
    case CUPTI_ERROR_API_NOT_IMPLEMENTED:
      code = absl::StatusCode::kUnimplemented;
      break;
    case CUPTI_ERROR_UNKNOWN:
      // What CUPTI returns when no driver can be loaded at all.
      code = absl::StatusCode::kUnavailable;
      break;
    default:
      break;
  }
  return MakeError(code, call, CuptiResultName(result), static_cast<int>(result));
}

absl::Status NvJitLinkResultToStatus(nvJitLinkResult result, std::string_view call) {
  if (result == NVJITLINK_SUCCESS) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (result) {
    case NVJITLINK_ERROR_UNRECOGNIZED_OPTION:
    case NVJITLINK_ERROR_MISSING_ARCH:
    case NVJITLINK_ERROR_INVALID_INPUT:
    case NVJITLINK_ERROR_PTX_COMPILE:
    case NVJITLINK_ERROR_NVVM_COMPILE:
    case NVJITLINK_ERROR_INCORRECT_INPUT_TYPE:
    case NVJITLINK_ERROR_UNRECOGNIZED_INPUT:
    case NVJITLINK_ERROR_NULL_INPUT:
    case NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS:
    case NVJITLINK_ERROR_UNRECOGNIZED_ARCH:
    case NVJITLINK_ERROR_UNSUPPORTED_ARCH:
      code = absl::StatusCode::kInvalidArgument;
      break;
    default:
      break;
  }
  return MakeError(code, call, NvJitLinkResultName(result), static_cast<int>(result));
}

}  // namespace cuprobe
