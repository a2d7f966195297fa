// CPU tier: the offline pipeline on every sample. Each sample probe is
// compiled from its C source (`cuprobe compile`: clang-19, the verifier, PTX)
// and applied to its workload with `cuprobe instrument` (rewrite, link the
// helper library, compile an sm_90 cubin), which must instrument exactly the
// kernels the probe selects, with the expected probe sites.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct SampleCase {
  std::string name;                 // the ctest name
  std::string probe;                // under samples/
  std::string workload;             // under build/samples/, or a path in the source tree
                                    // (tests/...: PTX a GPU run produced)
  std::vector<std::string> attach;  // instrument's attach flags: the probe's sections
  int kernels;                      // kernels the probe's globs select
  std::vector<std::string> expect;  // lines of the report
};

void PrintTo(const SampleCase& c, std::ostream* os) { *os << c.name; }

const std::string kVecAdd = "vec_add(float const*, float const*, float*, int)  [_Z7vec_addPKfS0_Pfi]";
const std::string kScale = "scale(float*, float, int)  [_Z5scalePffi]";
const std::string kHarness =
    "harness(unsigned long, unsigned long, unsigned long*, unsigned int)  [_Z7harnessmmPmj]";
const std::string kMatmul =
    "matmul_tiled(float const*, float const*, float*, int)  [_Z12matmul_tiledPKfS0_Pfi]";

const std::string kTritonAdd = "tests/samples/testdata/triton_add_kernel.ptx";

std::vector<SampleCase> Cases() {
  return {
      {"kernelretsnoop", "kernelretsnoop/kernelretsnoop.bpf.c", "vec_add", {"--exit"}, 1,
       {kVecAdd, "exit sites 1"}},
      {"cuda_counter", "cuda_counter/cuda_counter.bpf.c", "vec_add", {"--entry", "--exit"}, 2,
       {kVecAdd, kScale, "entry 1, exit sites 1"}},
      {"threadscheduling", "threadscheduling/threadscheduling.bpf.c", "threadscheduling",
       {"--entry"}, 1, {"place(unsigned int*)  [_Z5placePj]", "entry 1"}},
      // The early `exit` and the final `ret`: two exit sites.
      {"divergence", "divergence/divergence.bpf.c", "divergence", {"--entry", "--exit"}, 1,
       {"diverge(int const*, float*, int)  [_Z7divergePKiPfi]", "entry 1, exit sites 2"}},
      {"arglogger", "arglogger/arglogger.bpf.c", "arglogger", {"--entry"}, 2,
       {"axpy(float, float const*, float*, int)  [_Z4axpyfPKfPfi]",
        "stamp(unsigned long long*, unsigned long long, int, unsigned char, double, int)  "
        "[_Z5stampPyyihdi]"}},
      {"gpu_shared_map", "gpu_shared_map/gpu_shared_map.bpf.c", "gpu_shared_map", {"--entry"},
       1, {"bump(float*, int)  [_Z4bumpPfi]", "entry 1"}},
      {"directly_run", "directly_run/directly_run.bpf.c", "directly_run",
       {"--entry", "--exit", "--mem"}, 1,
       {kHarness, "entry 1", "exit sites 1"}},
      {"coalescing", "coalescing/coalescing.bpf.c", "directly_run", {"--mem"}, 1,
       {kHarness, "memory sites"}},
      {"warp_occupancy", "warp_occupancy/warp_occupancy.bpf.c", "matmul", {"--entry", "--exit"},
       1, {kMatmul, "entry 1, exit sites 1"}},
      // The reference probes (issue 7), and the benchmarks' empty probe.
      {"threadhist", "threadhist/threadhist.bpf.c", "vec_add", {"--exit"}, 1,
       {kVecAdd, "exit sites 1"}},
      {"kernel_trace", "kernel_trace/kernel_trace.bpf.c", "vec_add", {"--entry"}, 2,
       {kVecAdd, kScale, "entry 1"}},
      // The probe side of launchlate: block 0's start per grid id.
      {"launchlate", "launchlate/launchlate.bpf.c", "vec_add", {"--entry"}, 2,
       {kVecAdd, kScale, "entry 1"}},
      // matmul_tiled: 2 global loads, 1 global store and shared accesses;
      // the probe's counts are site constants.
      {"mem_trace", "mem_trace/mem_trace.bpf.c", "matmul", {"--mem"}, 1,
       {kMatmul, "memory sites"}},
      {"mem_regions", "mem_trace/mem_regions.bpf.c", "vec_add", {"--mem"}, 2,
       {kVecAdd, kScale, "memory sites"}},
      {"addr_trace", "mem_trace/addr_trace.bpf.c", "vec_add", {"--mem"}, 2,
       {kVecAdd, kScale, "memory sites"}},
      // Written for cuBLAS under --backend patch; offline it instruments
      // vec_add's PTX like any probe.
      {"cublas_probe", "cublas_probe/cublas_probe.bpf.c", "vec_add", {"--entry", "--mem"}, 2,
       {kVecAdd, kScale, "entry 1", "memory sites"}},
      {"cudagraph", "cudagraph/cudagraph.bpf.c", "cudagraph", {"--entry"}, 2,
       {"scale_add(float*, float, int)", "bump(int*, int)", "entry 1"}},
      {"empty", "probes/empty.bpf.c", "vec_add", {"--entry", "--exit"}, 2,
       {kVecAdd, kScale, "entry 1, exit sites 1"}},
      // Triton's own PTX for samples/triton_add (Triton 3.6 on the H200, from
      // its cache: LLVM's NVPTX output for sm_90a): the PyTorch samples'
      // Triton kernels go through this path.
      {"triton_entries", "torch_transformer/triton_entries.bpf.c", kTritonAdd, {"--entry"}, 1,
       {"add_kernel", "entry 1"}},
      {"kernel_trace_triton", "kernel_trace/kernel_trace.bpf.c", kTritonAdd, {"--entry"}, 1,
       {"add_kernel", "entry 1"}},
      {"coalescing_triton", "coalescing/coalescing.bpf.c", kTritonAdd, {"--mem"}, 1,
       {"add_kernel", "memory sites"}},
  };
}

