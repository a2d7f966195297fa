// File: maps/segment.cc
#include "maps/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <utility>

#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "support/proc_stat.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

namespace bip = boost::interprocess;

constexpr mode_t kSegmentMode = 0600;
// NAME_MAX for the /dev/shm entry.
constexpr size_t kMaxNameLength = 255;

// Reads a field of memory another process may be writing exactly once, so
// the value validated is the value used (no compiler re-load in between).
template <typename T>
T LoadOnce(const T& field) {
  return *static_cast<const volatile T*>(&field);
}

absl::Status ValidateName(std::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("empty session segment name");
  if (name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(
        absl::StrFormat("session segment name is %d bytes long (at most %d)", name.size(),
                        kMaxNameLength));
  }
  if (name.find('/') != std::string_view::npos || name.find('\0') != std::string_view::npos ||
      name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat(
        "session segment name '", name, "' must be a plain /dev/shm entry name (no '/')"));
  }
  return absl::OkStatus();
}

// 64 bits from the kernel CSPRNG: the name is what keeps other local users
// from opening (or racing to pre-create) the segment.
absl::StatusOr<uint64_t> RandomU64() {
  uint64_t value = 0;
  auto* out = reinterpret_cast<unsigned char*>(&value);
  size_t got = 0;
  while (got < sizeof(value)) {
    ssize_t n = ::getrandom(out + got, sizeof(value) - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == ENOSYS) {
      break;  // very old kernel: fall back to /dev/urandom below
    } else {
      return absl::InternalError(absl::StrCat("getrandom: ", std::strerror(errno)));
    }
  }
  if (got == sizeof(value)) return value;
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open /dev/urandom: ", std::strerror(errno)));
  got = 0;
  while (got < sizeof(value)) {
    ssize_t n = ::read(fd, out + got, sizeof(value) - got);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (!(n < 0 && errno == EINTR)) {
      ::close(fd);
      return absl::InternalError("cannot read /dev/urandom");
    }
  }
  ::close(fd);
  return value;
}

// Maps a Boost.Interprocess failure to a Status. Boost keeps the errno.
absl::Status FromInterprocess(const bip::interprocess_exception& e, std::string_view doing,
                              std::string_view name) {
  const int err = e.get_native_error();
  const bip::error_code_t code = e.get_error_code();
  const std::string path = Session::ShmPath(name);
  if (err == ENOENT || code == bip::not_found_error) {
    return absl::NotFoundError(absl::StrFormat(
        "session segment '%s' not found (no %s): the cuprobe session that created it may have "
        "ended",
        name, path));
  }
  if (err == EACCES || err == EPERM || code == bip::security_error) {
    struct stat st;
    std::string owner = "owner unknown";
    if (::stat(path.c_str(), &st) == 0) {
      owner = absl::StrFormat("owned by uid %d, mode 0%o", st.st_uid, st.st_mode & 07777);
    }
    return absl::PermissionDeniedError(absl::StrFormat(
        "permission denied %s session segment '%s' (%s is %s; this process runs as uid %d): run "
        "as the user that started the session",
        doing, name, path, owner, ::geteuid()));
  }
  if (err == EEXIST || code == bip::already_exists_error) {
    return absl::AlreadyExistsError(
        absl::StrFormat("session segment '%s' already exists (%s)", name, path));
  }
  if (err == ENOSPC || err == ENOMEM || code == bip::out_of_memory_error ||
      code == bip::out_of_space_error) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "out of memory or /dev/shm space %s session segment '%s': %s", doing, name, e.what()));
  }
  return absl::InternalError(absl::StrFormat("%s session segment '%s' failed: %s (errno %d)",
                                             doing, name, e.what(), err));
}

// Unlinks a half-built segment unless dismissed.
class RemoveOnFailure {
 public:
  explicit RemoveOnFailure(const std::string& name) : name_(name) {}
  RemoveOnFailure(const RemoveOnFailure&) = delete;
  RemoveOnFailure& operator=(const RemoveOnFailure&) = delete;
  ~RemoveOnFailure() {
    if (armed_) bip::shared_memory_object::remove(name_.c_str());
  }
  void Dismiss() { armed_ = false; }

 private:
  const std::string& name_;
  bool armed_ = true;
};

struct Geometry {
  uint64_t ring_offset;
  uint64_t ring_capacity;
  uint64_t maps_offset;
  uint64_t maps_size;
  uint64_t bundle_offset;
  uint64_t bundle_size;
};

