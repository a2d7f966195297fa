// File: tests/unit/hook_test_util.h
//
// The rig of hook_test (tests/unit/hook_*_test.cc and hook_test.cc): a Hook
// wired to a fake seam and a fake output, and what the tests fire through
// it as CUPTI would (launches, profiler start/stop calls, activity records),
// plus reading the records the hook wrote and capturing its log lines.
//
//   Rig rig;
//   ASSERT_EQ(rig.hook.Start(), HookState::kReady);
//   auto p = KernelParams(&k, 8, 64, nullptr);
//   Launch(rig.seam, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 5, 10, 20);
//   LaunchRecord r = Body<LaunchRecord>(rig.output.OfType(RecordType::kLaunch)[0]);
#ifndef CUPROBE_TESTS_UNIT_HOOK_TEST_UTIL_H_
#define CUPROBE_TESTS_UNIT_HOOK_TEST_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cupti_hook/hook.h"
#include "cupti_hook/testing/fake_output.h"
#include "cupti_hook/testing/fake_seam.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/log.h"

namespace cuprobe::testing {

// Log lines written while it lives (SetLogFd), returned by Take().
class StderrCapture {
 public:
  StderrCapture() {
    EXPECT_EQ(::pipe(fds_), 0);
    SetLogFd(fds_[1]);
  }
  ~StderrCapture() { SetLogFd(2); }
  std::string Take() {
    SetLogFd(2);
    ::close(fds_[1]);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds_[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    ::close(fds_[0]);
    return out;
  }

 private:
  int fds_[2];
};

// The body of a record the fake output kept, as its struct.
template <typename T>
T Body(const FakeOutput::Written& w) {
  T t;
  EXPECT_GE(w.bytes.size(), sizeof(T));
  std::memcpy(&t, w.bytes.data(), sizeof(T));
  return t;
}

// The name that `out`'s name records give `id` ("<missing>" if none).
std::string NameOf(const FakeOutput& out, uint64_t id);

// A hook wired to a fake seam and output, with a short watcher interval.
struct Rig {
  std::vector<std::string> events;
  FakeSeam seam;
  FakeOutput output{&events};
  HookConfig config;
  Hook hook;

  // A long default interval: no watcher tick touches the fakes while a test
  // reads them (Stop wakes the watcher at once); tests of ticks pass their own.
  // `tweak` changes the configuration further (measuring switches).
  explicit Rig(uint32_t interval_ms = 60000, std::string_view trace = "",
               const std::function<void(HookConfig&)>& tweak = {})
      : hook(seam, MakeConfig(interval_ms, trace, tweak),
             [this](const HookConfig&) -> absl::StatusOr<TraceOutput*> { return &output; }) {
    seam.events = &events;
  }
  static HookConfig MakeConfig(uint32_t interval_ms, std::string_view trace = "",
                               const std::function<void(HookConfig&)>& tweak = {}) {
    HookConfig c;
    c.pid = 4242;
    c.program = "./app";
    c.interval_ms = interval_ms;
    if (tweak) tweak(c);
    if (!trace.empty()) {
      EXPECT_THAT(c.SetTraceSelection(trace), ::testing::IsEmpty());
    }
    return c;
  }
};

// Fires one launch (ENTER then EXIT) as CUPTI would.
void Launch(FakeSeam& seam, CUpti_CallbackId cbid, void* params, uint32_t correlation,
            uint64_t t_enter, uint64_t t_exit);

// Fires one cuLaunchKernel (ENTER then EXIT) straight into the hook, as
// CUPTI does on the launching thread; unlike Launch, it touches no shared
// fake state, so many threads may call it at once.
void LaunchFromThisThread(Hook& hook, cuLaunchKernel_params* params, uint32_t correlation);

// cuLaunchKernel's parameters: a grid of gx x 2, blocks of bx, 128 bytes of
// dynamic shared memory, on `stream`.
cuLaunchKernel_params KernelParams(void* f, unsigned gx, unsigned bx, void* stream);

// With a capture range, the activity stays on from Start until the
// program's first launch returns (Hook::prewarm_pending_): one launch, at
// CUPTI's current clock, so that tests of the ranges' own switching start
// with it off.
void FirstLaunchReturns(Rig& rig);

// A `step` kernel's activity record (10 ns long, stream 7), queued as CUPTI
// writes it.
void QueueStepKernel(FakeSeam& seam, uint32_t correlation, uint64_t start);

// A profiler call fired as CUPTI fires it (ENTER and EXIT).
void ProfilerCall(FakeSeam& seam, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                  uint32_t correlation);

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_UNIT_HOOK_TEST_UTIL_H_
