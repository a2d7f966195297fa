// File: tests/maps/helpers_ptx_test.cc
//
// The GPU helper library artifact (maps/gpu/helpers_ptx.h): the embedded text
// is the generated file; it exports exactly the helper symbols of
// include/cuprobe/abi.h with all-.b64 signatures; the real ptxas assembles
// it for sm_90; nvJitLink links it with a probe-like module that calls
// every helper (what the rewriter's link step and the hook do), on this
// machine, without a GPU; and every helper stays within its register budget
// (nvJitLink gives an instrumented kernel the largest register count of its
// call graph, so a helper's count is a floor for every kernel that calls it).
#include "maps/gpu/helpers_ptx.h"

#include <nvJitLink.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cuprobe/abi.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuprobe {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Helper symbol -> number of .b64 parameters (abi.h's comments).
const std::map<std::string, int>& ExpectedHelpers() {
  static const auto* helpers = new std::map<std::string, int>{
      {CUPROBE_HELPER_SYMBOL_MAP_LOOKUP, 2},      {CUPROBE_HELPER_SYMBOL_MAP_UPDATE, 4},
      {CUPROBE_HELPER_SYMBOL_MAP_DELETE, 2},      {CUPROBE_HELPER_SYMBOL_MAP_ADD, 3},
      {CUPROBE_HELPER_SYMBOL_HIST_ADD, 3},        {CUPROBE_HELPER_SYMBOL_RINGBUF_OUTPUT, 4},
      {CUPROBE_HELPER_SYMBOL_RINGBUF_RESERVE, 3}, {CUPROBE_HELPER_SYMBOL_RINGBUF_SUBMIT, 2},
      {CUPROBE_HELPER_SYMBOL_RINGBUF_DISCARD, 2}, {CUPROBE_HELPER_SYMBOL_PID_TGID, 0},
      // Specialized entry points (ABI v3).
      {CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_ARRAY, 2},
      {CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_PERTHREAD, 2},
      {CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_PERWARP, 2},
      {CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_PERSM, 2},
      {CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_HASH, 2},
      {CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_HASH_WORD, 2},
      {CUPROBE_HELPER_SYMBOL_MAP_ADD_ARRAY, 3},
      {CUPROBE_HELPER_SYMBOL_MAP_ADD_PERTHREAD, 3},
      {CUPROBE_HELPER_SYMBOL_MAP_ADD_PERWARP, 3},
      {CUPROBE_HELPER_SYMBOL_MAP_ADD_PERSM, 3},
      {CUPROBE_HELPER_SYMBOL_MAP_ADD_HASH, 3},
      {CUPROBE_HELPER_SYMBOL_MAP_ADD_HASH_WORD, 3},
      {CUPROBE_HELPER_SYMBOL_HIST_ADD_LOG2, 3},
      {CUPROBE_HELPER_SYMBOL_HIST_ADD_LINEAR, 3},
      // The end of an inline reservation (ABI v5).
      {CUPROBE_HELPER_SYMBOL_RINGBUF_RESERVE_AT, 4},
      // Two-word HASH keys by value (ABI v10).
      {CUPROBE_HELPER_SYMBOL_MAP_ADD_HASH_2WORD, 4},
  };
  return *helpers;
}

TEST(HelpersPtx, EmbeddedTextIsTheGeneratedFile) {
  const std::string file = ReadFile(CUPROBE_HELPERS_PTX_PATH);
  ASSERT_FALSE(file.empty()) << CUPROBE_HELPERS_PTX_PATH;
  EXPECT_EQ(std::string(HelpersPtx()), file);
  EXPECT_THAT(std::string(HelpersPtx()), ::testing::HasSubstr(".target sm_90"));
}

