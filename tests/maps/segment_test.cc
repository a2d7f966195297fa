// File: tests/maps/segment_test.cc
//
// Session: Create/Open round trips, the 0600 mode, name uniqueness, the
// validation of every header field of an untrusted segment (hand-mutated and
// from tests/corpus/segment), permissions across users, and the record ring
// shared by forked processes.
#include "maps/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "probe/trace_records.h"
#include "tests/maps/ring_test_util.h"
#include "tests/test_paths.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::BodyLenFor;
using ::cuprobe::testing::CheckedBody;
using ::cuprobe::testing::kStressType;
using ::cuprobe::testing::MakeBody;
using ::cuprobe::testing::ParseBody;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr uint64_t kSmallRing = 4096;

// CUPROBE_ASSERT_CREATE(s, capacity): Session s, or a fatal test failure.
#define CUPROBE_ASSERT_CREATE(var, capacity)                                      \
  absl::StatusOr<Session> var##_or = CreateTracked(capacity);             \
  ASSERT_TRUE(var##_or.ok()) << var##_or.status();                        \
  Session& var = *var##_or

// Creates sessions and raw shm objects, and unlinks every name at the end.
class SegmentTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const std::string& name : names_) ::shm_unlink(("/" + name).c_str());
  }

  // Creates a session whose name TearDown unlinks (use ASSERT_CREATE).
  absl::StatusOr<Session> CreateTracked(uint64_t ring_capacity = kSmallRing) {
    absl::StatusOr<Session> s = Session::Create({.ring_capacity = ring_capacity});
    if (s.ok()) names_.push_back(s->name());
    return s;
  }

  // A raw shm object holding `bytes`, as a foreign or hostile process could
  // leave it.
  std::string MakeRawObject(const std::string& bytes) {
    std::string name = absl::StrCat("cuprobe-test-", ::getpid(), "-", counter_++);
    names_.push_back(name);
    int fd = ::shm_open(("/" + name).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    if (!bytes.empty()) {
      EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    }
    ::close(fd);
    return name;
  }

  std::vector<std::string> names_;
  int counter_ = 0;
};

uint8_t* Base(Session& s) { return reinterpret_cast<uint8_t*>(&s.header()); }
RingControl* Control(Session& s) { return reinterpret_cast<RingControl*>(Base(s) + s.ring_offset()); }

