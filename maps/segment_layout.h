// File: maps/segment_layout.h
//
// The byte layout of the session segment: the wire protocol between the
// `cuprobe` CLI (which creates the segment), the hook inside the CUDA
// application (which opens it and writes), and readers that attach later.
// The three are built separately and map the segment at different addresses,
// so everything here is fixed-width, offsets only (never pointers), and
// pinned by static_asserts. Bump kSegmentLayoutVersion on any change.
//
//   offset 0                         SegmentHeader (kSegmentHeaderSize bytes)
//   header.ring_offset               RingControl   (kRingControlSize bytes)
//   header.ring_offset + kRingControlSize
//                                    ring data     (header.ring_capacity bytes)
//   header.maps_offset               maps region   (header.maps_size bytes,
//                                    maps/maps_region.h; absent when 0)
//   header.segment_size              end
//
// Publication protocol: the creator writes the whole header and formats the
// ring, then stores session_state = kCreated with release. Anyone opening the
// segment loads session_state with acquire before trusting any other field;
// a zero state means "still being built".
//
// Reading a header someone else owns (see maps/segment.h for the checks):
//
//   const SegmentHeader& h = ...;
//   uint32_t state = h.session_state.load(std::memory_order_acquire);
//   if (h.magic != kSegmentMagic) ...  // not ours
#ifndef CUPROBE_MAPS_SEGMENT_LAYOUT_H_
#define CUPROBE_MAPS_SEGMENT_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "probe/trace_records.h"

namespace cuprobe {

// "CUPROBES" as bytes in memory on a little-endian machine.
inline constexpr uint64_t kSegmentMagic = 0x5345424F'52505543ull;
// 2: the maps region (maps_offset, maps_size; formerly reserved0).
// 3: the probe bundle (bundle_offset, bundle_size; formerly reserved).
// 4: the attach request (attach_owner, attach_request, attach_name; formerly
//    reserved): `cuprobe attach` asks the hook to attach a probe session.
// 5: map ring records begun by bpf_ringbuf_reserve commit in their header's
//    word 1 (probe/map_desc.h); a consumer of version 4 would wait on them.
//    Still 5 with capture_ranges (formerly spare_stats[0]): a hook of an
//    earlier build leaves it 0, which reads as "no profiler range opened",
//    and such a hook has no capture range; the CLI then checks the records.
inline constexpr uint32_t kSegmentLayoutVersion = 5;

// "CPRRING1" in memory: marks a formatted RingControl.
inline constexpr uint64_t kRingMagic = 0x31474E49'52525043ull;

enum class SessionState : uint32_t {
  kCreated = 1,        // the CLI built the segment; no hook yet
  kHookAttached = 2,   // a hook opened it and is initializing
  kHookReady = 3,      // the hook traces
  kHookDisabled = 4,   // the hook gave up; hook_reason says why
  kHookStopped = 5,    // the hook finished its teardown
};
inline constexpr uint32_t kMinSessionState = 1;
inline constexpr uint32_t kMaxSessionState = 5;

[[nodiscard]] constexpr std::string_view SessionStateName(SessionState state) {
  switch (state) {
    case SessionState::kCreated: return "created";
    case SessionState::kHookAttached: return "hook-attached";
    case SessionState::kHookReady: return "hook-ready";
    case SessionState::kHookDisabled: return "hook-disabled";
    case SessionState::kHookStopped: return "hook-stopped";
  }
  return "unknown";
}

// These fields are shared between processes: they must be plain lock-free
// machine words (a lock-based atomic would put a process-local lock in
// memory other processes see).
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == 8 && alignof(std::atomic<uint64_t>) == 8);
static_assert(sizeof(std::atomic<uint32_t>) == 4 && alignof(std::atomic<uint32_t>) == 4);

inline constexpr size_t kHookReasonSize = 256;
inline constexpr size_t kSpareStats = 9;

