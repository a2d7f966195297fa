#include "loader/run_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "cuprobe/abi.h"
#include "loader/compiler/compiler.h"
#include "loader/maps_command.h"
#include "loader/oneliner/compile.h"
#include "loader/oneliner/print.h"
#include "loader/oneliner/translate.h"
#include "loader/trace_command.h"
#include "maps/map_print.h"
#include "maps/map_reader.h"
#include "probe/kernel_glob.h"
#include "report/trace_data.h"
#include "report/trace_report.h"
#include "support/log.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

// How often `run` consumes ring buffers while the program runs. A 4 MiB ring
// of 40-byte records that a kernel fills at 8 M records/s (kernel_trace on
// a 2 ms matmul) holds about 13 ms of them.
constexpr uint32_t kRingDrainIntervalMs = 1;

// A record of `map` as JSON: fields by the map's value type when it has one
// (a ring's __type(value, T)), and the bytes in hex.
std::string EventJson(const MapSpec& map, absl::Span<const uint8_t> body) {
  std::string out = "{\"map\":";
  AppendJsonString(&out, map.name);
  absl::StrAppend(&out, ",\"bytes\":", body.size(), ",\"fields\":{");
  bool first = true;
  for (const TypeField& f : map.value_type.fields) {
    if (uint64_t{f.offset} + f.size > body.size()) continue;
    if (!first) out += ",";
    first = false;
    AppendJsonString(&out, f.name);
    out += ":";
    if (f.size == 1 || f.size == 2 || f.size == 4 || f.size == 8) {
      uint64_t v = 0;
      std::memcpy(&v, body.data() + f.offset, f.size);
      absl::StrAppend(&out, v);
    } else {
      std::string hex;
      for (uint32_t i = 0; i < f.size; ++i) absl::StrAppendFormat(&hex, "%02x", body[f.offset + i]);
      AppendJsonString(&out, hex);
    }
  }
  // The record's bytes too, always: the fields are a reading of them.
  std::string hex;
  for (uint8_t b : body) absl::StrAppendFormat(&hex, "%02x", b);
  out += "},\"hex\":";
  AppendJsonString(&out, hex);
  out += "}";
  return out;
}

// The names of instrumented kernels (ctx->kernel_id -> base name) as their
// records arrive, so that live prints name kernels: added on the thread that
// drains the session's record ring, read on the live view's. The first
// process's name of an id wins when several took turns with the maps.
class LiveKernelNames final : public RecordConsumer {
 public:
  void AddName(uint64_t id, std::string_view name) override {
    absl::MutexLock lock(&mu_);
    names_[id] = std::string(name);
  }
  void AddProbeKernel(const ProbeKernelRecord& r) override {
    absl::MutexLock lock(&mu_);
    auto it = names_.find(r.name_id);
    if (it != names_.end()) by_id_.emplace(r.kernel_id, KernelBaseName(it->second));
  }
  void AddProcess(const ProcessRecord&) override {}
  void AddLaunch(const LaunchRecord&) override {}
  void AddKernel(const KernelRecord&) override {}
  void AddMemcpy(const MemcpyRecord&) override {}
  void AddMemset(const MemsetRecord&) override {}

  std::string Find(uint32_t kernel_id) const {
    absl::MutexLock lock(&mu_);
    auto it = by_id_.find(kernel_id);
    return it == by_id_.end() ? std::string() : it->second;
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::string> names_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, std::string> by_id_ ABSL_GUARDED_BY(mu_);
};

// Everything the live view and the end of the run share.
class LivePrinter {
 public:
  // `drains_records`: the printer consumes the session's record ring itself
  // (`cuprobe attach`: the probe session's ring carries only the names of
  // the kernels instrumented); otherwise the run's drainer hands it the
  // records (records()).
  LivePrinter(const RunOptions& options, const ProbeBundle& bundle, bool drains_records = false)
      : options_(options), bundle_(bundle), drains_records_(drains_records) {
    if (!bundle.oneliner.empty()) {
      absl::StatusOr<oneliner::Translation> t = oneliner::TranslateOneliner(bundle.oneliner);
      if (t.ok()) oneliner_ = *std::move(t);
    }
  }