TEST(HelpersPtx, ExportsExactlyTheAbiHelpersWithB64Signatures) {
  const std::string ptx(HelpersPtx());
  // .visible .func  (.param .b64 func_retval0) NAME(\n .param .b64 NAME_param_0, ...)
  const std::regex func(R"(\.visible\s+\.func\s+\(([^)]*)\)\s*([A-Za-z_$][\w$]*)\s*\(([^)]*)\))");
  std::map<std::string, int> found;
  for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), func); it != std::sregex_iterator();
       ++it) {
    const std::string ret = (*it)[1];
    const std::string name = (*it)[2];
    const std::string params = (*it)[3];
    EXPECT_THAT(ret, ::testing::MatchesRegex(R"(\s*\.param\s+\.b64\s+\w+\s*)")) << name;
    int count = 0;
    const std::regex param(R"(\.param\s+(\.\w+)\s+\w+)");
    for (auto p = std::sregex_iterator(params.begin(), params.end(), param);
         p != std::sregex_iterator(); ++p) {
      EXPECT_EQ((*p)[1], ".b64") << name << " parameter " << count;
      ++count;
    }
    found[name] = count;
  }
  EXPECT_EQ(found, ExpectedHelpers());
  // The one global, and nothing else visible.
  const std::regex global(R"(\.visible\s+\.global\s+\.align\s+8\s+\.u64\s+([\w$]+)\s*;)");
  std::vector<std::string> globals;
  for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), global); it != std::sregex_iterator();
       ++it) {
    globals.push_back((*it)[1]);
  }
  EXPECT_THAT(globals, ::testing::ElementsAre(CUPROBE_PID_TGID_SYMBOL));
  size_t visible = 0;
  for (size_t pos = ptx.find(".visible"); pos != std::string::npos;
       pos = ptx.find(".visible", pos + 1)) {
    ++visible;
  }
  EXPECT_EQ(visible, ExpectedHelpers().size() + 1);
  EXPECT_EQ(ptx.find(".extern"), std::string::npos) << "the library must be self-contained";
}

TEST(HelpersPtx, PtxasAssemblesItForSm90) {
  const std::string out = std::string(CUPROBE_BINARY_DIR) + "/tests/helpers_ptx_test.o";
  const std::string cmd = std::string(CUPROBE_PTXAS) + " -arch=sm_90 -c " +
                          CUPROBE_HELPERS_PTX_PATH + " -o " + out + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string log;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) log += buf;
  const int rc = ::pclose(pipe);
  EXPECT_EQ(rc, 0) << log;
  std::remove(out.c_str());
}

// A module shaped like the compiler's output: a probe .func that declares
// the helpers .extern and calls each one with map addresses from the table.
constexpr char kProbeModule[] = R"(
.version 8.5
.target sm_90
.address_size 64
.extern .func (.param .b64 r) __cuprobe_map_lookup(.param .b64 a, .param .b64 b);
.extern .func (.param .b64 r) __cuprobe_map_update(.param .b64 a, .param .b64 b, .param .b64 c, .param .b64 d);
.extern .func (.param .b64 r) __cuprobe_map_delete(.param .b64 a, .param .b64 b);
.extern .func (.param .b64 r) __cuprobe_map_add(.param .b64 a, .param .b64 b, .param .b64 c);
.extern .func (.param .b64 r) __cuprobe_hist_add(.param .b64 a, .param .b64 b, .param .b64 c);
.extern .func (.param .b64 r) __cuprobe_ringbuf_output(.param .b64 a, .param .b64 b, .param .b64 c, .param .b64 d);
.extern .func (.param .b64 r) __cuprobe_ringbuf_reserve(.param .b64 a, .param .b64 b, .param .b64 c);
.extern .func (.param .b64 r) __cuprobe_ringbuf_submit(.param .b64 a, .param .b64 b);
.extern .func (.param .b64 r) __cuprobe_ringbuf_discard(.param .b64 a, .param .b64 b);
.extern .func (.param .b64 r) __cuprobe_pid_tgid();
.visible .global .align 8 .u64 __cuprobe_map_table[2];

