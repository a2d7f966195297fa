// File: maps/map_print.cc
#include "maps/map_print.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "probe/map_layout.h"

namespace cuprobe {
namespace {

constexpr int kBarWidth = 52;  // bpftrace's

std::string Bar(uint64_t count, uint64_t max) {
  const int n =
      max == 0 ? 0 : static_cast<int>(static_cast<unsigned __int128>(count) * kBarWidth / max);
  return absl::StrCat("|", std::string(n, '@'), std::string(kBarWidth - n, ' '), "|");
}

// [first, last] non-zero buckets, or nullopt when all are zero.
std::optional<std::pair<size_t, size_t>> NonZeroRange(absl::Span<const uint64_t> buckets) {
  size_t first = buckets.size(), last = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i] == 0) continue;
    first = std::min(first, i);
    last = i;
  }
  if (first == buckets.size()) return std::nullopt;
  return std::make_pair(first, last);
}

uint64_t Max(absl::Span<const uint64_t> v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

uint64_t LoadUnsigned(absl::Span<const uint8_t> bytes) {  // little-endian, up to 8 bytes
  uint64_t v = 0;
  std::memcpy(&v, bytes.data(), std::min<size_t>(bytes.size(), 8));
  return v;
}

bool LooksSigned(std::string_view type) {
  if (type.size() >= 2 && type[0] == 's' && type[1] >= '0' && type[1] <= '9') return true;
  for (std::string_view t : {"int", "long", "short", "signed char", "long long", "int8_t",
                             "int16_t", "int32_t", "int64_t", "__s8", "__s16", "__s32", "__s64"}) {
    if (type == t) return true;
  }
  return false;
}

std::string Integer(absl::Span<const uint8_t> bytes, std::string_view type) {
  const uint64_t v = LoadUnsigned(bytes);
  if (LooksSigned(type)) {
    const int shift = 64 - 8 * static_cast<int>(bytes.size());
    return absl::StrCat(static_cast<int64_t>(v << shift) >> shift);
  }
  return absl::StrCat(v);
}

std::string Hex(absl::Span<const uint8_t> bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size(); ++i) {
    absl::StrAppendFormat(&out, "%s%02x", i == 0 ? "" : " ", bytes[i]);
  }
  return out;
}

std::string Quoted(absl::Span<const uint8_t> bytes) {
  std::string out = "\"";
  for (uint8_t c : bytes) {
    if (c == 0) break;
    if (c == '"' || c == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, static_cast<char>(c)));
    } else if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
  }
  return out + "\"";
}

std::string Scalar(absl::Span<const uint8_t> bytes, std::string_view type) {
  if (absl::StrContains(type, "char[") || absl::StrContains(type, "char [")) return Quoted(bytes);
  if (bytes.size() == 1 || bytes.size() == 2 || bytes.size() == 4 || bytes.size() == 8) {
    return Integer(bytes, type);
  }
  return Hex(bytes);
}

std::string PerIdNoun(uint32_t type) {
  switch (type) {
    case CUPROBE_MAP_PERTHREAD:
      return "threads";
    case CUPROBE_MAP_PERWARP:
      return "warps";
    default:
      return "SMs";
  }
}

std::string ErrorsNote(const MapSnapshot& s) {
  if (s.control().errors == 0) return "";
  return absl::StrFormat("  (%d updates refused: map full, or key or id out of range)\n",
                         s.control().errors);
}

}  // namespace

std::string HistogramLine(std::string_view label, uint64_t count, uint64_t max) {
  return absl::StrFormat("%-16s%8d %s\n", label, count, Bar(count, max));
}

std::string PowerOfTwoLabel(uint64_t value) {
  static constexpr std::pair<int, char> kSuffixes[] = {{60, 'E'}, {50, 'P'}, {40, 'T'},
                                                       {30, 'G'}, {20, 'M'}, {10, 'K'}};
  for (const auto& [shift, suffix] : kSuffixes) {
    const uint64_t unit = uint64_t{1} << shift;
    if (value >= unit && value % unit == 0)
      return absl::StrCat(value >> shift, std::string(1, suffix));
  }
  return absl::StrCat(value);
}