  // Live, every few milliseconds: consumes the rings (printing their events
  // unless quiet). Before the hook made the maps, tries to attach at most
  // every 50 ms.
  void Drain(Session& session) {
    if (!reader_.has_value()) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_attach_ < std::chrono::milliseconds(50)) return;
      last_attach_ = now;
    }
    if (!Attach(session)) return;
    DrainEvents(/*print=*/!options_.quiet);
    if (drains_records_) DrainRecords(session);
  }

  // Where the run's drainer hands the session's records (LiveView::records).
  RecordConsumer* records() { return &live_names_; }

  // Live: maps (unless quiet) and events.
  void Interval(Session& session) {
    if (!Attach(session)) return;
    DrainEvents(/*print=*/!options_.quiet);
    if (options_.quiet || !HasPlainMaps()) return;
    absl::StatusOr<std::string> text = FormatMaps();
    if (!text.ok()) return;
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "--- maps at %.1f s ---\n%s", t, text->c_str());
  }

  // After the program exited: the last events and the final maps, on stderr
  // and into PREFIX.maps.txt / PREFIX.events.
  // `data`: the run's trace, for the list of instrumented kernels (nullptr
  // for `cuprobe attach`, whose kernels are in the program's own trace).
  void Final(Session& session, const TraceAggregator* data) {
    // The hook never attached (no CUDA, or it was disabled): RunTracedProgram
    // says why; there are no maps to show.
    const uint32_t state = session.session_state();
    if (state == static_cast<uint32_t>(SessionState::kCreated)) return;
    if (!Attach(session)) {
      CUPROBE_LOG(kWarning, "cannot read the session's maps: %s", attach_error_);
      return;
    }
    DrainEvents(/*print=*/!options_.quiet);
    if (drains_records_) DrainRecords(session);
    FormatEvents(/*print=*/false);  // what --quiet left
    std::string text;
    if (data != nullptr) RememberKernelNames(*data);
    if (data == nullptr) {
      // Attached late: nothing to say about kernels here.
    } else if (!data->probe_kernels().empty() && oneliner_.has_value()) {
      // A one-liner prints kernels by name.
    } else if (!data->probe_kernels().empty()) {
      text += "instrumented kernels (ctx->kernel_id):\n";
      // Each process numbers the kernels it instruments: when several
      // processes took turns with the maps, an id names a kernel per process.
      std::set<uint32_t> pids;
      for (const ProbeKernelRecord& k : data->probe_kernels()) pids.insert(k.pid);
      std::vector<std::pair<uint32_t, std::string>> kernels;
      for (const ProbeKernelRecord& k : data->probe_kernels()) {
        std::string name = DemangleKernelName(data->Name(k.name_id));
        if (pids.size() > 1) absl::StrAppend(&name, " (pid ", k.pid, ")");
        kernels.emplace_back(k.kernel_id, std::move(name));
      }
      std::sort(kernels.begin(), kernels.end());
      kernels.erase(std::unique(kernels.begin(), kernels.end()), kernels.end());
      for (const auto& [id, name] : kernels) absl::StrAppendFormat(&text, "  [%d] %s\n", id, name);
      text += "\n";
    } else if (options_.backend != ProbeBackend::kPtx) {
      CUPROBE_LOG(kWarning, "no kernel was instrumented: no module the program loaded had a "
                  "kernel that the probes select (check the section globs, or -k)");
    } else {
      CUPROBE_LOG(kWarning, "no kernel was instrumented: no module the program loaded had a "
                  "kernel with PTX that the probes select (check the section globs, or -k; "
                  "`cuprobe inspect` shows the kernels without PTX, which --backend auto "
                  "reaches)");
    }
    if (HasPlainMaps()) {
      absl::StatusOr<std::string> maps = FormatMaps();
      if (maps.ok()) {
        text += *maps;
      } else {
        CUPROBE_LOG(kWarning, "cannot read the final maps: %s", maps.status().message());
      }
    }
    for (const MapInfo& info : reader_->maps()) {
      if (info.spec.type != CUPROBE_MAP_RINGBUF) continue;
      absl::StatusOr<MapRingStats> stats = reader_->RingStats(info.spec.name);
      // A one-liner's printf ring is worth a line only when it lost records.
      if (stats.ok() && (!oneliner_.has_value() || stats->dropped > 0)) {
        text += FormatRingStats(info.spec.name, *stats) + "\n";
      }
    }
    std::fprintf(stderr, "--- final maps ---\n%s", text.c_str());
    WriteText(options_.trace.output + ".maps.txt", text);
    if (events_written_ > 0 || !events_.empty()) {
      WriteText(options_.trace.output + ".events", events_);
    }
  }

 private:
  bool Attach(Session& session) {
    if (reader_.has_value()) return true;
    // Rings are consumed here: open writable (one consumer per ring).
    absl::StatusOr<MapReader> reader = MapReader::Open(session.name(), /*writable=*/true);
    if (!reader.ok()) {
      attach_error_ = std::string(reader.status().message());
      return false;
    }
    reader_ = *std::move(reader);
    return true;
  }

  // The maps as text: a one-liner's its own way (keys by name), probes' as
  // `cuprobe maps` prints them.
  absl::StatusOr<std::string> FormatMaps() {
    if (!oneliner_.has_value()) return FormatSessionMaps(*reader_, PlainMaps());
    return oneliner::FormatOnelinerMaps(*oneliner_, *reader_, [this](uint32_t id) {
      auto it = kernel_names_.find(id);
      return it == kernel_names_.end() ? live_names_.Find(id) : it->second;
    });
  }

  // ctx->kernel_id -> demangled name, from the trace (the first process's
  // name of an id wins when several processes took turns).
  void RememberKernelNames(const TraceAggregator& data) {
    for (const ProbeKernelRecord& k : data.probe_kernels()) {
      kernel_names_.emplace(k.kernel_id, KernelBaseName(data.Name(k.name_id)));
    }
  }

  void DrainRecords(Session& session) {
    TraceCounters counters;
    session.ring().Drain([&](uint16_t type, absl::Span<const uint8_t> body) {
      (void)DecodeRecord(type, body, live_names_, counters);
    });
  }

  bool HasPlainMaps() const {
    for (const MapInfo& info : reader_->maps()) {
      if (info.spec.type != CUPROBE_MAP_RINGBUF && !absl::StartsWith(info.spec.name, ".")) {
        return true;
      }
    }
    return false;
  }

  // Maps worth printing: not rings (their events stream), not global data.
  MapsOptions PlainMaps() const {
    MapsOptions o;
    for (const MapInfo& info : reader_->maps()) {
      if (info.spec.type == CUPROBE_MAP_RINGBUF || absl::StartsWith(info.spec.name, ".")) continue;
      o.only.push_back(info.spec.name);
    }
    return o;
  }

  // Consumes every ring, keeping the records' bytes; formats (and prints)
  // them only when `print`, after the rings were freed: formatting runs far
  // slower than a kernel writes records (Final formats what is left).
  void DrainEvents(bool print) {
    const std::vector<MapInfo>& maps = reader_->maps();
    for (size_t i = 0; i < maps.size(); ++i) {
      const MapSpec& spec = maps[i].spec;
      if (spec.type != CUPROBE_MAP_RINGBUF) continue;
      absl::StatusOr<size_t> n = reader_->ReadRing(spec.name, [&](absl::Span<const uint8_t> body) {
        pending_.push_back({static_cast<uint32_t>(i), pending_bytes_.size(), body.size()});
        pending_bytes_.insert(pending_bytes_.end(), body.begin(), body.end());
      });
      if (!n.ok() && !ring_error_reported_) {
        ring_error_reported_ = true;
        CUPROBE_LOG(kWarning, "cannot read ring buffer @%s: %s", spec.name, n.status().message());
      }
    }
    if (print) FormatEvents(/*print=*/true);
  }

  // The consumed records as event lines, into PREFIX.events (and stderr).
  void FormatEvents(bool print) {
    const std::vector<MapInfo>& maps = reader_->maps();
    for (const PendingEvent& e : pending_) {
      const MapSpec& spec = maps[e.map].spec;
      const auto body = absl::MakeConstSpan(pending_bytes_).subspan(e.offset, e.size);
      std::string line;
      if (spec.name == CUPROBE_PRINTK_MAP_NAME) {
        std::string text = FormatPrintk(bundle_, body);
        if (options_.events_json) {
          line = "{\"printk\":";
          AppendJsonString(&line, text);
          line += "}";
        } else {
          line = text;
        }
      } else if (options_.events_json) {
        line = EventJson(spec, body);
      } else {
        line = absl::StrCat("@", spec.name, ": ", FormatBytes(body, spec.value_type));
      }
      if (print) std::fprintf(stderr, "%s\n", line.c_str());
      absl::StrAppend(&events_, line, "\n");
      ++events_written_;
    }
    pending_.clear();
    pending_bytes_.clear();
  }


  static void WriteText(const std::string& path, const std::string& text) {
    absl::Status s = WriteFile(path, text);
    if (s.ok()) {
      CUPROBE_LOG(kInfo, "wrote %s", path);
    } else {
      CUPROBE_LOG(kError, "%s", s.message());
    }
  }

  const RunOptions& options_;
  const ProbeBundle& bundle_;
  std::optional<oneliner::Translation> oneliner_;
  const bool drains_records_;
  std::map<uint32_t, std::string> kernel_names_;
  LiveKernelNames live_names_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::optional<MapReader> reader_;
  std::string attach_error_;
  std::chrono::steady_clock::time_point last_attach_{};
  std::string events_;
  uint64_t events_written_ = 0;
  // Consumed ring records not formatted yet: map index, offset and size in
  // pending_bytes_.
  struct PendingEvent {
    uint32_t map;
    size_t offset;
    size_t size;
  };
  std::vector<PendingEvent> pending_;
  std::vector<uint8_t> pending_bytes_;
  bool ring_error_reported_ = false;
};

}  // namespace