TEST_F(SegmentTest, CreateThenOpenRoundTrip) {
  CUPROBE_ASSERT_CREATE(created, kSmallRing);
  EXPECT_THAT(created.name(),
              MatchesRegex(absl::StrCat("cuprobe-", ::geteuid(), "-", ::getpid(), "-[0-9a-f]{16}")));
  const SegmentHeader& h = created.header();
  EXPECT_EQ(h.magic, kSegmentMagic);
  EXPECT_EQ(h.layout_version, kSegmentLayoutVersion);
  EXPECT_EQ(h.header_size, sizeof(SegmentHeader));
  EXPECT_EQ(h.segment_size, kDefaultRingOffset + kRingControlSize + kSmallRing);
  EXPECT_EQ(h.creator_pid, static_cast<uint32_t>(::getpid()));
  EXPECT_EQ(h.records_version, kTraceRecordsVersion);
  EXPECT_EQ(created.session_state(), static_cast<uint32_t>(SessionState::kCreated));
  EXPECT_EQ(created.ring().capacity(), kSmallRing);

  absl::StatusOr<Session> hook = Session::Open(created.name(), /*writable=*/true);
  ASSERT_TRUE(hook.ok()) << hook.status();
  EXPECT_EQ(hook->segment_size(), created.segment_size());
  EXPECT_EQ(hook->ring_offset(), created.ring_offset());
  EXPECT_EQ(hook->ring_capacity(), kSmallRing);

  // The hook's writes reach the creator through the shared pages (two
  // mappings of one object at different addresses).
  EXPECT_NE(&hook->header(), &created.header());
  hook->header().hook_pid.store(1234);
  ASSERT_TRUE(hook->SetHookStatus(7, SessionState::kHookDisabled, "no GPU: cuInit failed").ok());
  EXPECT_EQ(created.header().hook_pid.load(), 1234u);
  EXPECT_EQ(created.header().hook_state.load(), 7u);
  EXPECT_EQ(created.session_state(), static_cast<uint32_t>(SessionState::kHookDisabled));
  EXPECT_EQ(created.HookReason(), "no GPU: cuInit failed");
  ASSERT_TRUE(hook->SetHookStatus(2, SessionState::kHookReady, "").ok());
  EXPECT_EQ(created.HookReason(), "");  // the old reason is not left behind
  ASSERT_TRUE(hook->SetHookStatus(2, SessionState::kHookReady, std::string(1000, 'x')).ok());
  EXPECT_EQ(created.HookReason(), std::string(kHookReasonSize - 1, 'x'));

  LaunchRecord launch{};
  launch.correlation_id = 77;
  launch.grid[0] = 128;
  ASSERT_TRUE(hook->ring().Write(static_cast<uint16_t>(RecordType::kLaunch), &launch,
                                 sizeof(launch)));
  int got = 0;
  created.ring().Drain([&](uint16_t type, absl::Span<const uint8_t> body) {
    ++got;
    EXPECT_EQ(type, static_cast<uint16_t>(RecordType::kLaunch));
    ASSERT_EQ(body.size(), sizeof(LaunchRecord));
    LaunchRecord r;
    std::memcpy(&r, body.data(), sizeof(r));
    EXPECT_EQ(r.correlation_id, 77u);
    EXPECT_EQ(r.grid[0], 128u);
  });
  EXPECT_EQ(got, 1);
  EXPECT_EQ(hook->ring().written(), 1u);

  // Moving keeps the mapping; the moved-from Session is inert, not dangling.
  Session moved = *std::move(hook);
  EXPECT_EQ(moved.header().hook_pid.load(), 1234u);
  EXPECT_TRUE(moved.ring().Write(1, &launch, 8));
  EXPECT_FALSE(hook->ring().Write(1, &launch, 8));
  EXPECT_EQ(hook->ring().written(), 0u);
  EXPECT_EQ(hook->session_state(), 0u);
  EXPECT_EQ(hook->SetHookStatus(1, SessionState::kHookReady, "").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(hook->Remove().ok());
  EXPECT_EQ(created.ring().written(), 2u);
  // Move-assignment unmaps what the target held and takes the other mapping.
  absl::StatusOr<Session> other = Session::Open(created.name(), false);
  ASSERT_TRUE(other.ok());
  moved = *std::move(other);
  EXPECT_FALSE(moved.writable());
  EXPECT_EQ(moved.ring().written(), 2u);
}

TEST_F(SegmentTest, BundleBytesRoundTripAfterRingAndMaps) {
  std::vector<uint8_t> bundle(1000);
  for (size_t i = 0; i < bundle.size(); ++i) bundle[i] = static_cast<uint8_t>(i * 7 + 3);
  MapSpec counts;
  counts.name = "counts";
  counts.type = CUPROBE_MAP_ARRAY;
  counts.key_size = 4;
  counts.value_size = 8;
  counts.max_entries = 16;
  SessionOptions options{.ring_capacity = kSmallRing, .maps = {counts}, .bundle = bundle};
  absl::StatusOr<Session> created = Session::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  names_.push_back(created->name());
  const SegmentHeader& h = created->header();
  EXPECT_EQ(h.bundle_size, bundle.size());
  EXPECT_EQ(h.bundle_offset % 64, 0u);
  EXPECT_GE(h.bundle_offset, h.maps_offset + h.maps_size);
  EXPECT_EQ(h.segment_size, h.bundle_offset + h.bundle_size);
  absl::StatusOr<Session> opened = Session::Open(created->name(), /*writable=*/false);
  ASSERT_TRUE(opened.ok()) << opened.status();
  absl::Span<const uint8_t> got = opened->bundle_bytes();
  EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.end()), bundle);
  EXPECT_EQ(opened->maps().size(), 1u);
  // Without a bundle there is none.
  CUPROBE_ASSERT_CREATE(plain, kSmallRing);
  EXPECT_TRUE(plain.bundle_bytes().empty());
  EXPECT_EQ(plain.header().bundle_offset, 0u);
}

