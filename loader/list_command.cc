// File: loader/list_command.cc
//
// `cuprobe list` (list_command.h): the kernels of a file (ptx_rewriter's
// CatalogImage over the file's images), of a running program (its hook
// answers a list request through the late-attach channel with
// CatalogKernelRecords) or of a program run under the hook with
// CUPROBE_LIST=1 (each module load publishes its kernels), printed one
// attach point per line.
#include "loader/list_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "loader/inspect_command.h"
#include "loader/session_lookup.h"
#include "loader/trace_command.h"
#include "maps/segment.h"
#include "probe/bundle.h"
#include "probe/kernel_glob.h"
#include "probe/trace_records.h"
#include "ptx_rewriter/image.h"
#include "ptx_rewriter/image_pipeline.h"
#include "report/trace_data.h"
#include "support/log.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

std::string_view BackendWord(uint16_t backend) {
  switch (backend) {
    case kCatalogBackendPtx: return "ptx";
    case kCatalogBackendPatch: return "patch";
  }
  return "?";
}

// Kernels by mangled name, in first-seen order; a kernel seen with PTX in
// one image and without in another gets the PTX backend (the module the
// hook rewrites is the one with PTX).
class KernelSet {
 public:
  void Add(const std::string& mangled, uint16_t backend) {
    auto [it, inserted] = index_.try_emplace(mangled, kernels_.size());
    if (inserted) {
      kernels_.push_back({mangled, backend, std::nullopt});
      return;
    }
    uint16_t& have = kernels_[it->second].backend;
    if (have == 0 || backend == kCatalogBackendPtx) have = backend;
  }
  void Launched(const std::string& mangled, uint64_t n) {
    auto [it, inserted] = index_.try_emplace(mangled, kernels_.size());
    if (inserted) kernels_.push_back({mangled, 0, std::nullopt});
    std::optional<uint64_t>& l = kernels_[it->second].launches;
    l = l.value_or(0) + n;
  }
  std::vector<ListedKernel> Take() { return std::move(kernels_); }

 private:
  absl::flat_hash_map<std::string, size_t> index_;
  std::vector<ListedKernel> kernels_;
};

// The records of a list: names, catalog entries, launches per name.
class ListRecords final : public RecordConsumer {
 public:
  void AddName(uint64_t id, std::string_view name) override { names_[id] = std::string(name); }
  void AddProcess(const ProcessRecord&) override {}
  void AddLaunch(const LaunchRecord& r) override {
    if (r.name_id != 0) ++launches_[r.name_id];
  }
  void AddKernel(const KernelRecord&) override {}
  void AddMemcpy(const MemcpyRecord&) override {}
  void AddMemset(const MemsetRecord&) override {}
  void AddProbeKernel(const ProbeKernelRecord&) override {}
  void AddCatalogKernel(const CatalogKernelRecord& r) override { catalog_.push_back(r); }

  // Every cataloged kernel; with `launches`, every launched one too (a
  // kernel whose module image the hook did not keep has backend 0).
  std::vector<ListedKernel> Kernels(bool launches) const {
    KernelSet set;
    for (const CatalogKernelRecord& r : catalog_) {
      auto it = names_.find(r.name_id);
      if (it != names_.end()) set.Add(it->second, r.backend);
    }
    std::vector<ListedKernel> out;
    if (launches) {
      // Launch counts for every listed kernel, 0 for those never launched.
      for (const CatalogKernelRecord& r : catalog_) {
        auto it = names_.find(r.name_id);
        if (it != names_.end()) set.Launched(it->second, 0);
      }
      for (const auto& [id, n] : launches_) {
        auto it = names_.find(id);
        if (it != names_.end()) set.Launched(it->second, n);
      }
    }
    return set.Take();
  }

 private:
  absl::flat_hash_map<uint64_t, std::string> names_;
  absl::flat_hash_map<uint64_t, uint64_t> launches_;
  std::vector<CatalogKernelRecord> catalog_;
};

bool IsPoint(std::string_view p) { return p == "entry" || p == "exit" || p == "mem" || p == "*"; }

