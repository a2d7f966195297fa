// File: support/proc_stat.h
//
// What /proc/PID/stat says of a process: its state letter and its parent.
//
//   std::optional<ProcStat> st = ReadProcStat(pid);
//   bool zombie = st.has_value() && st->state == 'Z';
#ifndef CUPROBE_SUPPORT_PROC_STAT_H_
#define CUPROBE_SUPPORT_PROC_STAT_H_

#include <cstdint>
#include <optional>

namespace cuprobe {

struct ProcStat {
  char state = '?';   // R, S, D, Z (zombie), X (dead), ...
  uint32_t ppid = 0;
};

// nullopt when the file cannot be read or parsed (no such process, no /proc).
[[nodiscard]] std::optional<ProcStat> ReadProcStat(uint32_t pid);

// Whether `pid` runs: it exists (or exists as another user's: EPERM) and
// is not a zombie, an exited child its parent has not reaped yet. Holders
// of the session's shared state that are not alive are replaced.
[[nodiscard]] bool ProcessAlive(uint32_t pid);

}  // namespace cuprobe

#endif  // CUPROBE_SUPPORT_PROC_STAT_H_
