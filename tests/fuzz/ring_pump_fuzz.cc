// File: tests/fuzz/ring_pump_fuzz.cc
//
// Fuzz target of the hook's ring pump (MapSet::PumpRings, maps/map_set.h):
// what it does with the bytes of a device ring, which probes' producers
// write and which a fault on the GPU could leave in any state. The input
// sets up one 4 KiB ring of a real session segment, mirrored in "device"
// memory (HostDeviceMemory), and becomes that device ring:
//
//   byte 0       bit 0: producers that reserve first (kDeviceSpeculative,
//                a data area of twice the capacity) or not
//   bytes 1-2    the device head, in 8-byte units past the device tail
//   bytes 3..    the device data (the rest stays zero)
//
// then pumps three times, consuming the segment's ring in between. Any
// crash, hang or out-of-bounds access is a bug; DATA_LOSS is the expected
// outcome of a bad header. Checked: every record the consumer reads is
// whole (no longer than the ring), the consumer's ring stays readable, and
// the pump moves the device tail only forwards and never past the head.
//
//   ninja -C build-fuzz ring_pump_fuzz     (configured as in maps_region_fuzz.cc)
//   build-fuzz/bin/ring_pump_fuzz -max_total_time=60 /tmp/new tests/corpus/ring_pump
//
// Normal builds link this file with corpus_main.cc (ctest
// ring_pump_fuzz_corpus) and replay tests/corpus/ring_pump
// (tests/corpus/ring_pump/make_seeds.py writes those seeds).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "maps/device_memory.h"
#include "maps/map_algorithms.h"
#include "probe/map_desc.h"
#include "maps/map_set.h"
#include "maps/segment.h"

namespace {

namespace algo = ::cuprobe::mapalgo;

constexpr uint64_t kCapacity = 4096;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "ring_pump_fuzz: %s\n", what);
    std::abort();
  }
}

void Exercise(const uint8_t* data, size_t size) {
  cuprobe::MapSpec spec;
  spec.name = "events";
  spec.type = CUPROBE_MAP_RINGBUF;
  spec.max_entries = kCapacity;
  cuprobe::SessionOptions options;
  options.ring_capacity = 4096;
  options.maps = {spec};
  absl::StatusOr<cuprobe::Session> session = cuprobe::Session::Create(options);
  if (!session.ok()) return;  // no /dev/shm here: nothing to test
  absl::StatusOr<cuprobe::MapRing> ring = session->maps().Ring(0);
  Check(ring.ok(), "the session's ring");
  const cuprobe::RingData placement = (data[0] & 1) != 0 ? cuprobe::RingData::kDeviceSpeculative
                                                         : cuprobe::RingData::kDeviceMirrored;
  cuprobe::HostDeviceMemory memory;
  std::optional<cuprobe::MapSet> maps;
  {
    absl::StatusOr<cuprobe::MapSet> made =
        cuprobe::MapSet::Create({spec}, &memory, &session->maps(), placement);
    Check(made.ok(), "maps over the session");
    maps.emplace(*std::move(made));
  }
  const auto* d = algo::Ptr<const cuprobe_map_desc>(maps->table()[0]);
  const uint64_t area = d->slot_mask + 1;
  // The device ring as the input has it: data, then the head.
  const size_t n = std::min<size_t>(size - 3, area);
  std::memcpy(algo::Ptr<uint8_t>(d->ring_data), data + 3, n);
  const uint64_t head = 8 * (uint64_t{data[1]} | uint64_t{data[2]} << 8);
  algo::Control(d)->ring_head = head;
  auto* shadow = algo::Ptr<cuprobe_ring_host>(d->ring_host);
  uint64_t tail = shadow->tail;
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<uint64_t> moved = maps->PumpRings();
    Check(moved.ok() || moved.status().code() == absl::StatusCode::kDataLoss,
          "the pump fails only with DATA_LOSS");
    Check(shadow->tail >= tail && shadow->tail <= std::max(head, tail),
          "the device tail moves forwards, never past the head");
    tail = shadow->tail;
    ring->Consume([&](absl::Span<const uint8_t> body) {
      Check(body.size() + CUPROBE_RING_HEADER_SIZE <= kCapacity, "a record fits the ring");
    });
    Check(ring->status().ok(), "the segment's ring stays readable");
  }
  (void)maps->Publish(1);
  (void)maps->Release();
  (void)session->Remove();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3 || size > 3 + 2 * kCapacity) return 0;
  Exercise(data, size);
  return 0;
}