// `list PID`: a session without a bundle handed to the program's hook
// through the attach request; the hook writes the catalog into its ring and
// says kHookStopped.
absl::StatusOr<std::vector<ListedKernel>> ListRunning(const std::string& target_arg) {
  CUPROBE_ASSIGN_OR_RETURN(std::string name, FindTargetSession(target_arg));
  absl::StatusOr<Session> target = Session::Open(name, /*writable=*/true);
  if (!target.ok()) {
    return absl::Status(target.status().code(), absl::StrCat("cannot list the kernels of ",
                                                             target_arg, ": ",
                                                             target.status().message()));
  }
  if (target->session_state() != static_cast<uint32_t>(SessionState::kHookReady) ||
      !target->bundle_bytes().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot list the kernels of ", target_arg,
        ": it is not a program traced by `cuprobe trace` (its hook is ",
        SessionStateName(static_cast<SessionState>(target->session_state())),
        target->bundle_bytes().empty() ? "" : ", with probes of its own", ")"));
  }
  SessionOptions options;
  options.ring_capacity = uint64_t{16} << 20;
  CUPROBE_ASSIGN_OR_RETURN(Session lister, Session::Create(options));
  if (absl::Status s = target->RequestAttach(lister.name()); !s.ok()) {
    (void)lister.Remove();
    return s;
  }
  ListRecords records;
  TraceCounters counters;
  auto drain = [&] {
    return lister.ring().Drain([&](uint16_t type, absl::Span<const uint8_t> body) {
      (void)DecodeRecord(type, body, records, counters);
    });
  };
  // The hook acts at its heartbeat (100 ms by default); listing a large
  // program's images takes a while more.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  uint32_t state = lister.session_state();
  while (state == static_cast<uint32_t>(SessionState::kCreated) &&
         std::chrono::steady_clock::now() < deadline) {
    if (drain() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    state = lister.session_state();
  }
  while (drain() > 0) {
  }
  (void)target->RequestDetach();
  const uint64_t lost = lister.ring().dropped();
  (void)lister.Remove();
  if (state != static_cast<uint32_t>(SessionState::kHookStopped)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "pid ", target_arg, " did not answer the list request within 60 s (is the program "
        "stopped, or its hook run with CUPROBE_LATE_ATTACH=0?)"));
  }
  if (lost > 0) CUPROBE_LOG(kWarning, "%d list records were lost", lost);
  return records.Kernels(/*launches=*/false);
}

absl::StatusOr<int> ListProgram(const ListOptions& options, const ListPattern& pattern) {
  TraceOptions trace;
  trace.command = options.command;
  trace.formats.clear();            // no report: the list is the output
  trace.trace_selection = "launches";
  ListRecords records;
  LiveView live;
  live.records = &records;
  CUPROBE_ASSIGN_OR_RETURN(int code, RunTracedProgram(trace, SessionOptions(), live,
                                                      {{"CUPROBE_LIST", "1"}}));
  ListText text = FormatList(records.Kernels(/*launches=*/true), pattern, options.verbose);
  std::fputs(text.lines.c_str(), stdout);
  std::fflush(stdout);
  std::fputs(text.summary.c_str(), stderr);
  return code;
}

}  // namespace

ListPattern ParseListPattern(std::string_view pattern) {
  ListPattern p;
  if (pattern.empty()) return p;
  const size_t colon = pattern.find(':');
  std::string_view point;
  if (colon != std::string_view::npos && IsPoint(pattern.substr(0, colon))) {
    point = pattern.substr(0, colon);
    pattern.remove_prefix(colon + 1);
  }
  if (!point.empty() && point != "*") {
    p.entry = point == "entry";
    p.exit = point == "exit";
    p.mem = point == "mem";
  }
  p.glob = pattern.empty() ? "*" : std::string(pattern);
  return p;
}

