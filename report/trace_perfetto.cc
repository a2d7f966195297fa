// File: report/trace_perfetto.cc
#include "report/trace_perfetto.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "report/trace_chrome.h"
#include "report/trace_report.h"

namespace cuprobe {

PerfettoTimeline::PerfettoTimeline(PerfettoWriter::Sink sink) : writer_(std::move(sink)) {}

void PerfettoTimeline::AddName(uint64_t name_id, std::string_view name) {
  raw_names_[name_id] = std::string(name);
  names_.erase(name_id);
}

void PerfettoTimeline::AddProcess(const ProcessRecord& record) {
  auto it = raw_names_.find(record.name_id);
  if (it == raw_names_.end()) return;
  process_names_[record.pid] = it->second;
  last_pid_ = record.pid;
  // A track made before the name came is described again, named.
  if (auto p = processes_.find(record.pid); p != processes_.end()) {
    writer_.ProcessTrack(static_cast<int32_t>(record.pid), it->second, p->second);
  }
}

uint64_t PerfettoTimeline::ProcessTrackOf(uint32_t pid) {
  if (auto it = processes_.find(pid); it != processes_.end()) return it->second;
  auto name = process_names_.find(pid);
  const uint64_t uuid = writer_.ProcessTrack(
      static_cast<int32_t>(pid),
      name != process_names_.end() ? name->second : absl::StrCat("Process ", pid));
  processes_.emplace(pid, uuid);
  return uuid;
}

uint64_t PerfettoTimeline::ThreadTrackOf(uint32_t pid, uint32_t tid) {
  if (auto it = threads_.find({pid, tid}); it != threads_.end()) return it->second;
  ProcessTrackOf(pid);
  const uint64_t uuid =
      writer_.ThreadTrack(static_cast<int32_t>(pid), tid, absl::StrCat("Thread ", tid));
  threads_.emplace(std::make_pair(pid, tid), uuid);
  return uuid;
}

bool PerfettoTimeline::Lane::Fits(uint64_t start, uint64_t end) const {
  if (start < floor) return false;
  end = std::max(start, end);
  auto next = slices.lower_bound(start);
  if (next != slices.end() && next->first < end) return false;
  if (next != slices.begin() && std::prev(next)->second > start) return false;
  return true;
}

void PerfettoTimeline::Lane::Add(uint64_t start, uint64_t end) {
  slices.emplace(start, std::max(start, end));
  if (slices.size() > kLaneMemory) {
    floor = std::max(floor, slices.begin()->second);
    slices.erase(slices.begin());
  }
}

uint64_t PerfettoTimeline::GpuTrackOf(uint32_t pid, uint32_t device, uint32_t stream,
                                      uint64_t start, uint64_t end) {
  Stream& s = streams_[{pid, device, stream}];
  size_t lane = 0;
  while (lane < s.lanes.size() && !s.lanes[lane].Fits(start, end)) ++lane;
  if (lane == s.lanes.size()) {
    if (s.lanes.size() == kChromeMaxLanes) {
      // Every lane is taken: the last one takes it (its slices may overlap).
      lane = s.lanes.size() - 1;
    } else {
      const uint64_t process = ProcessTrackOf(pid);
      std::string name = absl::StrCat("GPU ", device, ", stream ", stream);
      if (lane > 0) absl::StrAppend(&name, " (overlap ", lane, ")");
      s.lanes.push_back(Lane{.track = writer_.NamedTrack(process, name)});
    }
  }
  s.lanes[lane].Add(start, end);
  return s.lanes[lane].track;
}

std::string_view PerfettoTimeline::KernelName(uint64_t name_id) {
  if (auto it = names_.find(name_id); it != names_.end()) return it->second;
  auto raw = raw_names_.find(name_id);
  std::string name = raw != raw_names_.end() ? DemangleKernelName(raw->second)
                                             : std::string(kUnknownName);
  return names_.emplace(name_id, std::move(name)).first->second;
}

bool PerfettoTimeline::FlowStarted(uint64_t correlation_id) {
  if (!flows_.insert(correlation_id).second) return true;
  flow_order_.push_back(correlation_id);
  if (flow_order_.size() > kFlowWindow) {
    flows_.erase(flow_order_.front());
    flow_order_.pop_front();
  }
  return false;
}

uint32_t PerfettoTimeline::ProcessOf(uint64_t correlation_id) const {
  const uint32_t pid = IdProcess(correlation_id);
  return pid != 0 ? pid : last_pid_;
}

void PerfettoTimeline::AddLaunch(const LaunchRecord& l) {
  last_pid_ = l.pid;
  const uint64_t track = ThreadTrackOf(l.pid, l.tid);
  uint64_t flow = 0;
  // A failed call launched nothing; a graph's kernels share its id.
  if (l.result == 0 && !IsGraphLaunch(l.api) && IdLocal(l.correlation_id) != 0 &&
      !FlowStarted(l.correlation_id)) {
    flow = l.correlation_id;
  }
  writer_.Slice(track, l.api_start_ns, l.api_end_ns, LaunchApiName(l.api), "", flow);
}

void PerfettoTimeline::AddKernel(const KernelRecord& k) {
  ++kernels_;
  const uint64_t track =
      GpuTrackOf(ProcessOf(k.correlation_id), k.device, k.stream_id, k.start_ns, k.end_ns);
  const bool graph = k.graph_id != 0 || k.graph_node_id != 0;
  const uint64_t flow = !graph && IdLocal(k.correlation_id) != 0 ? k.correlation_id : 0;
  writer_.Slice(track, k.start_ns, k.end_ns, KernelName(k.name_id), "", 0, flow);
}

void PerfettoTimeline::AddMemcpy(const MemcpyRecord& m) {
  const uint64_t track =
      GpuTrackOf(ProcessOf(m.correlation_id), m.device, m.stream_id, m.start_ns, m.end_ns);
  writer_.Slice(track, m.start_ns, m.end_ns, MemcpyKindName(m.copy_kind), "");
}

void PerfettoTimeline::AddMemset(const MemsetRecord& m) {
  const uint64_t track =
      GpuTrackOf(ProcessOf(m.correlation_id), m.device, m.stream_id, m.start_ns, m.end_ns);
  writer_.Slice(track, m.start_ns, m.end_ns, kMemsetOperationName, "");
}

absl::StatusOr<std::unique_ptr<PerfettoTimelineFile>> PerfettoTimelineFile::Open(
    const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write report '", path, "': ", std::strerror(errno)));
  }
  return std::unique_ptr<PerfettoTimelineFile>(new PerfettoTimelineFile(path, f));
}

PerfettoTimelineFile::PerfettoTimelineFile(std::string path, std::FILE* file)
    : path_(std::move(path)), file_(file), timeline_([this](std::string_view bytes) {
        if (std::fwrite(bytes.data(), 1, bytes.size(), file_) == bytes.size()) {
          return absl::OkStatus();
        }
        return absl::DataLossError(
            absl::StrCat("cannot write report '", path_, "': ", std::strerror(errno)));
      }) {}

PerfettoTimelineFile::~PerfettoTimelineFile() {
  if (file_ == nullptr) return;
  std::fclose(file_);
  ::unlink(path_.c_str());
}

absl::Status PerfettoTimelineFile::Close() {
  if (file_ == nullptr) return absl::FailedPreconditionError("timeline file closed twice");
  absl::Status s = timeline_.Finish();
  if (std::fclose(file_) != 0 && s.ok()) {
    s = absl::DataLossError(
        absl::StrCat("cannot write report '", path_, "': ", std::strerror(errno)));
  }
  file_ = nullptr;
  return s;
}

}  // namespace cuprobe
