// File: maps/segment.h
//
// Session: one process's mapping of the session segment (layout in
// maps/segment_layout.h), a POSIX shared-memory object in /dev/shm, mode
// 0600, made with Boost.Interprocess. The `cuprobe` CLI creates it; the hook
// in the CUDA application and any later reader open it by name
// (CUPROBE_SESSION). RAII and movable: destroying a Session unmaps it and
// nothing else; the name stays until someone calls Remove().
//
//   // CLI:
//   CUPROBE_ASSIGN_OR_RETURN(Session s, Session::Create({.ring_capacity = 64 << 20}));
//   setenv("CUPROBE_SESSION", s.name().c_str(), 1);  ... run the app ...
//   s.ring().Drain([&](uint16_t type, absl::Span<const uint8_t> body) { ... });
//   s.Remove();
//
//   // Hook:
//   CUPROBE_ASSIGN_OR_RETURN(Session s, Session::Open(name, /*writable=*/true));
//   s.header().hook_pid.store(getpid(), std::memory_order_relaxed);
//   s.SetHookStatus(hook_state, SessionState::kHookReady, "");
//   s.ring().Write(uint16_t(RecordType::kLaunch), &rec, sizeof(rec));
//   MapSet::Create(bundle.maps, &memory, &s.maps());   // maps/map_set.h
//
// Open trusts nothing in the segment (another process, possibly another
// build, wrote it): it checks magic, versions, and every size and offset
// against the real size of the object before use, then keeps its own copy of
// the geometry and never re-reads it from shared memory.
//
// Hazards:
//  - The header is shared: header() hands out a reference into memory other
//    processes write. Use its atomics; treat its plain fields as read-only.
//  - A process that shrinks the object (ftruncate) after Open makes accesses
//    past the new end raise SIGBUS; only the owning user can do that (0600).
//  - Not copyable. A moved-from Session has no mapping: its ring() is inert
//    (Write returns false), header() must not be used, Remove() is a no-op.
#ifndef CUPROBE_MAPS_SEGMENT_H_
#define CUPROBE_MAPS_SEGMENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "maps/maps_region.h"
#include "maps/record_ring.h"
#include "maps/segment_layout.h"
#include "probe/bundle.h"

// Kept out of this header so that users of Session do not include Boost.
namespace boost::interprocess {
class mapped_region;
}  // namespace boost::interprocess

namespace cuprobe {

inline constexpr uint64_t kDefaultSessionRingCapacity = uint64_t{64} << 20;

struct SessionOptions {
  // Ring data bytes: a multiple of 8 in
  // [RecordRing::kMinCapacity, RecordRing::kMaxCapacity].
  uint64_t ring_capacity = kDefaultSessionRingCapacity;
  // Reserve the segment's pages in /dev/shm at Create (posix_fallocate).
  // Without it a full tmpfs (containers often have 64 MiB) is discovered as
  // SIGBUS in the hook's first write into an unbacked page, inside the
  // user's application; with it Create fails with RESOURCE_EXHAUSTED.
  bool reserve_memory = true;
  // The probes' maps (the bundle's MapSpecs): a maps region is formatted for
  // them after the ring (maps/maps_region.h). Empty: no region.
  std::vector<MapSpec> maps;
  // The serialized probe bundle (WriteBundle) for the hook; empty: none.
  std::vector<uint8_t> bundle;
};

class Session {
 public:
  // For the CLI: creates a fresh segment named
  // cuprobe-<uid>-<pid>-<16 random hex digits> (fails rather than reuse an
  // existing name), mode 0600 (checked with fstat: umask or a hostile
  // /dev/shm cannot widen it), writes the header and formats the ring, and
  // only then publishes session_state = kCreated (release). On any failure
  // the name is removed again.
  [[nodiscard]] static absl::StatusOr<Session> Create(const SessionOptions& options = {});

  // For the hook (writable) and readers. NOT_FOUND if there is no such
  // segment, PERMISSION_DENIED naming the owner and mode, INVALID_ARGUMENT
  // for a foreign object (bad magic), FAILED_PRECONDITION for a version this
  // build does not understand, UNAVAILABLE while the creator is still
  // building it, DATA_LOSS for inconsistent sizes/offsets/state.
  [[nodiscard]] static absl::StatusOr<Session> Open(std::string_view name, bool writable);