struct SegmentHeader {
  // --- Written once by the creator before session_state is published;
  // immutable afterwards. Untrusted when read by another process: copy each
  // field once and validate the copy (maps/segment.cc).
  uint64_t magic;            // kSegmentMagic
  uint32_t layout_version;   // kSegmentLayoutVersion
  uint32_t header_size;      // sizeof(SegmentHeader)
  uint64_t segment_size;     // whole segment, bytes (equals the shm object's size)
  uint32_t creator_pid;
  uint32_t records_version;  // kTraceRecordsVersion of the creator
  uint64_t ring_offset;      // RingControl; data follows at +kRingControlSize
  uint64_t ring_capacity;    // ring data bytes, a multiple of 8
  uint64_t maps_offset;      // the maps region: 4096-aligned, after the ring; 0 if none
  uint64_t maps_size;        // its bytes (a multiple of 4096); 0 if none

  // --- Live, cross-process (lock-free atomics).
  std::atomic<uint32_t> hook_pid;
  std::atomic<uint32_t> hook_state;     // the hook's own state enum value
  std::atomic<uint32_t> session_state;  // SessionState; 0 while being built
  // The pid whose hook holds the probes' maps (0: none). Processes of one
  // session take turns: a second process that starts while the first holds
  // them runs uninstrumented (Session::ClaimMaps). Formerly reserved1 (zero
  // in layout 4 segments of earlier builds: unclaimed).
  std::atomic<uint32_t> maps_owner;
  std::atomic<uint64_t> heartbeat_ns;
  std::atomic<uint64_t> heartbeat_count;

  // Stats the hook publishes (its watcher copies them here). The ring's own
  // counters (RingControl) are the authoritative record counts.
  std::atomic<uint64_t> records_written;
  std::atomic<uint64_t> records_dropped;
  std::atomic<uint64_t> bytes_dropped;
  std::atomic<uint64_t> activity_buffers;
  std::atomic<uint64_t> activity_records_dropped;
  std::atomic<uint64_t> launches_seen;
  // Profiler ranges opened (`--capture-range cudaProfilerApi`; summed over
  // the session's processes). Formerly spare_stats[0], zero in segments of
  // earlier builds, which had no capture range.
  std::atomic<uint64_t> capture_ranges;
  std::atomic<uint64_t> spare_stats[kSpareStats];

  // Written before the hook_state/session_state store (release) that
  // announces it; NUL-terminated by the writer, but a reader must bound it
  // (Session::HookReason does).
  char hook_reason[kHookReasonSize];

  // Written once by the creator (like the fields at the top): the probe
  // bundle (probe/bundle.h's byte format) that `cuprobe run` hands to
  // the hook; 64-aligned, after the ring and the maps region. 0 and 0 when
  // the session only traces.
  uint64_t bundle_offset;
  uint64_t bundle_size;

  // --- Live, cross-process: the attach request (`cuprobe attach`, late
  // attach). An attacher takes attach_owner (compare-and-swap from 0, or
  // from the pid of a dead attacher) to its pid, writes the name of its own
  // probe session into attach_name (NUL-padded; empty: detach), then
  // increments attach_request with release. The hook's watcher acts on each
  // new attach_request value and answers through the attach session's own
  // header (hook status and reason). Untrusted like everything here: the
  // hook bounds the name and opens it as any other segment (Session::Open).
  std::atomic<uint32_t> attach_owner;
  uint32_t reserved2;
  std::atomic<uint64_t> attach_request;
  char attach_name[64];

  uint8_t reserved[448];
};

