// File: report/trace_chrome.cc
#include "report/trace_chrome.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "report/trace_report.h"

namespace cuprobe {
namespace {

// A slice or flow event, kept with its sort key so the output is stable
// whatever order the records arrived in.
struct Event {
  uint64_t ts;
  uint32_t pid;
  uint32_t tid;
  size_t seq;
  std::string json;
};

class ChromeTraceWriter {
 public:
  explicit ChromeTraceWriter(const TraceData& data) : data_(data) {
    origin_ = Origin();
    NumberGpus();
  }

  std::string Write();

 private:
  uint64_t Origin() const;
  // Microseconds since the origin, "%d.%03d": exact, no floating point.
  std::string Micros(uint64_t ns) const {
    const uint64_t rel = ns > origin_ ? ns - origin_ : 0;
    return absl::StrFormat("%d.%03d", rel / 1000, rel % 1000);
  }
  static std::string Dur(uint64_t start, uint64_t end) {
    const uint64_t d = DurationNs(start, end);
    return absl::StrFormat("%d.%03d", d / 1000, d % 1000);
  }
  // The track group of a GPU operation: one per device, or, when several
  // processes wrote into the session, one per (process, device).
  void NumberGpus();
  uint32_t GpuPid(uint64_t correlation_id, uint32_t device) const {
    auto it = gpu_pids_.find({IdProcess(correlation_id), device});
    return it != gpu_pids_.end() ? it->second : kChromeGpuPidBase + device;
  }
  static uint32_t LaneTid(uint32_t stream, uint32_t lane) {
    return stream + lane * kChromeLaneTidStride;
  }

  // Appends `"name":...,"cat":...,"ph":"X",...,"args":{` to a new event; the
  // caller appends its args and the closing "}}".
  std::string SliceHead(std::string_view name, std::string_view cat, uint64_t start,
                        uint64_t end, uint32_t pid, uint32_t tid) const;
  void AddEvent(uint64_t ts, uint32_t pid, uint32_t tid, std::string json) {
    events_.push_back(Event{ts, pid, tid, events_.size(), std::move(json)});
  }
  static void AppendMetadata(std::string* out, std::string_view name, uint32_t pid,
                             uint32_t tid, std::string_view key, std::string_view string_value,
                             int64_t int_value, bool is_string);

  void AssignLanes();
  void AddLaunches();
  void AddKernels();
  void AddMemoryOps();
  void AddFlows();
  std::string Metadata() const;