constexpr uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The header fields that say what the segment is, checked: the state (0
// while the creator builds it), magic, versions and sizes.
struct HeaderIdentity {
  uint32_t state;
  uint32_t header_size;
  uint64_t segment_size;
};

absl::StatusOr<HeaderIdentity> CheckIdentity(std::string_view name, const SegmentHeader& h,
                                             uint64_t real_size) {
  // Acquire first: if the creator has published a state, everything it
  // wrote before is visible to the loads below.
  const uint32_t state = h.session_state.load(std::memory_order_acquire);
  const uint64_t magic = LoadOnce(h.magic);
  if (magic != kSegmentMagic) {
    if (magic == 0 && state == 0) {
      return absl::UnavailableError(absl::StrFormat(
          "segment '%s' is not initialized yet (its creator is still building it, or died "
          "doing so)",
          name));
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "segment '%s' is not a cuprobe session (magic 0x%016x, expected 0x%016x)", name, magic,
        kSegmentMagic));
  }
  if (state == 0) {
    return absl::UnavailableError(absl::StrFormat(
        "segment '%s' is not ready yet (session state 0: its creator is still building it)", name));
  }
  const uint32_t layout_version = LoadOnce(h.layout_version);
  if (layout_version != kSegmentLayoutVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "segment '%s': layout version %d, this build understands %d (mixing cuprobe builds?)",
        name, layout_version, kSegmentLayoutVersion));
  }
  const uint32_t header_size = LoadOnce(h.header_size);
  if (header_size != sizeof(SegmentHeader)) {
    return absl::DataLossError(absl::StrFormat(
        "segment '%s': header_size %d, layout version %d has %d", name, header_size,
        kSegmentLayoutVersion, sizeof(SegmentHeader)));
  }
  const uint32_t records_version = LoadOnce(h.records_version);
  if (records_version != kTraceRecordsVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "segment '%s': trace records version %d, this build understands %d", name,
        records_version, kTraceRecordsVersion));
  }
  const uint64_t segment_size = LoadOnce(h.segment_size);
  if (segment_size != real_size) {
    return absl::DataLossError(absl::StrFormat(
        "segment '%s': header says segment_size %d, but the shared memory object is %d bytes",
        name, segment_size, real_size));
  }
  return HeaderIdentity{state, header_size, segment_size};
}

// The record ring: its control block and data past the header and within
// the segment, its capacity in RecordRing's range. Fills g's ring fields.
// (segment_size >= sizeof(SegmentHeader): every subtraction is guarded by
// the comparison before it.)
absl::Status CheckRing(std::string_view name, const SegmentHeader& h, const HeaderIdentity& id,
                       Geometry& g) {
  const uint64_t segment_size = id.segment_size;
  g.ring_offset = LoadOnce(h.ring_offset);
  if (g.ring_offset < id.header_size || g.ring_offset % 64 != 0) {
    return absl::DataLossError(absl::StrFormat(
        "segment '%s': ring_offset %d is not a 64-byte-aligned offset past the %d-byte header",
        name, g.ring_offset, id.header_size));
  }
  if (g.ring_offset > segment_size || segment_size - g.ring_offset < kRingControlSize) {
    return absl::DataLossError(absl::StrFormat(
        "segment '%s': ring_offset %d leaves no room for the %d-byte ring control block in a "
        "%d-byte segment",
        name, g.ring_offset, kRingControlSize, segment_size));
  }
  const uint64_t room = segment_size - g.ring_offset - kRingControlSize;
  g.ring_capacity = LoadOnce(h.ring_capacity);
  if (g.ring_capacity > room) {
    return absl::DataLossError(absl::StrFormat(
        "segment '%s': ring_capacity %d does not fit in the %d bytes after the ring control "
        "block",
        name, g.ring_capacity, room));
  }
  if (g.ring_capacity % 8 != 0 || g.ring_capacity < RecordRing::kMinCapacity ||
      g.ring_capacity > RecordRing::kMaxCapacity) {
    return absl::DataLossError(absl::StrFormat(
        "segment '%s': ring_capacity %d is not a multiple of 8 in [%d, %d]", name,
        g.ring_capacity, RecordRing::kMinCapacity, RecordRing::kMaxCapacity));
  }
  return absl::OkStatus();
}