inline constexpr size_t kSegmentHeaderSize = 1024;
static_assert(sizeof(SegmentHeader) == kSegmentHeaderSize);
static_assert(std::is_standard_layout_v<SegmentHeader>);
static_assert(alignof(SegmentHeader) == 8);
static_assert(offsetof(SegmentHeader, magic) == 0);
static_assert(offsetof(SegmentHeader, layout_version) == 8);
static_assert(offsetof(SegmentHeader, header_size) == 12);
static_assert(offsetof(SegmentHeader, segment_size) == 16);
static_assert(offsetof(SegmentHeader, creator_pid) == 24);
static_assert(offsetof(SegmentHeader, records_version) == 28);
static_assert(offsetof(SegmentHeader, ring_offset) == 32);
static_assert(offsetof(SegmentHeader, ring_capacity) == 40);
static_assert(offsetof(SegmentHeader, maps_offset) == 48);
static_assert(offsetof(SegmentHeader, maps_size) == 56);
static_assert(offsetof(SegmentHeader, hook_pid) == 64);
static_assert(offsetof(SegmentHeader, hook_state) == 68);
static_assert(offsetof(SegmentHeader, session_state) == 72);
static_assert(offsetof(SegmentHeader, heartbeat_ns) == 80);
static_assert(offsetof(SegmentHeader, heartbeat_count) == 88);
static_assert(offsetof(SegmentHeader, records_written) == 96);
static_assert(offsetof(SegmentHeader, launches_seen) == 136);
static_assert(offsetof(SegmentHeader, capture_ranges) == 144);
static_assert(offsetof(SegmentHeader, spare_stats) == 152);
static_assert(offsetof(SegmentHeader, hook_reason) == 224);
static_assert(offsetof(SegmentHeader, bundle_offset) == 480);
static_assert(offsetof(SegmentHeader, bundle_size) == 488);
static_assert(offsetof(SegmentHeader, attach_owner) == 496);
static_assert(offsetof(SegmentHeader, attach_request) == 504);
static_assert(offsetof(SegmentHeader, attach_name) == 512);
static_assert(offsetof(SegmentHeader, reserved) == 576);
inline constexpr size_t kAttachNameSize = 64;

// The ring's control block. Producers (hook threads, possibly in several
// processes) contend on `head`; the single consumer owns `tail`; each sits on
// its own cache line so the consumer's stores do not bounce the producers'
// line. head and tail are byte positions that only grow (64 bits: they do not
// wrap in practice); the data index is position % capacity.
struct alignas(64) RingControl {
  // Line 0: written by Format, read-only afterwards.
  uint64_t magic;     // kRingMagic
  uint64_t capacity;  // data bytes (also in SegmentHeader: both must agree)
  uint8_t pad0[48];
  // Line 1: next byte position a producer reserves.
  std::atomic<uint64_t> head;
  uint8_t pad1[56];
  // Line 2: next byte position the consumer reads; bytes before it are zero.
  std::atomic<uint64_t> tail;
  uint8_t pad2[56];
  // Line 3.
  std::atomic<uint64_t> written;
  uint8_t pad3[56];
  // Line 4: drops are rare and update both together.
  std::atomic<uint64_t> dropped;
  std::atomic<uint64_t> dropped_bytes;
  uint8_t pad4[48];
  uint8_t reserved[192];
};

inline constexpr size_t kRingControlSize = 512;
static_assert(sizeof(RingControl) == kRingControlSize);
static_assert(std::is_standard_layout_v<RingControl>);
static_assert(offsetof(RingControl, magic) == 0);
static_assert(offsetof(RingControl, capacity) == 8);
static_assert(offsetof(RingControl, head) == 64);
static_assert(offsetof(RingControl, tail) == 128);
static_assert(offsetof(RingControl, written) == 192);
static_assert(offsetof(RingControl, dropped) == 256);
static_assert(offsetof(RingControl, dropped_bytes) == 264);

// Where Session::Create puts the ring (Open accepts any valid placement).
inline constexpr uint64_t kDefaultRingOffset = kSegmentHeaderSize;
// The maps region starts on a page: the hook cuMemHostRegister()s its rings.
inline constexpr uint64_t kMapsRegionAlignment = 4096;
static_assert(kDefaultRingOffset % 64 == 0);

// The record header sits at 8-aligned positions and capacity is a multiple
// of 8, so the 8-byte RecordHeader is never split by the wrap.
static_assert(sizeof(RecordHeader) == 8 && offsetof(RecordHeader, size) == 0);

}  // namespace cuprobe

#endif  // CUPROBE_MAPS_SEGMENT_LAYOUT_H_
