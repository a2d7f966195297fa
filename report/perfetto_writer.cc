// File: report/perfetto_writer.cc
#include "report/perfetto_writer.h"

#include <utility>

namespace cuprobe {
namespace {

// Wire types.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kBytes = 2;

// Field numbers (Perfetto's public protos; see the header).
namespace trace { constexpr uint32_t kPacket = 1; }
namespace packet {
constexpr uint32_t kClockSnapshot = 6;
constexpr uint32_t kTimestamp = 8;
constexpr uint32_t kSequenceId = 10;
constexpr uint32_t kTrackEvent = 11;
constexpr uint32_t kInternedData = 12;
constexpr uint32_t kSequenceFlags = 13;
constexpr uint32_t kTimestampClockId = 58;
constexpr uint32_t kDefaults = 59;  // TracePacketDefaults
constexpr uint32_t kTrackDescriptor = 60;
constexpr uint32_t kIncrementalStateCleared = 1;  // SEQ_INCREMENTAL_STATE_CLEARED
constexpr uint32_t kNeedsIncrementalState = 2;    // SEQ_NEEDS_INCREMENTAL_STATE
}  // namespace packet
namespace event {
constexpr uint32_t kCategoryIids = 3;
constexpr uint32_t kType = 9;
constexpr uint32_t kNameIid = 10;
constexpr uint32_t kFlowIds = 47;
constexpr uint32_t kTerminatingFlowIds = 48;
constexpr uint64_t kSliceBegin = 1;
constexpr uint64_t kSliceEnd = 2;
}  // namespace event
namespace defaults {
constexpr uint32_t kTimestampClockId = 58;    // TracePacketDefaults
constexpr uint32_t kTrackEventDefaults = 11;  // TracePacketDefaults
constexpr uint32_t kTrackUuid = 11;           // TrackEventDefaults
}  // namespace defaults
namespace clock {
constexpr uint32_t kClocks = 1;  // ClockSnapshot
constexpr uint32_t kId = 1;      // ClockSnapshot.Clock
constexpr uint32_t kTimestamp = 2;
constexpr uint32_t kIsIncremental = 3;
constexpr uint64_t kBoottime = 6;      // BuiltinClock.BUILTIN_CLOCK_BOOTTIME, the trace's clock
constexpr uint64_t kIncremental = 64;  // the first sequence-scoped clock id
}  // namespace clock
namespace descriptor {
constexpr uint32_t kUuid = 1;
constexpr uint32_t kName = 2;
constexpr uint32_t kProcess = 3;
constexpr uint32_t kThread = 4;
constexpr uint32_t kParentUuid = 5;
}  // namespace descriptor
namespace interned {
constexpr uint32_t kEventCategories = 1;
constexpr uint32_t kEventNames = 2;
constexpr uint32_t kIid = 1;  // EventName, EventCategory
constexpr uint32_t kName = 2;
}  // namespace interned
constexpr uint32_t kDescriptorSequence = 1;

void Varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void Tag(std::string& out, uint32_t field, uint32_t wire) {
  Varint(out, (uint64_t{field} << 3) | wire);
}

void VarintField(std::string& out, uint32_t field, uint64_t v) {
  Tag(out, field, kVarint);
  Varint(out, v);
}

void BytesField(std::string& out, uint32_t field, std::string_view bytes) {
  Tag(out, field, kBytes);
  Varint(out, bytes.size());
  out.append(bytes);
}

void Fixed64Field(std::string& out, uint32_t field, uint64_t v) {
  Tag(out, field, kFixed64);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

PerfettoWriter::PerfettoWriter(Sink sink, size_t flush_bytes)
    : sink_(std::move(sink)), flush_bytes_(flush_bytes) {}

void PerfettoWriter::Packet(const std::string& body) {
  BytesField(buffer_, trace::kPacket, body);
  MaybeFlush(/*force=*/false);
}

void PerfettoWriter::MaybeFlush(bool force) {
  if (buffer_.empty() || (!force && buffer_.size() < flush_bytes_)) return;
  if (status_.ok()) {
    status_ = sink_(buffer_);
    if (status_.ok()) bytes_written_ += buffer_.size();
  }
  buffer_.clear();
}

void PerfettoWriter::Descriptor(uint64_t uuid, const std::string& body) {
  std::string descriptor;
  VarintField(descriptor, descriptor::kUuid, uuid);
  descriptor += body;
  std::string p;
  VarintField(p, packet::kSequenceId, kDescriptorSequence);
  BytesField(p, packet::kTrackDescriptor, descriptor);
  Packet(p);
}

uint64_t PerfettoWriter::ProcessTrack(int32_t pid, std::string_view name, uint64_t uuid) {
  if (uuid == 0) uuid = next_uuid_++;
  std::string process;
  VarintField(process, 1, static_cast<uint64_t>(static_cast<int64_t>(pid)));  // pid
  BytesField(process, 6, name);                                               // process_name
  std::string body;
  BytesField(body, descriptor::kProcess, process);
  Descriptor(uuid, body);
  return uuid;
}

uint64_t PerfettoWriter::ThreadTrack(int32_t pid, int64_t tid, std::string_view name) {
  const uint64_t uuid = next_uuid_++;
  std::string thread;
  VarintField(thread, 1, static_cast<uint64_t>(static_cast<int64_t>(pid)));  // pid
  VarintField(thread, 2, static_cast<uint64_t>(tid));                         // tid
  BytesField(thread, 5, name);                                                // thread_name
  std::string body;
  BytesField(body, descriptor::kThread, thread);
  Descriptor(uuid, body);
  return uuid;
}

uint64_t PerfettoWriter::NamedTrack(uint64_t parent_uuid, std::string_view name) {
  const uint64_t uuid = next_uuid_++;
  std::string body;
  BytesField(body, descriptor::kName, name);
  if (parent_uuid != 0) VarintField(body, descriptor::kParentUuid, parent_uuid);
  Descriptor(uuid, body);
  return uuid;
}

uint64_t PerfettoWriter::Intern(absl::flat_hash_map<std::string, uint64_t>& table,
                                std::string_view name, uint32_t field, std::string& interned) {
  if (auto it = table.find(name); it != table.end()) return it->second;
  const uint64_t iid = table.size() + 1;
  table.emplace(std::string(name), iid);
  std::string entry;
  VarintField(entry, interned::kIid, iid);
  BytesField(entry, interned::kName, name);
  BytesField(interned, field, entry);
  return iid;
}

PerfettoWriter::Sequence& PerfettoWriter::SequenceOf(uint64_t track, uint64_t start_ns) {
  auto [it, inserted] = sequences_.try_emplace(track);
  Sequence& seq = it->second;
  if (!inserted) return seq;
  seq.id = next_sequence_++;
  seq.last_ns = start_ns;
  // The sequence's first packet: state cleared, its track and incremental
  // clock as defaults, the clock tied to the trace's at `start_ns`.
  std::string event_defaults;
  VarintField(event_defaults, defaults::kTrackUuid, track);
  std::string packet_defaults;
  VarintField(packet_defaults, defaults::kTimestampClockId, clock::kIncremental);
  BytesField(packet_defaults, defaults::kTrackEventDefaults, event_defaults);
  std::string trace_clock, incremental_clock, snapshot;
  VarintField(trace_clock, clock::kId, clock::kBoottime);
  VarintField(trace_clock, clock::kTimestamp, start_ns);
  VarintField(incremental_clock, clock::kId, clock::kIncremental);
  VarintField(incremental_clock, clock::kTimestamp, start_ns);
  VarintField(incremental_clock, clock::kIsIncremental, 1);
  BytesField(snapshot, clock::kClocks, trace_clock);
  BytesField(snapshot, clock::kClocks, incremental_clock);
  std::string p;
  VarintField(p, packet::kSequenceId, seq.id);
  VarintField(p, packet::kSequenceFlags, packet::kIncrementalStateCleared);
  BytesField(p, packet::kDefaults, packet_defaults);
  BytesField(p, packet::kClockSnapshot, snapshot);
  Packet(p);
  return seq;
}

void PerfettoWriter::Timestamp(std::string& p, Sequence& seq, uint64_t ns) {
  if (ns >= seq.last_ns) {
    VarintField(p, packet::kTimestamp, ns - seq.last_ns);
    seq.last_ns = ns;
    return;
  }
  // The incremental clock only moves forward; this packet leaves it as is.
  VarintField(p, packet::kTimestamp, ns);
  VarintField(p, packet::kTimestampClockId, clock::kBoottime);
}

void PerfettoWriter::Slice(uint64_t track, uint64_t start_ns, uint64_t end_ns,
                           std::string_view name, std::string_view category, uint64_t flow_out,
                           uint64_t flow_in) {
  Sequence& seq = SequenceOf(track, start_ns);
  const bool absolute = start_ns < seq.last_ns;
  if (absolute) ++absolute_timestamps_;
  std::string interned;
  const uint64_t category_iid =
      category.empty() ? 0 : Intern(seq.categories, category, interned::kEventCategories, interned);
  const uint64_t name_iid = Intern(seq.names, name, interned::kEventNames, interned);

  std::string begin;
  VarintField(begin, event::kType, event::kSliceBegin);
  VarintField(begin, event::kNameIid, name_iid);
  if (category_iid != 0) VarintField(begin, event::kCategoryIids, category_iid);
  if (flow_out != 0) Fixed64Field(begin, event::kFlowIds, flow_out);
  if (flow_in != 0) Fixed64Field(begin, event::kTerminatingFlowIds, flow_in);
  // The packet is built in a buffer kept across slices (one per drain).
  std::string& p = packet_scratch_;
  p.clear();
  Timestamp(p, seq, start_ns);
  VarintField(p, packet::kSequenceId, seq.id);
  if (!interned.empty()) BytesField(p, packet::kInternedData, interned);
  // Interned names, the track and the clock are the sequence's incremental
  // state: a reader that lost it skips these packets.
  VarintField(p, packet::kSequenceFlags, packet::kNeedsIncrementalState);
  BytesField(p, packet::kTrackEvent, begin);
  Packet(p);

  std::string end;
  VarintField(end, event::kType, event::kSliceEnd);
  p.clear();
  // An absolute slice's end stays absolute: it may still precede the clock.
  if (absolute) {
    VarintField(p, packet::kTimestamp, end_ns < start_ns ? start_ns : end_ns);
    VarintField(p, packet::kTimestampClockId, clock::kBoottime);
  } else {
    Timestamp(p, seq, end_ns < start_ns ? start_ns : end_ns);
  }
  VarintField(p, packet::kSequenceId, seq.id);
  VarintField(p, packet::kSequenceFlags, packet::kNeedsIncrementalState);
  BytesField(p, packet::kTrackEvent, end);
  Packet(p);
  ++slices_;
}

absl::Status PerfettoWriter::Finish() {
  MaybeFlush(/*force=*/true);
  return status_;
}

}  // namespace cuprobe