// The maps region (if any): page-aligned, between the ring's end and the
// segment's. Fills g's maps fields.
absl::Status CheckMapsRegion(std::string_view name, const SegmentHeader& h,
                             uint64_t segment_size, Geometry& g) {
  g.maps_offset = LoadOnce(h.maps_offset);
  g.maps_size = LoadOnce(h.maps_size);
  if (g.maps_size == 0) {
    if (g.maps_offset != 0) {
      return absl::DataLossError(absl::StrFormat(
          "segment '%s': maps_offset %d with an empty maps region", name, g.maps_offset));
    }
    return absl::OkStatus();
  }
  const uint64_t ring_end = g.ring_offset + kRingControlSize + g.ring_capacity;  // <= segment_size
  if (g.maps_offset % kMapsRegionAlignment != 0 || g.maps_offset < ring_end ||
      g.maps_offset > segment_size || g.maps_size > segment_size - g.maps_offset) {
    return absl::DataLossError(absl::StrFormat(
        "segment '%s': maps region at offset %d (%d bytes) is not a page-aligned range "
        "between the ring's end (%d) and the segment's end (%d)",
        name, g.maps_offset, g.maps_size, ring_end, segment_size));
  }
  return absl::OkStatus();
}

// The probe bundle (if any): 64-byte aligned, after the ring and the maps,
// within the segment. Fills g's bundle fields.
absl::Status CheckBundle(std::string_view name, const SegmentHeader& h, uint64_t segment_size,
                         Geometry& g) {
  g.bundle_offset = LoadOnce(h.bundle_offset);
  g.bundle_size = LoadOnce(h.bundle_size);
  if (g.bundle_size == 0) {
    if (g.bundle_offset != 0) {
      return absl::DataLossError(absl::StrFormat(
          "segment '%s': bundle_offset %d with an empty bundle", name, g.bundle_offset));
    }
    return absl::OkStatus();
  }
  // <= segment_size: both were checked before.
  const uint64_t before = g.maps_size != 0 ? g.maps_offset + g.maps_size
                                           : g.ring_offset + kRingControlSize + g.ring_capacity;
  if (g.bundle_offset % 64 != 0 || g.bundle_offset < before || g.bundle_offset > segment_size ||
      g.bundle_size > segment_size - g.bundle_offset) {
    return absl::DataLossError(absl::StrFormat(
        "segment '%s': bundle at offset %d (%d bytes) is not a 64-byte-aligned range between "
        "the end of the ring and maps (%d) and the segment's end (%d)",
        name, g.bundle_offset, g.bundle_size, before, segment_size));
  }
  return absl::OkStatus();
}

// Validates the header of a mapped segment of `real_size` bytes. Every
// field is copied once before it is checked.
absl::StatusOr<Geometry> ValidateHeader(std::string_view name, const uint8_t* base,
                                        uint64_t real_size) {
  const auto& h = *reinterpret_cast<const SegmentHeader*>(base);
  CUPROBE_ASSIGN_OR_RETURN(const HeaderIdentity id, CheckIdentity(name, h, real_size));
  Geometry g{};
  CUPROBE_RETURN_IF_ERROR(CheckRing(name, h, id, g));
  if (id.state < kMinSessionState || id.state > kMaxSessionState) {
    return absl::DataLossError(
        absl::StrFormat("segment '%s': unknown session state %d", name, id.state));
  }
  CUPROBE_RETURN_IF_ERROR(CheckMapsRegion(name, h, id.segment_size, g));
  CUPROBE_RETURN_IF_ERROR(CheckBundle(name, h, id.segment_size, g));
  return g;
}

// ---- Creating a segment -------------------------------------------------------

// Where Create puts the ring, the maps region and the bundle, and the
// segment's size.
struct CreatePlan {
  Geometry geometry;
  uint64_t segment_size;
};

absl::StatusOr<CreatePlan> PlanSegment(const SessionOptions& options) {
  const uint64_t capacity = options.ring_capacity;
  if (capacity % 8 != 0 || capacity < RecordRing::kMinCapacity ||
      capacity > RecordRing::kMaxCapacity) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "session ring capacity %d must be a multiple of 8 in [%d, %d]", capacity,
        RecordRing::kMinCapacity, RecordRing::kMaxCapacity));
  }
  Geometry g{};
  g.ring_offset = kDefaultRingOffset;
  g.ring_capacity = capacity;
  if (!options.maps.empty()) {
    CUPROBE_ASSIGN_OR_RETURN(g.maps_size, MapsRegion::RegionBytes(options.maps));
    g.maps_offset = RoundUp(g.ring_offset + kRingControlSize + capacity, kMapsRegionAlignment);
  }
  const uint64_t before_bundle =
      g.maps_size != 0 ? g.maps_offset + g.maps_size : g.ring_offset + kRingControlSize + capacity;
  g.bundle_size = options.bundle.size();
  g.bundle_offset = g.bundle_size != 0 ? RoundUp(before_bundle, 64) : 0;
  const uint64_t segment_size =
      g.bundle_size != 0 ? g.bundle_offset + g.bundle_size : before_bundle;
  return CreatePlan{g, segment_size};
}

