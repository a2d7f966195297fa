// File: cupti_hook/testing/fake_output.h
//
// A TraceOutput for unit tests: keeps every record written, every status and
// stats publication, and an ordered event log shared with the test (e.g. to
// assert that Release() comes after the watcher was joined).
//
//   std::vector<std::string> events;
//   FakeOutput out(&events);
//   Hook hook(seam, config, [&](const HookConfig&) { return &out; });
#ifndef CUPROBE_CUPTI_HOOK_TESTING_FAKE_OUTPUT_H_
#define CUPROBE_CUPTI_HOOK_TESTING_FAKE_OUTPUT_H_

#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cupti_hook/testing/event_log.h"
#include "cupti_hook/trace_output.h"

namespace cuprobe {

class FakeOutput : public TraceOutput {
 public:
  struct Written {
    uint16_t type;
    std::vector<uint8_t> bytes;  // body followed by extra
  };

  explicit FakeOutput(std::vector<std::string>* events) : events_(events) {}

  bool accept_writes = true;       // false: every Write is a drop
  Session* attach_session = nullptr;  // what AttachSession() returns (late attach)
  std::function<void()> on_release;  // runs inside Release() (assertions)

  bool Write(uint16_t type, const void* body, uint32_t body_size, const void* extra,
             uint32_t extra_size) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (released_) ++writes_after_release_;
    if (!accept_writes) return false;
    Written w{type, {}};
    w.bytes.resize(body_size + extra_size);
    std::memcpy(w.bytes.data(), body, body_size);
    if (extra_size > 0) std::memcpy(w.bytes.data() + body_size, extra, extra_size);
    written_.push_back(std::move(w));
    return true;
  }
  Session* AttachSession() override { return attach_session; }
  absl::Span<const uint8_t> BundleBytes() const override { return bundle; }
  std::vector<uint8_t> bundle;  // the session's probe bundle (empty: none)
  void PublishStatus(HookState state, std::string_view reason) override {
    Log(absl::StrCat("Status(", HookStateName(state), reason.empty() ? "" : ",", reason, ")"));
  }
  void PublishStats(const TracerStats& stats, uint64_t now_ns) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_published_;
    last_stats_ = stats;
  }
  absl::Status Finish() override {
    Log("Finish");
    return absl::OkStatus();
  }
  void Release() override {
    if (on_release) on_release();
    Log("Release");
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
  }
  std::string Describe() const override { return "fake output"; }

  std::vector<Written> written() const {
    std::lock_guard<std::mutex> lock(mu_);
    return written_;
  }
  std::vector<Written> OfType(RecordType type) const {
    std::vector<Written> out;
    for (auto& w : written()) {
      if (w.type == static_cast<uint16_t>(type)) out.push_back(w);
    }
    return out;
  }
  int stats_published() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_published_;
  }
  TracerStats last_stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_stats_;
  }
  int writes_after_release() const {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_after_release_;
  }

 private:
  void Log(std::string e) { AppendEvent(events_, std::move(e)); }

  std::vector<std::string>* events_;
  mutable std::mutex mu_;
  std::vector<Written> written_;
  int stats_published_ = 0;
  TracerStats last_stats_;
  bool released_ = false;
  int writes_after_release_ = 0;
};

}  // namespace cuprobe

#endif  // CUPROBE_CUPTI_HOOK_TESTING_FAKE_OUTPUT_H_
