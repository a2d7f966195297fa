// File: report/trace_perfetto.h
//
// PerfettoTimeline streams the timeline of a trace as Perfetto's protobuf
// trace (report/perfetto_writer.h) while the records are drained: each
// record becomes its slice at once and nothing of it is kept, so memory
// stays bounded whatever the trace's length (it grows with the distinct
// kernel names, threads and streams only) and the file is complete as soon
// as the drain ends.
//
// What the timeline shows (Perfetto's UI, ui.perfetto.dev, opens it):
//   - per traced process a process track; under it a thread track per
//     thread that launched work, with one slice per launch call
//     (cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch, ...);
//   - a track per GPU and stream, "GPU 0, stream 7", with the kernels
//     (demangled names), copies ("[CUDA memcpy HtoD]") and sets. Work that
//     overlaps on one stream (a graph's branches) goes to overflow tracks,
//     "GPU 0, stream 7 (overlap 1)", as in the Chrome timeline;
//   - a flow arrow from each launch call to its kernel (not for graph
//     launches, whose kernels share one correlation id).
//
//   PerfettoTimeline timeline([&](std::string_view b) { return file.Append(b); });
//   DecodeRecord(type, body, timeline, counters);   // for every record
//   absl::Status s = timeline.Finish();
//
// Not thread-safe: one consumer thread feeds it.
#ifndef CUPROBE_REPORT_TRACE_PERFETTO_H_
#define CUPROBE_REPORT_TRACE_PERFETTO_H_

#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "report/perfetto_writer.h"
#include "report/trace_data.h"

namespace cuprobe {

class PerfettoTimeline final : public RecordConsumer {
 public:
  explicit PerfettoTimeline(PerfettoWriter::Sink sink);

  void AddName(uint64_t name_id, std::string_view name) override;
  void AddProcess(const ProcessRecord& record) override;
  void AddLaunch(const LaunchRecord& record) override;
  void AddKernel(const KernelRecord& record) override;
  void AddMemcpy(const MemcpyRecord& record) override;
  void AddMemset(const MemsetRecord& record) override;
  void AddProbeKernel(const ProbeKernelRecord&) override {}

  // Writes what is buffered; the first write error, if any.
  absl::Status Finish() { return writer_.Finish(); }

  [[nodiscard]] uint64_t bytes_written() const { return writer_.bytes_written(); }
  [[nodiscard]] uint64_t slices() const { return writer_.slices(); }
  [[nodiscard]] uint64_t kernels() const { return kernels_; }

 private:
  // One track of a stream: its latest kLaneMemory slices (start -> end)
  // and `floor`, the latest end of those it forgot. A slice fits when it
  // starts at or after the floor and overlaps none it remembers: records
  // a little out of order (copies and kernels from different activity
  // buffers) still share the stream's track.
  struct Lane {
    uint64_t track = 0;
    uint64_t floor = 0;
    std::map<uint64_t, uint64_t> slices;
    bool Fits(uint64_t start, uint64_t end) const;
    void Add(uint64_t start, uint64_t end);
  };
  // A stream's tracks: lane 0 and its overflow lanes.
  struct Stream {
    std::vector<Lane> lanes;
  };
  uint64_t ProcessTrackOf(uint32_t pid);
  // The process of a GPU record: its correlation id's, or for an id not
  // qualified with one (an older hook) the process that last wrote.
  uint32_t ProcessOf(uint64_t correlation_id) const;
  uint64_t ThreadTrackOf(uint32_t pid, uint32_t tid);
  // The track for work [start, end] on (process, device, stream): the first
  // lane it fits, a new one when none does.
  uint64_t GpuTrackOf(uint32_t pid, uint32_t device, uint32_t stream, uint64_t start,
                      uint64_t end);
  // The demangled name of `name_id` (cached).
  std::string_view KernelName(uint64_t name_id);
  // Whether a flow from this correlation id was started already (a
  // runtime call and the driver call inside it share one): remembered for
  // the last kFlowWindow ids.
  bool FlowStarted(uint64_t correlation_id);

  static constexpr size_t kFlowWindow = 1 << 16;
  static constexpr size_t kLaneMemory = 256;

  PerfettoWriter writer_;
  absl::flat_hash_map<uint64_t, std::string> raw_names_;
  absl::flat_hash_map<uint64_t, std::string> names_;  // demangled, by name id
  absl::flat_hash_map<uint32_t, std::string> process_names_;
  absl::flat_hash_map<uint32_t, uint64_t> processes_;
  absl::flat_hash_map<std::pair<uint32_t, uint32_t>, uint64_t> threads_;
  absl::flat_hash_map<std::tuple<uint32_t, uint32_t, uint32_t>, Stream> streams_;
  absl::flat_hash_set<uint64_t> flows_;
  std::deque<uint64_t> flow_order_;
  uint64_t kernels_ = 0;
  uint32_t last_pid_ = 0;
};

// A PerfettoTimeline streamed into a file (`cuprobe trace --format
// perfetto`, and the hook's standalone mode). The file is opened before
// anything runs, so an unwritable path is an error up front; dropped
// without Close (the program never ran), it leaves no file behind.
//
//   absl::StatusOr<std::unique_ptr<PerfettoTimelineFile>> f = PerfettoTimelineFile::Open(path);
//   DecodeRecord(type, body, (*f)->timeline(), counters);
//   absl::Status s = (*f)->Close();
class PerfettoTimelineFile {
 public:
  static absl::StatusOr<std::unique_ptr<PerfettoTimelineFile>> Open(const std::string& path);
  PerfettoTimelineFile(const PerfettoTimelineFile&) = delete;
  PerfettoTimelineFile& operator=(const PerfettoTimelineFile&) = delete;
  ~PerfettoTimelineFile();

  PerfettoTimeline& timeline() { return timeline_; }
  [[nodiscard]] const std::string& path() const { return path_; }

  // Writes the rest and closes the file: the first write error, if any.
  absl::Status Close();

 private:
  PerfettoTimelineFile(std::string path, std::FILE* file);

  std::string path_;
  std::FILE* file_;
  PerfettoTimeline timeline_;
};

}  // namespace cuprobe

#endif  // CUPROBE_REPORT_TRACE_PERFETTO_H_