  const TraceData& data_;
  uint64_t origin_ = 0;
  std::vector<Event> events_;
  std::vector<Event> flows_;
  std::set<uint32_t> cpu_pids_;
  std::set<std::pair<uint32_t, uint32_t>> cpu_threads_;  // (pid, tid)
  // (process, device) -> the track group's pid.
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> gpu_pids_;
  bool several_processes_ = false;
  // (GPU pid, stream id, lane): lane 0 is the stream's own track.
  std::set<std::tuple<uint32_t, uint32_t, uint32_t>> tracks_;
  std::vector<uint32_t> kernel_lane_, memcpy_lane_, memset_lane_;
};

void ChromeTraceWriter::NumberGpus() {
  std::set<std::pair<uint32_t, uint32_t>> gpus;  // (process, device)
  for (const auto& k : data_.kernels()) gpus.insert({IdProcess(k.correlation_id), k.device});
  for (const auto& m : data_.memcpys()) gpus.insert({IdProcess(m.correlation_id), m.device});
  for (const auto& m : data_.memsets()) gpus.insert({IdProcess(m.correlation_id), m.device});
  std::set<uint32_t> processes;
  for (const auto& [process, device] : gpus) processes.insert(process);
  several_processes_ = processes.size() > 1;
  uint32_t next = kChromeGpuPidBase;
  for (const auto& [process, device] : gpus) {
    gpu_pids_[{process, device}] = several_processes_ ? next++ : kChromeGpuPidBase + device;
  }
}

uint64_t ChromeTraceWriter::Origin() const {
  // A start of 0 is CUPTI's "not timed": such a record is drawn at the
  // origin rather than moving it to 1970.
  uint64_t origin = std::numeric_limits<uint64_t>::max();
  auto note = [&origin](uint64_t start) {
    if (start != 0) origin = std::min(origin, start);
  };
  for (const auto& l : data_.launches()) note(l.api_start_ns);
  for (const auto& k : data_.kernels()) note(k.start_ns);
  for (const auto& m : data_.memcpys()) note(m.start_ns);
  for (const auto& m : data_.memsets()) note(m.start_ns);
  return origin == std::numeric_limits<uint64_t>::max() ? 0 : origin;
}

std::string ChromeTraceWriter::SliceHead(std::string_view name, std::string_view cat,
                                         uint64_t start, uint64_t end, uint32_t pid,
                                         uint32_t tid) const {
  std::string out = "{\"name\":";
  AppendJsonString(&out, name);
  out += ",\"cat\":";
  AppendJsonString(&out, cat);
  absl::StrAppend(&out, ",\"ph\":\"X\",\"ts\":", Micros(start), ",\"dur\":", Dur(start, end),
                  ",\"pid\":", pid, ",\"tid\":", tid, ",\"args\":{");
  return out;
}

std::string Dim3(const uint32_t (&v)[3]) { return absl::StrCat("[", v[0], ",", v[1], ",", v[2], "]"); }

// Work on one stream is serialized, except kernels of a graph (and async
// copies engines) that CUPTI reports with the stream they were launched into.
// Viewers drop or garble "X" slices that overlap without nesting, so an
// operation that starts before the previous one on its stream ended goes to
// the first free overflow lane of that stream (greedy interval partitioning).
void ChromeTraceWriter::AssignLanes() {
  struct Op {
    uint32_t gpu, stream;  // gpu: the track group's pid
    uint64_t start, end;
    int kind;  // 0 kernel, 1 memcpy, 2 memset
    size_t index;
  };
  std::vector<Op> ops;
  const auto& kernels = data_.kernels();
  const auto& memcpys = data_.memcpys();
  const auto& memsets = data_.memsets();
  for (size_t i = 0; i < kernels.size(); ++i) {
    ops.push_back({GpuPid(kernels[i].correlation_id, kernels[i].device), kernels[i].stream_id, kernels[i].start_ns,
                   std::max(kernels[i].start_ns, kernels[i].end_ns), 0, i});
  }
  for (size_t i = 0; i < memcpys.size(); ++i) {
    ops.push_back({GpuPid(memcpys[i].correlation_id, memcpys[i].device), memcpys[i].stream_id, memcpys[i].start_ns,
                   std::max(memcpys[i].start_ns, memcpys[i].end_ns), 1, i});
  }
  for (size_t i = 0; i < memsets.size(); ++i) {
    ops.push_back({GpuPid(memsets[i].correlation_id, memsets[i].device), memsets[i].stream_id, memsets[i].start_ns,
                   std::max(memsets[i].start_ns, memsets[i].end_ns), 2, i});
  }
  std::sort(ops.begin(), ops.end(), [](const Op& a, const Op& b) {
    return std::tie(a.gpu, a.stream, a.start, a.kind, a.index) <
           std::tie(b.gpu, b.stream, b.start, b.kind, b.index);
  });
  kernel_lane_.assign(kernels.size(), 0);
  memcpy_lane_.assign(memcpys.size(), 0);
  memset_lane_.assign(memsets.size(), 0);
  std::vector<uint64_t> lane_end;  // per lane of the current stream
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (i == 0 || op.gpu != ops[i - 1].gpu || op.stream != ops[i - 1].stream) {
      lane_end.clear();
    }
    uint32_t lane = 0;
    while (lane < lane_end.size() && lane_end[lane] > op.start) ++lane;
    if (lane == lane_end.size()) lane_end.push_back(0);
    lane_end[lane] = op.end;
    // Lanes beyond the stride's reach would collide with other streams' tids.
    lane = std::min<uint32_t>(lane, kChromeMaxLanes - 1);
    tracks_.insert({op.gpu, op.stream, lane});
    (op.kind == 0 ? kernel_lane_ : op.kind == 1 ? memcpy_lane_ : memset_lane_)[op.index] = lane;
  }
}

void ChromeTraceWriter::AddLaunches() {
  for (const LaunchRecord& l : data_.launches()) {
    cpu_pids_.insert(l.pid);
    cpu_threads_.insert({l.pid, l.tid});
    std::string e = SliceHead(LaunchApiName(l.api), "cuda_api", l.api_start_ns, l.api_end_ns,
                              l.pid, l.tid);
    e += "\"kernel\":";
    if (l.name_id == 0 && IsGraphLaunch(l.api)) {
      AppendJsonString(&e, "[graph]");
    } else {
      AppendJsonString(&e, DemangleKernelName(LaunchReportName(data_, l)));
    }
    absl::StrAppend(&e, ",\"correlation id\":", IdLocal(l.correlation_id), ",\"grid\":", Dim3(l.grid),
                    ",\"block\":", Dim3(l.block), ",\"shared memory\":", l.shared_mem_bytes,
                    ",\"stream\":\"",
                    l.stream == kUnknownStream ? std::string("unknown")
                                               : absl::StrFormat("0x%x", l.stream),
                    "\",\"result\":",
                    l.result, "}}");
    AddEvent(l.api_start_ns, l.pid, l.tid, std::move(e));
  }
}

void ChromeTraceWriter::AddKernels() {
  for (size_t i = 0; i < data_.kernels().size(); ++i) {
    const KernelRecord& k = data_.kernels()[i];
    const uint32_t tid = LaneTid(k.stream_id, kernel_lane_[i]);
    const std::string_view raw = data_.Name(k.name_id);
    const std::string name = DemangleKernelName(raw);
    std::string e = SliceHead(name, "kernel", k.start_ns, k.end_ns, GpuPid(k.correlation_id, k.device), tid);
    absl::StrAppend(&e, "\"correlation id\":", IdLocal(k.correlation_id), ",\"grid\":", Dim3(k.grid),
                    ",\"block\":", Dim3(k.block),
                    ",\"shared memory\":", k.dynamic_shared_bytes + uint64_t{k.static_shared_bytes},
                    ",\"dynamic shared memory\":", k.dynamic_shared_bytes,
                    ",\"static shared memory\":", k.static_shared_bytes,
                    ",\"registers per thread\":", k.registers_per_thread,
                    ",\"stream\":", k.stream_id, ",\"device\":", k.device,
                    ",\"context\":", k.context, ",\"grid id\":", k.grid_id);
    if (k.graph_id != 0 || k.graph_node_id != 0) {
      absl::StrAppend(&e, ",\"graph id\":", k.graph_id, ",\"graph node id\":", k.graph_node_id);
    }
    if (name != raw) {
      e += ",\"mangled name\":";
      AppendJsonString(&e, raw);
    }
    e += "}}";
    AddEvent(k.start_ns, GpuPid(k.correlation_id, k.device), tid, std::move(e));
  }
}

void ChromeTraceWriter::AddMemoryOps() {
  for (size_t i = 0; i < data_.memcpys().size(); ++i) {
    const MemcpyRecord& m = data_.memcpys()[i];
    const uint32_t tid = LaneTid(m.stream_id, memcpy_lane_[i]);
    std::string e = SliceHead(MemcpyKindName(m.copy_kind), "memcpy", m.start_ns, m.end_ns,
                              GpuPid(m.correlation_id, m.device), tid);
    absl::StrAppend(&e, "\"bytes\":", m.bytes, ",\"correlation id\":", IdLocal(m.correlation_id),
                    ",\"stream\":", m.stream_id, ",\"device\":", m.device, ",\"src kind\":");
    AppendJsonString(&e, MemoryKindName(m.src_kind));
    e += ",\"dst kind\":";
    AppendJsonString(&e, MemoryKindName(m.dst_kind));
    e += "}}";
    AddEvent(m.start_ns, GpuPid(m.correlation_id, m.device), tid, std::move(e));
  }
  for (size_t i = 0; i < data_.memsets().size(); ++i) {
    const MemsetRecord& m = data_.memsets()[i];
    const uint32_t tid = LaneTid(m.stream_id, memset_lane_[i]);
    std::string e = SliceHead(kMemsetOperationName, "memset", m.start_ns, m.end_ns,
                              GpuPid(m.correlation_id, m.device), tid);
    absl::StrAppend(&e, "\"bytes\":", m.bytes, ",\"value\":", m.value,
                    ",\"correlation id\":", IdLocal(m.correlation_id), ",\"stream\":", m.stream_id,
                    ",\"device\":", m.device, "}}");
    AddEvent(m.start_ns, GpuPid(m.correlation_id, m.device), tid, std::move(e));
  }
}

void ChromeTraceWriter::AddFlows() {
  // The earliest kernel of each correlation id (ties: first recorded).
  const auto& kernels = data_.kernels();
  absl::flat_hash_map<uint64_t, size_t> kernel_of;  // index into kernels
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (IdLocal(kernels[i].correlation_id) == 0) continue;
    auto [it, inserted] = kernel_of.try_emplace(kernels[i].correlation_id, i);
    if (!inserted && kernels[i].start_ns < kernels[it->second].start_ns) it->second = i;
  }
  // One arrow per correlation id: the first launch record that carries it.
  // Arrows are numbered from 1 in correlation order: process-qualified
  // correlation ids exceed JavaScript's exact integers.
  std::vector<std::pair<size_t, size_t>> arrows;  // (launch, kernel) indices
  absl::flat_hash_map<uint64_t, bool> done;
  const auto& launches = data_.launches();
  for (size_t li = 0; li < launches.size(); ++li) {
    const LaunchRecord& l = launches[li];
    auto it = kernel_of.find(l.correlation_id);
    if (it == kernel_of.end() || !done.try_emplace(l.correlation_id, true).second) continue;
    arrows.push_back({li, it->second});
  }
  std::sort(arrows.begin(), arrows.end(), [&](const auto& a, const auto& b) {
    return launches[a.first].correlation_id < launches[b.first].correlation_id;
  });
  uint64_t id = 0;
  for (const auto& [li, ki] : arrows) {
    const LaunchRecord& l = launches[li];
    const KernelRecord& k = kernels[ki];
    ++id;
    std::string s = absl::StrCat(
        "{\"name\":\"launch\",\"cat\":\"launch\",\"ph\":\"s\",\"id\":", id,
        ",\"ts\":", Micros(l.api_start_ns), ",\"pid\":", l.pid, ",\"tid\":", l.tid, "}");
    std::string f = absl::StrCat(
        "{\"name\":\"launch\",\"cat\":\"launch\",\"ph\":\"f\",\"bp\":\"e\",\"id\":", id,
        ",\"ts\":", Micros(k.start_ns), ",\"pid\":", GpuPid(k.correlation_id, k.device),
        ",\"tid\":", LaneTid(k.stream_id, kernel_lane_[ki]), "}");
    // Sorted by arrow, start before finish.
    flows_.push_back(Event{id, 0, 0, 0, std::move(s)});
    flows_.push_back(Event{id, 0, 0, 1, std::move(f)});
  }
  std::sort(flows_.begin(), flows_.end(), [](const Event& a, const Event& b) {
    return std::tie(a.ts, a.seq) < std::tie(b.ts, b.seq);
  });
}