TEST_F(SegmentTest, ReadOnlyOpenReadsButCannotWriteOrDrain) {
  CUPROBE_ASSERT_CREATE(created, kSmallRing);
  uint64_t v = 5;
  ASSERT_TRUE(created.ring().Write(1, &v, 8));
  absl::StatusOr<Session> reader = Session::Open(created.name(), /*writable=*/false);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_FALSE(reader->writable());
  EXPECT_EQ(reader->session_state(), static_cast<uint32_t>(SessionState::kCreated));
  EXPECT_EQ(reader->ring().written(), 1u);
  EXPECT_EQ(reader->SetHookStatus(1, SessionState::kHookReady, "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(reader->ring().Write(1, &v, 8));  // would fault on the read-only mapping
  EXPECT_EQ(reader->ring().Drain([](uint16_t, absl::Span<const uint8_t>) {}), 0u);
  EXPECT_EQ(reader->ring().consumer_status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SegmentTest, ModeIs0600EvenUnderAHostileUmask) {
  // 0277 would strip the owner's write bit from a plain shm_open(0600);
  // Create must still end up 0600 (Boost fchmods; we verify).
  const mode_t old = ::umask(0277);
  absl::StatusOr<Session> s = Session::Create({.ring_capacity = kSmallRing});
  ::umask(old);
  ASSERT_TRUE(s.ok()) << s.status();
  names_.push_back(s->name());
  struct stat st;
  ASSERT_EQ(::stat(Session::ShmPath(s->name()).c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), s->segment_size());
  // posix_fallocate reserved the pages up front.
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, s->segment_size());
}

// One process of a session at a time holds the probes' maps: a live holder
// keeps them (the error names it), a dead one's claim is taken over, and
// giving them back frees them for the next process.
TEST_F(SegmentTest, MapsAreClaimedByOneLiveProcessAtATime) {
  absl::StatusOr<Session> s = CreateTracked();
  ASSERT_TRUE(s.ok()) << s.status();
  const auto me = static_cast<uint32_t>(::getpid());
  const auto parent = static_cast<uint32_t>(::getppid());  // alive while we run
  EXPECT_EQ(s->maps_owner(), 0u);
  ASSERT_TRUE(s->ClaimMaps(parent).ok());
  absl::Status taken = s->ClaimMaps(me);
  EXPECT_EQ(taken.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(taken.message()), HasSubstr(absl::StrCat("held by pid ", parent)));
  s->ReleaseMaps(me);
  EXPECT_EQ(s->maps_owner(), parent) << "only the holder gives them back";
  s->ReleaseMaps(parent);
  EXPECT_EQ(s->maps_owner(), 0u);

  // A holder that died without giving them back.
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(s->ClaimMaps(static_cast<uint32_t>(child)).ok());
  ASSERT_TRUE(s->ClaimMaps(me).ok()) << "a dead holder is replaced";
  EXPECT_EQ(s->maps_owner(), me);
  EXPECT_TRUE(s->ClaimMaps(me).ok()) << "claiming again is fine";

  // A holder that exited but was not reaped yet (a zombie) is gone too.
  s->ReleaseMaps(me);
  pid_t zombie = ::fork();
  ASSERT_GE(zombie, 0);
  if (zombie == 0) ::_exit(0);
  ASSERT_TRUE(s->ClaimMaps(static_cast<uint32_t>(zombie)).ok());
  siginfo_t info = {};
  ASSERT_EQ(::waitid(P_PID, zombie, &info, WEXITED | WNOWAIT), 0);  // exited, not reaped
  ASSERT_TRUE(s->ClaimMaps(me).ok()) << "a zombie holder is replaced";
  ASSERT_EQ(::waitpid(zombie, &status, 0), zombie);

  absl::StatusOr<Session> reader = Session::Open(s->name(), /*writable=*/false);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(reader->maps_owner(), me);
  EXPECT_EQ(reader->ClaimMaps(me).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SegmentTest, TwoCreatesGetDifferentNames) {
  CUPROBE_ASSERT_CREATE(a, kSmallRing);
  CUPROBE_ASSERT_CREATE(b, kSmallRing);
  EXPECT_NE(a.name(), b.name());
  EXPECT_NE(a.name().substr(a.name().size() - 16), b.name().substr(b.name().size() - 16));
}

TEST_F(SegmentTest, RejectsBadCapacity) {
  EXPECT_EQ(Session::Create({.ring_capacity = 4100}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Session::Create({.ring_capacity = 64}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SegmentTest, DestructorUnmapsOnlyAndRemoveIsIdempotent) {
  std::string name;
  {
    CUPROBE_ASSERT_CREATE(s, kSmallRing);
    name = s.name();
  }
  absl::StatusOr<Session> reopened = Session::Open(name, true);
  ASSERT_TRUE(reopened.ok()) << reopened.status();  // still there
  ASSERT_TRUE(reopened->Remove().ok());
  EXPECT_TRUE(reopened->Remove().ok());
  struct stat st;
  EXPECT_NE(::stat(Session::ShmPath(name).c_str(), &st), 0);
  // The mapping outlives the name.
  uint64_t v = 1;
  EXPECT_TRUE(reopened->ring().Write(1, &v, 8));
  EXPECT_EQ(reopened->ring().Drain([](uint16_t, absl::Span<const uint8_t>) {}), 1u);

  absl::StatusOr<Session> gone = Session::Open(name, true);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr("'" + name + "' not found"));
}

TEST_F(SegmentTest, OpenMissingAndBadNames) {
  absl::StatusOr<Session> s = Session::Open("cuprobe-0-0-doesnotexist00000", false);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.status().message(), HasSubstr("cuprobe-0-0-doesnotexist00000"));
  EXPECT_THAT(s.status().message(), HasSubstr("/dev/shm/cuprobe-0-0-doesnotexist00000"));
  EXPECT_EQ(Session::Open("", false).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Session::Open("../etc/passwd", false).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Session::Open(std::string(300, 'a'), false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SegmentTest, OpenForeignObjects) {
  std::string garbage(8192, '\xAB');
  absl::StatusOr<Session> s = Session::Open(MakeRawObject(garbage), true);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(),
              HasSubstr("is not a cuprobe session (magic 0xabababababababab"));

  s = Session::Open(MakeRawObject(std::string(100, '\x01')), true);  // smaller than a header
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("is not a cuprobe session (magic 0x0101010101010101"));

  s = Session::Open(MakeRawObject(""), true);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.status().message(), HasSubstr("is empty"));
}

// Issue 9: a session that another user made, or that others can write, is
// not opened (it carries probe code into the program).
TEST_F(SegmentTest, OpenRefusesSegmentsOthersCanWriteOrOwn) {
  CUPROBE_ASSERT_CREATE(s, kSmallRing);
  const std::string path = Session::ShmPath(s.name());
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0) << path;
  absl::StatusOr<Session> o = Session::Open(s.name(), true);
  EXPECT_EQ(o.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(o.status().message(), HasSubstr("mode 0666"));
  EXPECT_THAT(o.status().message(), HasSubstr("writable by nobody else; not opened"));
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  EXPECT_TRUE(Session::Open(s.name(), true).ok()) << "this user's private segment opens";
  if (::geteuid() == 0) {  // as root, the segment can be given to another user
    ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
    o = Session::Open(s.name(), false);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(o.status().message(), HasSubstr("has owner uid 65534"));
    ASSERT_EQ(::chown(path.c_str(), 0, 0), 0);
  }
}

TEST_F(SegmentTest, OpenTruncatedObject) {
  CUPROBE_ASSERT_CREATE(s, kSmallRing);
  // Shrink the object behind the creator's back (we never touch the
  // creator's mapping past 2048 afterwards).
  int fd = ::shm_open(("/" + s.name()).c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 2048), 0);
  ::close(fd);
  absl::StatusOr<Session> o = Session::Open(s.name(), true);
  EXPECT_EQ(o.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(o.status().message(),
              HasSubstr(absl::StrCat("header says segment_size ", s.segment_size(),
                                     ", but the shared memory object is 2048 bytes")));
}

struct HeaderLie {
  const char* name;
  std::function<void(Session&)> mutate;
  absl::StatusCode code;
  const char* message;
};
void PrintTo(const HeaderLie& lie, std::ostream* os) { *os << lie.name; }

class SegmentLies : public SegmentTest, public ::testing::WithParamInterface<HeaderLie> {};

TEST_P(SegmentLies, OpenRejectsWithASpecificMessage) {
  CUPROBE_ASSERT_CREATE(s, kSmallRing);
  GetParam().mutate(s);
  absl::StatusOr<Session> o = Session::Open(s.name(), true);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), GetParam().code) << o.status();
  EXPECT_THAT(o.status().message(), HasSubstr(GetParam().message));
  EXPECT_THAT(o.status().message(), HasSubstr("'" + s.name() + "'"));
  // Read-only readers apply the same checks.
  EXPECT_EQ(Session::Open(s.name(), false).status().code(), GetParam().code);
}

constexpr uint64_t kSmallSegment = kDefaultRingOffset + kRingControlSize + kSmallRing;

INSTANTIATE_TEST_SUITE_P(
    Session, SegmentLies,
    ::testing::Values(
        HeaderLie{"ForeignMagic", [](Session& s) { s.header().magic = 0x1234; },
                  absl::StatusCode::kInvalidArgument,
                  "is not a cuprobe session (magic 0x0000000000001234, expected 0x5345424f52505543)"},
        HeaderLie{"NotPublished",
                  [](Session& s) { s.header().session_state.store(0); },
                  absl::StatusCode::kUnavailable, "not ready yet"},
        HeaderLie{"NothingWrittenYet",
                  [](Session& s) {
                    s.header().magic = 0;
                    s.header().session_state.store(0);
                  },
                  absl::StatusCode::kUnavailable, "not initialized yet"},
        HeaderLie{"LayoutVersion7", [](Session& s) { s.header().layout_version = 7; },
                  absl::StatusCode::kFailedPrecondition,
                  "layout version 7, this build understands 5"},
        HeaderLie{"HeaderSize", [](Session& s) { s.header().header_size = 2048; },
                  absl::StatusCode::kDataLoss, "header_size 2048"},
        HeaderLie{"RecordsVersion", [](Session& s) { s.header().records_version = 9; },
                  absl::StatusCode::kFailedPrecondition,
                  "trace records version 9, this build understands 2"},
        HeaderLie{"SegmentSizeLarger", [](Session& s) { s.header().segment_size += 4096; },
                  absl::StatusCode::kDataLoss,
                  "header says segment_size 9728, but the shared memory object is 5632 bytes"},
        HeaderLie{"SegmentSizeHuge", [](Session& s) { s.header().segment_size = ~uint64_t{0}; },
                  absl::StatusCode::kDataLoss, "header says segment_size 18446744073709551615"},
        HeaderLie{"RingOffsetPastEnd",
                  [](Session& s) { s.header().ring_offset = kSmallSegment + 64; },
                  absl::StatusCode::kDataLoss, "ring_offset 5696 leaves no room"},
        HeaderLie{"RingOffsetHuge",
                  [](Session& s) { s.header().ring_offset = ~uint64_t{63}; },
                  absl::StatusCode::kDataLoss, "leaves no room for the 512-byte ring control"},
        HeaderLie{"RingOffsetAtEndMinusControl",
                  [](Session& s) { s.header().ring_offset = kSmallSegment - 448; },
                  absl::StatusCode::kDataLoss, "leaves no room"},
        HeaderLie{"RingOffsetMisaligned", [](Session& s) { s.header().ring_offset += 8; },
                  absl::StatusCode::kDataLoss, "is not a 64-byte-aligned offset"},
        HeaderLie{"RingOffsetInHeader", [](Session& s) { s.header().ring_offset = 512; },
                  absl::StatusCode::kDataLoss, "past the 1024-byte header"},
        HeaderLie{"CapacityOverflow",
                  [](Session& s) { s.header().ring_capacity = ~uint64_t{7}; },
                  absl::StatusCode::kDataLoss, "does not fit in the 4096 bytes"},
        HeaderLie{"CapacityOneTooMany", [](Session& s) { s.header().ring_capacity += 8; },
                  absl::StatusCode::kDataLoss, "ring_capacity 4104 does not fit"},
        HeaderLie{"CapacityShifted",  // in bounds, but not what the ring was formatted for
                  [](Session& s) {
                    s.header().ring_offset += 64;
                    s.header().ring_capacity -= 64;
                  },
                  absl::StatusCode::kDataLoss, "not formatted"},
        HeaderLie{"CapacityOdd", [](Session& s) { s.header().ring_capacity -= 4; },
                  absl::StatusCode::kDataLoss, "is not a multiple of 8"},
        HeaderLie{"CapacityTiny", [](Session& s) { s.header().ring_capacity = 8; },
                  absl::StatusCode::kDataLoss, "ring_capacity 8 is not a multiple of 8 in [256"},
        HeaderLie{"UnknownState", [](Session& s) { s.header().session_state.store(42); },
                  absl::StatusCode::kDataLoss, "unknown session state 42"},
        HeaderLie{"RingControlMagic", [](Session& s) { Control(s)->magic = 0; },
                  absl::StatusCode::kDataLoss, "not formatted"},
        HeaderLie{"RingControlCapacity", [](Session& s) { Control(s)->capacity = 2048; },
                  absl::StatusCode::kDataLoss, "says capacity 2048, the segment says 4096"},
        HeaderLie{"RingCursors", [](Session& s) { Control(s)->head.store(7); },
                  absl::StatusCode::kDataLoss, "cursors are inconsistent"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(SegmentTest, PermissionDeniedNamesOwnerAndMode) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to open as another user";
  CUPROBE_ASSERT_CREATE(s, kSmallRing);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(pipe_fds[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    absl::StatusOr<Session> o = Session::Open(s.name(), false);
    std::string msg = o.ok() ? "OK" : absl::StrCat(absl::StatusCodeToString(o.status().code()),
                                                   ": ", o.status().message());
    (void)!::write(pipe_fds[1], msg.data(), msg.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf, sizeof(buf))) > 0) msg.append(buf, n);
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_THAT(msg, HasSubstr("PERMISSION_DENIED: permission denied opening session segment"));
  EXPECT_THAT(msg, HasSubstr("owned by uid 0, mode 0600"));
  EXPECT_THAT(msg, HasSubstr("runs as uid 65534"));
}

// --- Across processes -------------------------------------------------------

struct ChildReport {
  uint32_t ok = 0;
  uint32_t dropped = 0;
  uint32_t refused = 0;  // writes refused and retried (block_first)
  std::vector<uint8_t> succeeded;  // per seq
};

// Forks a child that opens the segment by name and writes `n` self-checking
// records; it reports which ones the ring accepted through a pipe.
pid_t SpawnWriter(const std::string& name, uint32_t child, uint32_t n, uint32_t fixed_len,
                  int* read_fd, bool yield_on_drop = false, uint32_t block_first = 0) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  pid_t pid = ::fork();
  if (pid != 0) {
    ::close(fds[1]);
    *read_fd = fds[0];
    return pid;
  }
  ::close(fds[0]);
  absl::StatusOr<Session> s = Session::Open(name, /*writable=*/true);
  if (!s.ok()) ::_exit(2);
  std::vector<uint8_t> report(12 + n);
  uint32_t ok = 0, dropped = 0, refused = 0;
  for (uint32_t seq = 0; seq < n; ++seq) {
    std::vector<uint8_t> body = MakeBody(child, seq, fixed_len ? fixed_len : BodyLenFor(seq));
    if (seq < block_first) {
      // Waits for the consumer instead of dropping (bounded, well inside
      // ctest's timeout: a consumer that never drains fails the test with
      // exit status 5 rather than hanging it).
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!s->ring().Write(kStressType, body.data(), static_cast<uint32_t>(body.size()))) {
        if (std::chrono::steady_clock::now() > deadline) ::_exit(5);
        ++refused;  // the ring counts each refusal as a drop
        ::sched_yield();
      }
      ++ok;
      report[12 + seq] = 1;
    } else if (s->ring().Write(kStressType, body.data(), static_cast<uint32_t>(body.size()))) {
      ++ok;
      report[12 + seq] = 1;
    } else {
      ++dropped;
      if (yield_on_drop && dropped % 64 == 0) ::sched_yield();  // rarely: see record_ring_test
    }
  }
  std::memcpy(report.data(), &ok, 4);
  std::memcpy(report.data() + 4, &dropped, 4);
  std::memcpy(report.data() + 8, &refused, 4);
  size_t off = 0;
  while (off < report.size()) {
    ssize_t w = ::write(fds[1], report.data() + off, report.size() - off);
    if (w <= 0) ::_exit(4);
    off += static_cast<size_t>(w);
  }
  ::_exit(0);
}

ChildReport ReadReport(int fd, uint32_t n) {
  std::vector<uint8_t> bytes;
  uint8_t buf[4096];
  ssize_t r;
  while ((r = ::read(fd, buf, sizeof(buf))) > 0) bytes.insert(bytes.end(), buf, buf + r);
  ::close(fd);
  ChildReport rep;
  if (bytes.size() != 12 + n) return rep;
  std::memcpy(&rep.ok, bytes.data(), 4);
  std::memcpy(&rep.dropped, bytes.data() + 4, 4);
  std::memcpy(&rep.refused, bytes.data() + 8, 4);
  rep.succeeded.assign(bytes.begin() + 12, bytes.end());
  return rep;
}

// What the parent saw of each child's records.
struct Tally {
  explicit Tally(uint32_t children, uint32_t n)
      : received(children, std::vector<uint8_t>(n, 0)), last(children, -1) {}
  void operator()(uint16_t type, absl::Span<const uint8_t> body) {
    CheckedBody b;
    ++total;
    bytes += 8 + body.size();
    if (type != kStressType || !ParseBody(body, &b) || b.producer >= received.size() ||
        b.seq >= received[0].size()) {
      if (error.empty()) error = b.error.empty() ? "bad type or ids" : b.error;
      ++bad;
      return;
    }
    if (received[b.producer][b.seq]++) ++duplicates;
    if (static_cast<int64_t>(b.seq) <= last[b.producer]) ++out_of_order;
    last[b.producer] = b.seq;
  }
  std::vector<std::vector<uint8_t>> received;
  std::vector<int64_t> last;
  uint64_t total = 0, bytes = 0, bad = 0, duplicates = 0, out_of_order = 0;
  std::string error;
};

TEST_F(SegmentTest, ForkedWritersAndConcurrentDrain) {
  constexpr uint32_t kChildren = 4;
  constexpr uint32_t kPerChild = 20000;
  constexpr uint32_t kBlocking = 2000;
  CUPROBE_ASSERT_CREATE(s, kSmallRing);  // small: constant wraparound, some drops
  std::vector<pid_t> pids;
  std::vector<int> fds(kChildren);
  for (uint32_t c = 0; c < kChildren; ++c) {
    // Child 0 waits when the ring is full for its first kBlocking records
    // (about 270 KB: 60-odd laps of the ring), so the traffic through the
    // ring does not depend on how much CPU the drainer gets on a loaded
    // machine; then it drops like the others.
    pid_t pid = SpawnWriter(s.name(), c, kPerChild, 0, &fds[c], /*yield_on_drop=*/true,
                            /*block_first=*/c == 0 ? kBlocking : 0);
    ASSERT_GT(pid, 0);
    pids.push_back(pid);
  }
  Tally tally(kChildren, kPerChild);
  size_t alive = kChildren;
  std::vector<int> statuses(kChildren, -1);
  while (alive > 0) {
    if (s.ring().Drain(std::ref(tally)) == 0) {
      for (uint32_t c = 0; c < kChildren; ++c) {
        if (statuses[c] != -1) continue;
        int st = 0;
        if (::waitpid(pids[c], &st, WNOHANG) == pids[c]) {
          statuses[c] = st;
          --alive;
        }
      }
      ::sched_yield();
    }
  }
  s.ring().Drain(std::ref(tally));  // whatever was committed before the last exit
  EXPECT_TRUE(s.ring().consumer_status().ok()) << s.ring().consumer_status();

  uint64_t ok = 0, dropped = 0, refused = 0;
  for (uint32_t c = 0; c < kChildren; ++c) {
    ASSERT_TRUE(WIFEXITED(statuses[c]) && WEXITSTATUS(statuses[c]) == 0) << statuses[c];
    ChildReport rep = ReadReport(fds[c], kPerChild);
    ASSERT_EQ(rep.succeeded.size(), kPerChild) << "child " << c << " sent no report";
    EXPECT_EQ(rep.ok + rep.dropped, kPerChild);
    EXPECT_EQ(tally.received[c], rep.succeeded) << "child " << c;
    ok += rep.ok;
    dropped += rep.dropped;
    refused += rep.refused;
  }
  EXPECT_EQ(tally.bad, 0u) << tally.error;
  EXPECT_EQ(tally.duplicates, 0u);
  EXPECT_EQ(tally.out_of_order, 0u);
  EXPECT_EQ(tally.total, ok);
  EXPECT_EQ(s.ring().written(), ok);
  EXPECT_EQ(s.ring().dropped(), dropped + refused);
  EXPECT_EQ(s.ring().written() + s.ring().dropped(), uint64_t{kChildren} * kPerChild + refused);
  EXPECT_EQ(s.ring().used_bytes(), 0u);
  // The waiting child lost none of the records it waited for.
  EXPECT_EQ(std::count(tally.received[0].begin(), tally.received[0].begin() + kBlocking, 1),
            kBlocking);
  EXPECT_GT(tally.bytes, 20 * kSmallRing);  // wrapped around many times
  RecordProperty("dropped", static_cast<int>(dropped));
}

TEST_F(SegmentTest, ForkedWritersOverflowAnUndrainedRingExactly) {
  constexpr uint32_t kChildren = 3;
  constexpr uint32_t kPerChild = 100;
  constexpr uint32_t kLen = 64;  // 72-byte records
  CUPROBE_ASSERT_CREATE(s, kSmallRing);
  std::vector<int> fds(kChildren);
  for (uint32_t c = 0; c < kChildren; ++c) {
    pid_t pid = SpawnWriter(s.name(), c, kPerChild, kLen, &fds[c]);
    ASSERT_GT(pid, 0);
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);  // one after the other; nobody drains
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  }
  constexpr uint64_t kRecord = 72;
  constexpr uint64_t kFit = kSmallRing / kRecord;  // 56
  constexpr uint64_t kAttempted = kChildren * kPerChild;
  EXPECT_EQ(s.ring().written(), kFit);
  EXPECT_EQ(s.ring().dropped(), kAttempted - kFit);
  EXPECT_EQ(s.ring().dropped_bytes(), (kAttempted - kFit) * kRecord);
  ChildReport first = ReadReport(fds[0], kPerChild);
  EXPECT_EQ(first.ok, kFit);  // the first child filled it; the others got nothing in
  for (uint32_t c = 1; c < kChildren; ++c) EXPECT_EQ(ReadReport(fds[c], kPerChild).ok, 0u);

  Tally tally(kChildren, kPerChild);
  EXPECT_EQ(s.ring().Drain(std::ref(tally)), kFit);
  EXPECT_EQ(tally.bad, 0u) << tally.error;
  for (uint64_t seq = 0; seq < kPerChild; ++seq) {
    EXPECT_EQ(tally.received[0][seq], seq < kFit ? 1 : 0) << seq;
  }
  // Drained: a writer in another process gets in again.
  int fd = -1;
  pid_t pid = SpawnWriter(s.name(), 1, 10, kLen, &fd);
  ASSERT_GT(pid, 0);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  EXPECT_EQ(ReadReport(fd, 10).ok, 10u);
  EXPECT_EQ(s.ring().Drain(std::ref(tally)), 10u);
  EXPECT_EQ(s.ring().written(), kFit + 10);
}