// The report of `cuprobe instrument` to PTX, without its last line (the
// file written and the time taken), and the PTX; `flags` go before the
// workload.
std::pair<std::string, std::string> InstrumentToPtx(const std::string& bundle,
                                                    const std::vector<std::string>& flags,
                                                    const std::string& workload,
                                                    const std::string& ptx) {
  std::vector<std::string> argv = {BuildDir() + "/bin/cuprobe", "instrument", "-p", bundle};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {workload, "-o", ptx});
  ProcessResult r = RunProcess(argv, {{"CUPROBE_CACHE_DIR", "off"}}, 120);
  EXPECT_EQ(r.exit_code, 0) << r.out + r.err;
  return {r.out.substr(0, r.out.rfind("wrote ")), ReadWholeFile(ptx)};
}

class SampleOffline : public ::testing::TestWithParam<SampleCase> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cuprobe-samples-offline-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_P(SampleOffline, CompilesAndInstrumentsItsWorkload) {
  const SampleCase& c = GetParam();
  const std::string cuprobe = BuildDir() + "/bin/cuprobe";
  const std::string bundle = dir_ + "/" + c.name + ".cpb";
  ProcessResult compiled =
      RunProcess({cuprobe, "compile", SourceDir() + "/samples/" + c.probe, "-o", bundle});
  ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
  EXPECT_THAT(compiled.err, HasSubstr(" -> " + bundle));