struct ProbePrinter::Impl {
  Impl(const RunOptions& options, const ProbeBundle& bundle)
      : printer(options, bundle, /*drains_records=*/true) {}
  LivePrinter printer;
};

ProbePrinter::ProbePrinter(const RunOptions& options, const ProbeBundle& bundle)
    : impl_(std::make_unique<Impl>(options, bundle)) {}
ProbePrinter::~ProbePrinter() = default;
void ProbePrinter::Interval(Session& session) { impl_->printer.Interval(session); }
void ProbePrinter::Drain(Session& session) { impl_->printer.Drain(session); }
void ProbePrinter::Final(Session& session) { impl_->printer.Final(session, nullptr); }

std::string FormatPrintf(std::string_view format, absl::Span<const uint64_t> args) {
  std::string out;
  size_t next_arg = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    char c = format[i];
    if (c != '%') {
      out += c;
      continue;
    }
    size_t start = i++;
    if (i < format.size() && format[i] == '%') {
      out += '%';
      continue;
    }
    while (i < format.size() && std::strchr("-+ #0", format[i]) != nullptr) ++i;
    while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) ++i;
    if (i < format.size() && format[i] == '.') {
      ++i;
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) ++i;
    }
    size_t length_start = i;
    while (i < format.size() && std::strchr("hlzjt", format[i]) != nullptr) ++i;
    if (i >= format.size()) {
      out.append(format.substr(start));
      break;
    }
    const char conv = format[i];
    if (std::strchr("diuxXocp", conv) == nullptr || next_arg >= args.size()) {
      out.append(format.substr(start, i - start + 1));  // verbatim
      continue;
    }
    // Rebuild the spec with a 64-bit length so every argument reads as one.
    std::string spec(format.substr(start, length_start - start));
    const uint64_t v = args[next_arg++];
    // The length modifier says how wide the argument is: %d and %x of a
    // 32-bit value read 32 bits, %ld / %zu / %llx 64.
    const std::string_view length = format.substr(length_start, i - length_start);
    const bool wide = length.find('l') != std::string_view::npos ||
                      length.find('z') != std::string_view::npos;
    char buf[128];
    if (conv == 'p') {
      spec += "llx";
      std::snprintf(buf, sizeof(buf), ("0x" + spec).c_str(), static_cast<unsigned long long>(v));
    } else if (conv == 'c') {
      spec += 'c';
      std::snprintf(buf, sizeof(buf), spec.c_str(), static_cast<int>(v & 0xff));
    } else if (conv == 'd' || conv == 'i') {
      spec += "lld";
      long long sv = wide ? static_cast<long long>(v)
                          : static_cast<long long>(static_cast<int32_t>(v & 0xffffffffu));
      std::snprintf(buf, sizeof(buf), spec.c_str(), sv);
    } else {
      spec += "ll";
      spec += conv;
      std::snprintf(buf, sizeof(buf), spec.c_str(),
                    static_cast<unsigned long long>(wide ? v : (v & 0xffffffffu)));
    }
    out += buf;
  }
  return out;
}