TEST_F(SegmentTest, CorruptRecordInASharedRingStopsTheConsumer) {
  CUPROBE_ASSERT_CREATE(s, kSmallRing);
  absl::StatusOr<Session> hook = Session::Open(s.name(), true);
  ASSERT_TRUE(hook.ok());
  uint8_t body[56] = {};
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(hook->ring().Write(3, body, sizeof(body)));  // 64 each
  // The hook side scribbles on the third record's size word.
  uint8_t* data = Base(*hook) + hook->ring_offset() + kRingControlSize;
  const uint32_t evil = 0x7FFFFFF8;
  std::memcpy(data + 128, &evil, 4);
  int n = 0;
  EXPECT_EQ(s.ring().Drain([&](uint16_t, absl::Span<const uint8_t>) { ++n; }), 2u);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(s.ring().consumer_status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.ring().consumer_status().message(),
              HasSubstr("corrupt at position 128 (data offset 128): bad record size"));
}

// --- tests/corpus/segment ---------------------------------------------------

struct CorpusCase {
  std::string file;
  std::string open_code;
  std::string open_message;
  uint64_t records = 0;
  std::string drain_code;
  std::string drain_message;
};

std::vector<CorpusCase> LoadExpected(const std::string& dir) {
  std::vector<CorpusCase> cases;
  std::ifstream in(dir + "/EXPECTED");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    CorpusCase c;
    c.file = f[0];
    if (f.size() >= 3) {
      c.open_code = f[1];
      c.open_message = f[2];
    }
    if (f.size() >= 6) {
      EXPECT_TRUE(absl::SimpleAtoi(f[3], &c.records)) << line;
      c.drain_code = f[4];
      c.drain_message = f[5];
    }
    cases.push_back(c);
  }
  return cases;
}