// The new shared memory object (fd) is ours alone: mode 0600, owned by
// this user.
absl::Status CheckOwnership(int fd, const std::string& name) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrFormat("fstat %s: %s", Session::ShmPath(name),
                                               std::strerror(errno)));
  }
  if ((st.st_mode & 07777) != kSegmentMode || st.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "session segment %s has mode 0%o and owner uid %d, expected 0%o and uid %d",
        Session::ShmPath(name), st.st_mode & 07777, st.st_uid, kSegmentMode, ::geteuid()));
  }
  return absl::OkStatus();
}

// SessionOptions::reserve_memory: the segment's pages allocated now, so that
// a full /dev/shm is an error here rather than a SIGBUS later.
absl::Status ReserveMemory(int fd, const std::string& name, uint64_t segment_size) {
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(segment_size));
  if (rc == ENOSPC || rc == ENOMEM || rc == EFBIG) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "not enough space in /dev/shm for a %d-byte session segment (%s); free some or ask "
        "for a smaller ring",
        segment_size, std::strerror(rc)));
  }
  // EOPNOTSUPP/EINVAL: a filesystem without fallocate. The pages are then
  // allocated on first touch, as without reserve_memory.
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
    return absl::InternalError(
        absl::StrFormat("posix_fallocate %s: %s", Session::ShmPath(name), std::strerror(rc)));
  }
  return absl::OkStatus();
}

// The header of a fresh segment (state 0: not published yet), and the
// bundle's bytes.
SegmentHeader* WriteHeader(uint8_t* base, const CreatePlan& plan, const SessionOptions& options) {
  const Geometry& g = plan.geometry;
  // Fresh shm pages are zero; value-initialization also zeroes every field
  // and reserved byte, and begins the lifetime of the atomics.
  auto* header = new (base) SegmentHeader();
  header->magic = kSegmentMagic;
  header->layout_version = kSegmentLayoutVersion;
  header->header_size = sizeof(SegmentHeader);
  header->segment_size = plan.segment_size;
  header->creator_pid = static_cast<uint32_t>(::getpid());
  header->records_version = kTraceRecordsVersion;
  header->ring_offset = g.ring_offset;
  header->ring_capacity = g.ring_capacity;
  header->maps_offset = g.maps_offset;
  header->maps_size = g.maps_size;
  header->bundle_offset = g.bundle_offset;
  header->bundle_size = g.bundle_size;
  if (g.bundle_size != 0) std::memcpy(base + g.bundle_offset, options.bundle.data(), g.bundle_size);
  return header;
}

}  // namespace

std::string Session::ShmPath(std::string_view name) { return absl::StrCat("/dev/shm/", name); }

Session::Session(std::string name, std::unique_ptr<bip::mapped_region> region,
                 SegmentHeader* header, RecordRing ring, MapsRegion maps, uint64_t segment_size,
                 uint64_t ring_offset, uint64_t ring_capacity, uint64_t bundle_offset,
                 uint64_t bundle_size, bool writable)
    : name_(std::move(name)),
      region_(std::move(region)),
      header_(header),
      ring_(std::move(ring)),
      maps_(std::move(maps)),
      segment_size_(segment_size),
      ring_offset_(ring_offset),
      ring_capacity_(ring_capacity),
      bundle_offset_(bundle_offset),
      bundle_size_(bundle_size),
      writable_(writable) {}