ListText FormatList(std::vector<ListedKernel> kernels, const ListPattern& pattern, bool verbose) {
  struct Row {
    std::string base;
    const ListedKernel* kernel;
  };
  std::vector<Row> rows;
  for (const ListedKernel& k : kernels) {
    std::string base = KernelBaseName(k.mangled);
    if (KernelGlobMatches(pattern.glob, k.mangled, base)) rows.push_back({std::move(base), &k});
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.base != b.base ? a.base < b.base : a.kernel->mangled < b.kernel->mangled;
  });
  std::vector<std::string_view> points;
  if (pattern.entry) points.push_back("entry");
  if (pattern.exit) points.push_back("exit");
  if (pattern.mem) points.push_back("mem");
  size_t width = 0;
  for (const Row& r : rows) width = std::max(width, r.base.size() + 6);
  width = std::min<size_t>(width, 72);
  ListText out;
  int ptx = 0, patch = 0, unknown = 0;
  for (const Row& r : rows) {
    const ListedKernel& k = *r.kernel;
    (k.backend == kCatalogBackendPtx ? ptx : k.backend == kCatalogBackendPatch ? patch : unknown)++;
    for (std::string_view point : points) {
      std::string line = absl::StrCat(point, ":", r.base);
      if (line.size() < width) line.resize(width, ' ');
      absl::StrAppend(&line, "  ", BackendWord(k.backend));
      if (k.launches.has_value()) absl::StrAppend(&line, "  launches=", *k.launches);
      if (verbose && k.mangled != r.base) absl::StrAppend(&line, "  ", k.mangled);
      absl::StrAppend(&out.lines, line, "\n");
    }
  }
  out.summary = absl::StrCat(rows.size() * points.size(), " attach point(s) of ", rows.size(),
                             " kernel(s): ", ptx, " ptx, ", patch, " patch (SASS only)",
                             unknown > 0 ? absl::StrCat(", ", unknown, " unknown (image not kept)")
                                         : std::string(),
                             "\n");
  return out;
}

absl::StatusOr<std::vector<ListedKernel>> ListFileKernels(
    const std::string& path, uint32_t sm, const std::vector<std::string>& ptx_search_roots) {
  CUPROBE_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadFileBytes(path));
  CUPROBE_ASSIGN_OR_RETURN(std::vector<FileImage> images, FindImagesInFile(bytes, path));
  const PtxSourceFinder find_ptx =
      ptx_search_roots.empty() ? PtxSourceFinder() : TritonCacheFinder(ptx_search_roots);
  KernelSet set;
  for (const FileImage& f : images) {
    CUPROBE_ASSIGN_OR_RETURN(Image image, ReadFileImage(f));
    for (const CatalogKernel& k : CatalogImage(image, sm, find_ptx)) {
      set.Add(k.name, CatalogBackendCode(k.backend));
    }
  }
  return set.Take();
}

absl::StatusOr<int> RunList(const ListOptions& options) {
  const ListPattern pattern = ParseListPattern(options.pattern);
  if (!options.command.empty()) return ListProgram(options, pattern);
  std::vector<ListedKernel> kernels;
  const bool pid_like = !options.target.empty() &&
                        std::all_of(options.target.begin(), options.target.end(),
                                    [](char c) { return c >= '0' && c <= '9'; });
  std::error_code ec;
  if (pid_like && !std::filesystem::exists(options.target, ec)) {
    CUPROBE_ASSIGN_OR_RETURN(kernels, ListRunning(options.target));
  } else if (options.target.rfind("cuprobe-", 0) == 0 &&
             !std::filesystem::exists(options.target, ec)) {
    CUPROBE_ASSIGN_OR_RETURN(kernels, ListRunning(options.target));  // a session name
  } else {
    CUPROBE_ASSIGN_OR_RETURN(kernels, ListFileKernels(options.target, options.sm,
                                                      PtxSearchRootsFromEnvironment()));
  }
  ListText text = FormatList(std::move(kernels), pattern, options.verbose);
  std::fputs(text.lines.c_str(), stdout);
  std::fflush(stdout);
  std::fputs(text.summary.c_str(), stderr);
  return 0;
}

}  // namespace cuprobe