std::string FormatLog2Histogram(absl::Span<const uint64_t> buckets) {
  std::optional<std::pair<size_t, size_t>> range = NonZeroRange(buckets);
  if (!range.has_value()) return "";
  const uint64_t max = Max(buckets);
  std::string out;
  for (size_t b = range->first; b <= range->second; ++b) {
    std::string label;
    if (b == 0) {
      label = "[0]";
    } else if (b == 1) {
      label = "[1]";
    } else {
      const uint64_t lo = uint64_t{1} << (b - 1);
      label = absl::StrCat("[", PowerOfTwoLabel(lo), ", ",
                           b == 64 ? std::string("16E") : PowerOfTwoLabel(uint64_t{1} << b), ")");
    }
    // The last bucket also holds everything above (the map clamps).
    if (b + 1 == buckets.size() && b < 64 && b > 0) {
      label = absl::StrCat("[", PowerOfTwoLabel(uint64_t{1} << (b - 1)), ", ...)");
    }
    out += HistogramLine(label, buckets[b], max);
  }
  return out;
}

std::string FormatLinearHistogram(absl::Span<const uint64_t> buckets, uint64_t map_extra) {
  std::optional<std::pair<size_t, size_t>> range = NonZeroRange(buckets);
  if (!range.has_value()) return "";
  const int64_t min = static_cast<int32_t>(static_cast<uint32_t>(map_extra));
  const int64_t step = static_cast<uint32_t>(map_extra >> 32);
  const uint64_t max = Max(buckets);
  std::string out;
  for (size_t b = range->first; b <= range->second; ++b) {
    std::string label;
    const int64_t lo = min + (static_cast<int64_t>(b) - 1) * step;
    if (b == 0) {
      label = absl::StrCat("(..., ", min, ")");
    } else if (b + 1 == buckets.size()) {
      label = absl::StrCat("[", lo, ", ...)");
    } else {
      label = absl::StrCat("[", lo, ", ", lo + step, ")");
    }
    out += HistogramLine(label, buckets[b], max);
  }
  return out;
}

