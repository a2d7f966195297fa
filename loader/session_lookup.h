// File: loader/session_lookup.h
//
// Finds the session of a program given on the command line (`cuprobe attach
// PID`, `cuprobe maps PID`).
//
//   CUPROBE_ASSIGN_OR_RETURN(std::string name, FindTargetSession("4242"));
#ifndef CUPROBE_LOADER_SESSION_LOOKUP_H_
#define CUPROBE_LOADER_SESSION_LOOKUP_H_

#include <string>

#include "absl/status/statusor.h"

namespace cuprobe {

// What the session is wanted for, when a pid has several (its own `cuprobe
// trace`/`run` session, and one per `cuprobe attach`).
enum class SessionPurpose {
  kProgram,  // the session the program was started in (attach to it)
  kMaps,     // the one whose probes' maps the program holds (read them)
};

// The session of a target: a session name ("/dev/shm/" prefix allowed) is
// returned as is; a pid is looked up among this user's sessions in /dev/shm
// whose hook runs in that process and has not stopped. Of several, kProgram
// prefers the one its parent (the cuprobe that started it) created; kMaps
// the one whose maps it holds, then one with maps. NOT_FOUND naming the pid
// when no session has it.
[[nodiscard]] absl::StatusOr<std::string> FindTargetSession(
    const std::string& target, SessionPurpose purpose = SessionPurpose::kProgram);

}  // namespace cuprobe

#endif  // CUPROBE_LOADER_SESSION_LOOKUP_H_