std::string FormatPrintk(const ProbeBundle& bundle, absl::Span<const uint8_t> record) {
  if (record.size() < 32) return absl::StrCat("<short printk record: ", record.size(), " bytes>");
  uint32_t format_id = 0, nargs = 0;
  uint64_t args[3];
  std::memcpy(&format_id, record.data(), 4);
  std::memcpy(&nargs, record.data() + 4, 4);
  std::memcpy(args, record.data() + 8, sizeof(args));
  if (format_id >= bundle.printk_formats.size()) {
    return absl::StrCat("<printk with unknown format ", format_id, ">");
  }
  std::string text =
      FormatPrintf(bundle.printk_formats[format_id], absl::MakeConstSpan(args, std::min(nargs, 3u)));
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

absl::StatusOr<ProbeBundle> LoadProbe(const std::string& path) {
  if (absl::EndsWith(path, ".cpb")) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read probe bundle '", path, "'"));
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
    absl::StatusOr<ProbeBundle> bundle = ReadBundle(bytes);
    if (!bundle.ok()) {
      return absl::Status(bundle.status().code(),
                          absl::StrCat(path, ": ", bundle.status().message()));
    }
    return bundle;
  }
  auto t0 = std::chrono::steady_clock::now();
  CUPROBE_LOG(kInfo, "compiling %s", path);
  CUPROBE_ASSIGN_OR_RETURN(CompileResult r, CompileFile(path, ProbeCompileOptions::FromEnvironment(&std::getenv)));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
  CUPROBE_LOG(kInfo, "compiled %s in %.0f ms: %d program(s), %d map(s)", path, ms,
              r.bundle.programs.size(), r.bundle.maps.size());
  return std::move(r.bundle);
}

