// File: tests/report/trace_report_test_util.h
//
// The trace that trace_report_test (tests/report/trace_report*_test.cc)
// reports on: records built as the hook writes them, serialized as ring
// records (RecordHeader + body + padding) and decoded with TraceData::Add(),
// the same path as the ring consumer.
//
//   TraceData data = MakeFixture();
//   data.AddKernel(MakeKernel({1, kVecAdd, 0, 7, 2000, 500, 4096, 256, 16}));
#ifndef CUPROBE_TESTS_REPORT_TRACE_REPORT_TEST_UTIL_H_
#define CUPROBE_TESTS_REPORT_TRACE_REPORT_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "probe/trace_records.h"
#include "report/trace_data.h"

namespace cuprobe::testing {

inline constexpr uint64_t kBase = 1'722'000'000'123'456'789;  // a CUPTI-like timestamp
inline constexpr uint32_t kPid = 4242;
inline constexpr uint32_t kTidA = 4242;  // main thread
inline constexpr uint32_t kTidB = 4250;  // a worker thread

enum NameId : uint64_t {
  kVecAdd = 1,
  kReduce = 2,
  kScale = 3,
  kLambda = 4,
  kBogus = 5,
  kNoSuchName = 99,  // never named
  kAppName = 100,
};

// Appends one ring record: header, body, zero padding to a multiple of 8.
class RecordStream {
 public:
  template <typename T>
  void Put(RecordType type, const T& body, std::string_view tail = {}) {
    const size_t body_size = sizeof(T) + tail.size();
    const size_t padded = (sizeof(RecordHeader) + body_size + 7) / 8 * 8;
    RecordHeader h{static_cast<uint32_t>(padded), static_cast<uint16_t>(type), 0};
    const size_t at = bytes_.size();
    bytes_.resize(at + padded, 0);
    std::memcpy(bytes_.data() + at, &h, sizeof(h));
    std::memcpy(bytes_.data() + at + sizeof(h), &body, sizeof(T));
    if (!tail.empty()) {
      std::memcpy(bytes_.data() + at + sizeof(h) + sizeof(T), tail.data(), tail.size());
    }
  }
  void Name(uint64_t id, std::string_view name) {
    NameRecord r{id, static_cast<uint32_t>(name.size()), 0};
    Put(RecordType::kName, r, name);
  }
  // Calls fn(type, body) for every record, in order (body with its padding).
  template <typename Fn>
  void ForEachRecord(Fn fn) const {
    size_t at = 0;
    while (at < bytes_.size()) {
      RecordHeader h;
      std::memcpy(&h, bytes_.data() + at, sizeof(h));
      ASSERT_GE(h.size, sizeof(h));
      fn(h.type, absl::Span<const uint8_t>(bytes_.data() + at + sizeof(h), h.size - sizeof(h)));
      at += h.size;
    }
  }
  // Decodes the stream as the ring consumer does, into any consumer.
  void FeedTo(RecordConsumer& consumer) const {
    size_t at = 0;
    TraceCounters counters;
    while (at < bytes_.size()) {
      RecordHeader h;
      std::memcpy(&h, bytes_.data() + at, sizeof(h));
      ASSERT_GE(h.size, sizeof(h));
      absl::Span<const uint8_t> body(bytes_.data() + at + sizeof(h), h.size - sizeof(h));
      absl::Status s = DecodeRecord(h.type, body, consumer, counters);
      ASSERT_TRUE(s.ok()) << s;
      at += h.size;
    }
  }
  // Decodes the stream as the ring consumer does.
  void FeedTo(TraceData* data) const {
    size_t at = 0;
    while (at < bytes_.size()) {
      RecordHeader h;
      std::memcpy(&h, bytes_.data() + at, sizeof(h));
      ASSERT_GE(h.size, sizeof(h));
      absl::Span<const uint8_t> body(bytes_.data() + at + sizeof(h), h.size - sizeof(h));
      absl::Status s = data->Add(h.type, body);
      ASSERT_TRUE(s.ok()) << s;
      at += h.size;
    }
  }

