#include "loader/oneliner/print.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "maps/map_print.h"
#include "maps/map_snapshot.h"

namespace cuprobe::oneliner {
namespace {

constexpr uint64_t kSignBit = uint64_t{1} << 63;

std::string KeyText(KeyKind kind, int64_t v, const KernelNames& names) {
  switch (kind) {
    case KeyKind::kKernel: {
      std::string name = names ? names(static_cast<uint32_t>(v)) : "";
      return name.empty() ? absl::StrCat("kernel#", v) : name;
    }
    case KeyKind::kAccessKind:
      if (v == 1) return "read";
      if (v == 2) return "write";
      if (v == 3) return "atomic";
      break;
    case KeyKind::kSpace:
      if (v == 1) return "global";
      if (v == 2) return "shared";
      if (v == 3) return "local";
      if (v == 4) return "generic";
      break;
    case KeyKind::kInt:
      break;
  }
  return absl::StrCat(v);
}

std::string MapHeader(const MapPlan& plan, const std::vector<int64_t>& key,
                      const KernelNames& names) {
  std::string out = absl::StrCat("@", plan.name);
  if (!plan.keyed()) return out;
  std::vector<std::string> parts;
  for (size_t i = 0; i < key.size(); ++i) parts.push_back(KeyText(plan.keys[i], key[i], names));
  return absl::StrCat(out, "[", absl::StrJoin(parts, ", "), "]");
}

std::string LogLabel(size_t slot) {
  if (slot == 0) return "(..., 0)";
  const size_t b = slot - 1;  // HIST_LOG2's bucket
  if (b == 0) return "[0]";
  if (b == 1) return "[1]";
  return absl::StrCat("[", PowerOfTwoLabel(uint64_t{1} << (b - 1)), ", ",
                      b == 64 ? std::string("16E") : PowerOfTwoLabel(uint64_t{1} << b), ")");
}

std::string LinearLabel(const MapPlan& plan, size_t slot) {
  if (slot == 0) return absl::StrCat("(..., ", plan.lhist_min, ")");
  if (slot + 1 == plan.slots) return absl::StrCat("[", plan.lhist_max, ", ...)");
  const int64_t lo = plan.lhist_min + static_cast<int64_t>(slot - 1) * plan.lhist_step;
  return absl::StrCat("[", lo, ", ", std::min(lo + plan.lhist_step, plan.lhist_max), ")");
}

std::string Histogram(const MapPlan& plan, const std::vector<uint64_t>& slots) {
  size_t first = slots.size(), last = 0;
  uint64_t max = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] == 0) continue;
    first = std::min(first, i);
    last = i;
    max = std::max(max, slots[i]);
  }
  std::string out;
  if (first == slots.size()) return out;
  for (size_t i = first; i <= last; ++i) {
    const std::string label =
        plan.aggregation == Aggregation::kHist ? LogLabel(i) : LinearLabel(plan, i);
    out += HistogramLine(label, slots[i], max);
  }
  return out;
}

// What one key holds: its slots (or its one value in slots[0]).
struct KeyValues {
  std::vector<uint64_t> slots;
  bool present = false;
};

std::map<std::vector<int64_t>, KeyValues> Group(const MapPlan& plan,
                                                const std::vector<MapEntry>& entries) {
  std::map<std::vector<int64_t>, KeyValues> groups;
  const size_t width = std::max<uint32_t>(plan.slots, 1);
  for (const MapEntry& e : entries) {
    if (e.key.size() != plan.key_size()) continue;
    std::vector<int64_t> key(plan.keys.size());
    uint64_t slot = 0;
    if (plan.keyed()) {
      std::memcpy(key.data(), e.key.data(), 8 * key.size());
      if (plan.slots > 0) std::memcpy(&slot, e.key.data() + 8 * key.size(), 8);
    } else {
      uint32_t index = 0;
      std::memcpy(&index, e.key.data(), 4);
      slot = index;
    }
    if (slot >= width) continue;
    KeyValues& kv = groups[key];
    kv.slots.resize(width);
    kv.slots[slot] += e.value;
    kv.present = true;
  }
  return groups;
}

