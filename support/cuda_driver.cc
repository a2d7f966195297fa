// File: support/cuda_driver.cc
#include "support/cuda_driver.h"

#include "absl/strings/str_cat.h"
#include "support/cuda_status.h"

namespace cuprobe {

absl::Status CudaDriver::Check(CUresult result, std::string_view call) const {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  absl::Status s = CuResultToStatus(result, call);
  const char* text = nullptr;
  if (GetErrorString != nullptr && GetErrorString(result, &text) == CUDA_SUCCESS &&
      text != nullptr) {
    return absl::Status(s.code(), absl::StrCat(s.message(), ": ", text));
  }
  return s;
}

ScopedCurrentContext::ScopedCurrentContext(const CudaDriver* driver, CUcontext context)
    : driver_(driver) {
  if (context == nullptr) return;
  if (driver_ == nullptr) {
    status_ = absl::FailedPreconditionError("the CUDA driver is not loaded");
    return;
  }
  status_ = driver_->Check(driver_->CtxGetCurrent(&previous_), "cuCtxGetCurrent");
  if (!status_.ok() || previous_ == context) return;
  status_ = driver_->Check(driver_->CtxSetCurrent(context), "cuCtxSetCurrent");
  switched_ = status_.ok();
}

ScopedCurrentContext::~ScopedCurrentContext() {
  if (switched_) (void)driver_->CtxSetCurrent(previous_);
}

}  // namespace cuprobe