std::string FormatBytes(absl::Span<const uint8_t> bytes, const TypeDescription& type) {
  if (type.fields.empty()) return Scalar(bytes, type.name);
  std::vector<std::string> parts;
  for (const TypeField& f : type.fields) {
    if (f.offset > bytes.size() || f.size > bytes.size() - f.offset) continue;
    parts.push_back(absl::StrCat(f.name, ": ", Scalar(bytes.subspan(f.offset, f.size), f.type)));
  }
  // Bytes too short for any field of the type (a record smaller than the
  // map's declared value, as bpftime's examples emit): the bytes themselves.
  if (parts.empty() && !bytes.empty()) return Hex(bytes);
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

std::string FormatRingStats(std::string_view name, const MapRingStats& s) {
  const uint64_t pending = s.head >= s.tail ? s.head - s.tail : 0;
  return absl::StrFormat(
      "@%s: ring of %d bytes: %d records delivered, %d dropped (%d bytes), %d discarded; "
      "%d bytes pending\n",
      name, s.capacity, s.delivered, s.dropped, s.dropped_bytes, s.discarded, pending);
}

namespace {

// A PER* map: per key, the sum, count, min and max over the ids that hold a
// value (or, for values over 8 bytes, how many do).
std::string FormatPerIdMap(const MapSnapshot& snapshot, const std::string& at) {
  const MapSpec& spec = snapshot.spec();
  struct Agg {
    uint64_t sum = 0, count = 0, min = UINT64_MAX, max = 0;
  };
  std::vector<Agg> per_key(spec.max_entries);
  snapshot.ForEach([&](absl::Span<const uint8_t> key, uint64_t, absl::Span<const uint8_t> v) {
    uint32_t k;
    std::memcpy(&k, key.data(), 4);
    const uint64_t x = LoadUnsigned(v);
    Agg& a = per_key[k];
    a.sum += x;
    a.count += 1;
    a.min = std::min(a.min, x);
    a.max = std::max(a.max, x);
  });
  std::string out;
  for (uint32_t k = 0; k < per_key.size(); ++k) {
    const Agg& a = per_key[k];
    if (a.count == 0) continue;
    if (spec.value_size <= 8) {
      absl::StrAppendFormat(&out, "%s[%d]: sum %d over %d %s (min %d, max %d)\n", at, k, a.sum,
                            a.count, PerIdNoun(spec.type), a.min, a.max);
    } else {
      absl::StrAppendFormat(&out, "%s[%d]: %d %s with a value\n", at, k, a.count,
                            PerIdNoun(spec.type));
    }
  }
  if (out.empty()) out = absl::StrCat(at, ": (empty)\n");
  return out;
}

// An ARRAY (the entries written) or HASH map: one line per key, as bpftrace
// prints them.
std::string FormatKeyedMap(const MapSnapshot& snapshot, const std::string& at) {
  const MapSpec& spec = snapshot.spec();
  struct Row {
    std::string key, value;
    uint64_t sort = 0;
  };
  std::vector<Row> rows;
  const bool scalar = spec.value_type.fields.empty() && spec.value_size <= 8;
  snapshot.ForEach([&](absl::Span<const uint8_t> key, uint64_t, absl::Span<const uint8_t> v) {
    if (spec.type == CUPROBE_MAP_ARRAY &&
        std::all_of(v.begin(), v.end(), [](uint8_t b) { return b == 0; })) {
      return;  // arrays: only the entries that were written
    }
    rows.push_back(Row{FormatBytes(key, spec.key_type), FormatBytes(v, spec.value_type),
                       scalar ? LoadUnsigned(v) : 0});
  });
  // bpftrace prints counters sorted by value, largest last.
  if (scalar && spec.type == CUPROBE_MAP_HASH) {
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Row& a, const Row& b) { return a.sort < b.sort; });
  }
  if (rows.empty()) {
    return spec.type == CUPROBE_MAP_ARRAY
               ? absl::StrFormat("%s: (all %d entries zero)\n", at, spec.max_entries)
               : absl::StrCat(at, ": (empty)\n");
  }
  const bool single = spec.type == CUPROBE_MAP_ARRAY && spec.max_entries == 1;
  std::string out;
  for (const Row& r : rows) {
    out += single ? absl::StrCat(at, ": ", r.value, "\n")
                  : absl::StrCat(at, "[", r.key, "]: ", r.value, "\n");
  }
  return out;
}

}  // namespace

std::string FormatMap(const MapSnapshot& snapshot) {
  const MapSpec& spec = snapshot.spec();
  const std::string at = absl::StrCat("@", spec.name);
  std::string out;
  switch (spec.type) {
    case CUPROBE_MAP_HIST_LOG2:
    case CUPROBE_MAP_HIST_LINEAR: {
      const std::vector<uint64_t> buckets = snapshot.Buckets();
      out = absl::StrCat(at, ":\n",
                         spec.type == CUPROBE_MAP_HIST_LOG2
                             ? FormatLog2Histogram(buckets)
                             : FormatLinearHistogram(buckets, spec.map_extra));
      break;
    }
    case CUPROBE_MAP_RINGBUF: {
      const cuprobe_map_control& c = snapshot.control();
      out =
          absl::StrFormat("%s: ring of %d bytes: %d records reserved, %d dropped (%d bytes)\n", at,
                          spec.max_entries, c.ring_reserved, c.ring_dropped, c.ring_dropped_bytes);
      break;
    }
    case CUPROBE_MAP_PERTHREAD:
    case CUPROBE_MAP_PERWARP:
    case CUPROBE_MAP_PERSM:
      out = FormatPerIdMap(snapshot, at);
      break;
    default:  // ARRAY, HASH
      out = FormatKeyedMap(snapshot, at);
      break;
  }
  return absl::StrCat(out, ErrorsNote(snapshot), "\n");
}

}  // namespace cuprobe
