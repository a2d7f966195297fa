// File: tests/maps/map_set_fork_test.cc
//
// MapSet across processes (fork): writers in forked processes with readers
// in others, a clear requested by another process, and ring producers in
// forked processes with the consumer in the parent.
//
// Part of map_set_test (tests/maps/CMakeLists.txt); the maps and the fixture are
// in map_set_test_util.h.

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "maps/map_algorithms.h"
#include "maps/map_set.h"
#include "maps/map_snapshot.h"
#include "maps/segment.h"
#include "tests/maps/map_set_test_util.h"
#include "tests/maps/ring_test_util.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::Desc;
using ::cuprobe::testing::MapSetTest;
using ::cuprobe::testing::Specs;

namespace algo = ::cuprobe::mapalgo;

// A shared anonymous mapping: "device memory" that forked children see at
// the same addresses as the parent.
class SharedArena {
 public:
  explicit SharedArena(uint64_t bytes) : bytes_(bytes) {
    memory_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  }
  ~SharedArena() { ::munmap(memory_, bytes_); }
  void* memory() const { return memory_; }
  uint64_t bytes() const { return bytes_; }

 private:
  void* memory_;
  uint64_t bytes_;
};

// Waits for a child and returns its exit code (-1 on a signal).
int Wait(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(MapSetTest, WritersInForkedProcessesReadersInOthers) {
  // The "device" is a shared mapping; the hook (parent) owns the MapSet;
  // kernels are forked writers; a forked reader checks a snapshot.
  SharedArena arena(64 << 20);
  HostDeviceMemory memory(arena.memory(), arena.bytes());
  Session& session = Create(Specs());
  absl::StatusOr<MapSet> maps = MapSet::Create(Specs(), &memory, &session.maps());
  ASSERT_TRUE(maps.ok()) << maps.status();
  constexpr int kWriters = 3;
  constexpr uint64_t kAdds = 20000;
  std::vector<pid_t> writers;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = ::fork();
    if (pid == 0) {
      for (uint64_t i = 0; i < kAdds; ++i) {
        const uint64_t key = i % 40;  // shared keys: contention on insert and add
        int64_t err = 0;
        uint64_t* c = algo::MapAddTarget(Desc(*maps, 0), &key, 0, &err);
        if (c == nullptr) ::_exit(10);
        algo::AtomicAdd64(c, 1);
        algo::AtomicAdd64(algo::HistTarget(Desc(*maps, 2), i), 1);
      }
      ::_exit(0);
    }
    writers.push_back(pid);
  }
  // Publish while they run (the watcher's periodic tick), then at the end.
  bool running = true;
  while (running) {
    ASSERT_TRUE(maps->Publish(1).ok());
    running = false;
    for (pid_t pid : writers) running |= ::waitpid(pid, nullptr, WNOHANG) == 0;
  }
  for (pid_t pid : writers) (void)::waitpid(pid, nullptr, 0);
  ASSERT_TRUE(maps->Publish(2).ok());
  // The reader runs in yet another process and reports through its exit code.
  const std::string name = session.name();
  pid_t reader = ::fork();
  if (reader == 0) {
    absl::StatusOr<Session> s = Session::Open(name, false);
    if (!s.ok()) ::_exit(20);
    absl::StatusOr<SnapshotBytes> bytes = s->maps().ReadSnapshot(0);
    if (!bytes.ok()) ::_exit(21);
    MapSnapshot counts(s->maps().map(0), *std::move(bytes));
    uint64_t total = 0;
    counts.ForEach([&](absl::Span<const uint8_t>, uint64_t, absl::Span<const uint8_t> v) {
      uint64_t x;
      std::memcpy(&x, v.data(), 8);
      total += x;
    });
    if (counts.CountEntries() != 40) ::_exit(22);
    if (total != kWriters * kAdds) ::_exit(23);
    absl::StatusOr<SnapshotBytes> hist = s->maps().ReadSnapshot(2);
    if (!hist.ok()) ::_exit(24);
    uint64_t hist_total = 0;
    for (uint64_t b : MapSnapshot(s->maps().map(2), *std::move(hist)).Buckets()) hist_total += b;
    ::_exit(hist_total == kWriters * kAdds ? 0 : 25);
  }
  EXPECT_EQ(Wait(reader), 0);
  ASSERT_TRUE(maps->Release().ok());
}

