// File: cupti_hook/hook_config.h
//
// Everything the hook can be told, read from the environment once, in
// InitializeInjection (HookConfig::FromEnvironment); nothing below the hook
// reads the environment. `cuprobe trace` and `cuprobe run` set these
// variables for the program they start (docs/CLI.md lists them).
//
//   Hook hook(seam, HookConfig::FromEnvironment(), MakeTraceOutput);
#ifndef CUPROBE_CUPTI_HOOK_HOOK_CONFIG_H_
#define CUPROBE_CUPTI_HOOK_HOOK_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cupti_hook/tracer.h"
#include "maps/map_set.h"
#include "probe/capture_range_end.h"
#include "ptx_rewriter/settings.h"

namespace cuprobe {

// Which way probes reach kernels (`cuprobe run --backend`, CUPROBE_BACKEND).
enum class Backend : uint8_t {
  // CUPTI tracing; kernels with PTX are rewritten (ptx_rewriter/). Kernels
  // without PTX are named in one line and left alone.
  kPtx,
  // With probes: the Compute Sanitizer's callbacks, kernels with PTX
  // rewritten as under kPtx and the others patched as under kPatch
  // (cupti_hook/hook_patch.cc). Without probes, or without the Sanitizer
  // (one line says so): kPtx.
  kAuto,
  // The Compute Sanitizer's callbacks instead of CUPTI's; every kernel a
  // probe selects is patched (cupti_hook/kernel_patcher.h), SASS-only ones
  // included. Launches are traced from the launch callbacks, without GPU
  // kernel times.
  kPatch,
};

struct HookConfig {
  // CUPROBE_SESSION: the session segment created by `cuprobe` (empty when the
  // injection path was set by hand: standalone mode).
  std::string session;
  // CUPROBE_OUTPUT: where standalone mode writes its trace
  // (default ./cuprobe-<pid>.pftrace; a path ending in .json gets Chrome JSON).
  std::string output;
  // CUPROBE_INTERVAL_MS: watcher period.
  uint32_t interval_ms = 100;
  uint32_t pid = 0;
  std::string program;  // for the trace: argv[0] of the app
  // CUPROBE_TRACE: what to trace, a comma-separated subset of "launches"
  // (driver launch callbacks: API time, grid, stream), "kernels" (CUPTI
  // concurrent-kernel activity: GPU start/end) and "memory" (memcpy and
  // memset activity). Default: all three. An unknown word is ignored with a
  // warning. Kernel activity is what costs most on launch-bound programs
  // (docs/PERFORMANCE.md); "launches" alone is the cheapest full count.
  bool trace_launches = true;
  bool trace_kernels = true;
  bool trace_memory = true;
  // CUPROBE_LATE_ATTACH=0 turns late attach off: the hook then keeps no
  // module images and never redirects a launch (cupti_hook/late_attach.h).
  bool late_attach = true;
  // CUPROBE_LIST=1 (`cuprobe list -- cmd`): every module load publishes its
  // kernels and their backends (CatalogKernelRecord). Needs late attach's
  // image registry.
  bool list_kernels = false;
  // CUPROBE_DIAG (the benchmarks' measuring switches, a list of words; not
  // a user setting) is read here and nowhere else.
  // CUPROBE_DIAG=serial-kernels:
  // kernels are timed with CUPTI's serialized kernel activity
  // (CUPTI_ACTIVITY_KIND_KERNEL), which does not instrument kernels but
  // keeps kernels of different streams from overlapping, instead of the
  // concurrent-kernel activity (bench/overhead_breakdown.sh compares them).
  bool serial_kernels = false;
  // Launch API times from CUPTI's API activity for the launch calls alone
  // (cuptiActivityEnableDriverApi for the driver's, cuptiActivityEnableRuntimeApi
  // for the runtime's) instead of launch callbacks, when
  // kernels are traced too: the activity record carries the call's times,
  // thread and result, and the kernel record of the same correlation id its
  // name, grid and block (TraceData joins them). No launch callback runs
  // then, until a late attach asks for one. CUPROBE_LAUNCH_TIMES=activity or
  // callbacks (the default: activity passes the GPU tests but was not
  // measurably cheaper on the H200, docs/PERFORMANCE.md).
  bool launch_api_activity = false;
  // CUPROBE_CAPTURE_RANGE=cudaProfilerApi (`cuprobe trace --capture-range`):
  // only calls between the program's cudaProfilerStart and cudaProfilerStop
  // (or the driver's cuProfilerStart and cuProfilerStop) are traced
  // (cupti_hook/capture_range.h). CUPROBE_CAPTURE_RANGE=none: everything.
  // CUPTI's kernel, memcpy and memset activity is then on only while a
  // range is open (and between ranges back to back: RangeActivity).
  bool capture_profiler_api = false;
  // CUPROBE_CAPTURE_RANGE_END (`--capture-range-end`): how many ranges, and
  // whether a stop call ends one (probe/capture_range_end.h).
  CaptureRangeEnd capture_range_end;
  // CUPROBE_DIAG=capture-activity-on (a measuring switch): with a capture
  // range, CUPTI's activity stays on the whole run; only the records are
  // filtered (what bench/run.sh compares the default with).
  bool capture_activity_on = false;
  // CUPROBE_DIAG=activity-at-context (a measuring switch): without a
  // capture range, the activity kinds are turned off after Start's check and
  // on again when the first context is created, from its callback. On the
  // H200 a range's activity, turned on mid-run, looked cheaper than the
  // same activity on from Start (docs/PERFORMANCE.md); this tells whether
  // turning it on once a context exists is what matters.
  bool activity_at_context = false;
  // CUPROBE_DIAG=no-linger (a measuring switch): every range's stop turns
  // the activity off, back to back or not (what a switch costs).
  bool no_linger = false;
  // CUPROBE_DIAG=no-prewarm (a measuring switch): with a capture range, the
  // activity is off from Start until the first range (as before the
  // pre-warm: Hook::prewarm_pending_), so the first range's first launch
  // pays CUPTI's one-time set-up.
  bool no_prewarm = false;
  // CUPROBE_DIAG=no-launch-records, no-kernel-records, no-timestamps (the
  // tracer's measuring switches: bench/overhead_breakdown.sh). Chosen once:
  // the launch path then runs another handler rather than testing a flag.
  TracerDiag tracer_diag;
  // Where PTX is looked for when a module is a cubin without any (Triton's
  // cache: $TRITON_CACHE_DIR, ~/.triton/cache; ptx_rewriter/image_pipeline.h).
  std::vector<std::string> ptx_search_roots;
  // CUPROBE_RING_DATA: where the probes' ring buffer records go
  // (maps/map_set.h): speculative (device memory, reserve first; the
  // default), device (device memory, check the head first) or host (the
  // segment itself, over the bus); the last two are for comparisons.
  RingData ring_data = RingData::kDeviceSpeculative;
  // TMPDIR (default /tmp): where instrumented cubins for file-based module
  // loads are written.
  std::string tmp_dir = "/tmp";
  // The rewriter's and the PTX compiler's settings (ptx_rewriter/settings.h:
  // CUPROBE_CACHE_DIR, CUPROBE_PTX_COMPILER, CUDA_HOME, ...), put in force
  // by Hook::Start.
  RewriterSettings rewriter;
  // CUPROBE_BACKEND: ptx (the default), auto or patch.
  Backend backend = Backend::kPtx;
  // CUPROBE_PATCH_ASYNC_COPIES=1: with the patch backend, memory probes see
  // cp.async copies (global -> shared) too, as global loads. Off by
  // default: patching them costs far more than every other global access
  // on the gemms that use them (docs/PERFORMANCE.md).
  bool patch_async_copies = false;
  // Where libsanitizer-public.so is tried, in order: $CUDA_HOME's and
  // /usr/local/cuda's compute-sanitizer folder, then the loader's path.
  std::vector<std::string> sanitizer_paths;

  // Parses a CUPROBE_TRACE value into the three switches above; returns the
  // words it did not understand (empty when all were fine).
  std::vector<std::string> SetTraceSelection(std::string_view list);

  // The environment, read once (the only getenv of the hook). Unknown
  // values are ignored with one warning each.
  [[nodiscard]] static HookConfig FromEnvironment();
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_HOOK_CONFIG_H_