// Several -p: their sources or objects compiled together into one bundle
// (CompileFiles). Compiled bundles cannot be combined: their PTX already
// numbers its maps.
absl::StatusOr<ProbeBundle> LoadProbes(const std::vector<std::string>& paths) {
  if (paths.size() == 1) return LoadProbe(paths[0]);
  for (const std::string& path : paths) {
    if (absl::EndsWith(path, ".cpb")) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": several -p need probe sources (.bpf.c) or objects (.o), which are compiled "
                "together; a compiled bundle (.cpb) can only be used alone"));
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  CUPROBE_LOG(kInfo, "compiling %s", absl::StrJoin(paths, ", "));
  CUPROBE_ASSIGN_OR_RETURN(CompileResult r, CompileFiles(paths, ProbeCompileOptions::FromEnvironment(&std::getenv)));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
  CUPROBE_LOG(kInfo, "compiled %d probe files in %.0f ms: %d program(s), %d map(s)", paths.size(),
              ms, r.bundle.programs.size(), r.bundle.maps.size());
  return std::move(r.bundle);
}

// A one-liner (-e) compiled into a bundle.
absl::StatusOr<ProbeBundle> LoadOneliner(const std::string& text) {
  auto t0 = std::chrono::steady_clock::now();
  CUPROBE_ASSIGN_OR_RETURN(CompileResult r, oneliner::CompileOneliner(
                                                text, ProbeCompileOptions::FromEnvironment(&std::getenv)));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
  CUPROBE_LOG(kInfo, "compiled the one-liner in %.0f ms: %d program(s), %d map(s)", ms,
              r.bundle.programs.size(), r.bundle.maps.size());
  return std::move(r.bundle);
}

