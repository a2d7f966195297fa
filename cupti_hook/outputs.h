// File: cupti_hook/outputs.h
//
// The two TraceOutputs of the hook:
//
//   SessionOutput     the session segment created by `cuprobe trace`
//                     (CUPROBE_SESSION): records go to its ring, status and
//                     stats to its header, for the CLI to read live.
//   StandaloneOutput  CUDA_INJECTION64_PATH set by hand: the timeline goes to
//                     CUPROBE_OUTPUT (default ./cuprobe-<pid>.pftrace),
//                     streamed as a Perfetto trace while the program runs,
//                     in bounded memory; a path ending in .json gets a
//                     Chrome JSON timeline instead, kept in memory until
//                     exit (for short runs).
//
//   absl::StatusOr<TraceOutput*> out = MakeTraceOutput(HookConfig::FromEnvironment());
#ifndef CUPROBE_CUPTI_HOOK_OUTPUTS_H_
#define CUPROBE_CUPTI_HOOK_OUTPUTS_H_

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "cupti_hook/hook.h"
#include "cupti_hook/trace_output.h"
#include "maps/segment.h"
#include "report/trace_data.h"
#include "report/trace_perfetto.h"

namespace cuprobe {

class SessionOutput final : public TraceOutput {
 public:
  // Opens and validates the segment; marks it attached by this process.
  static absl::StatusOr<TraceOutput*> Open(const std::string& name, uint32_t pid);

  bool Write(uint16_t type, const void* body, uint32_t body_size, const void* extra,
             uint32_t extra_size) override;
  void PublishStatus(HookState state, std::string_view reason) override;
  void PublishStats(const TracerStats& stats, uint64_t now_ns) override;
  absl::Status Finish() override { return absl::OkStatus(); }
  void Release() override;
  std::string Describe() const override;
  absl::Span<const uint8_t> BundleBytes() const override { return session_.bundle_bytes(); }
  MapsRegion* Maps() override { return &session_.maps(); }
  Session* AttachSession() override { return &session_; }

 private:
  explicit SessionOutput(Session session) : session_(std::move(session)) {}
  Session session_;
  TracerStats published_;  // this process's counts already added to the header
};

class StandaloneOutput final : public TraceOutput {
 public:
  // Opens the timeline at `path` (a Perfetto file is created now, so an
  // unwritable path fails here, before anything is traced).
  static absl::StatusOr<TraceOutput*> Open(const std::string& path);

  bool Write(uint16_t type, const void* body, uint32_t body_size, const void* extra,
             uint32_t extra_size) override;
  void PublishStatus(HookState state, std::string_view reason) override {}
  void PublishStats(const TracerStats& stats, uint64_t now_ns) override;
  absl::Status Finish() override;
  void Release() override {}
  std::string Describe() const override { return "file " + path_; }

 private:
  StandaloneOutput(std::string path, std::unique_ptr<PerfettoTimelineFile> perfetto)
      : path_(std::move(path)), perfetto_(std::move(perfetto)) {}

  const std::string path_;
  std::mutex mu_;
  // The streamed timeline; null for a Chrome timeline, which keeps every
  // record in `data_` until Finish.
  std::unique_ptr<PerfettoTimelineFile> perfetto_;
  bool finished_ = false;
  TraceData data_;
  TraceCounters counters_;  // the Perfetto timeline's decode counts
  uint64_t dropped_ = 0;
};

// The real OutputFactory: a session when config.session is set, else standalone.
[[nodiscard]] absl::StatusOr<TraceOutput*> MakeTraceOutput(const HookConfig& config);

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_OUTPUTS_H_