// A scalar map's value for printing and sorting; nullopt: nothing yet.
std::optional<std::pair<int64_t, std::string>> Scalar(const MapPlan& plan, const KeyValues& kv) {
  const uint64_t v = kv.slots[0];
  switch (plan.aggregation) {
    case Aggregation::kMin:
    case Aggregation::kMax: {
      if (v == 0) return std::nullopt;  // no value was kept
      const uint64_t code = plan.aggregation == Aggregation::kMin ? ~v : v;
      const int64_t x = static_cast<int64_t>(code ^ kSignBit);
      return std::make_pair(x, absl::StrCat(x));
    }
    case Aggregation::kAvg:
    case Aggregation::kStats: {
      const uint64_t count = kv.slots[0];
      const int64_t sum = static_cast<int64_t>(kv.slots[1]);
      if (count == 0) return std::nullopt;
      const int64_t avg = sum / static_cast<int64_t>(count);
      if (plan.aggregation == Aggregation::kAvg) return std::make_pair(avg, absl::StrCat(avg));
      return std::make_pair(avg, absl::StrCat("count ", count, ", average ", avg, ", total ", sum));
    }
    case Aggregation::kCount:
      return std::make_pair(static_cast<int64_t>(v), absl::StrCat(v));
    default:
      return std::make_pair(static_cast<int64_t>(v), absl::StrCat(static_cast<int64_t>(v)));
  }
}

}  // namespace

std::string FormatOnelinerMap(const MapPlan& plan, const std::vector<MapEntry>& entries,
                              const KernelNames& names, uint64_t refused) {
  const std::map<std::vector<int64_t>, KeyValues> groups = Group(plan, entries);
  std::string out;
  if (plan.aggregation == Aggregation::kHist || plan.aggregation == Aggregation::kLhist) {
    for (const auto& [key, kv] : groups) {
      std::string body = Histogram(plan, kv.slots);
      if (body.empty()) continue;
      absl::StrAppend(&out, MapHeader(plan, key, names), ":\n", body, "\n");
    }
  } else {
    std::vector<std::tuple<int64_t, std::vector<int64_t>, std::string>> rows;
    for (const auto& [key, kv] : groups) {
      std::optional<std::pair<int64_t, std::string>> v = Scalar(plan, kv);
      if (v.has_value()) rows.emplace_back(v->first, key, std::move(v->second));
    }
    std::sort(rows.begin(), rows.end());
    for (const auto& [sort_value, key, text] : rows) {
      absl::StrAppend(&out, MapHeader(plan, key, names), ": ", text, "\n");
    }
    if (!rows.empty()) out += "\n";
  }
  if (refused > 0) {
    absl::StrAppend(&out, "@", plan.name, ": ", refused, " updates refused (the map is full: ",
                    plan.max_entries, " entries)\n\n");
  }
  return out;
}

absl::StatusOr<std::string> FormatOnelinerMaps(const Translation& translation, MapReader& reader,
                                               const KernelNames& names) {
  std::string out;
  for (const MapPlan& plan : translation.maps) {
    absl::StatusOr<MapSnapshot> snapshot = reader.Snapshot(plan.c_name);
    if (!snapshot.ok()) return snapshot.status();
    std::vector<MapEntry> entries;
    snapshot->ForEach([&](absl::Span<const uint8_t> key, uint64_t, absl::Span<const uint8_t> value) {
      MapEntry e;
      e.key.assign(key.begin(), key.end());
      std::memcpy(&e.value, value.data(), std::min<size_t>(value.size(), 8));
      // An ARRAY holds every index: the untouched ones are not entries.
      if (e.value != 0 || plan.keyed() || plan.aggregation == Aggregation::kValue) {
        entries.push_back(std::move(e));
      }
    });
    out += FormatOnelinerMap(plan, entries, names, snapshot->control().errors);
  }
  return out;
}

}  // namespace cuprobe::oneliner
