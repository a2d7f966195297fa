#include "cupti_hook/outputs.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "report/trace_chrome.h"
#include "report/trace_report.h"
#include "support/log.h"

namespace cuprobe {
namespace {

SessionState ToSessionState(HookState state) {
  switch (state) {
    case HookState::kReady: return SessionState::kHookReady;
    case HookState::kDisabled: return SessionState::kHookDisabled;
    case HookState::kStopping:
    case HookState::kStopped: return SessionState::kHookStopped;
    default: return SessionState::kHookAttached;
  }
}

}  // namespace

absl::StatusOr<TraceOutput*> SessionOutput::Open(const std::string& name, uint32_t pid) {
  absl::StatusOr<Session> session = Session::Open(name, /*writable=*/true);
  if (!session.ok()) {
    return absl::Status(session.status().code(),
                        absl::StrCat("session '", name, "' is not usable (",
                                     session.status().message(), ")"));
  }
  auto* out = new SessionOutput(std::move(*session));
  out->session_.header().hook_pid.store(pid, std::memory_order_release);
  (void)out->session_.SetHookStatus(static_cast<uint32_t>(HookState::kInitializing),
                                    SessionState::kHookAttached, "");
  return out;
}

bool SessionOutput::Write(uint16_t type, const void* body, uint32_t body_size, const void* extra,
                          uint32_t extra_size) {
  return session_.ring().Write(type, body, body_size, extra, extra_size);
}

void SessionOutput::PublishStatus(HookState state, std::string_view reason) {
  // A DISABLED hook keeps saying so (with its reason) after it stops.
  SessionState s = ToSessionState(state);
  if (state == HookState::kStopped && !reason.empty()) s = SessionState::kHookDisabled;
  (void)session_.SetHookStatus(static_cast<uint32_t>(state), s, reason);
}

void SessionOutput::PublishStats(const TracerStats& stats, uint64_t now_ns) {
  // Several processes may share the session: each adds what it counted
  // since its last publication, so the header holds the sum.
  SegmentHeader& h = session_.header();
  auto add = [](std::atomic<uint64_t>& total, uint64_t now, uint64_t& last) {
    if (now > last) total.fetch_add(now - last, std::memory_order_relaxed);
    last = std::max(last, now);
  };
  add(h.records_written, stats.records_written, published_.records_written);
  add(h.records_dropped, stats.records_dropped, published_.records_dropped);
  add(h.activity_buffers, stats.activity_buffers, published_.activity_buffers);
  add(h.activity_records_dropped, stats.activity_dropped, published_.activity_dropped);
  add(h.launches_seen, stats.launches, published_.launches);
  add(h.capture_ranges, stats.capture_ranges, published_.capture_ranges);
  h.heartbeat_ns.store(now_ns, std::memory_order_relaxed);
  h.heartbeat_count.fetch_add(1, std::memory_order_release);
}

void SessionOutput::Release() {
  // If the CLI that created the session is gone (killed), nobody else will
  // remove the name: do it so /dev/shm does not fill up with dead sessions.
  uint32_t creator = session_.header().creator_pid;
  if (creator != 0 && ::kill(static_cast<pid_t>(creator), 0) != 0 && errno == ESRCH) {
    (void)session_.Remove();
  }
  // Unmap: move the session into a temporary that dies here.
  Session gone = std::move(session_);
  (void)gone;
}

std::string SessionOutput::Describe() const { return absl::StrCat("session ", session_.name()); }

absl::StatusOr<TraceOutput*> StandaloneOutput::Open(const std::string& path) {
  if (absl::EndsWith(path, ".json")) return new StandaloneOutput(path, nullptr);
  absl::StatusOr<std::unique_ptr<PerfettoTimelineFile>> file = PerfettoTimelineFile::Open(path);
  if (!file.ok()) return file.status();
  return new StandaloneOutput(path, std::move(*file));
}

bool StandaloneOutput::Write(uint16_t type, const void* body, uint32_t body_size,
                             const void* extra, uint32_t extra_size) {
  std::vector<uint8_t> joined;
  absl::Span<const uint8_t> bytes(static_cast<const uint8_t*>(body), body_size);
  if (extra_size > 0) {  // a name record's text follows its body
    joined.resize(body_size + extra_size);
    std::memcpy(joined.data(), body, body_size);
    std::memcpy(joined.data() + body_size, extra, extra_size);
    bytes = absl::MakeConstSpan(joined);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return false;
  if (perfetto_ == nullptr) return data_.Add(type, bytes).ok();
  return DecodeRecord(type, bytes, perfetto_->timeline(), counters_).ok();
}

void StandaloneOutput::PublishStats(const TracerStats& stats, uint64_t now_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  dropped_ = stats.records_dropped;
}

absl::Status StandaloneOutput::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return absl::OkStatus();
  finished_ = true;
  if (dropped_ > 0) {
    CUPROBE_LOG(kWarning, "%d trace records were dropped; the timeline misses them", dropped_);
  }
  if (perfetto_ == nullptr) {
    data_.AddDropped(dropped_);
    absl::Status s = WriteFile(path_, FormatChromeTrace(data_));
    if (s.ok()) {
      CUPROBE_LOG(kInfo, "wrote trace of %d kernels to %s", data_.kernels().size(), path_);
    }
    return s;
  }
  absl::Status s = perfetto_->Close();
  if (s.ok()) {
    CUPROBE_LOG(kInfo, "wrote trace of %d kernels to %s", perfetto_->timeline().kernels(), path_);
  }
  return s;
}

absl::StatusOr<TraceOutput*> MakeTraceOutput(const HookConfig& config) {
  if (!config.session.empty()) return SessionOutput::Open(config.session, config.pid);
  return StandaloneOutput::Open(config.output);
}

}  // namespace cuprobe
