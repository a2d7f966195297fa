// File: tests/maps/maps_command_test.cc
//
// bpftrace-style printing of maps (maps/map_print.h), the host reader API
// (maps/map_reader.h), and `cuprobe maps` end to end: a session whose maps a
// MapSet filled (over host memory) is printed by the real CLI binary, in
// another process, exactly. Also the CLI's own lifecycle when the program it
// runs is killed.
#include "loader/maps_command.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loader/args.h"
#include "maps/map_algorithms.h"
#include "maps/map_print.h"
#include "maps/map_reader.h"
#include "maps/map_set.h"
#include "maps/segment.h"
#include "tests/maps/map_test_util.h"
#include "tests/test_process.h"

namespace cuprobe {
namespace {

using ::cuprobe::testing::Spec;
using ::testing::HasSubstr;
namespace algo = ::cuprobe::mapalgo;

std::string Bar(int n) {
  return absl::StrCat("|", std::string(n, '@'), std::string(52 - n, ' '), "|");
}

TEST(MapPrint, Log2HistogramLooksLikeBpftrace) {
  std::vector<uint64_t> buckets(65, 0);
  buckets[1] = 2;    // [1]
  buckets[3] = 52;   // [4, 8)
  buckets[11] = 13;  // [1K, 2K)
  const std::string expected = absl::StrCat(
      "[1]                    2 ", Bar(2), "\n", "[2, 4)                 0 ", Bar(0), "\n",
      "[4, 8)                52 ", Bar(52), "\n", "[8, 16)                0 ", Bar(0), "\n",
      "[16, 32)               0 ", Bar(0), "\n", "[32, 64)               0 ", Bar(0), "\n",
      "[64, 128)              0 ", Bar(0), "\n", "[128, 256)             0 ", Bar(0), "\n",
      "[256, 512)             0 ", Bar(0), "\n", "[512, 1K)              0 ", Bar(0), "\n",
      "[1K, 2K)              13 ", Bar(13), "\n");
  EXPECT_EQ(FormatLog2Histogram(buckets), expected);
  EXPECT_EQ(FormatLog2Histogram(std::vector<uint64_t>(65, 0)), "");
  std::vector<uint64_t> top(65, 0);
  top[0] = 1;
  top[64] = 1;
  const std::string text = FormatLog2Histogram(top);
  EXPECT_THAT(text, HasSubstr("[0]                    1 "));
  EXPECT_THAT(text, HasSubstr("[8E, 16E)              1 "));
  // A short histogram's last bucket holds everything above.
  std::vector<uint64_t> short_hist = {0, 0, 0, 4};
  EXPECT_EQ(FormatLog2Histogram(short_hist),
            absl::StrCat("[4, ...)               4 ", Bar(52), "\n"));
}

TEST(MapPrint, LinearHistogram) {
  const uint64_t extra = static_cast<uint32_t>(-10) | (uint64_t{5} << 32);
  const std::vector<uint64_t> buckets = {1, 0, 4, 0, 0, 2};
  EXPECT_EQ(FormatLinearHistogram(buckets, extra),
            absl::StrCat("(..., -10)             1 ", Bar(13), "\n", "[-10, -5)              0 ",
                         Bar(0), "\n", "[-5, 0)                4 ", Bar(52), "\n",
                         "[0, 5)                 0 ", Bar(0), "\n", "[5, 10)                0 ",
                         Bar(0), "\n", "[10, ...)              2 ", Bar(26), "\n"));
}

TEST(MapPrint, ValuesByTheirBtfFields) {
  TypeDescription t{"struct event",
                    24,
                    {{"pid", "u32", 0, 4},
                     {"delta", "s32", 4, 4},
                     {"comm", "char[8]", 8, 8},
                     {"ts", "u64", 16, 8}}};
  uint8_t bytes[24] = {};
  const uint32_t pid = 4242;
  const int32_t delta = -3;
  const uint64_t ts = 123456789;
  std::memcpy(bytes, &pid, 4);
  std::memcpy(bytes + 4, &delta, 4);
  std::memcpy(bytes + 8, "bash\0\0\0\0", 8);
  std::memcpy(bytes + 16, &ts, 8);
  EXPECT_EQ(FormatBytes(bytes, t), "{pid: 4242, delta: -3, comm: \"bash\", ts: 123456789}");
  EXPECT_EQ(FormatBytes(absl::MakeConstSpan(bytes, 4), {}), "4242");
  EXPECT_EQ(FormatBytes(absl::MakeConstSpan(bytes, 3), {}), "92 10 00");
  // A record shorter than every field of its type (bpftime's examples
  // declare a 1 KiB value and emit 32 bytes) shows its bytes.
  TypeDescription big{"struct big_struct", 1024, {{"s", "char[1024]", 0, 1024}}};
  EXPECT_EQ(FormatBytes(absl::MakeConstSpan(bytes, 3), big), "92 10 00");
  EXPECT_EQ(PowerOfTwoLabel(1024), "1K");
  EXPECT_EQ(PowerOfTwoLabel(1536), "1536");
  EXPECT_EQ(PowerOfTwoLabel(uint64_t{1} << 40), "1T");
}

TEST(MapsArgs, ParsesEveryOption) {
  absl::StatusOr<CliArgs> a =
      ParseArgs({"cuprobe", "maps", "--watch", "-i", "250", "--count=3", "--map", "lat", "--clear",
                 "counts", "--events", "/dev/shm/cuprobe-1-2-3"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->command, Command::kMaps);
  EXPECT_TRUE(a->maps.watch);
  EXPECT_EQ(a->maps.interval_ms, 250u);
  EXPECT_EQ(a->maps.count, 3u);
  EXPECT_THAT(a->maps.only, ::testing::ElementsAre("lat"));
  EXPECT_THAT(a->maps.clear, ::testing::ElementsAre("counts"));
  EXPECT_TRUE(a->maps.events);
  EXPECT_EQ(a->maps.session, "/dev/shm/cuprobe-1-2-3");
  a = ParseArgs({"cuprobe", "maps", "--help"});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->command, Command::kHelp);
  EXPECT_EQ(a->help_topic, "maps");
  EXPECT_THAT(UsageText("maps"), HasSubstr("cuprobe maps [options] SESSION"));
  EXPECT_THAT(UsageText(""), HasSubstr("maps      print the probes' maps"));
  EXPECT_TRUE(ParseArgs({"cuprobe", "help", "maps"}).ok());
  EXPECT_THAT(std::string(ParseArgs({"cuprobe", "maps"}).status().message()),
              HasSubstr("maps needs a session"));
  EXPECT_THAT(std::string(ParseArgs({"cuprobe", "maps", "a", "b"}).status().message()),
              HasSubstr("one session"));
  EXPECT_THAT(std::string(ParseArgs({"cuprobe", "maps", "-i", "0", "s"}).status().message()),
              HasSubstr("--interval expects a number from 10"));
  EXPECT_THAT(std::string(ParseArgs({"cuprobe", "maps", "--bogus", "s"}).status().message()),
              HasSubstr("unknown option '--bogus'"));
}

// A session with maps that a MapSet filled the way probes would.
class MapsCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    specs_ = {
        Spec("counts", CUPROBE_MAP_HASH, 8, 8, 16), Spec("lat", CUPROBE_MAP_HIST_LOG2, 4, 8, 65),
        Spec("per_thread", CUPROBE_MAP_PERTHREAD, 4, 8, 1, 64),
        Spec("cfg", CUPROBE_MAP_ARRAY, 4, 8, 1), Spec("events", CUPROBE_MAP_RINGBUF, 0, 0, 4096)};
    specs_[0].key_type = {"u64", 8, {}};
    SessionOptions options;
    options.ring_capacity = 4096;
    options.maps = specs_;
    absl::StatusOr<Session> s = Session::Create(options);
    ASSERT_TRUE(s.ok()) << s.status();
    session_.emplace(*std::move(s));
    absl::StatusOr<MapSet> maps = MapSet::Create(specs_, &memory_, &session_->maps());
    ASSERT_TRUE(maps.ok()) << maps.status();
    maps_.emplace(*std::move(maps));
    auto desc = [&](size_t i) { return algo::Ptr<const cuprobe_map_desc>(maps_->table()[i]); };
    for (uint64_t k = 1; k <= 3; ++k) {
      int64_t err;
      *algo::MapAddTarget(desc(0), &k, 0, &err) += 10 * (4 - k);
    }
    for (uint64_t v : {5u, 6u, 7u, 100u}) *algo::HistTarget(desc(1), v) += 1;
    const uint32_t zero = 0;
    for (uint64_t id = 0; id < 8; ++id) {
      int64_t err;
      *algo::MapAddTarget(desc(2), &zero, id, &err) += id + 1;
    }
    const uint64_t cfg = 99;
    ASSERT_EQ(algo::MapUpdate(desc(3), &zero, &cfg, 0, 0), 0);
    const uint8_t record[5] = {0xde, 0xad, 0xbe, 0xef, 0x01};
    ASSERT_EQ(algo::RingOutput(desc(4), record, 5, 0), 0);
    ASSERT_TRUE(maps_->Publish(1).ok());
  }
  void TearDown() override {
    if (maps_.has_value()) (void)maps_->Release();
    if (session_.has_value()) (void)session_->Remove();
  }