void ChromeTraceWriter::AppendMetadata(std::string* out, std::string_view name, uint32_t pid,
                                       uint32_t tid, std::string_view key,
                                       std::string_view string_value, int64_t int_value,
                                       bool is_string) {
  *out += "{\"name\":";
  AppendJsonString(out, name);
  absl::StrAppend(out, ",\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid, ",\"args\":{");
  AppendJsonString(out, key);
  *out += ':';
  if (is_string) {
    AppendJsonString(out, string_value);
  } else {
    absl::StrAppend(out, int_value);
  }
  *out += "}},\n";
}

std::string ChromeTraceWriter::Metadata() const {
  absl::flat_hash_map<uint32_t, std::string_view> process_names;
  for (const ProcessRecord& p : data_.processes()) {
    if (data_.HasName(p.name_id)) process_names[p.pid] = data_.Name(p.name_id);
  }
  std::set<uint32_t> pids = cpu_pids_;
  for (const ProcessRecord& p : data_.processes()) pids.insert(p.pid);

  std::string out;
  int64_t sort_index = 0;
  for (uint32_t pid : pids) {
    auto it = process_names.find(pid);
    const std::string name =
        it != process_names.end() ? std::string(it->second) : absl::StrCat("Process ", pid);
    AppendMetadata(&out, "process_name", pid, 0, "name", name, 0, true);
    AppendMetadata(&out, "process_sort_index", pid, 0, "sort_index", "", sort_index++, false);
  }
  for (const auto& [pid, tid] : cpu_threads_) {
    AppendMetadata(&out, "thread_name", pid, tid, "name", absl::StrCat("Thread ", tid), 0, true);
  }
  for (const auto& [key, gpu] : gpu_pids_) {
    const auto& [process, device] = key;
    std::string name = absl::StrCat("GPU ", device);
    if (several_processes_) {
      auto it = process_names.find(process);
      absl::StrAppend(&name, " (", it != process_names.end() ? it->second : "pid",
                      it != process_names.end() ? ", pid " : " ", process, ")");
    }
    AppendMetadata(&out, "process_name", gpu, 0, "name", name, 0, true);
    AppendMetadata(&out, "process_sort_index", gpu, 0, "sort_index", "", sort_index++, false);
  }
  for (const auto& [gpu, stream, lane] : tracks_) {
    const uint32_t tid = LaneTid(stream, lane);
    AppendMetadata(&out, "thread_name", gpu, tid, "name",
                   lane == 0 ? absl::StrCat("Stream ", stream)
                             : absl::StrCat("Stream ", stream, " (overlap ", lane, ")"),
                   0, true);
    AppendMetadata(&out, "thread_sort_index", gpu, tid, "sort_index", "",
                   int64_t{stream} * kChromeMaxLanes + lane, false);
  }
  return out;
}