.visible .entry probe_kernel(.param .u64 out)
{
  .reg .b64 %rd<20>;
  .local .align 8 .b8 key[16];
  mov.u64 %rd10, 3;
  st.local.u64 [key], %rd10;
  st.local.u64 [key+8], %rd10;
  cvta.local.u64 %rd1, key;
  ld.global.u64 %rd2, [__cuprobe_map_table];
  ld.global.u64 %rd3, [__cuprobe_map_table+8];
  { .param .b64 a; .param .b64 b; .param .b64 r;
    st.param.b64 [a], %rd2; st.param.b64 [b], %rd1;
    call.uni (r), __cuprobe_map_lookup, (a, b); ld.param.b64 %rd4, [r]; }
  { .param .b64 a; .param .b64 b; .param .b64 c; .param .b64 d; .param .b64 r;
    st.param.b64 [a], %rd2; st.param.b64 [b], %rd1; st.param.b64 [c], %rd1; st.param.b64 [d], 0;
    call.uni (r), __cuprobe_map_update, (a, b, c, d); ld.param.b64 %rd5, [r]; }
  { .param .b64 a; .param .b64 b; .param .b64 r;
    st.param.b64 [a], %rd2; st.param.b64 [b], %rd1;
    call.uni (r), __cuprobe_map_delete, (a, b); ld.param.b64 %rd6, [r]; }
  { .param .b64 a; .param .b64 b; .param .b64 c; .param .b64 r;
    st.param.b64 [a], %rd2; st.param.b64 [b], %rd1; st.param.b64 [c], 1;
    call.uni (r), __cuprobe_map_add, (a, b, c); ld.param.b64 %rd7, [r]; }
  { .param .b64 a; .param .b64 b; .param .b64 c; .param .b64 r;
    st.param.b64 [a], %rd2; st.param.b64 [b], %rd10; st.param.b64 [c], 1;
    call.uni (r), __cuprobe_hist_add, (a, b, c); ld.param.b64 %rd8, [r]; }
  { .param .b64 a; .param .b64 b; .param .b64 c; .param .b64 d; .param .b64 r;
    st.param.b64 [a], %rd3; st.param.b64 [b], %rd1; st.param.b64 [c], 16; st.param.b64 [d], 0;
    call.uni (r), __cuprobe_ringbuf_output, (a, b, c, d); ld.param.b64 %rd9, [r]; }
  { .param .b64 a; .param .b64 b; .param .b64 c; .param .b64 r;
    st.param.b64 [a], %rd3; st.param.b64 [b], 16; st.param.b64 [c], 0;
    call.uni (r), __cuprobe_ringbuf_reserve, (a, b, c); ld.param.b64 %rd11, [r]; }
  { .param .b64 a; .param .b64 b; .param .b64 r;
    st.param.b64 [a], %rd11; st.param.b64 [b], 0;
    call.uni (r), __cuprobe_ringbuf_submit, (a, b); ld.param.b64 %rd12, [r]; }
  { .param .b64 a; .param .b64 b; .param .b64 r;
    st.param.b64 [a], %rd11; st.param.b64 [b], 0;
    call.uni (r), __cuprobe_ringbuf_discard, (a, b); ld.param.b64 %rd13, [r]; }
  { .param .b64 r;
    call.uni (r), __cuprobe_pid_tgid, (); ld.param.b64 %rd14, [r]; }
  add.u64 %rd4, %rd4, %rd5; add.u64 %rd4, %rd4, %rd6; add.u64 %rd4, %rd4, %rd7;
  add.u64 %rd4, %rd4, %rd8; add.u64 %rd4, %rd4, %rd9; add.u64 %rd4, %rd4, %rd12;
  add.u64 %rd4, %rd4, %rd13; add.u64 %rd4, %rd4, %rd14;
  ld.param.u64 %rd15, [out];
  st.global.u64 [%rd15], %rd4;
  ret;
}
)";

// Links `module` with the helper library for sm_90; returns the error log.
std::string LinkWithHelpers(const std::string& module) {
  nvJitLinkHandle handle = nullptr;
  const char* options[] = {"-arch=sm_90"};
  if (nvJitLinkCreate(&handle, 1, options) != NVJITLINK_SUCCESS) return "nvJitLinkCreate failed";
  const std::string helpers(HelpersPtx());
  nvJitLinkResult r =
      nvJitLinkAddData(handle, NVJITLINK_INPUT_PTX, module.data(), module.size(), "module.ptx");
  if (r == NVJITLINK_SUCCESS) {
    r = nvJitLinkAddData(handle, NVJITLINK_INPUT_PTX, helpers.data(), helpers.size(),
                         "cuprobe_helpers.ptx");
  }
  if (r == NVJITLINK_SUCCESS) r = nvJitLinkComplete(handle);
  std::string log;
  size_t log_size = 0;
  if (r != NVJITLINK_SUCCESS) {
    log = "link failed";
    if (nvJitLinkGetErrorLogSize(handle, &log_size) == NVJITLINK_SUCCESS && log_size > 1) {
      log.resize(log_size);
      (void)nvJitLinkGetErrorLog(handle, log.data());
    }
  }
  nvJitLinkDestroy(&handle);
  return log;
}

TEST(HelpersPtx, TheGpuTestKernelsLinkAgainstIt) {
  // What maps_gpu_test and maps_bench load on the GPU machine: checked here.
  const std::string kernels = ReadFile(CUPROBE_MAP_KERNELS_PTX);
  ASSERT_FALSE(kernels.empty()) << CUPROBE_MAP_KERNELS_PTX;
  EXPECT_EQ(LinkWithHelpers(kernels), "");
}