Session::Session(Session&& other) noexcept
    : name_(std::move(other.name_)),
      region_(std::move(other.region_)),
      header_(std::exchange(other.header_, nullptr)),
      ring_(std::move(other.ring_)),
      maps_(std::exchange(other.maps_, MapsRegion())),
      segment_size_(std::exchange(other.segment_size_, 0)),
      ring_offset_(std::exchange(other.ring_offset_, 0)),
      ring_capacity_(std::exchange(other.ring_capacity_, 0)),
      bundle_offset_(std::exchange(other.bundle_offset_, 0)),
      bundle_size_(std::exchange(other.bundle_size_, 0)),
      writable_(std::exchange(other.writable_, false)),
      removed_(std::exchange(other.removed_, true)) {}

Session& Session::operator=(Session&& other) noexcept {
  if (this != &other) {
    name_ = std::move(other.name_);
    region_ = std::move(other.region_);  // unmaps what this held
    header_ = std::exchange(other.header_, nullptr);
    ring_ = std::move(other.ring_);
    maps_ = std::exchange(other.maps_, MapsRegion());
    segment_size_ = std::exchange(other.segment_size_, 0);
    ring_offset_ = std::exchange(other.ring_offset_, 0);
    ring_capacity_ = std::exchange(other.ring_capacity_, 0);
    bundle_offset_ = std::exchange(other.bundle_offset_, 0);
    bundle_size_ = std::exchange(other.bundle_size_, 0);
    writable_ = std::exchange(other.writable_, false);
    removed_ = std::exchange(other.removed_, true);
  }
  return *this;
}
// mapped_region's destructor munmaps; it does not throw.
Session::~Session() = default;

absl::StatusOr<Session> Session::Create(const SessionOptions& options) {
  CUPROBE_ASSIGN_OR_RETURN(const CreatePlan plan, PlanSegment(options));
  const Geometry& g = plan.geometry;
  const uint64_t segment_size = plan.segment_size;
  CUPROBE_ASSIGN_OR_RETURN(uint64_t random, RandomU64());
  std::string name =
      absl::StrFormat("cuprobe-%d-%d-%016x", ::geteuid(), ::getpid(), random);

  try {
    // create_only: O_CREAT | O_EXCL. Boost fchmods to the permissions after
    // shm_open (so umask cannot narrow them) but ignores fchmod's result:
    // we check the outcome below.
    bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write,
                                  bip::permissions(kSegmentMode));
    RemoveOnFailure cleanup(name);
    const int fd = shm.get_mapping_handle().handle;
    CUPROBE_RETURN_IF_ERROR(CheckOwnership(fd, name));
    shm.truncate(static_cast<bip::offset_t>(segment_size));
    if (options.reserve_memory) CUPROBE_RETURN_IF_ERROR(ReserveMemory(fd, name, segment_size));
    auto region = std::make_unique<bip::mapped_region>(shm, bip::read_write, 0,
                                                       static_cast<size_t>(segment_size));
    auto* base = static_cast<uint8_t*>(region->get_address());
    SegmentHeader* header = WriteHeader(base, plan, options);
    // The data area is fresh (zero) memory: the two-argument Format, which
    // does not touch all of it.
    RecordRing::Format(base + g.ring_offset, g.ring_capacity);
    CUPROBE_ASSIGN_OR_RETURN(RecordRing ring,
                             RecordRing::Attach(base + g.ring_offset,
                                                base + g.ring_offset + kRingControlSize,
                                                g.ring_capacity));
    MapsRegion maps;
    if (g.maps_size != 0) {
      CUPROBE_RETURN_IF_ERROR(MapsRegion::Format(base + g.maps_offset, g.maps_size, options.maps));
      CUPROBE_ASSIGN_OR_RETURN(maps, MapsRegion::Attach(base + g.maps_offset, g.maps_size, true));
    }
    // Publish last: an Open that sees kCreated sees the whole header.
    header->session_state.store(static_cast<uint32_t>(SessionState::kCreated),
                                std::memory_order_release);
    cleanup.Dismiss();
    return Session(std::move(name), std::move(region), header, std::move(ring), std::move(maps),
                   segment_size, g.ring_offset, g.ring_capacity, g.bundle_offset, g.bundle_size,
                   /*writable=*/true);
  } catch (const bip::interprocess_exception& e) {
    return FromInterprocess(e, "creating", name);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("out of memory creating session segment '%s'", name));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrFormat("creating session segment '%s' failed: %s", name, e.what()));
  }
}