std::string ChromeTraceWriter::Write() {
  AssignLanes();
  AddLaunches();
  AddKernels();
  AddMemoryOps();
  AddFlows();
  // seq makes every key unique: the order is total, whatever sort is used.
  std::sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
    return std::tie(a.ts, a.pid, a.tid, a.seq) < std::tie(b.ts, b.pid, b.tid, b.seq);
  });

  std::string out = "{\"traceEvents\":[\n";
  out += Metadata();
  for (const Event& e : events_) absl::StrAppend(&out, e.json, ",\n");
  for (const Event& e : flows_) absl::StrAppend(&out, e.json, ",\n");
  // Every entry above ends in ",\n"; JSON forbids a trailing comma.
  if (out.size() >= 2 && out.compare(out.size() - 2, 2, ",\n") == 0) {
    out.resize(out.size() - 2);
    out += '\n';
  }
  // origin_ns is a string: CUPTI timestamps exceed 2^53, JavaScript's exact
  // integer range.
  const TraceCounters& c = data_.counters();
  absl::StrAppend(&out, "],\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"cuprobe\"",
                  ",\"trace_records_version\":", kTraceRecordsVersion,
                  ",\"origin_ns\":\"", origin_, "\",\"dropped_records\":", c.dropped,
                  ",\"invalid_records\":", c.invalid, ",\"unknown_type_records\":",
                  c.unknown_type, "}}\n");
  return out;
}

}  // namespace

std::string FormatChromeTrace(const TraceData& data) { return ChromeTraceWriter(data).Write(); }

}  // namespace cuprobe