TEST(HelpersPtx, NvJitLinkLinksAProbeModuleAgainstIt) {
  nvJitLinkHandle handle = nullptr;
  const char* options[] = {"-arch=sm_90"};
  ASSERT_EQ(nvJitLinkCreate(&handle, 1, options), NVJITLINK_SUCCESS);
  const std::string helpers(HelpersPtx());
  nvJitLinkResult r = nvJitLinkAddData(handle, NVJITLINK_INPUT_PTX, kProbeModule,
                                       sizeof(kProbeModule) - 1, "probe.ptx");
  EXPECT_EQ(r, NVJITLINK_SUCCESS);
  r = nvJitLinkAddData(handle, NVJITLINK_INPUT_PTX, helpers.data(), helpers.size(),
                       "cuprobe_helpers.ptx");
  EXPECT_EQ(r, NVJITLINK_SUCCESS);
  const nvJitLinkResult done = nvJitLinkComplete(handle);
  size_t log_size = 0;
  std::string log;
  if (nvJitLinkGetErrorLogSize(handle, &log_size) == NVJITLINK_SUCCESS && log_size > 1) {
    log.resize(log_size);
    (void)nvJitLinkGetErrorLog(handle, log.data());
  }
  EXPECT_EQ(done, NVJITLINK_SUCCESS) << log;
  size_t cubin_size = 0;
  if (done == NVJITLINK_SUCCESS) {
    ASSERT_EQ(nvJitLinkGetLinkedCubinSize(handle, &cubin_size), NVJITLINK_SUCCESS);
    std::vector<char> cubin(cubin_size);
    ASSERT_EQ(nvJitLinkGetLinkedCubin(handle, cubin.data()), NVJITLINK_SUCCESS);
    ASSERT_GE(cubin.size(), 4u);
    EXPECT_EQ(std::string(cubin.data() + 1, 3), "ELF");
  }
  nvJitLinkDestroy(&handle);
}

// Registers of a kernel that only calls `helper`, as nvJitLink reports them
// for the linked cubin (its -verbose info log), per helper.
std::map<std::string, int> HelperRegisterCounts() {
  std::string module = ".version 8.5\n.target sm_90\n.address_size 64\n";
  for (const auto& [name, n] : ExpectedHelpers()) {
    std::string args, stores;
    for (int i = 0; i < n; ++i) {
      args += (i ? ", a" : "a") + std::to_string(i);
      stores += "  .param .b64 a" + std::to_string(i) + "; ld.param.u64 %rd1, [p" +
                std::to_string(i) + "]; st.param.b64 [a" + std::to_string(i) + "], %rd1;\n";
    }
    std::string decl = ".extern .func (.param .b64 r) " + name + "(";
    std::string entry = ".visible .entry k_" + name + "(";
    for (int i = 0; i < n; ++i) {
      decl += std::string(i ? ", " : "") + ".param .b64 d" + std::to_string(i);
      entry += ".param .u64 p" + std::to_string(i) + ", ";
    }
    decl += ");\n";
    entry += ".param .u64 out)\n{\n  .reg .b64 %rd<4>;\n  {\n" + stores +
             "  .param .b64 r;\n  call.uni (r), " + name + ", (" + args +
             ");\n  ld.param.b64 %rd2, [r];\n  }\n  ld.param.u64 %rd3, [out];\n"
             "  st.global.u64 [%rd3], %rd2;\n  ret;\n}\n";
    module += decl + entry;
  }
  std::map<std::string, int> counts;
  nvJitLinkHandle handle = nullptr;
  const char* options[] = {"-arch=sm_90", "-verbose"};
  if (nvJitLinkCreate(&handle, 2, options) != NVJITLINK_SUCCESS) return counts;
  const std::string helpers(HelpersPtx());
  nvJitLinkResult r =
      nvJitLinkAddData(handle, NVJITLINK_INPUT_PTX, module.data(), module.size(), "kernels.ptx");
  if (r == NVJITLINK_SUCCESS) {
    r = nvJitLinkAddData(handle, NVJITLINK_INPUT_PTX, helpers.data(), helpers.size(),
                         "cuprobe_helpers.ptx");
  }
  if (r == NVJITLINK_SUCCESS) r = nvJitLinkComplete(handle);
  size_t size = 0;
  std::string log;
  if (r == NVJITLINK_SUCCESS && nvJitLinkGetInfoLogSize(handle, &size) == NVJITLINK_SUCCESS &&
      size > 1) {
    log.resize(size);
    (void)nvJitLinkGetInfoLog(handle, log.data());
  }
  nvJitLinkDestroy(&handle);
  // info    : Function properties for 'k_NAME':
  // info    : used 38 registers, used 0 barriers, 0 stack, ...
  const std::regex props(R"(Function properties for 'k_([\w$]+)':\s*\n[^\n]*used (\d+) registers)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), props); it != std::sregex_iterator();
       ++it) {
    counts[(*it)[1]] = std::stoi((*it)[2]);
  }
  return counts;
}

