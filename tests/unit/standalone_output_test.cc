// File: tests/unit/standalone_output_test.cc
//
// StandaloneOutput (cupti_hook/outputs.h), the hook's output without a
// session: the fixture trace written through it as the hook writes records
// (a name's text as the extra bytes) comes back from the streamed .pftrace
// with every kernel, and from a .json path as the Chrome timeline; an
// unwritable path fails when the output is opened, and records after
// Finish are refused.
#include "cupti_hook/outputs.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "probe/trace_records.h"
#include "tests/report/perfetto_trace_reader.h"
#include "tests/report/trace_report_test_util.h"

namespace cuprobe {
namespace {

using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes every fixture record the way the tracer does: a name record's
// text goes as the extra bytes after its NameRecord.
void WriteFixture(TraceOutput& out) {
  testing::MakeFixtureStream().ForEachRecord([&](uint16_t type, absl::Span<const uint8_t> body) {
    if (type == static_cast<uint16_t>(RecordType::kName)) {
      NameRecord r;
      std::memcpy(&r, body.data(), sizeof(r));
      ASSERT_TRUE(out.Write(type, body.data(), sizeof(r), body.data() + sizeof(r), r.length));
      return;
    }
    ASSERT_TRUE(out.Write(type, body.data(), body.size(), nullptr, 0));
  });
}

class StandaloneOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("cuprobe_standalone_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(StandaloneOutputTest, APerfettoPathGetsTheTimelineStreamed) {
  const std::string path = dir_ / "trace.pftrace";
  absl::StatusOr<TraceOutput*> out = StandaloneOutput::Open(path);
  ASSERT_TRUE(out.ok()) << out.status();
  std::unique_ptr<TraceOutput> owned(*out);
  EXPECT_TRUE(std::filesystem::exists(path)) << "created when opened";
  WriteFixture(*owned);
  ASSERT_TRUE(owned->Finish().ok());
  EXPECT_FALSE(owned->Write(static_cast<uint16_t>(RecordType::kName), "x", 1, nullptr, 0))
      << "records after Finish are refused";
  EXPECT_TRUE(owned->Finish().ok()) << "a second Finish is harmless";

  absl::StatusOr<PerfettoTrace> t = ReadPerfettoTrace(ReadAll(path));
  ASSERT_TRUE(t.ok()) << t.status();
  const TraceData data = testing::MakeFixture();
  size_t kernels = 0, vec_add = 0, flows = 0;
  for (const PerfettoSlice& s : t->slices) {
    flows += s.flows_in.size();
    for (const KernelRecord& k : data.kernels()) {
      if (s.start_ns == k.start_ns && s.end_ns == k.end_ns) ++kernels;
    }
    if (s.name == "vec_add(float const*, float const*, float*, int)") ++vec_add;
  }
  EXPECT_EQ(kernels, data.kernels().size());
  EXPECT_GT(vec_add, 0u) << "names came from the records' extra bytes";
  EXPECT_GT(flows, 0u) << "launches lead to their kernels";
}

TEST_F(StandaloneOutputTest, AJsonPathGetsTheChromeTimeline) {
  const std::string path = dir_ / "trace.json";
  absl::StatusOr<TraceOutput*> out = StandaloneOutput::Open(path);
  ASSERT_TRUE(out.ok()) << out.status();
  std::unique_ptr<TraceOutput> owned(*out);
  WriteFixture(*owned);
  ASSERT_TRUE(owned->Finish().ok());
  const std::string json = ReadAll(path);
  EXPECT_THAT(json, HasSubstr("\"traceEvents\""));
  EXPECT_THAT(json, HasSubstr("vec_add"));
}

TEST_F(StandaloneOutputTest, AnUnwritablePathFailsWhenOpened) {
  const std::string path = dir_ / "no" / "such" / "dir" / "trace.pftrace";
  absl::StatusOr<TraceOutput*> out = StandaloneOutput::Open(path);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr(path));
}

}  // namespace
}  // namespace cuprobe