  const std::string cubin = dir_ + "/" + c.name + ".cubin";
  std::vector<std::string> argv = {cuprobe, "instrument", "-p", bundle};
  argv.insert(argv.end(), c.attach.begin(), c.attach.end());
  const std::string workload = c.workload.rfind("tests/", 0) == 0
                                   ? SourceDir() + "/" + c.workload
                                   : SamplePath(c.workload);
  argv.insert(argv.end(), {"--stats", workload, "-o", cubin});
  // A fresh compile each time: the cache would skip the cubin's compilation.
  ProcessResult r = RunProcess(argv, {{"CUPROBE_CACHE_DIR", "off"}}, 240);
  const std::string report = r.out + r.err;
  ASSERT_EQ(r.exit_code, 0) << report;
  EXPECT_THAT(report, HasSubstr(absl::StrCat("instrumented ", c.kernels, " kernel(s) with ",
                                             std::filesystem::path(c.probe).filename().string())))
      << report;
  for (const std::string& line : c.expect) EXPECT_THAT(report, HasSubstr(line)) << report;
  EXPECT_THAT(report, Not(HasSubstr("error"))) << report;
  const std::string image = ReadWholeFile(cubin);
  ASSERT_GE(image.size(), 4u) << report;
  EXPECT_EQ(image.substr(0, 4), "\x7f" "ELF") << "an sm_90 cubin";

  // Without attach flags the bundle's own sections decide: the same kernels,
  // sites and PTX as the flags naming them.
  const auto [own_report, own_ptx] = InstrumentToPtx(bundle, {}, workload, dir_ + "/own.ptx");
  const auto [flags_report, flags_ptx] =
      InstrumentToPtx(bundle, c.attach, workload, dir_ + "/flags.ptx");
  EXPECT_THAT(own_report, HasSubstr(absl::StrCat("instrumented ", c.kernels, " kernel(s)")));
  EXPECT_EQ(own_report, flags_report);
  EXPECT_FALSE(own_ptx.empty());
  EXPECT_TRUE(own_ptx == flags_ptx) << "the PTX differs";
}

// `cuprobe compile` decides C or eBPF object by content, not by name, and
// `cuprobe instrument` takes a bundle's own attach points when no flag
// narrows them.
TEST(SampleOfflineCli, CompileByContentAndInstrumentWithTheBundlesAttachPoints) {
  char tmpl[] = "/tmp/cuprobe-samples-offline-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string cuprobe = BuildDir() + "/bin/cuprobe";
  // A C probe with no extension compiles as C.
  const std::string source = dir + "/threadhist";
  std::filesystem::copy_file(SourceDir() + "/samples/threadhist/threadhist.bpf.c", source);
  const std::string bundle = dir + "/threadhist.cpb";
  ProcessResult compiled = RunProcess({cuprobe, "compile", source, "-o", bundle});
  EXPECT_EQ(compiled.exit_code, 0) << compiled.err;
  EXPECT_THAT(compiled.err, HasSubstr(" -> " + bundle));
  // Neither C nor eBPF: clang's own error, not a missing object file.
  const std::string text = dir + "/passwd";
  {
    std::ofstream out(text);
    out << "root:x:0:0:root:/root:/bin/bash\n";
  }
  ProcessResult bad = RunProcess({cuprobe, "compile", text, "-o", dir + "/bad.cpb"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("clang could not compile " + text));
  EXPECT_THAT(bad.err, HasSubstr("error:"));
  EXPECT_THAT(bad.err, Not(HasSubstr("cannot open")));
  // The bundle's exit program, with no attach flag.
  const std::string ptx = dir + "/out.ptx";
  ProcessResult r = RunProcess({cuprobe, "instrument", "-p", bundle, "--stats",
                                SamplePath("vec_add"), "-o", ptx},
                               {{"CUPROBE_CACHE_DIR", "off"}}, 240);
  EXPECT_EQ(r.exit_code, 0) << r.out + r.err;
  EXPECT_THAT(r.out + r.err, HasSubstr("instrumented 1 kernel(s) with threadhist"));
  EXPECT_THAT(r.out + r.err, HasSubstr("exit sites 1"));
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Samples, SampleOffline, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<SampleCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace cuprobe::testing