 private:
  std::vector<uint8_t> bytes_;
};

// A launch record, times relative to kBase; MakeLaunch fills the rest.
struct LaunchSpec {
  uint32_t tid;
  uint64_t correlation;
  uint64_t name_id;
  LaunchApi api;
  uint64_t start, end;  // relative to kBase
  uint64_t stream;
  uint16_t result;
};

// A kernel record, times relative to kBase; MakeKernel fills the rest.
struct KernelSpec {
  uint64_t correlation;
  uint64_t name_id;
  uint32_t device, stream;
  uint64_t start, duration;  // relative to kBase
  uint32_t grid_x, block_x, registers;
  uint32_t graph_id = 0;
  uint64_t graph_node = 0;
};

// Records as the hook writes them (launches of process kPid, the others on
// context 1); times are relative to kBase.
LaunchRecord MakeLaunch(const LaunchSpec& s);
KernelRecord MakeKernel(const KernelSpec& s);
MemcpyRecord MakeMemcpy(uint64_t correlation, uint8_t kind, uint32_t device, uint32_t stream,
                        uint64_t start, uint64_t duration, uint64_t bytes, uint8_t src,
                        uint8_t dst);
MemsetRecord MakeMemset(uint64_t correlation, uint32_t stream, uint64_t start,
                        uint64_t duration, uint64_t bytes, uint32_t value);

// The fixture: kernels with 4 (even), 3 (odd), 2, and 1 instances, a name
// that needs demangling, one that does not demangle, one with a comma and a
// quote, one never named; three streams on GPU 0 and one on GPU 1; launches
// from two CPU threads, a graph launch and a failed launch; memcpys of three
// kinds and two memsets.
//
// Timeline (ns after kBase); streams never overlap themselves:
//   stream 7:  memcpy HtoD 1200+600, HtoD 2000+1200, vec_add 10000+100,
//              12000+200, 14000+300, 15000+400, <unknown> 20000+10,
//              memcpy DtoH 21000+900
//   stream 13: reduce 11000+1000, 13000+3000, 17000+2000, memcpy DtoD 20000+300
//   stream 14: memset 14500+200, lambda 16000+250, 16500+250, scale 22000+500
//              (graph), memset 23000+100
//   GPU 1 stream 21: _Zbogus 19500+50
inline const LaunchSpec kLaunches[] = {
    {kTidA, 1, kVecAdd, LaunchApi::kLaunchKernel, 1000, 5500, 0x7000, 0},
    {kTidB, 3, kReduce, LaunchApi::kLaunchKernelEx, 2000, 7000, 0x13000, 0},
    {kTidA, 2, kVecAdd, LaunchApi::kLaunchKernel, 6000, 9000, 0x7000, 0},
    {kTidB, 4, kReduce, LaunchApi::kLaunchKernelEx, 8000, 10000, 0x13000, 0},
    {kTidA, 5, kVecAdd, LaunchApi::kLaunchKernel, 9500, 11500, 0x7000, 0},
    {kTidB, 6, kReduce, LaunchApi::kLaunchKernelEx, 10500, 12500, 0x13000, 0},
    {kTidA, 7, kVecAdd, LaunchApi::kLaunchKernel, 12000, 13000, 0x7000, 0},
    {kTidB, 9, kLambda, LaunchApi::kLaunchKernel, 13000, 14000, 0x14000, 0},
    {kTidA, 8, kLambda, LaunchApi::kLaunchKernel, 13500, 14500, 0x14000, 0},
    {kTidA, 10, kBogus, LaunchApi::kLaunchCooperativeKernel, 15000, 16000, 0x21000, 0},
    {kTidA, 11, kNoSuchName, LaunchApi::kLaunchKernel, 16500, 17000, 0x7000, 0},
    {kTidB, 30, 0, LaunchApi::kGraphLaunch, 18000, 21000, 0x14000, 0},
    {kTidB, 12, kVecAdd, LaunchApi::kLaunchKernelEx, 21500, 21800, 0x7000, 1},  // failed
};

inline const KernelSpec kKernels[] = {
    {1, kVecAdd, 0, 7, 10000, 100, 4096, 256, 16},
    {3, kReduce, 0, 13, 11000, 1000, 1024, 256, 32},
    {2, kVecAdd, 0, 7, 12000, 200, 4096, 256, 16},
    {4, kReduce, 0, 13, 13000, 3000, 1024, 256, 32},
    {5, kVecAdd, 0, 7, 14000, 300, 4096, 256, 16},
    {7, kVecAdd, 0, 7, 15000, 400, 4096, 256, 16},
    {8, kLambda, 0, 14, 16000, 250, 64, 64, 40},
    {9, kLambda, 0, 14, 16500, 250, 64, 64, 40},
    {6, kReduce, 0, 13, 17000, 2000, 1024, 256, 32},
    {10, kBogus, 1, 21, 19500, 50, 1, 32, 8},
    {11, kNoSuchName, 0, 7, 20000, 10, 1, 1, 4},
    {30, kScale, 0, 14, 22000, 500, 128, 128, 24, /*graph_id=*/1, /*graph_node=*/5},
};

// Memcpy kinds and memory kinds, as CUPTI numbers them.
inline constexpr uint8_t kHtoD = 1, kDtoH = 2, kDtoD = 8;
inline constexpr uint8_t kPageable = 1, kPinned = 2, kDevice = 3;

// The fixture as ring records, and decoded into a TraceData.
RecordStream MakeFixtureStream();
TraceData MakeFixture();

// Resident set size of this process (/proc/self/statm), 0 if unknown.
uint64_t RssBytes();

// AddressSanitizer keeps freed blocks resident in its quarantine (256 MB by
// default), so RSS growth says nothing about bounded memory under it: the
// tests that measure it check their counts on fewer records there.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kUnderAsan = true;
#else
inline constexpr bool kUnderAsan = false;
#endif
#else
inline constexpr bool kUnderAsan = false;
#endif

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_REPORT_TRACE_REPORT_TEST_UTIL_H_
