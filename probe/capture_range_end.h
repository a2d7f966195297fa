// File: probe/capture_range_end.h
//
// `--capture-range-end` (CUPROBE_CAPTURE_RANGE_END): what a capture range's
// end does, read by the CLI (to reject a bad value before the program runs)
// and by the hook. Header-only: the CLI does not link the hook.
//
//   repeat     every range, up to kMaxCaptureRanges (the default)
//   repeat:N   the first N ranges; later start calls are ignored
//   stop       the first range only (repeat:1)
//   none       from the first start call to the end of the run: stop calls
//              are ignored
//
// nsys' stop-shutdown and repeat-shutdown:N end the program after the
// range; cuprobe never ends the program it traces, so they are refused with
// a message that names what to use instead.
#ifndef CUPROBE_PROBE_CAPTURE_RANGE_END_H_
#define CUPROBE_PROBE_CAPTURE_RANGE_END_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cuprobe {

// Ranges kept at most (CaptureRanges): a program that brackets every step
// of a long run still gets its first 4096 steps.
inline constexpr int kMaxCaptureRanges = 4096;

struct CaptureRangeEnd {
  int max_ranges = kMaxCaptureRanges;  // ranges traced; later starts ignored
  bool ignore_stop = false;            // "none": stop calls close nothing
};

inline absl::StatusOr<CaptureRangeEnd> ParseCaptureRangeEnd(std::string_view value) {
  CaptureRangeEnd end;
  if (value == "repeat") return end;
  if (value == "stop") {
    end.max_ranges = 1;
    return end;
  }
  if (value == "none") {
    end.max_ranges = 1;
    end.ignore_stop = true;
    return end;
  }
  if (value == "stop-shutdown" || absl::StartsWith(value, "repeat-shutdown")) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", value, "' ends the program, which cuprobe never does; use 'stop' ",
                     "(the first range) or 'repeat:N' (the first N), and the program runs on ",
                     "untraced"));
  }
  if (absl::ConsumePrefix(&value, "repeat:")) {
    int n = 0;
    const bool digits = !value.empty() && value.size() <= 4 &&
                        value.find_first_not_of("0123456789") == std::string_view::npos;
    if (!digits || !absl::SimpleAtoi(value, &n) || n < 1 || n > kMaxCaptureRanges) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'repeat:", value, "': the number of ranges must be 1 to ", kMaxCaptureRanges));
    }
    end.max_ranges = n;
    return end;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown value '", value, "' (expected repeat, repeat:N, stop or none)"));
}

}  // namespace cuprobe

#endif  // CUPROBE_PROBE_CAPTURE_RANGE_END_H_
