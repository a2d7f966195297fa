// File: cupti_hook/trace_output.h
//
// Where a running hook sends its records and status: the session segment made
// by `cuprobe trace` (SessionOutput), or, when CUDA_INJECTION64_PATH was set by
// hand, an in-process collector that writes the trace itself at exit
// (StandaloneOutput). The hook calls everything but Write from its own init
// and teardown only; Write is called by tracer threads through the tracer's
// gate, so Release() never races a writer.
#ifndef CUPROBE_CUPTI_HOOK_TRACE_OUTPUT_H_
#define CUPROBE_CUPTI_HOOK_TRACE_OUTPUT_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "cupti_hook/init_state.h"
#include "cupti_hook/record_sink.h"
#include "cupti_hook/tracer.h"

namespace cuprobe {

class MapsRegion;
class Session;

class TraceOutput : public RecordSink {
 public:
  // The hook's state (and the reason, for DISABLED) for readers.
  virtual void PublishStatus(HookState state, std::string_view reason) = 0;
  // Heartbeat and counters; called by the watcher and at teardown.
  virtual void PublishStats(const TracerStats& stats, uint64_t now_ns) = 0;
  // End of the run: the standalone output writes its report here.
  [[nodiscard]] virtual absl::Status Finish() = 0;
  // Unmaps / frees. Nothing may touch the output afterwards.
  virtual void Release() = 0;
  // For messages: "session cuprobe-...", "file ./cuprobe-123.json".
  [[nodiscard]] virtual std::string Describe() const = 0;
  // The probe bundle the session carries (`cuprobe run`; empty when it only
  // traces) and the maps region its maps are published to. Valid until
  // Release(); the bytes are shared memory: parse a copy.
  [[nodiscard]] virtual absl::Span<const uint8_t> BundleBytes() const { return {}; }
  [[nodiscard]] virtual MapsRegion* Maps() { return nullptr; }
  // The session segment, where late-attach requests arrive (`cuprobe
  // attach`); nullptr when there is none (standalone). Valid until Release().
  [[nodiscard]] virtual Session* AttachSession() { return nullptr; }
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_TRACE_OUTPUT_H_
