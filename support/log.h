// File: support/log.h
//
// A small levelled logger. Lines go to stderr (or to the file named by
// CUPROBE_LOG_FILE), one write(2) per line so lines of several threads never
// interleave. The injected library must never write to the app's stdout.
//
//   CUPROBE_LOG(kInfo, "subscribed to CUPTI as '%s'", name);
//
// The level is warn until the program's configuration sets it
// (ConfigureLogging: the hook's config and the CLI pass CUPROBE_LOG and
// CUPROBE_LOG_FILE). Arguments are not evaluated when the level is off.
#ifndef CUPROBE_SUPPORT_LOG_H_
#define CUPROBE_SUPPORT_LOG_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

namespace cuprobe {

enum class LogLevel : int { kOff = 0, kError = 1, kWarning = 2, kInfo = 3, kDebug = 4, kTrace = 5 };

[[nodiscard]] absl::StatusOr<LogLevel> ParseLogLevel(std::string_view text);
[[nodiscard]] std::string_view LogLevelName(LogLevel level);

// The level in force (warn until set).
[[nodiscard]] LogLevel CurrentLogLevel();
void SetLogLevel(LogLevel level);
// The level from `level` (off, error, warn, info, debug, trace; null or
// empty: `fallback`; anything else: warn, saying so once), and lines to the
// file `file` (appended, mode 0600) when it is set and can be opened.
void ConfigureLogging(const char* level, const char* file,
                      LogLevel fallback = LogLevel::kWarning);
[[nodiscard]] inline bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= static_cast<int>(CurrentLogLevel());
}

// Prefix of every line, e.g. "cuprobe" -> "cuprobe: warning: ...". The hook
// uses "cuprobe[<pid>]" so its lines can be told from the app's.
void SetLogPrefix(std::string_view prefix);

// Where lines go: a file descriptor (default 2). Tests point it at a pipe.
void SetLogFd(int fd);

// Writes one line (a newline is appended) regardless of the level.
void WriteLogLine(LogLevel level, std::string_view message);

}  // namespace cuprobe

#define CUPROBE_LOG(level, ...)                                                  \
  do {                                                                           \
    if (::cuprobe::LogEnabled(::cuprobe::LogLevel::level)) {                     \
      ::cuprobe::WriteLogLine(::cuprobe::LogLevel::level, ::absl::StrFormat(__VA_ARGS__)); \
    }                                                                            \
  } while (0)

#endif  // CUPROBE_SUPPORT_LOG_H_
