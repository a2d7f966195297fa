#include "loader/session_lookup.h"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "maps/segment.h"

namespace cuprobe {

absl::StatusOr<std::string> FindTargetSession(const std::string& target) {
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
  for (const std::string& candidate : candidates) {
    absl::StatusOr<Session> s = Session::Open(candidate, /*writable=*/false);
    if (!s.ok()) continue;
    if (s->header().hook_pid.load(std::memory_order_acquire) != pid) continue;
    const uint32_t state = s->session_state();
    if (state == static_cast<uint32_t>(SessionState::kHookStopped)) continue;
    return candidate;
  }
  return absl::NotFoundError(absl::StrCat(
      "no running cuprobe session of yours belongs to pid ", pid,
      " (is the program running under `cuprobe trace` or `cuprobe run`?)"));
}

}  // namespace cuprobe
