// File: maps/map_set_site_counters.cc
//
// MapSet's site counters (include/cuprobe/abi.h, "Site counters"): the
// per-module blocks of per-SM counter shards that instrumented kernels add
// to instead of calling a map helper, and the areas of thread-range
// counters. Reading them, and adding what they counted into a map's folded
// snapshot, so that a snapshot shows what the probe calls would have done.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "maps/map_algorithms.h"
#include "maps/map_set.h"
#include "support/status_macros.h"

namespace cuprobe {

uint64_t MapSet::SiteCounterBytes(size_t counters) {
  const uint64_t groups = (std::max<uint64_t>(counters, 1) + CUPROBE_SITE_COUNTERS_PER_LINE - 1) /
                          CUPROBE_SITE_COUNTERS_PER_LINE;
  return groups * CUPROBE_SITE_COUNTER_GROUP_BYTES;
}

absl::Status MapSet::CheckSiteCounters(const std::vector<SiteCounter>& counters) const {
  for (size_t c = 0; c < counters.size(); ++c) {
    const uint32_t ids = counters[c].thread_ids;
    for (const SiteAdd& a : counters[c].adds) {
      if (a.map >= maps_.size() || maps_[a.map].geometry.type == CUPROBE_MAP_RINGBUF) {
        return absl::InvalidArgumentError(
            absl::StrFormat("a site counter adds to map %d, which is not a counting map", a.map));
      }
      const MapGeometry& g = maps_[a.map].geometry;
      uint32_t key = 0;
      if (a.key.size() == sizeof(key)) std::memcpy(&key, a.key.data(), sizeof(key));
      const bool per_thread = g.type == CUPROBE_MAP_PERTHREAD;
      if (ids == 0 ? mapalgo::IsPerId(g.type)
                   : !per_thread || g.id_slots != ids || a.hist || a.key.size() != sizeof(key) ||
                         key >= g.max_entries || g.value_size < 8) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "a site counter adds to map %d (type %#x) as a %s counter, which it cannot be", a.map,
            g.type, ids == 0 ? "count" : "thread-range"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status MapSet::AdoptSiteCounters(std::vector<SiteCounter> counters, uint64_t base) {
  if (memory_ == nullptr) return absl::FailedPreconditionError("the maps were released");
  CUPROBE_RETURN_IF_ERROR(CheckSiteCounters(counters));
  SiteBlock block;
  block.base = base;
  block.owned = false;
  block.area.assign(counters.size(), -1);
  block.cleared.resize(counters.size());
  for (size_t c = 0; c < counters.size(); ++c) {
    if (counters[c].thread_ids != 0) {
      return absl::InvalidArgumentError("an adopted site counter block has a thread-range counter");
    }
    block.cleared[c].assign(counters[c].adds.size(), 0);
  }
  block.counters = std::move(counters);
  site_blocks_.push_back(std::move(block));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> MapSet::AddSiteCounters(std::vector<SiteCounter> counters) {
  if (memory_ == nullptr) return absl::FailedPreconditionError("the maps were released");
  CUPROBE_RETURN_IF_ERROR(CheckSiteCounters(counters));
  SiteBlock block;
  block.cleared.resize(counters.size());
  block.area.assign(counters.size(), -1);
  for (size_t c = 0; c < counters.size(); ++c) {
    block.cleared[c].assign(counters[c].adds.size(), 0);
  }
  const uint64_t bytes = SiteCounterBytes(counters.size());
  CUPROBE_ASSIGN_OR_RETURN(block.base, memory_->Allocate(bytes));
  const size_t areas_before = range_areas_.size();
  auto give_back = [&] {  // what this call allocated
    for (size_t r = areas_before; r < range_areas_.size(); ++r) {
      (void)memory_->Free(range_areas_[r].base);
    }
    range_areas_.resize(areas_before);
    (void)memory_->Free(block.base);
  };
  if (absl::Status s = memory_->Zero(block.base, bytes); !s.ok()) {
    give_back();
    return s;
  }
  // Thread-range counters (abi.h): the counter's slot in shard 0 holds its
  // area's address; modules with the same counter share the area.
  for (size_t c = 0; c < counters.size(); ++c) {
    if (counters[c].thread_ids == 0) continue;
    int32_t r = -1;
    for (size_t k = 0; k < range_areas_.size(); ++k) {
      if (range_areas_[k].counter == counters[c]) r = static_cast<int32_t>(k);
    }
    if (r < 0) {
      const uint64_t area_bytes = (uint64_t{counters[c].thread_ids} + 3) * sizeof(uint64_t);
      absl::StatusOr<uint64_t> area = memory_->Allocate(area_bytes);
      if (!area.ok()) {
        give_back();
        return area.status();
      }
      range_areas_.push_back(RangeArea{counters[c], *area, {}});
      range_areas_.back().cleared.resize(counters[c].adds.size());
      r = static_cast<int32_t>(range_areas_.size() - 1);
      if (absl::Status s = memory_->Zero(*area, area_bytes); !s.ok()) {
        give_back();
        return s;
      }
    }
    block.area[c] = r;
    const uint64_t slot = c / CUPROBE_SITE_COUNTERS_PER_LINE * CUPROBE_SITE_COUNTER_GROUP_BYTES +
                          c % CUPROBE_SITE_COUNTERS_PER_LINE * sizeof(uint64_t);
    const uint64_t address = range_areas_[static_cast<size_t>(r)].base;
    if (absl::Status s = memory_->CopyToDevice(block.base + slot, &address, sizeof(address));
        !s.ok()) {
      give_back();
      return s;
    }
  }
  block.counters = std::move(counters);
  site_blocks_.push_back(std::move(block));
  return site_blocks_.back().base;
}

absl::StatusOr<MapSet::SiteCountValues> MapSet::SiteCounts(bool areas) {
  SiteCountValues values;
  std::vector<std::vector<uint64_t>>& counts = values.counts;
  counts.resize(site_blocks_.size());
  std::vector<uint64_t> shards;
  for (size_t b = 0; b < site_blocks_.size(); ++b) {
    const SiteBlock& block = site_blocks_[b];
    // Layout: include/cuprobe/abi.h, "Site counters".
    const size_t n = block.counters.size();
    const size_t groups = (n + CUPROBE_SITE_COUNTERS_PER_LINE - 1) / CUPROBE_SITE_COUNTERS_PER_LINE;
    shards.resize(groups * CUPROBE_SITE_COUNTER_GROUP_BYTES / sizeof(uint64_t));
    if (!shards.empty()) {
      CUPROBE_RETURN_IF_ERROR(
          memory_->CopyFromDevice(shards.data(), block.base, shards.size() * sizeof(uint64_t)));
    }
    counts[b].assign(n, 0);
    for (size_t c = 0; c < n; ++c) {
      if (block.area[c] >= 0) continue;  // its slot holds its area's address
      const size_t group = c / CUPROBE_SITE_COUNTERS_PER_LINE * CUPROBE_SITE_COUNTER_GROUP_BYTES / 8;
      for (uint32_t k = 0; k < CUPROBE_SITE_COUNTER_SHARDS; ++k) {
        counts[b][c] += shards[group + k * 16 + c % CUPROBE_SITE_COUNTERS_PER_LINE];
      }
    }
  }
  if (!areas) return values;
  // An area is copied up to its high water (the largest thread count it
  // recorded, capped at ids): a few words for small launches.
  values.areas.resize(range_areas_.size());
  for (size_t r = 0; r < range_areas_.size(); ++r) {
    uint64_t head[2] = {0, 0};  // errors, high water
    CUPROBE_RETURN_IF_ERROR(memory_->CopyFromDevice(head, range_areas_[r].base, sizeof(head)));
    const uint64_t high = std::min<uint64_t>(head[1], range_areas_[r].counter.thread_ids);
    std::vector<uint64_t>& area = values.areas[r];
    area.assign(high + 2, 0);
    area[0] = head[0];
    CUPROBE_RETURN_IF_ERROR(memory_->CopyFromDevice(
        area.data() + 1, range_areas_[r].base + 2 * sizeof(uint64_t), (high + 1) * sizeof(uint64_t)));
  }
  return values;
}

namespace {

// A thread-range counter's adds to one map (abi.h): `area` is errors, then
// launches[j] for j up to the high water, launches[j] = launches whose
// min(thread count, ids) was j; `since` the same at the map's last clear
// (empty: none). Id t gains delta for each launch with more than t threads.
void ApplyThreadRange(const cuprobe_map_desc& desc, const SiteAdd& add, uint32_t ids,
                      const std::vector<uint64_t>& area, const std::vector<uint64_t>& since,
                      cuprobe_map_control* control) {
  if (area.empty()) return;
  auto at = [&](size_t k) { return area[k] - (k < since.size() ? since[k] : 0); };
  control->errors += at(0);  // one refusal per thread past the map's ids
  uint64_t launches = 0;
  for (size_t k = 1; k < area.size(); ++k) launches += at(k);
  uint32_t key = 0;
  std::memcpy(&key, add.key.data(), std::min(add.key.size(), sizeof(key)));
  for (uint64_t t = 0; t < ids; ++t) {
    if (1 + t < area.size()) launches -= at(1 + t);  // launches with exactly t threads end here
    if (launches == 0) break;
    uint8_t* value = mapalgo::IndexedValueOf(&desc, CUPROBE_MAP_PERTHREAD, key, t);
    if (value == nullptr) break;
    uint64_t v = 0;
    std::memcpy(&v, value, sizeof(v));
    v += launches * add.delta;
    std::memcpy(value, &v, sizeof(v));
  }
}

}  // namespace

void MapSet::ApplySiteCounts(size_t i, const SiteCountValues& values, uint8_t* snapshot) const {
  const MapGeometry& g = maps_[i].geometry;
  const cuprobe_map_desc desc = MakeSnapshotDesc(g, snapshot);
  auto* control = reinterpret_cast<cuprobe_map_control*>(snapshot);
  const std::vector<std::vector<uint64_t>>& counts = values.counts;
  for (size_t b = 0; b < site_blocks_.size() && b < counts.size(); ++b) {
    const SiteBlock& block = site_blocks_[b];
    for (size_t c = 0; c < block.counters.size() && c < counts[b].size(); ++c) {
      const std::vector<SiteAdd>& adds = block.counters[c].adds;
      for (size_t a = 0; a < adds.size(); ++a) {
        const SiteAdd& add = adds[a];
        if (add.map != i) continue;
        if (block.area[c] >= 0) continue;  // below, once per area
        const uint64_t count = counts[b][c] - block.cleared[c][a];
        if (count == 0) continue;
        uint64_t* target = nullptr;
        if (add.hist) {
          uint64_t value = 0;
          std::memcpy(&value, add.key.data(), std::min<size_t>(add.key.size(), 8));
          target = mapalgo::HistTarget(&desc, value);
        } else if (add.key.size() >= g.key_size) {
          int64_t err = 0;
          target = mapalgo::MapAddTarget(&desc, add.key.data(), 0, &err);
        }
        if (target != nullptr) {
          *target += count * add.delta;
        } else {
          control->errors += count;  // as many refusals as the GPU would have counted
        }
      }
    }
  }
  for (size_t r = 0; r < range_areas_.size() && r < values.areas.size(); ++r) {
    const RangeArea& area = range_areas_[r];
    for (size_t a = 0; a < area.counter.adds.size(); ++a) {
      if (area.counter.adds[a].map != i) continue;
      ApplyThreadRange(desc, area.counter.adds[a], area.counter.thread_ids, values.areas[r],
                       area.cleared[a], control);
    }
  }
}

}  // namespace cuprobe
