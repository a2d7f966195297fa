// File: tests/report/perfetto_trace_reader.cc
#include "tests/report/perfetto_trace_reader.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cuprobe {

absl::StatusOr<std::vector<ProtoField>> DecodeProtoFields(std::string_view in) {
  std::vector<ProtoField> out;
  size_t i = 0;
  auto varint = [&](uint64_t* v) {
    *v = 0;
    for (int shift = 0; i < in.size() && shift < 64; shift += 7) {
      const uint8_t b = static_cast<uint8_t>(in[i++]);
      *v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  };
  while (i < in.size()) {
    uint64_t tag = 0;
    if (!varint(&tag)) return absl::DataLossError(absl::StrCat("bad tag at byte ", i));
    ProtoField f;
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire = static_cast<uint32_t>(tag & 7);
    if (f.wire == 0) {
      if (!varint(&f.value)) return absl::DataLossError("truncated varint");
    } else if (f.wire == 1) {
      if (i + 8 > in.size()) return absl::DataLossError("truncated fixed64");
      for (int b = 0; b < 8; ++b) f.value |= uint64_t{static_cast<uint8_t>(in[i++])} << (8 * b);
    } else if (f.wire == 2) {
      uint64_t n = 0;
      if (!varint(&n) || n > in.size() - i) return absl::DataLossError("truncated bytes field");
      f.bytes = in.substr(i, n);
      i += n;
    } else {
      return absl::DataLossError(absl::StrCat("wire type ", f.wire, " in field ", f.number));
    }
    out.push_back(f);
  }
  return out;
}

namespace {

using Field = ProtoField;

// A sequence-scoped clock from a ClockSnapshot: `value` on it is `trace_ns`
// on the trace's clock (BOOTTIME).
struct SequenceClock {
  uint64_t value = 0;
  uint64_t trace_ns = 0;
  bool incremental = false;
  uint64_t running = 0;  // an incremental clock's current value
};

struct SequenceState {
  bool cleared = false;
  uint64_t default_track = 0;
  uint64_t default_clock = 0;
  absl::flat_hash_map<uint64_t, SequenceClock> clocks;
  absl::flat_hash_map<uint64_t, std::string> names, categories;
  bool has_slices = false;
};

struct Event {
  uint64_t ts = 0;
  size_t order = 0;
  bool begin = false;
  PerfettoSlice slice;  // name, category, flows (BEGIN)
};

constexpr uint64_t kBoottime = 6;

class Reader {
 public:
  absl::StatusOr<PerfettoTrace> Read(std::string_view bytes);

 private:
  absl::Status Packet(std::string_view bytes);
  absl::Status Descriptor(std::string_view bytes);
  absl::Status Defaults(SequenceState& s, std::string_view bytes);
  absl::Status Clocks(SequenceState& s, std::string_view bytes);
  absl::Status Interned(SequenceState& s, std::string_view bytes);
  absl::StatusOr<uint64_t> TraceTime(SequenceState& s, uint64_t ts, uint64_t clock);
  absl::Status TrackEvent(SequenceState& s, uint64_t ts, std::string_view bytes);
  absl::Status Pair();

  PerfettoTrace trace_;
  absl::flat_hash_map<uint64_t, SequenceState> sequences_;
  std::map<uint64_t, std::vector<Event>> events_;  // by track
  size_t order_ = 0;
};

absl::StatusOr<PerfettoTrace> Reader::Read(std::string_view bytes) {
  absl::StatusOr<std::vector<Field>> top = DecodeProtoFields(bytes);
  if (!top.ok()) return top.status();
  for (const Field& f : *top) {
    if (f.number != 1 || f.wire != 2) {
      return absl::DataLossError(absl::StrCat("Trace field ", f.number, " is not a packet"));
    }
    ++trace_.packets;
    if (absl::Status s = Packet(f.bytes); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("packet ", trace_.packets, ": ", s.message()));
    }
  }
  if (absl::Status s = Pair(); !s.ok()) return s;
  for (const auto& [id, s] : sequences_) trace_.sequences += s.has_slices ? 1 : 0;
  return std::move(trace_);
}

absl::Status Reader::Packet(std::string_view bytes) {
  absl::StatusOr<std::vector<Field>> fields = DecodeProtoFields(bytes);
  if (!fields.ok()) return fields.status();
  uint64_t seq_id = 0, flags = 0, ts = 0, clock = 0;
  bool has_ts = false, has_clock = false;
  for (const Field& f : *fields) {
    if (f.number == 10) seq_id = f.value;
    if (f.number == 13) flags = f.value;
    if (f.number == 8) has_ts = true, ts = f.value;
    if (f.number == 58) has_clock = true, clock = f.value;
  }
  if (seq_id == 0) return absl::InvalidArgumentError("no trusted_packet_sequence_id");
  SequenceState& s = sequences_[seq_id];
  if (flags & 1) s = SequenceState{.cleared = true};
  if ((flags & 2) && !s.cleared) {
    return absl::FailedPreconditionError("needs incremental state before it was cleared");
  }
  for (const Field& f : *fields) {
    absl::Status st;
    if (f.number == 59) st = Defaults(s, f.bytes);
    if (f.number == 6) st = Clocks(s, f.bytes);
    if (f.number == 12) st = Interned(s, f.bytes);
    if (f.number == 60) st = Descriptor(f.bytes);
    if (!st.ok()) return st;
  }
  for (const Field& f : *fields) {
    if (f.number != 11) continue;
    if (!has_ts) return absl::InvalidArgumentError("a track event without a timestamp");
    absl::StatusOr<uint64_t> t = TraceTime(s, ts, has_clock ? clock : s.default_clock);
    if (!t.ok()) return t.status();
    if (absl::Status st = TrackEvent(s, *t, f.bytes); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status Reader::Descriptor(std::string_view bytes) {
  absl::StatusOr<std::vector<Field>> fields = DecodeProtoFields(bytes);
  if (!fields.ok()) return fields.status();
  PerfettoTrack t;
  for (const Field& f : *fields) {
    if (f.number == 1) t.uuid = f.value;
    if (f.number == 2) t.name = std::string(f.bytes);
    if (f.number == 5) t.parent_uuid = f.value;
    if (f.number == 3 || f.number == 4) {
      absl::StatusOr<std::vector<Field>> sub = DecodeProtoFields(f.bytes);
      if (!sub.ok()) return sub.status();
      (f.number == 3 ? t.is_process : t.is_thread) = true;
      for (const Field& g : *sub) {
        if (g.number == 1) t.pid = static_cast<int64_t>(g.value);
        if (f.number == 4 && g.number == 2) t.tid = static_cast<int64_t>(g.value);
        if ((f.number == 3 && g.number == 6) || (f.number == 4 && g.number == 5)) {
          t.name = std::string(g.bytes);
        }
      }
    }
  }
  if (t.uuid == 0) return absl::InvalidArgumentError("a track descriptor without a uuid");
  trace_.tracks[t.uuid] = std::move(t);  // a later descriptor of a uuid updates it
  return absl::OkStatus();
}

absl::Status Reader::Defaults(SequenceState& s, std::string_view bytes) {
  absl::StatusOr<std::vector<Field>> fields = DecodeProtoFields(bytes);
  if (!fields.ok()) return fields.status();
  for (const Field& f : *fields) {
    if (f.number == 58) s.default_clock = f.value;
    if (f.number != 11) continue;
    absl::StatusOr<std::vector<Field>> te = DecodeProtoFields(f.bytes);
    if (!te.ok()) return te.status();
    for (const Field& g : *te) {
      if (g.number == 11) s.default_track = g.value;
    }
  }
  return absl::OkStatus();
}

absl::Status Reader::Clocks(SequenceState& s, std::string_view bytes) {
  absl::StatusOr<std::vector<Field>> fields = DecodeProtoFields(bytes);
  if (!fields.ok()) return fields.status();
  bool has_trace_clock = false;
  uint64_t trace_ns = 0;
  std::vector<std::pair<uint64_t, SequenceClock>> scoped;
  for (const Field& f : *fields) {
    if (f.number != 1) continue;
    absl::StatusOr<std::vector<Field>> c = DecodeProtoFields(f.bytes);
    if (!c.ok()) return c.status();
    uint64_t id = 0;
    SequenceClock clock;
    for (const Field& g : *c) {
      if (g.number == 1) id = g.value;
      if (g.number == 2) clock.value = g.value;
      if (g.number == 3) clock.incremental = g.value != 0;
      if (g.number == 4 && g.value != 1) return absl::UnimplementedError("unit_multiplier_ns");
    }
    if (id == kBoottime) {
      has_trace_clock = true;
      trace_ns = clock.value;
    } else if (id >= 64 && id < 128) {
      scoped.emplace_back(id, clock);
    }
  }
  if (!has_trace_clock) return absl::InvalidArgumentError("a clock snapshot without BOOTTIME");
  for (auto& [id, clock] : scoped) {
    clock.trace_ns = trace_ns;
    clock.running = clock.value;
    s.clocks[id] = clock;
  }
  return absl::OkStatus();
}

absl::Status Reader::Interned(SequenceState& s, std::string_view bytes) {
  if (!s.cleared) {
    return absl::FailedPreconditionError("interned data before the state was cleared");
  }
  absl::StatusOr<std::vector<Field>> fields = DecodeProtoFields(bytes);
  if (!fields.ok()) return fields.status();
  for (const Field& f : *fields) {
    if (f.number != 1 && f.number != 2) continue;
    absl::StatusOr<std::vector<Field>> entry = DecodeProtoFields(f.bytes);
    if (!entry.ok()) return entry.status();
    uint64_t iid = 0;
    std::string name;
    for (const Field& g : *entry) {
      if (g.number == 1) iid = g.value;
      if (g.number == 2) name = std::string(g.bytes);
    }
    (f.number == 1 ? s.categories : s.names)[iid] = std::move(name);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Reader::TraceTime(SequenceState& s, uint64_t ts, uint64_t clock) {
  if (clock == 0 || clock == kBoottime) return ts;
  auto it = s.clocks.find(clock);
  if (it == s.clocks.end()) return absl::NotFoundError(absl::StrCat("unknown clock ", clock));
  SequenceClock& c = it->second;
  uint64_t value = ts;
  if (c.incremental) {
    value = c.running + ts;
    c.running = value;
  }
  if (value < c.value) return absl::OutOfRangeError("a timestamp before its clock's snapshot");
  return c.trace_ns + (value - c.value);
}

absl::Status Reader::TrackEvent(SequenceState& s, uint64_t ts, std::string_view bytes) {
  absl::StatusOr<std::vector<Field>> fields = DecodeProtoFields(bytes);
  if (!fields.ok()) return fields.status();
  Event e;
  e.ts = ts;
  e.order = order_++;
  uint64_t type = 0;
  e.slice.track = s.default_track;
  for (const Field& f : *fields) {
    if (f.number == 9) type = f.value;
    if (f.number == 11) e.slice.track = f.value;
    if (f.number == 23) e.slice.name = std::string(f.bytes);
    if (f.number == 47) e.slice.flows_out.push_back(f.value);
    if (f.number == 48) e.slice.flows_in.push_back(f.value);
    if (f.number == 10) {
      auto it = s.names.find(f.value);
      if (it == s.names.end()) return absl::NotFoundError(absl::StrCat("name iid ", f.value));
      e.slice.name = it->second;
    }
    if (f.number == 3) {
      auto it = s.categories.find(f.value);
      if (it == s.categories.end()) {
        return absl::NotFoundError(absl::StrCat("category iid ", f.value));
      }
      e.slice.category = it->second;
    }
  }
  if (type != 1 && type != 2) return absl::UnimplementedError(absl::StrCat("event type ", type));
  if (e.slice.track == 0) return absl::InvalidArgumentError("a track event without a track");
  e.begin = type == 1;
  s.has_slices = true;
  events_[e.slice.track].push_back(std::move(e));
  return absl::OkStatus();
}

absl::Status Reader::Pair() {
  for (auto& [track, events] : events_) {
    if (!trace_.tracks.contains(track)) {
      return absl::NotFoundError(absl::StrCat("slices on track ", track, " with no descriptor"));
    }
    std::stable_sort(events.begin(), events.end(),
                     [](const Event& a, const Event& b) { return a.ts < b.ts; });
    std::vector<size_t> open;  // indices into trace_.slices
    for (Event& e : events) {
      if (e.begin) {
        e.slice.start_ns = e.ts;
        e.slice.depth = static_cast<uint32_t>(open.size());
        open.push_back(trace_.slices.size());
        trace_.slices.push_back(std::move(e.slice));
      } else {
        if (open.empty()) {
          return absl::InvalidArgumentError(absl::StrCat("END without BEGIN on track ", track));
        }
        trace_.slices[open.back()].end_ns = e.ts;
        open.pop_back();
      }
    }
    if (!open.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("slices left open on track ", track));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PerfettoTrace> ReadPerfettoTrace(std::string_view bytes) {
  return Reader().Read(bytes);
}

}  // namespace cuprobe
