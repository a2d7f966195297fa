#include "support/proc_stat.h"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace cuprobe {

std::optional<ProcStat> ReadProcStat(uint32_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%u/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return std::nullopt;
  char buf[1024] = {};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  // "pid (comm) S ppid ...": comm may hold spaces and parentheses, so the
  // fields follow the last ')'.
  const char* close = nullptr;
  for (size_t i = 0; i < n; ++i) {
    if (buf[i] == ')') close = buf + i;
  }
  if (close == nullptr || close + 2 >= buf + n) return std::nullopt;
  ProcStat st;
  st.state = close[2];
  st.ppid = static_cast<uint32_t>(std::strtoul(close + 3, nullptr, 10));
  return st;
}

bool ProcessAlive(uint32_t pid) {
  if (pid == 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  std::optional<ProcStat> st = ReadProcStat(pid);
  return !st.has_value() || (st->state != 'Z' && st->state != 'X');
}

}  // namespace cuprobe