TEST_F(SegmentTest, CorpusFilesAreRejectedOrDrainedAsExpected) {
  const std::string dir = testing::SourceDir() + "/tests/corpus/segment";
  std::vector<CorpusCase> cases = LoadExpected(dir);
  ASSERT_GE(cases.size(), 20u) << "no corpus table at " << dir;
  std::set<std::string> listed;
  int valid = 0;
  for (const CorpusCase& c : cases) {
    SCOPED_TRACE(c.file);
    listed.insert(c.file);
    std::ifstream in(dir + "/" + c.file, std::ios::binary);
    ASSERT_TRUE(in.good());
    std::stringstream ss;
    ss << in.rdbuf();
    absl::StatusOr<Session> s = Session::Open(MakeRawObject(ss.str()), /*writable=*/true);
    EXPECT_EQ(absl::StatusCodeToString(s.status().code()), c.open_code) << s.status();
    if (c.open_message != "-") {
      EXPECT_THAT(s.status().message(), HasSubstr(c.open_message));
    }
    if (!s.ok()) continue;
    ASSERT_EQ(c.drain_code.empty(), false) << "an OK row needs its drain columns";
    ++valid;
    EXPECT_LT(s->HookReason().size(), kHookReasonSize);
    uint64_t drained = s->ring().Drain([](uint16_t, absl::Span<const uint8_t>) {});
    EXPECT_EQ(drained, c.records);
    EXPECT_EQ(absl::StatusCodeToString(s->ring().consumer_status().code()), c.drain_code)
        << s->ring().consumer_status();
    if (c.drain_message != "-") {
      EXPECT_THAT(s->ring().consumer_status().message(), HasSubstr(c.drain_message));
    }
  }
  EXPECT_GE(valid, 2);  // the valid files prove the loader and layout are right
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".seg") {
      EXPECT_TRUE(listed.count(entry.path().filename().string()))
          << entry.path() << " is not in EXPECTED";
    }
  }
}

}  // namespace
}  // namespace cuprobe
