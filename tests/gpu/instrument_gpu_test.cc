// GPU tier: kernels instrumented offline with builtin:count (the library
// pipeline and the `cuprobe instrument` CLI), loaded with cuModuleLoadData,
// launched, and the per-kernel counts read back and compared exactly with
// the number of entries, exits and stores the launch makes. The kernels'
// own results must be unchanged. Skips when this machine has no GPU.
//
//   ctest --test-dir build -R instrument_gpu_test      (on the GPU machine)
//
// The driver is reached through dlopen("libcuda.so.1"), so the binary starts
// (and skips) on machines without one. The GPU helper library is the test
// stand-in (tests/ptx_rewriter/testdata/test_helpers.cu), whose map
// descriptor is {u64* values; u32 max_entries; u32 value_size}.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ptx_rewriter/builtin_probes.h"
#include "ptx_rewriter/compile.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The dozen driver entry points the test needs, from libcuda.so.1.
struct Driver {
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*ModuleLoadData)(CUmodule*, const void*);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*ModuleGetGlobal)(CUdeviceptr*, size_t*, CUmodule, const char*);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void**, void**);
  CUresult (*CtxSynchronize)();

  bool Load() {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return false;
    bool ok = true;
    auto get = [&](auto* fn, const char* name) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
      ok &= *fn != nullptr;
    };
    get(&Init, "cuInit");
    get(&DeviceGet, "cuDeviceGet");
    get(&DeviceGetAttribute, "cuDeviceGetAttribute");
    get(&PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    get(&CtxSetCurrent, "cuCtxSetCurrent");
    get(&ModuleLoadData, "cuModuleLoadData");
    get(&ModuleUnload, "cuModuleUnload");
    get(&ModuleGetFunction, "cuModuleGetFunction");
    get(&ModuleGetGlobal, "cuModuleGetGlobal_v2");
    get(&MemAlloc, "cuMemAlloc_v2");
    get(&MemFree, "cuMemFree_v2");
    get(&MemcpyHtoD, "cuMemcpyHtoD_v2");
    get(&MemcpyDtoH, "cuMemcpyDtoH_v2");
    get(&MemsetD8, "cuMemsetD8_v2");
    get(&LaunchKernel, "cuLaunchKernel");
    get(&CtxSynchronize, "cuCtxSynchronize");
    return ok;
  }
};

#define DRV_OK(call) ASSERT_EQ((call), CUDA_SUCCESS) << #call

// The test helper library's map descriptor.
struct TestMapDesc {
  uint64_t values;
  uint32_t max_entries;
  uint32_t value_size;
};

class InstrumentGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no GPU on this machine";
    ASSERT_TRUE(d_.Load());
    DRV_OK(d_.Init(0));
    CUdevice dev;
    DRV_OK(d_.DeviceGet(&dev, 0));
    int major = 0, minor = 0;
    DRV_OK(d_.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    DRV_OK(d_.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    sm_ = static_cast<uint32_t>(major * 10 + minor);
    CUcontext ctx;
    DRV_OK(d_.PrimaryCtxRetain(&ctx, dev));
    DRV_OK(d_.CtxSetCurrent(ctx));
    ptx_ = ReadAll(BuildDir() + "/tests/gpu/instrument_kernels.ptx");
    helpers_ = ReadAll(BuildDir() + "/tests/ptx_rewriter/fixtures/test_helpers.ptx");
    ASSERT_FALSE(ptx_.empty());
    ASSERT_FALSE(helpers_.empty());
  }

  // Instruments the test kernels (fill -> id 3, divergent -> id 7).
  std::vector<uint8_t> Instrument(bool entry, bool exit, bool memory) {
    BuiltinBundleOptions bo;
    bo.entry = entry;
    bo.exit = exit;
    bo.memory = memory;
    absl::StatusOr<ProbeBundle> bundle = BuiltinBundle("builtin:count", bo);
    EXPECT_TRUE(bundle.ok()) << bundle.status();
    InstrumentOptions options;
    options.helper_ptx = helpers_;
    options.sm = sm_;
    options.kernel_ids = {{"fill", 3}, {"divergent", 7}};
    absl::StatusOr<InstrumentedModule> m =
        InstrumentAndCompile(ptx_, *bundle, options, CompileCache::Disabled());
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return {};
    EXPECT_EQ(m->instrumented.size(), 2u);
    return m->cubin;
  }

  struct Counts {
    uint64_t fill = 0, divergent = 0;
  };

  // Loads `cubin`, points map 0 at a fresh zeroed array, runs both kernels,
  // checks their results and returns the counts of their ids.
  // `divergent_id`: the kernel id the divergent kernel was given (fill has 3).
  void Run(const std::vector<uint8_t>& cubin, Counts* counts, int divergent_id = 7) {
    ASSERT_FALSE(cubin.empty());
    CUmodule mod;
    DRV_OK(d_.ModuleLoadData(&mod, cubin.data()));
    CUdeviceptr values, desc, table, out;
    size_t table_size = 0;
    DRV_OK(d_.MemAlloc(&values, kBuiltinCountMaxKernels * sizeof(uint64_t)));
    DRV_OK(d_.MemsetD8(values, 0, kBuiltinCountMaxKernels * sizeof(uint64_t)));
    TestMapDesc host_desc{values, kBuiltinCountMaxKernels, 8};
    DRV_OK(d_.MemAlloc(&desc, sizeof(host_desc)));
    DRV_OK(d_.MemcpyHtoD(desc, &host_desc, sizeof(host_desc)));
    DRV_OK(d_.ModuleGetGlobal(&table, &table_size, mod, "__cuprobe_map_table"));
    ASSERT_EQ(table_size, 8u);  // one map
    const uint64_t desc_address = desc;
    DRV_OK(d_.MemcpyHtoD(table, &desc_address, 8));

    DRV_OK(d_.MemAlloc(&out, kThreads * sizeof(int)));
    DRV_OK(d_.MemsetD8(out, 0xff, kThreads * sizeof(int)));
    CUfunction fill, divergent;
    DRV_OK(d_.ModuleGetFunction(&fill, mod, "fill"));
    DRV_OK(d_.ModuleGetFunction(&divergent, mod, "divergent"));
    int n = kN;
    void* fill_args[] = {&out, &n};
    DRV_OK(d_.LaunchKernel(fill, kThreads / kBlock, 1, 1, kBlock, 1, 1, 0, nullptr, fill_args, nullptr));
    DRV_OK(d_.CtxSynchronize());
    std::vector<int> host(kThreads);
    DRV_OK(d_.MemcpyDtoH(host.data(), out, kThreads * sizeof(int)));
    for (int i = 0; i < kThreads; ++i) {
      ASSERT_EQ(host[i], i < kN ? i : -1) << "fill's result changed at " << i;
    }
    CUdeviceptr out2;
    DRV_OK(d_.MemAlloc(&out2, kDivergentThreads * sizeof(int)));
    DRV_OK(d_.MemsetD8(out2, 0, kDivergentThreads * sizeof(int)));
    void* div_args[] = {&out2};
    DRV_OK(d_.LaunchKernel(divergent, 1, 1, 1, kDivergentThreads, 1, 1, 0, nullptr, div_args, nullptr));
    DRV_OK(d_.CtxSynchronize());
    std::vector<int> host2(kDivergentThreads);
    DRV_OK(d_.MemcpyDtoH(host2.data(), out2, kDivergentThreads * sizeof(int)));
    for (int t = 0; t < kDivergentThreads; ++t) {
      ASSERT_EQ(host2[t], t % 3 == 0 ? 1 : t % 3 == 1 ? 0 : 2) << "divergent's result at " << t;
    }
    std::vector<uint64_t> v(8);
    DRV_OK(d_.MemcpyDtoH(v.data(), values, v.size() * 8));
    counts->fill = v[3];
    counts->divergent = v[divergent_id];
    for (int i = 0; i < 8; ++i) {
      if (i != 3 && i != divergent_id) {
        EXPECT_EQ(v[i], 0u) << "count at unused id " << i;
      }
    }
    DRV_OK(d_.MemFree(out));
    DRV_OK(d_.MemFree(out2));
    DRV_OK(d_.MemFree(desc));
    DRV_OK(d_.MemFree(values));
    DRV_OK(d_.ModuleUnload(mod));
  }

  static constexpr int kBlock = 256;
  static constexpr int kThreads = 1000 * kBlock;   // launched
  static constexpr int kN = 200003;                // stores by fill
  static constexpr int kDivergentThreads = 96;
  static constexpr uint64_t kDivergentStores = 64;  // tid % 3 != 1

  Driver d_{};
  uint32_t sm_ = 90;
  std::string ptx_, helpers_;
};