TEST(HelpersPtx, EveryHelperStaysWithinItsRegisterBudget) {
  // Budgets: what the helper needs (CUDA 13.0's nvJitLink, sm_90) plus a
  // little room. Indexed lookups and adds are a few loads and one atomic;
  // HASH keys of up to 8 bytes search with one word; the generic and
  // byte-key HASH paths carry unaligned key reads; ring reservations carry
  // the group reservation. The budgets of the hot paths keep a kernel that
  // calls them at full occupancy or close (64 registers: 1024 threads/SM).
  const std::map<std::string, int> budget = {
      {CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_ARRAY, 32},
      // PER* lookups count an out-of-range id, one atomic per
      // warp: the warp vote costs registers. Compiled probes inline these
      // lookups; the entry points serve hand-written PTX.
      {CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_PERTHREAD, 40},
      {CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_PERWARP, 40},
      {CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_PERSM, 40},
      {CUPROBE_HELPER_SYMBOL_MAP_ADD_ARRAY, 48},
      {CUPROBE_HELPER_SYMBOL_MAP_ADD_PERTHREAD, 48},
      {CUPROBE_HELPER_SYMBOL_MAP_ADD_PERWARP, 48},
      {CUPROBE_HELPER_SYMBOL_MAP_ADD_PERSM, 48},
      {CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_HASH_WORD, 64},
      {CUPROBE_HELPER_SYMBOL_MAP_ADD_HASH_WORD, 64},
      // The second word and the grouping by both cost what the byte-key
      // path's unaligned reads do (in mem_regions on vec_add the kernel
      // ends at 46 registers).
      {CUPROBE_HELPER_SYMBOL_MAP_ADD_HASH_2WORD, 88},
      {CUPROBE_HELPER_SYMBOL_HIST_ADD_LOG2, 48},
      {CUPROBE_HELPER_SYMBOL_HIST_ADD_LINEAR, 64},
      {CUPROBE_HELPER_SYMBOL_RINGBUF_SUBMIT, 32},
      {CUPROBE_HELPER_SYMBOL_RINGBUF_DISCARD, 32},
      {CUPROBE_HELPER_SYMBOL_PID_TGID, 32},
      {CUPROBE_HELPER_SYMBOL_RINGBUF_OUTPUT, 96},
      {CUPROBE_HELPER_SYMBOL_RINGBUF_RESERVE, 96},
      {CUPROBE_HELPER_SYMBOL_RINGBUF_RESERVE_AT, 96},
      {CUPROBE_HELPER_SYMBOL_MAP_LOOKUP_HASH, 96},
      {CUPROBE_HELPER_SYMBOL_MAP_ADD_HASH, 96},
      {CUPROBE_HELPER_SYMBOL_HIST_ADD, 64},
      {CUPROBE_HELPER_SYMBOL_MAP_LOOKUP, 96},
      {CUPROBE_HELPER_SYMBOL_MAP_ADD, 96},
      {CUPROBE_HELPER_SYMBOL_MAP_UPDATE, 96},
      {CUPROBE_HELPER_SYMBOL_MAP_DELETE, 96},
  };
  const std::map<std::string, int> counts = HelperRegisterCounts();
  ASSERT_EQ(counts.size(), ExpectedHelpers().size()) << "nvJitLink's info log changed format?";
  for (const auto& [name, used] : counts) {
    ASSERT_TRUE(budget.contains(name)) << name << " has no budget";
    EXPECT_LE(used, budget.at(name)) << name;
    std::printf("%-36s %3d registers (budget %d)\n", name.c_str(), used, budget.at(name));
  }
}

}  // namespace
}  // namespace cuprobe