absl::StatusOr<Session> Session::Open(std::string_view name_view, bool writable) {
  CUPROBE_RETURN_IF_ERROR(ValidateName(name_view));
  std::string name(name_view);
  try {
    bip::shared_memory_object shm(bip::open_only, name.c_str(),
                                  writable ? bip::read_write : bip::read_only);
    struct stat st;
    if (::fstat(shm.get_mapping_handle().handle, &st) != 0) {
      return absl::InternalError(absl::StrFormat("fstat %s: %s", ShmPath(name),
                                                 std::strerror(errno)));
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("segment '%s' is not a cuprobe session (not a regular shm object)", name));
    }
    // A session carries probe code into the program and takes its records:
    // only one this user made, and nobody else can write, is opened.
    if (st.st_uid != ::geteuid() || (st.st_mode & 022) != 0) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "segment '%s' has owner uid %d and mode 0%o: a session must be this user's (uid %d) "
          "and writable by nobody else; not opened",
          name, st.st_uid, st.st_mode & 07777, ::geteuid()));
    }
    const uint64_t real_size = static_cast<uint64_t>(st.st_size);
    if (real_size == 0) {
      return absl::UnavailableError(absl::StrFormat(
          "segment '%s' is empty (0 bytes): not a cuprobe session, or its creator is still "
          "building it",
          name));
    }
    auto region = std::make_unique<bip::mapped_region>(
        shm, writable ? bip::read_write : bip::read_only, 0, static_cast<size_t>(real_size));
    auto* base = static_cast<uint8_t*>(region->get_address());
    if (real_size < sizeof(SegmentHeader)) {
      uint64_t magic = 0;
      if (real_size >= sizeof(magic)) std::memcpy(&magic, base, sizeof(magic));
      if (magic != kSegmentMagic) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "segment '%s' is not a cuprobe session (magic 0x%016x, %d bytes)", name, magic,
            real_size));
      }
      return absl::DataLossError(absl::StrFormat(
          "segment '%s' is truncated: %d bytes, smaller than the %d-byte session header", name,
          real_size, sizeof(SegmentHeader)));
    }
    CUPROBE_ASSIGN_OR_RETURN(Geometry g, ValidateHeader(name, base, real_size));
    uint8_t* control = base + g.ring_offset;
    absl::StatusOr<RecordRing> ring =
        RecordRing::Attach(control, control + kRingControlSize, g.ring_capacity, writable);
    if (!ring.ok()) {
      return absl::Status(ring.status().code(),
                          absl::StrCat("segment '", name, "': ", ring.status().message()));
    }
    MapsRegion maps;
    if (g.maps_size != 0) {
      absl::StatusOr<MapsRegion> attached =
          MapsRegion::Attach(base + g.maps_offset, g.maps_size, writable);
      if (!attached.ok()) {
        return absl::Status(attached.status().code(),
                            absl::StrCat("segment '", name, "': ", attached.status().message()));
      }
      maps = *std::move(attached);
    }
    auto* header = reinterpret_cast<SegmentHeader*>(base);
    return Session(std::move(name), std::move(region), header, *std::move(ring), std::move(maps),
                   real_size, g.ring_offset, g.ring_capacity, g.bundle_offset, g.bundle_size,
                   writable);
  } catch (const bip::interprocess_exception& e) {
    return FromInterprocess(e, "opening", name);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("out of memory opening session segment '%s'", name));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrFormat("opening session segment '%s' failed: %s", name, e.what()));
  }
}

absl::Span<const uint8_t> Session::bundle_bytes() const {
  if (header_ == nullptr || bundle_size_ == 0) return {};
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(header_) + bundle_offset_,
                             bundle_size_);
}

uint32_t Session::session_state() const {
  if (header_ == nullptr) return 0;  // moved-from
  return header_->session_state.load(std::memory_order_acquire);
}

std::string Session::HookReason() const {
  if (header_ == nullptr) return "";  // moved-from
  (void)header_->session_state.load(std::memory_order_acquire);
  char copy[kHookReasonSize];
  std::memcpy(copy, header_->hook_reason, sizeof(copy));
  const size_t n = ::strnlen(copy, sizeof(copy) - 1);
  return std::string(copy, n);
}

absl::Status Session::SetHookStatus(uint32_t hook_state, SessionState state,
                                    std::string_view reason) {
  if (!writable_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("session segment '%s' is open read-only", name_));
  }
  const size_t n = std::min(reason.size(), kHookReasonSize - 1);
  if (n > 0) std::memcpy(header_->hook_reason, reason.data(), n);
  std::memset(header_->hook_reason + n, 0, kHookReasonSize - n);
  header_->hook_state.store(hook_state, std::memory_order_release);
  header_->session_state.store(static_cast<uint32_t>(state), std::memory_order_release);
  return absl::OkStatus();
}