TEST_F(InstrumentGpuTest, EntryCountsEveryThread) {
  Counts c;
  ASSERT_NO_FATAL_FAILURE(Run(Instrument(true, false, false), &c));
  EXPECT_EQ(c.fill, uint64_t{kThreads});
  EXPECT_EQ(c.divergent, uint64_t{kDivergentThreads});
}

TEST_F(InstrumentGpuTest, ExitCountsEveryRetAndExit) {
  Counts c;
  ASSERT_NO_FATAL_FAILURE(Run(Instrument(false, true, false), &c));
  EXPECT_EQ(c.fill, uint64_t{kThreads});
  EXPECT_EQ(c.divergent, uint64_t{kDivergentThreads});
}

TEST_F(InstrumentGpuTest, MemoryCountsEveryStore) {
  Counts c;
  ASSERT_NO_FATAL_FAILURE(Run(Instrument(false, false, true), &c));
  EXPECT_EQ(c.fill, uint64_t{kN});
  EXPECT_EQ(c.divergent, kDivergentStores);
}

TEST_F(InstrumentGpuTest, AllAttachPointsAddUp) {
  Counts c;
  ASSERT_NO_FATAL_FAILURE(Run(Instrument(true, true, true), &c));
  EXPECT_EQ(c.fill, uint64_t{2 * kThreads + kN});
  EXPECT_EQ(c.divergent, 2 * uint64_t{kDivergentThreads} + kDivergentStores);
}

TEST_F(InstrumentGpuTest, CliInstrumentedCubinLoadsAndCounts) {
  // The same through `cuprobe instrument`: ids are assigned in module order
  // from --kernel-id (fill first), so fill gets 3 and divergent 4.
  const std::string cubin = BuildDir() + "/tests/gpu/instrument_cli.cubin";
  ProcessResult r = RunProcess(
      {BuildDir() + "/bin/cuprobe", "instrument", "--probe", "builtin:count", "--entry",
       "--kernel-id", "3", "--sm", std::to_string(sm_), "--helpers",
       BuildDir() + "/tests/ptx_rewriter/fixtures/test_helpers.ptx",
       BuildDir() + "/tests/gpu/instrument_kernels.ptx", "-o", cubin},
      {{"CUPROBE_CACHE_DIR", "off"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string bytes = ReadAll(cubin);
  Counts c;
  ASSERT_NO_FATAL_FAILURE(Run(std::vector<uint8_t>(bytes.begin(), bytes.end()), &c, 4));
  EXPECT_EQ(c.fill, uint64_t{kThreads});
  EXPECT_EQ(c.divergent, uint64_t{kDivergentThreads});
}

}  // namespace
}  // namespace cuprobe::testing