TEST_F(MapSetTest, ClearRequestedByAnotherProcessIsHonouredAtTheNextPublish) {
  HostDeviceMemory memory;
  Session& session = Create(Specs());
  absl::StatusOr<MapSet> maps = MapSet::Create(Specs(), &memory, &session.maps());
  ASSERT_TRUE(maps.ok());
  const uint64_t key = 5;
  ASSERT_EQ(algo::MapUpdate(Desc(*maps, 0), &key, &key, 0, 0), 0);
  const std::string name = session.name();
  pid_t child = ::fork();
  if (child == 0) {
    absl::StatusOr<Session> s = Session::Open(name, true);
    if (!s.ok()) ::_exit(1);
    ::_exit(s->maps().RequestClear(0).ok() && !s->maps().RequestClear(4).ok() ? 0 : 2);
  }
  ASSERT_EQ(Wait(child), 0);
  EXPECT_EQ(session.maps().clear_requests(0), 1u);
  EXPECT_EQ(session.maps().clears_done(0), 0u);
  ASSERT_TRUE(maps->Publish(5).ok());
  EXPECT_EQ(session.maps().clears_done(0), 1u);
  EXPECT_EQ(algo::MapLookup(Desc(*maps, 0), &key, 0), 0u);
  absl::StatusOr<SnapshotBytes> bytes = session.maps().ReadSnapshot(0);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(MapSnapshot(session.maps().map(0), *std::move(bytes)).CountEntries(), 0u);
  ASSERT_TRUE(maps->Release().ok());
}

std::vector<uint8_t> Body(uint32_t producer, uint32_t seq) {
  std::vector<uint8_t> body(8 + (seq % 7) * 8);
  std::memcpy(body.data(), &producer, 4);
  std::memcpy(body.data() + 4, &seq, 4);
  for (size_t i = 8; i < body.size(); ++i) body[i] = static_cast<uint8_t>(producer ^ seq ^ i);
  return body;
}

TEST_F(MapSetTest, RingProducersInForkedProcessesConsumerInTheParent) {
  SharedArena arena(16 << 20);
  HostDeviceMemory memory(arena.memory(), arena.bytes());
  Session& session = Create(Specs());
  absl::StatusOr<MapSet> maps = MapSet::Create(Specs(), &memory, &session.maps());
  ASSERT_TRUE(maps.ok()) << maps.status();
  constexpr uint32_t kProducers = 3;
  constexpr uint32_t kRecords = 30000;
  std::vector<pid_t> producers;
  for (uint32_t p = 0; p < kProducers; ++p) {
    pid_t pid = ::fork();
    if (pid == 0) {
      for (uint32_t seq = 0; seq < kRecords; ++seq) {
        const std::vector<uint8_t> body = Body(p, seq);
        (void)algo::RingOutput(Desc(*maps, 4), body.data(), body.size(), 0);
      }
      ::_exit(0);
    }
    producers.push_back(pid);
  }
  // The consumer: a separate writable mapping, as the CLI would have.
  absl::StatusOr<Session> cli = Session::Open(session.name(), true);
  ASSERT_TRUE(cli.ok());
  absl::StatusOr<MapRing> ring = cli->maps().Ring(4);
  ASSERT_TRUE(ring.ok());
  uint64_t delivered = 0, bad = 0;
  auto check = [&](absl::Span<const uint8_t> body) {
    uint32_t p = 0, seq = 0;
    if (body.size() >= 8) {
      std::memcpy(&p, body.data(), 4);
      std::memcpy(&seq, body.data() + 4, 4);
    }
    if (body.size() < 8 || p >= kProducers ||
        std::vector<uint8_t>(body.begin(), body.end()) != Body(p, seq)) {
      ++bad;
    }
    ++delivered;
  };
  bool running = true;
  while (running) {
    if (ring->Consume(check) == 0) std::this_thread::yield();
    running = false;
    for (pid_t pid : producers) running |= ::waitpid(pid, nullptr, WNOHANG) == 0;
  }
  for (pid_t pid : producers) (void)::waitpid(pid, nullptr, 0);
  ring->Consume(check);
  ASSERT_TRUE(ring->status().ok()) << ring->status();
  ASSERT_TRUE(maps->Publish(9).ok());
  const MapRingStats stats = ring->Stats();
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(delivered + stats.dropped, uint64_t{kProducers} * kRecords);
  EXPECT_EQ(stats.delivered, delivered);
  EXPECT_EQ(stats.reserved, delivered);
  EXPECT_EQ(stats.head, stats.tail);
  ASSERT_TRUE(maps->Release().ok());
}

}  // namespace
}  // namespace cuprobe