absl::StatusOr<ProbeBundle> LoadRunProbes(const RunOptions& options) {
  CUPROBE_ASSIGN_OR_RETURN(ProbeBundle bundle, options.oneliner.empty()
                                                   ? LoadProbes(options.probes)
                                                   : LoadOneliner(options.oneliner));
  if (bundle.programs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(absl::StrJoin(options.probes, ", "),
                     " has no probe programs (sections cuprobe/entry/..., "
                     "cuprobe/exit/..., cuprobe/mem/..., kprobe/..., kretprobe/...)"));
  }
  if (!options.kernels.empty()) {
    for (ProbeProgram& p : bundle.programs) p.kernel_glob = options.kernels;
  }
  for (const ProbeProgram& p : bundle.programs) {
    CUPROBE_LOG(kInfo, "probe %s: %s of kernels '%s'", p.name,
                p.attach == AttachKind::kEntry  ? "entry"
                : p.attach == AttachKind::kExit ? "exit"
                                                : "memory accesses",
                p.kernel_glob);
  }

  return bundle;
}

namespace {

// run's part of the program's environment: CUPROBE_BACKEND, always set
// (--backend or its default), so that a value left in cuprobe's own
// environment cannot pick another backend than the one asked for; a
// different one is named so the user knows it was replaced.
ExtraEnvironment RunEnvironment(const RunOptions& options) {
  const std::string backend(ProbeBackendName(options.backend));
  if (const char* env = std::getenv("CUPROBE_BACKEND");
      env != nullptr && *env != '\0' && backend != env) {
    CUPROBE_LOG(kWarning, "CUPROBE_BACKEND=%s in the environment is replaced by --backend %s",
                env, backend);
  }
  return {{"CUPROBE_BACKEND", backend}};
}

}  // namespace

absl::StatusOr<int> RunRun(const RunOptions& options) {
  CUPROBE_ASSIGN_OR_RETURN(ProbeBundle bundle, LoadRunProbes(options));
  SessionOptions session_options;
  session_options.maps = bundle.maps;
  session_options.bundle = WriteBundle(bundle);

  // The hook publishes maps at its heartbeat; the live view prints at the
  // user's interval.
  TraceOptions trace = options.trace;
  trace.interval_ms = std::min<uint32_t>(options.trace.interval_ms, 100);
  LivePrinter printer(options, bundle);
  LiveView live;
  live.interval_ms = options.trace.interval_ms;
  live.on_interval = [&printer](Session& s) { printer.Interval(s); };
  live.drain_interval_ms = kRingDrainIntervalMs;
  live.on_drain = [&printer](Session& s) { printer.Drain(s); };
  live.on_exit = [&printer](Session& s, const TraceAggregator& data) { printer.Final(s, &data); };
  live.records = printer.records();
  return RunTracedProgram(trace, std::move(session_options), live, RunEnvironment(options));
}

}  // namespace cuprobe