bool Session::IsSessionName(std::string_view name) {
  if (name.empty() || name.size() >= kAttachNameSize) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.';
  });
}

absl::Status Session::RequestAttach(std::string_view attach_session) {
  if (!writable_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("session segment '%s' is open read-only", name_));
  }
  if (!IsSessionName(attach_session)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' is not a session name", attach_session));
  }
  const auto me = static_cast<uint32_t>(::getpid());
  uint32_t owner = 0;
  while (!header_->attach_owner.compare_exchange_strong(owner, me, std::memory_order_acq_rel)) {
    if (owner == me) break;
    // A claim by a process that no longer exists (an attacher killed with
    // SIGKILL) is taken over.
    if (::kill(static_cast<pid_t>(owner), 0) == 0 || errno == EPERM) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "session '%s' already has probes attached by `cuprobe attach` (pid %d); stop that one "
          "first",
          name_, owner));
    }
  }
  char padded[kAttachNameSize] = {};
  std::memcpy(padded, attach_session.data(), attach_session.size());
  std::memcpy(header_->attach_name, padded, sizeof(padded));
  header_->attach_request.fetch_add(1, std::memory_order_acq_rel);
  return absl::OkStatus();
}

absl::Status Session::ClaimMaps(uint32_t pid) {
  if (!writable_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("session segment '%s' is open read-only", name_));
  }
  uint32_t owner = 0;
  while (!header_->maps_owner.compare_exchange_strong(owner, pid, std::memory_order_acq_rel)) {
    if (owner == pid) return absl::OkStatus();
    if (owner == 0) continue;  // given back meanwhile: try again
    // A holder that exited (processes keep the claim until they are gone)
    // or died is replaced.
    if (ProcessAlive(owner)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the probes' maps of session '%s' are held by pid %d, another process of the same "
          "session (one process of a session at a time is instrumented: run one cuprobe per "
          "process, see docs/CLI.md \"Several ranks and machines\")",
          name_, owner));
    }
  }
  return absl::OkStatus();
}

void Session::ReleaseMaps(uint32_t pid) {
  if (!writable_ || header_ == nullptr) return;
  uint32_t expected = pid;
  header_->maps_owner.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
}

uint32_t Session::maps_owner() const {
  return header_ == nullptr ? 0 : header_->maps_owner.load(std::memory_order_acquire);
}

absl::Status Session::RequestDetach() {
  if (!writable_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("session segment '%s' is open read-only", name_));
  }
  const auto me = static_cast<uint32_t>(::getpid());
  if (header_->attach_owner.load(std::memory_order_acquire) != me) return absl::OkStatus();
  std::memset(header_->attach_name, 0, kAttachNameSize);
  header_->attach_request.fetch_add(1, std::memory_order_acq_rel);
  uint32_t expected = me;
  header_->attach_owner.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
  return absl::OkStatus();
}

absl::StatusOr<Session::AttachRequest> Session::ReadAttachRequest() const {
  AttachRequest r;
  if (header_ == nullptr) return r;  // moved-from
  r.serial = header_->attach_request.load(std::memory_order_acquire);
  r.owner = header_->attach_owner.load(std::memory_order_acquire);
  char copy[kAttachNameSize];
  std::memcpy(copy, header_->attach_name, sizeof(copy));
  const size_t n = ::strnlen(copy, sizeof(copy));
  if (n == sizeof(copy)) {
    return absl::DataLossError(absl::StrFormat(
        "session '%s': the attach request's name fills all %d bytes (no terminating NUL)", name_,
        kAttachNameSize));
  }
  r.name.assign(copy, n);
  if (!r.name.empty() && !IsSessionName(r.name)) {
    return absl::DataLossError(absl::StrFormat(
        "session '%s': the attach request names '%s', which is not a session name", name_,
        absl::CEscape(r.name)));
  }
  return r;
}

absl::Status Session::Remove() {
  if (removed_) return absl::OkStatus();
  errno = 0;
  if (!bip::shared_memory_object::remove(name_.c_str()) && errno != ENOENT) {
    return absl::InternalError(absl::StrFormat("removing session segment %s: %s", ShmPath(name_),
                                               std::strerror(errno)));
  }
  removed_ = true;
  return absl::OkStatus();
}

}  // namespace cuprobe
