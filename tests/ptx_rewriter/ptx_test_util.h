// File: tests/ptx_rewriter/ptx_test_util.h
//
// Helpers of the rewriter tests: run the real ptxas on PTX text, compare its
// resource-usage report, read test files.
//
//   absl::StatusOr<std::string> info = RunPtxas(ptx);       // ptxas -v output
//   EXPECT_EQ(ResourceReport(*info), ResourceReport(*original_info));
#ifndef CUPROBE_TESTS_PTX_REWRITER_PTX_TEST_UTIL_H_
#define CUPROBE_TESTS_PTX_REWRITER_PTX_TEST_UTIL_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "probe/bundle.h"

namespace cuprobe::testing {

// Assembles `ptx` with `ptxas -arch=<arch> -v`; the info output on success,
// an error carrying ptxas' messages otherwise.
absl::StatusOr<std::string> RunPtxas(std::string_view ptx, std::string_view arch = "sm_90");

// The lines of ptxas -v output that describe the generated code (registers,
// stack, spills, barriers, cmem, per function), in order, without timings.
std::string ResourceReport(std::string_view ptxas_output);

// Reads a whole file ("" and a test failure when it cannot).
std::string ReadTextFile(const std::string& path);
void WriteTextFile(const std::string& path, std::string_view text);

// The build's probes/NAME.cpb, every program attached to every kernel
// (an empty bundle and a test failure when it cannot be read).
ProbeBundle CompiledProbeBundle(std::string_view name);

// A fresh empty directory under $TMPDIR, removed by the caller.
std::string MakeTempDir();

// Runs a shell command, returning its exit status and collecting stdout+stderr.
int RunCommand(const std::string& command, std::string* output);

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_PTX_REWRITER_PTX_TEST_UTIL_H_