  std::vector<MapSpec> specs_;
  HostDeviceMemory memory_;
  std::optional<Session> session_;
  std::optional<MapSet> maps_;
};

TEST_F(MapsCommand, ReaderApiListsLooksUpAndReadsRings) {
  absl::StatusOr<MapReader> reader = MapReader::Open(absl::StrCat("/dev/shm/", session_->name()));
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ(reader->maps().size(), 5u);
  EXPECT_EQ(reader->maps()[0].spec.key_type.name, "u64");
  const uint64_t key = 2;
  absl::StatusOr<std::optional<std::vector<uint8_t>>> v = reader->Lookup("counts", AsBytes(key));
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->has_value());
  uint64_t value;
  std::memcpy(&value, (*v)->data(), 8);
  EXPECT_EQ(value, 20u);
  const uint64_t absent = 7;
  EXPECT_FALSE(reader->Lookup("counts", AsBytes(absent))->has_value());
  EXPECT_EQ(reader->Lookup("counts", AsBytes(uint32_t{1})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(reader->Snapshot("nope").status().message()),
              HasSubstr("no map named 'nope' (its maps: counts, lat, per_thread, cfg, events)"));
  EXPECT_EQ(reader->ReadRing("events", [](absl::Span<const uint8_t>) {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reader->Clear("counts").code(), absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<MapReader> rw = MapReader::Open(session_->name(), true);
  ASSERT_TRUE(rw.ok());
  std::vector<std::vector<uint8_t>> records;
  absl::StatusOr<size_t> n = rw->ReadRing(
      "events", [&](absl::Span<const uint8_t> b) { records.emplace_back(b.begin(), b.end()); });
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 1u);
  EXPECT_THAT(records, ::testing::ElementsAre(std::vector<uint8_t>{0xde, 0xad, 0xbe, 0xef, 1}));
  EXPECT_EQ(rw->RingStats("events")->delivered, 1u);
  EXPECT_TRUE(rw->Clear("counts").ok());
  EXPECT_EQ(rw->Clear("events").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MapsCommand, CliPrintsTheSessionsMaps) {
  const std::string cli = std::string(CUPROBE_BINARY_DIR) + "/bin/cuprobe";
  testing::ProcessResult r = testing::RunProcess({cli, "maps", session_->name()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string expected_maps = absl::StrCat(
      "@counts[3]: 10\n@counts[2]: 20\n@counts[1]: 30\n\n", "@lat:\n", "[4, 8)                 3 ",
      Bar(52), "\n", "[8, 16)                0 ", Bar(0), "\n", "[16, 32)               0 ", Bar(0),
      "\n", "[32, 64)               0 ", Bar(0), "\n", "[64, 128)              1 ", Bar(17), "\n\n",
      "@per_thread[0]: sum 36 over 8 threads (min 1, max 8)\n\n", "@cfg: 99\n\n",
      "@events: ring of 4096 bytes: 0 records delivered, 0 dropped (0 bytes), 0 discarded; "
      "16 bytes pending\n\n");
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat(session_->name(),
                                            ": hook created, maps published 1 times, last ")));
  EXPECT_THAT(r.out, ::testing::EndsWith(expected_maps)) << r.out;

  r = testing::RunProcess({cli, "maps", "--map", "lat", "--events", session_->name()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("@lat:\n"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("@counts")));
  r = testing::RunProcess({cli, "maps", "--events", session_->name()});
  EXPECT_THAT(r.out, HasSubstr("@events: 5 bytes: deadbeef01\n"));

  r = testing::RunProcess({cli, "maps", "--list", session_->name()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "@counts: HASH, key u64, value 8 bytes, 16 entries\n"
            "@lat: HIST_LOG2, key 4 bytes, value 8 bytes, 65 entries\n"
            "@per_thread: PERTHREAD, key 4 bytes, value 8 bytes, 1 entries, 64 ids per key\n"
            "@cfg: ARRAY, key 4 bytes, value 8 bytes, 1 entries\n"
            "@events: RINGBUF of 4096 bytes\n");

  r = testing::RunProcess(
      {cli, "maps", "--watch", "--interval", "10", "--count", "2", session_->name()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t prints = 0;
  for (size_t pos = r.out.find("@lat:"); pos != std::string::npos;
       pos = r.out.find("@lat:", pos + 1)) {
    ++prints;
  }
  EXPECT_EQ(prints, 2u);

  r = testing::RunProcess({cli, "maps", "--clear", "counts", session_->name()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("asked the hook to clear @counts"));
  ASSERT_TRUE(maps_->Publish(2).ok());
  r = testing::RunProcess({cli, "maps", "--map", "counts", session_->name()});
  EXPECT_THAT(r.out, HasSubstr("@counts: (empty)\n"));

  r = testing::RunProcess({cli, "maps", "cuprobe-0-0-0000000000000000"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("not found"));
}

// `cuprobe maps --set`: the CLI waits until the hook (here a thread
// publishing as the watcher does) applied the write, and says so; the map
// then holds it. Bad assignments are refused with the reason.
// A program killed while its hook published a map leaves that map's
// snapshot half-written: the map says so in its place and the others print.
TEST_F(MapsCommand, AHalfWrittenSnapshotLosesOnlyItsOwnMap) {
  (void)session_->maps().BeginSnapshot(1);  // @lat, never finished
  absl::StatusOr<MapReader> reader = MapReader::Open(session_->name());
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<std::string> text = FormatSessionMaps(*reader, MapsOptions{});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("@counts[1]: 30\n")) << *text;
  EXPECT_THAT(*text, HasSubstr("@lat: (not readable: map 'lat': its snapshot is half-written"))
      << *text;
  EXPECT_THAT(*text, HasSubstr("@cfg: 99\n")) << *text;
}

TEST_F(MapsCommand, CliSetWritesAnArrayEntryThroughTheHook) {
  const std::string cli = std::string(CUPROBE_BINARY_DIR) + "/bin/cuprobe";
  std::atomic<bool> stop{false};
  std::thread watcher([&] {
    for (uint64_t now = 10; !stop.load(); ++now) {
      EXPECT_TRUE(maps_->Publish(now).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  testing::ProcessResult r =
      testing::RunProcess({cli, "maps", "--set", "cfg[0]=0x1234", "--map", "cfg", session_->name()});
  stop = true;
  watcher.join();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("@cfg[0] = 0x1234 (applied by the hook)"));
  EXPECT_THAT(r.out, HasSubstr("@cfg: 4660\n")) << r.out;

  // No hook publishing: the write stays pending and the CLI says why.
  r = testing::RunProcess({cli, "maps", "--set", "cfg[0]=7", session_->name()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("was not applied within 5s"));
  ASSERT_TRUE(maps_->Publish(99).ok());  // the hook comes back: it lands
  absl::StatusOr<MapReader> reader = MapReader::Open(session_->name());
  ASSERT_TRUE(reader.ok());
  uint64_t value = 0;
  std::memcpy(&value, (*reader->Lookup("cfg", AsBytes(uint32_t{0})))->data(), 8);
  EXPECT_EQ(value, 7u);

  r = testing::RunProcess({cli, "maps", "--set", "counts[0]=1", session_->name()});
  EXPECT_THAT(r.err, HasSubstr("only ARRAY maps take writes from the host"));
  r = testing::RunProcess({cli, "maps", "--set", "cfg[1]=1", session_->name()});
  EXPECT_THAT(r.err, HasSubstr("has 1 entries: no index 1"));
  r = testing::RunProcess({cli, "maps", "--set", "cfg=1", session_->name()});
  EXPECT_THAT(r.err, HasSubstr("no [INDEX]="));
}

TEST(MapsArgs, ValuesAreEncodedByTheMapsValueSize) {
  EXPECT_EQ(*EncodeMapValue("258", 2), (std::vector<uint8_t>{2, 1}));
  EXPECT_EQ(*EncodeMapValue("0xff", 1), (std::vector<uint8_t>{0xff}));
  EXPECT_EQ(*EncodeMapValue("-1", 4), (std::vector<uint8_t>{0xff, 0xff, 0xff, 0xff}));
  EXPECT_EQ(*EncodeMapValue("hex:0a0B0c", 3), (std::vector<uint8_t>{0x0a, 0x0b, 0x0c}));
  EXPECT_THAT(std::string(EncodeMapValue("256", 1).status().message()),
              HasSubstr("does not fit 1 bytes"));
  EXPECT_THAT(std::string(EncodeMapValue("-129", 1).status().message()),
              HasSubstr("does not fit 1 bytes"));
  EXPECT_THAT(std::string(EncodeMapValue("7", 3).status().message()),
              HasSubstr("give them as hex:BYTES (6 hex digits)"));
  EXPECT_THAT(std::string(EncodeMapValue("hex:0g", 1).status().message()),
              HasSubstr("'g' is not a hex digit"));
  EXPECT_THAT(std::string(EncodeMapValue("seven", 8).status().message()),
              HasSubstr("'seven' is not an integer"));
  EXPECT_THAT(std::string(EncodeMapValue("1f", 8).status().message()),
              HasSubstr("hex after 0x")) << "bare hex is not taken for a number";
  absl::StatusOr<MapAssignment> a = ParseMapAssignment("cfg[12]=-3");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->map, "cfg");
  EXPECT_EQ(a->index, 12u);
  EXPECT_EQ(a->value, "-3");
  EXPECT_THAT(std::string(ParseMapAssignment("[1]=2").status().message()), HasSubstr("no map name"));
  EXPECT_THAT(std::string(ParseMapAssignment("m[x]=2").status().message()),
              HasSubstr("not a non-negative integer"));
  EXPECT_THAT(std::string(ParseArgs({"cuprobe", "maps", "--set", "m[1]=", "s"}).status().message()),
              HasSubstr("no value"));
}

}  // namespace
}  // namespace cuprobe

namespace cuprobe {
namespace {

// The program killed with SIGKILL (issue 9): the CLI writes the report of
// what it has, removes the session segment, and dies of the same signal.
// Runs without a GPU (the program never initializes CUDA).
TEST(CliLifecycle, ProgramKilledWithSigkillStillGetsAReportAndNoSegmentIsLeft) {
  const std::string cli = std::string(CUPROBE_BINARY_DIR) + "/bin/cuprobe";
  char dir_template[] = "/tmp/cuprobe-killed-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  // The shell prints its parent's pid (the CLI's), then kills itself.
  testing::ProcessResult r = testing::RunProcess(
      {cli, "trace", "-o", dir + "/report", "--format", "json", "--", "/bin/sh", "-c",
       "echo $PPID; kill -9 $$"});
  EXPECT_EQ(r.term_signal, SIGKILL) << r.err;
  EXPECT_THAT(r.err, HasSubstr("the program was killed by signal 9")) << r.err;
  EXPECT_FALSE(testing::ReadWholeFile(dir + "/report.json").empty()) << r.err;
  const std::string pid(absl::StripAsciiWhitespace(r.out));
  ASSERT_FALSE(pid.empty());
  const std::string prefix = absl::StrCat("cuprobe-", ::geteuid(), "-", pid, "-");
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    EXPECT_FALSE(absl::StartsWith(entry.path().filename().string(), prefix))
        << entry.path() << " was left behind";
  }
  std::filesystem::remove_all(dir);
}

// The default formats: the summary and the streamed Perfetto timeline,
// whose file is opened before the program runs; the program's exit code
// is cuprobe's. An unwritable timeline path fails before the program runs.
TEST(CliLifecycle, DefaultFormatsWriteTheSummaryAndThePerfettoTimeline) {
  const std::string cli = std::string(CUPROBE_BINARY_DIR) + "/bin/cuprobe";
  char dir_template[] = "/tmp/cuprobe-formats-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  testing::ProcessResult r = testing::RunProcess(
      {cli, "trace", "-o", dir + "/report", "--", "/bin/sh", "-c", "echo ran; exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out, "ran\n");
  EXPECT_TRUE(std::filesystem::exists(dir + "/report.txt")) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/report.pftrace")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/report.trace.json"));

  r = testing::RunProcess({cli, "trace", "-o", dir + "/missing/report", "--format", "perfetto",
                           "--", "/bin/sh", "-c", "echo ran"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out, "") << "the program does not run";
  EXPECT_THAT(r.err, HasSubstr("does not exist"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cuprobe
