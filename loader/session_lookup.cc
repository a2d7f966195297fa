#include "loader/session_lookup.h"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "maps/segment.h"
#include "support/proc_stat.h"

namespace cuprobe {


absl::StatusOr<std::string> FindTargetSession(const std::string& target,
                                              SessionPurpose purpose) {
  std::string name = target;
  if (absl::StartsWith(name, "/dev/shm/")) name = name.substr(9);
  uint32_t pid = 0;
  if (!absl::SimpleAtoi(name, &pid)) return name;
  const std::string prefix = absl::StrCat("cuprobe-", ::geteuid(), "-");
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot list /dev/shm: ", std::strerror(errno)));
  }
  std::vector<std::string> candidates;
  while (dirent* e = ::readdir(dir)) {
    if (absl::StartsWith(e->d_name, prefix)) candidates.emplace_back(e->d_name);
  }
  ::closedir(dir);
  const std::optional<ProcStat> stat = ReadProcStat(pid);
  const uint32_t parent = stat.has_value() ? stat->ppid : 0;
  std::string best;
  int best_score = -1;
  for (const std::string& candidate : candidates) {
    absl::StatusOr<Session> s = Session::Open(candidate, /*writable=*/false);
    if (!s.ok()) continue;
    const bool holds_maps = s->maps_owner() == pid;
    if (s->header().hook_pid.load(std::memory_order_acquire) != pid && !holds_maps) continue;
    const uint32_t state = s->session_state();
    if (state == static_cast<uint32_t>(SessionState::kHookStopped) && !holds_maps) continue;
    int score = 0;
    if (purpose == SessionPurpose::kProgram) {
      score = parent != 0 && s->header().creator_pid == parent ? 2 : 0;
    } else {
      score = holds_maps ? 4 : (s->maps().size() > 0 ? 1 : 0);
    }
    if (score > best_score) {
      best = candidate;
      best_score = score;
    }
  }
  if (best_score >= 0) return best;
  return absl::NotFoundError(absl::StrCat(
      "no running cuprobe session of yours belongs to pid ", pid,
      " (is the program running under `cuprobe trace` or `cuprobe run`?)"));
}

}  // namespace cuprobe