  // "/dev/shm/<name>": where Linux keeps a POSIX shm object (for messages,
  // tests and tools; Boost.Interprocess adds the leading '/' to shm_open).
  [[nodiscard]] static std::string ShmPath(std::string_view name);

  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session();  // unmaps; does not remove the name

  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] SegmentHeader& header() { return *header_; }
  [[nodiscard]] const SegmentHeader& header() const { return *header_; }
  // Over a read-only Session the ring can report counters only.
  [[nodiscard]] RecordRing& ring() { return ring_; }
  [[nodiscard]] bool writable() const { return writable_; }
  // The probes' maps (validated at Open; empty when the session has none).
  [[nodiscard]] MapsRegion& maps() { return maps_; }
  [[nodiscard]] const MapsRegion& maps() const { return maps_; }

  // The bundle bytes the CLI stored (empty when none). They live in shared
  // memory: copy them (ReadBundle does) before trusting anything in them.
  [[nodiscard]] absl::Span<const uint8_t> bundle_bytes() const;

  // The validated geometry (private copies, not the shared header fields).
  [[nodiscard]] uint64_t segment_size() const { return segment_size_; }
  [[nodiscard]] uint64_t ring_offset() const { return ring_offset_; }
  [[nodiscard]] uint64_t ring_capacity() const { return ring_capacity_; }

  // session_state, loaded with acquire (any value another process stored).
  [[nodiscard]] uint32_t session_state() const;
  // hook_reason, read after an acquire load of session_state and bounded to
  // kHookReasonSize - 1 bytes whatever the segment contains.
  [[nodiscard]] std::string HookReason() const;

  // Publishes a hook status: writes `reason` (truncated to
  // kHookReasonSize - 1 bytes, NUL-padded) first, then hook_state and
  // session_state with release, so a reader that sees the new state sees
  // its reason. FAILED_PRECONDITION on a read-only Session.
  [[nodiscard]] absl::Status SetHookStatus(uint32_t hook_state, SessionState state,
                                           std::string_view reason);

  // The attach request (layout 4; segment_layout.h). For `cuprobe attach`:
  // takes attach_owner for this process (ALREADY_EXISTS naming the live
  // attacher that holds it; a dead one's claim is taken over), writes
  // `attach_session` (a session name) and bumps attach_request.
  [[nodiscard]] absl::Status RequestAttach(std::string_view attach_session);
  // Empties the name, bumps attach_request and gives attach_owner back.
  // Only the owner may; a no-op when this process does not own it.
  [[nodiscard]] absl::Status RequestDetach();
  struct AttachRequest {
    uint64_t serial = 0;  // attach_request: 0 until the first request
    uint32_t owner = 0;   // the attacher's pid
    std::string name;     // empty: detach
  };
  // For the hook: the current request, the name copied once, bounded and
  // checked (DATA_LOSS when it fills all its bytes or is not a session name).
  [[nodiscard]] absl::StatusOr<AttachRequest> ReadAttachRequest() const;
  // True for names Session::Create makes: [A-Za-z0-9._-], 1..63 characters.
  [[nodiscard]] static bool IsSessionName(std::string_view name);

  // The probes' maps belong to one process of the session at a time (the
  // device maps of two processes would overwrite each other's snapshots).
  // ClaimMaps takes maps_owner for `pid`: OK when it was free, already
  // `pid`'s, or held by a process that no longer exists (or is a zombie:
  // a process keeps its claim until it is gone, since its kernels may run
  // until then); FAILED_PRECONDITION naming the live holder otherwise.
  // ReleaseMaps gives it back (a no-op unless `pid` holds it).
  // FAILED_PRECONDITION on a read-only Session.
  [[nodiscard]] absl::Status ClaimMaps(uint32_t pid);
  void ReleaseMaps(uint32_t pid);
  [[nodiscard]] uint32_t maps_owner() const;

  // Unlinks the name (shm_unlink) so no new process can open it; mappings,
  // this one included, stay valid. Idempotent: a name already gone is OK.
  [[nodiscard]] absl::Status Remove();

 private:
  Session(std::string name, std::unique_ptr<boost::interprocess::mapped_region> region,
          SegmentHeader* header, RecordRing ring, MapsRegion maps, uint64_t segment_size,
          uint64_t ring_offset, uint64_t ring_capacity, uint64_t bundle_offset,
          uint64_t bundle_size, bool writable);

  std::string name_;
  std::unique_ptr<boost::interprocess::mapped_region> region_;
  SegmentHeader* header_ = nullptr;
  RecordRing ring_;
  MapsRegion maps_;
  uint64_t segment_size_ = 0;
  uint64_t ring_offset_ = 0;
  uint64_t ring_capacity_ = 0;
  uint64_t bundle_offset_ = 0;
  uint64_t bundle_size_ = 0;
  bool writable_ = false;
  bool removed_ = false;
};

}  // namespace cuprobe

#endif  // CUPROBE_MAPS_SEGMENT_H_
