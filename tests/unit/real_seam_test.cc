// The real seam on this machine. Without a CUDA driver (CI, build machines)
// CUPTI answers cuptiSubscribe_v2 with an error and every driver call fails
// cleanly; with one (the GPU machine) subscribing works.
#include "cupti_hook/real_seam.h"

#include <dlfcn.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;

bool DriverPresent() {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return false;
  ::dlclose(lib);
  return true;
}

void CUPTIAPI NoOp(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

TEST(RealSeam, SubscribeFailsCleanlyWithoutDriver) {
  if (DriverPresent()) GTEST_SKIP() << "a CUDA driver is installed here";
  RealSeam seam;
  std::string other;
  absl::Status s = seam.Subscribe(&NoOp, nullptr, "cuprobe-test", &other);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("cuptiSubscribe_v2"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  // Nothing was subscribed, so unsubscribing is a no-op.
  EXPECT_TRUE(seam.Unsubscribe().ok());
}

TEST(RealSeam, DriverCallsFailCleanlyWithoutDriver) {
  if (DriverPresent()) GTEST_SKIP() << "a CUDA driver is installed here";
  RealSeam seam;
  absl::StatusOr<std::string> name = seam.KernelName(nullptr);
  ASSERT_FALSE(name.ok());
  EXPECT_THAT(name.status().message(), HasSubstr("libcuda.so.1"));
  EXPECT_FALSE(seam.FunctionName(nullptr).ok());
  EXPECT_FALSE(seam.CurrentDeviceSm().ok());
  EXPECT_FALSE(seam.LibraryGlobal(nullptr, "x").ok());
  EXPECT_FALSE(seam.ModuleGlobal(nullptr, "x").ok());
  uint64_t v = 0;
  EXPECT_FALSE(seam.MemcpyHtoD(0, &v, sizeof(v)).ok());
  // The one driver table of the process says why it is missing, every time.
  absl::StatusOr<const CudaDriver*> driver = seam.Driver();
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(driver.status().message(), HasSubstr("libcuda.so.1"));
  EXPECT_EQ(LoadCudaDriver().status(), driver.status());
}

// The seam loads the driver once and resolves every entry point of the
// table (support/cuda_driver.h) that the hook, the maps and the tests use.
TEST(RealSeam, DriverTableIsCompleteWithDriver) {
  if (!DriverPresent()) GTEST_SKIP() << "no CUDA driver on this machine";
  RealSeam seam;
  absl::StatusOr<const CudaDriver*> driver = seam.Driver();
  ASSERT_TRUE(driver.ok()) << driver.status();
  EXPECT_EQ(*LoadCudaDriver(), *driver) << "one table per process";
  const CudaDriver& d = **driver;
  EXPECT_TRUE(d.redirect_status.ok()) << d.redirect_status;
  for (const void* fn :
       {reinterpret_cast<const void*>(d.Init), reinterpret_cast<const void*>(d.CtxGetCurrent),
        reinterpret_cast<const void*>(d.MemCreate), reinterpret_cast<const void*>(d.LaunchKernel),
        reinterpret_cast<const void*>(d.LibraryGetGlobal),
        reinterpret_cast<const void*>(d.ThreadExchangeStreamCaptureMode),
        reinterpret_cast<const void*>(d.KernelGetAttribute),
        reinterpret_cast<const void*>(d.EventQuery)}) {
    EXPECT_NE(fn, nullptr);
  }
  CUcontext none = reinterpret_cast<CUcontext>(1);
  ASSERT_EQ(d.Init(0), CUDA_SUCCESS);
  EXPECT_EQ(d.CtxGetCurrent(&none), CUDA_SUCCESS);
}

TEST(RealSeam, DeviceSmWithDriver) {
  if (!DriverPresent()) GTEST_SKIP() << "no CUDA driver on this machine";
  // In an application the driver is initialized before any callback runs;
  // here the test does it. No context is current: the seam uses device 0.
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW);
  ASSERT_NE(lib, nullptr);
  auto init = reinterpret_cast<int (*)(unsigned)>(::dlsym(lib, "cuInit"));
  ASSERT_NE(init, nullptr);
  ASSERT_EQ(init(0), 0);
  RealSeam seam;
  absl::StatusOr<uint32_t> sm = seam.CurrentDeviceSm();
  ASSERT_TRUE(sm.ok()) << sm.status();
  EXPECT_GE(*sm, 50u);
  EXPECT_LE(*sm, 200u);
  RecordProperty("sm", static_cast<int>(*sm));
}

TEST(RealSeam, SubscribesWithDriver) {
  if (!DriverPresent()) GTEST_SKIP() << "no CUDA driver on this machine";
  RealSeam seam;
  std::string other;
  absl::Status s = seam.Subscribe(&NoOp, nullptr, "cuprobe-test", &other);
  ASSERT_TRUE(s.ok()) << s << " (other subscriber: '" << other << "')";
  EXPECT_NE(seam.Timestamp(), 0u);
  EXPECT_TRUE(seam.Unsubscribe().ok());
}

}  // namespace
}  // namespace cuprobe
