// File: tests/report/trace_report_test_util.cc
//
// The helpers trace_report_test_util.h declares.
#include "tests/report/trace_report_test_util.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>

#include "probe/trace_records.h"
#include "report/trace_data.h"

namespace cuprobe::testing {

LaunchRecord MakeLaunch(const LaunchSpec& s) {
  LaunchRecord r{};
  r.correlation_id = s.correlation;
  r.name_id = s.name_id;
  r.api_start_ns = kBase + s.start;
  r.api_end_ns = kBase + s.end;
  r.stream = s.stream;
  r.pid = kPid;
  r.tid = s.tid;
  r.grid[0] = 256;
  r.grid[1] = r.grid[2] = 1;
  r.block[0] = 128;
  r.block[1] = r.block[2] = 1;
  r.shared_mem_bytes = s.name_id == kReduce ? 1024 : 0;
  r.api = static_cast<uint16_t>(s.api);
  r.result = s.result;
  return r;
}

KernelRecord MakeKernel(const KernelSpec& s) {
  KernelRecord r{};
  r.correlation_id = s.correlation;
  r.name_id = s.name_id;
  r.start_ns = kBase + s.start;
  r.end_ns = kBase + s.start + s.duration;
  r.graph_node_id = s.graph_node;
  r.device = s.device;
  r.context = 1;
  r.stream_id = s.stream;
  r.grid[0] = s.grid_x;
  r.grid[1] = r.grid[2] = 1;
  r.block[0] = s.block_x;
  r.block[1] = r.block[2] = 1;
  r.dynamic_shared_bytes = s.name_id == kReduce ? 1024 : 0;
  r.static_shared_bytes = s.name_id == kReduce ? 256 : 0;
  r.registers_per_thread = s.registers;
  r.graph_id = s.graph_id;
  r.grid_id = 1000 + IdLocal(s.correlation);  // as %gridid: one per launch
  return r;
}

MemcpyRecord MakeMemcpy(uint64_t correlation, uint8_t kind, uint32_t device, uint32_t stream,
                        uint64_t start, uint64_t duration, uint64_t bytes, uint8_t src,
                        uint8_t dst) {
  MemcpyRecord r{};
  r.correlation_id = correlation;
  r.start_ns = kBase + start;
  r.end_ns = kBase + start + duration;
  r.bytes = bytes;
  r.device = device;
  r.context = 1;
  r.stream_id = stream;
  r.copy_kind = kind;
  r.src_kind = src;
  r.dst_kind = dst;
  return r;
}

MemsetRecord MakeMemset(uint64_t correlation, uint32_t stream, uint64_t start,
                        uint64_t duration, uint64_t bytes, uint32_t value) {
  MemsetRecord r{};
  r.correlation_id = correlation;
  r.start_ns = kBase + start;
  r.end_ns = kBase + start + duration;
  r.bytes = bytes;
  r.device = 0;
  r.context = 1;
  r.stream_id = stream;
  r.value = value;
  return r;
}

RecordStream MakeFixtureStream() {
  RecordStream stream;
  stream.Name(kAppName, "vec_app");
  stream.Put(RecordType::kProcess, ProcessRecord{kPid, 0, kBase, kAppName});
  stream.Name(kVecAdd, "_Z7vec_addPKfS0_Pfi");
  stream.Name(kReduce, "_Z6reduceILi256EEvPKfPfi");
  stream.Name(kScale, "_ZN6detail5scaleEPff");
  stream.Name(kLambda, "lambda_kernel, \"fast\" path");
  stream.Name(kBogus, "_Zbogus");
  for (const auto& l : kLaunches) stream.Put(RecordType::kLaunch, MakeLaunch(l));
  for (const auto& k : kKernels) stream.Put(RecordType::kKernel, MakeKernel(k));
  stream.Put(RecordType::kMemcpy, MakeMemcpy(40, kHtoD, 0, 7, 1200, 600, 4096, kPageable, kDevice));
  stream.Put(RecordType::kMemcpy, MakeMemcpy(41, kHtoD, 0, 7, 2000, 1200, 8192, kPinned, kDevice));
  stream.Put(RecordType::kMemcpy, MakeMemcpy(42, kDtoD, 0, 13, 20000, 300, 1 << 20, kDevice, kDevice));
  stream.Put(RecordType::kMemcpy, MakeMemcpy(43, kDtoH, 0, 7, 21000, 900, 4096, kDevice, kPageable));
  stream.Put(RecordType::kMemset, MakeMemset(44, 14, 14500, 200, 1024, 0));
  stream.Put(RecordType::kMemset, MakeMemset(45, 14, 23000, 100, 2048, 255));
  return stream;
}

TraceData MakeFixture() {
  TraceData data;
  MakeFixtureStream().FeedTo(&data);
  return data;
}

uint64_t RssBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace cuprobe::testing
