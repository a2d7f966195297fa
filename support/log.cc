#include "support/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace cuprobe {
namespace {

constexpr int kUnset = -1;

// Leaked on purpose: log lines may be written from atexit handlers and CUPTI
// callbacks that run after static destructors.
struct LogState {
  std::atomic<int> level{kUnset};
  std::atomic<int> fd{2};
  std::mutex prefix_mu;
  std::string prefix = "cuprobe";
};

LogState& State() {
  static auto* state = new LogState;
  return *state;
}

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(std::string_view text) {
  std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "off" || t == "none" || t == "0") return LogLevel::kOff;
  if (t == "error" || t == "1") return LogLevel::kError;
  if (t == "warn" || t == "warning" || t == "2") return LogLevel::kWarning;
  if (t == "info" || t == "3") return LogLevel::kInfo;
  if (t == "debug" || t == "4") return LogLevel::kDebug;
  if (t == "trace" || t == "5") return LogLevel::kTrace;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log level '", text, "' (expected off, error, warn, info, debug, trace)"));
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kOff: return "off";
    case LogLevel::kError: return "error";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kTrace: return "trace";
  }
  return "?";
}

LogLevel CurrentLogLevel() {
  int level = State().level.load(std::memory_order_relaxed);
  return level != kUnset ? static_cast<LogLevel>(level) : LogLevel::kWarning;
}

void ConfigureLogging(const char* level, const char* file, LogLevel fallback) {
  LogState& s = State();
  if (file != nullptr && *file != '\0') {
    int fd = ::open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) s.fd.store(fd);
  }
  if (level == nullptr || *level == '\0') {
    SetLogLevel(fallback);
    return;
  }
  absl::StatusOr<LogLevel> parsed = ParseLogLevel(level);
  SetLogLevel(parsed.ok() ? *parsed : LogLevel::kWarning);
  if (!parsed.ok()) {
    WriteLogLine(LogLevel::kWarning,
                 absl::StrCat("CUPROBE_LOG='", level,
                              "' is not one of off, error, warn, info, debug, trace; using warn"));
  }
}

void SetLogLevel(LogLevel level) { State().level.store(static_cast<int>(level)); }

void SetLogPrefix(std::string_view prefix) {
  LogState& s = State();
  std::lock_guard<std::mutex> lock(s.prefix_mu);
  s.prefix = std::string(prefix);
}

void SetLogFd(int fd) { State().fd.store(fd); }

void WriteLogLine(LogLevel level, std::string_view message) {
  LogState& s = State();
  std::string line;
  {
    std::lock_guard<std::mutex> lock(s.prefix_mu);
    line = s.prefix;
  }
  absl::StrAppend(&line, ": ");
  if (level != LogLevel::kInfo) absl::StrAppend(&line, LogLevelName(level), ": ");
  absl::StrAppend(&line, message, "\n");
  WriteAll(s.fd.load(), line);
}

}  // namespace cuprobe
