#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/cuda_status.h"
#include "support/log.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  CUPROBE_ASSIGN_OR_RETURN(int h, Half(x));
  CUPROBE_ASSIGN_OR_RETURN(h, Half(h));
  return h;
}

absl::Status CheckEven(int x) {
  CUPROBE_RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnPropagatesValueAndError) {
  EXPECT_EQ(*Quarter(12), 3);
  absl::StatusOr<int> bad = Quarter(6);  // 6 -> 3 -> odd
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "odd");
}

TEST(StatusMacros, ReturnIfError) {
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(5).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaStatus, SuccessIsOk) {
  EXPECT_TRUE(CuResultToStatus(CUDA_SUCCESS, "cuInit(0)").ok());
  EXPECT_TRUE(CuptiResultToStatus(CUPTI_SUCCESS, "cuptiGetTimestamp").ok());
  EXPECT_TRUE(NvJitLinkResultToStatus(NVJITLINK_SUCCESS, "nvJitLinkCreate").ok());
}

TEST(CudaStatus, KeepsCallTextNameAndCode) {
  absl::Status s = CuResultToStatus(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc(&p, 1 << 40)");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "cuMemAlloc(&p, 1 << 40) failed: CUDA_ERROR_OUT_OF_MEMORY (2)");

  s = CuptiResultToStatus(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, "cuptiSubscribe_v2");
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (39)"));

  s = CuptiResultToStatus(CUPTI_ERROR_UNKNOWN, "cuptiSubscribe_v2");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("CUPTI_ERROR_UNKNOWN (999)"));

  s = NvJitLinkResultToStatus(NVJITLINK_ERROR_PTX_COMPILE, "nvJitLinkComplete(h)");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "nvJitLinkComplete(h) failed: NVJITLINK_ERROR_PTX_COMPILE (4)");
}

TEST(CudaStatus, MacroUsesTheCallText) {
  auto fails = [] { return CUDA_ERROR_INVALID_VALUE; };
  absl::Status s = CUPROBE_CU_CALL(fails());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "fails() failed: CUDA_ERROR_INVALID_VALUE (1)");
}

TEST(CudaStatus, UnknownCodesAreNamedByNumber) {
  EXPECT_EQ(CuResultName(static_cast<CUresult>(123456)), "CUresult 123456");
  EXPECT_EQ(CuptiResultName(static_cast<CUptiResult>(4242)), "CUptiResult 4242");
  EXPECT_EQ(CuResultName(CUDA_ERROR_NO_DEVICE), "CUDA_ERROR_NO_DEVICE");
}

TEST(Log, ParseLevels) {
  EXPECT_EQ(*ParseLogLevel("off"), LogLevel::kOff);
  EXPECT_EQ(*ParseLogLevel("ERROR"), LogLevel::kError);
  EXPECT_EQ(*ParseLogLevel(" warn "), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("5"), LogLevel::kTrace);
  absl::StatusOr<LogLevel> bad = ParseLogLevel("loud");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown log level 'loud'"));
}

// Captures what the logger writes, through a real pipe.
class LogCapture {
 public:
  LogCapture() {
    EXPECT_EQ(::pipe(fds_), 0);
    SetLogFd(fds_[1]);
  }
  ~LogCapture() {
    SetLogFd(2);
    ::close(fds_[0]);
  }
  std::string Take() {
    ::close(fds_[1]);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds_[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  int fds_[2];
};

TEST(Log, LevelFiltersAndFormats) {
  LogCapture capture;
  SetLogPrefix("cuprobe[42]");
  SetLogLevel(LogLevel::kInfo);
  int evaluated = 0;
  CUPROBE_LOG(kDebug, "hidden %d", ++evaluated);
  CUPROBE_LOG(kInfo, "ready with %d kernels", 3);
  CUPROBE_LOG(kWarning, "disk %s", "full");
  SetLogLevel(LogLevel::kOff);
  CUPROBE_LOG(kError, "also hidden");
  SetLogLevel(LogLevel::kWarning);
  SetLogPrefix("cuprobe");
  EXPECT_EQ(evaluated, 0) << "arguments of a disabled level must not be evaluated";
  EXPECT_EQ(capture.Take(),
            "cuprobe[42]: ready with 3 kernels\n"
            "cuprobe[42]: warning: disk full\n");
}

}  // namespace
}  // namespace cuprobe
