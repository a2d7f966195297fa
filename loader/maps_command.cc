// File: loader/maps_command.cc
#include "loader/maps_command.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cuprobe/abi.h"
#include "loader/session_lookup.h"
#include "probe/map_layout.h"
#include "maps/map_print.h"
#include "maps/map_reader.h"
#include "maps/segment_layout.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

constexpr char kUsage[] = R"(cuprobe maps: print the probes' maps of a session

USAGE
  cuprobe maps [options] SESSION|PID

  SESSION is the session segment's name (cuprobe-<uid>-<pid>-<hex>, as in
  /dev/shm; `cuprobe run --keep` and CUPROBE_SESSION show it), or the pid
  of a program running under `cuprobe run` or `cuprobe trace`. Prints every
  map from the latest snapshot the hook published: histograms with bars and
  `@name[key]: value` tables, as bpftrace does. Reading never disturbs the
  program.

OPTIONS
  -w, --watch             reprint every interval until the program's hook stops
  -i, --interval MS       --watch period (default: 1000)
  -n, --count N           --watch: stop after N prints
      --map NAME          print only this map (repeatable)
      --list              list the maps with their specs and types
      --events            consume the ring buffers and print their records
                          (one consumer at a time: not while `cuprobe run` reads them)
      --clear NAME        ask the hook to clear a map at its next publish (repeatable)
      --set NAME[I]=V     write V into entry I of ARRAY map NAME, where the
                          probes read it on the GPU (repeatable); V is an
                          integer (decimal, 0x hex, negative) for 1-, 2-, 4-
                          and 8-byte values, or hex:BYTES for any size. The
                          hook applies it at its next publish; cuprobe waits
                          for that (up to 5 s)
  -h, --help              this text

EXAMPLES
  cuprobe maps cuprobe-1000-4242-0123456789abcdef
  cuprobe maps --watch --interval 500 --map lat cuprobe-1000-4242-0123456789abcdef
  cuprobe maps --clear counts cuprobe-1000-4242-0123456789abcdef
  cuprobe maps --set 'config[0]=4' --map seen $(pgrep -n vec_add)
)";

absl::Status Invalid(std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(message, "\nTry 'cuprobe maps --help'."));
}

// "--name value" or "--name=value".
bool Option(const std::vector<std::string>& argv, size_t& i, std::string_view short_name,
            std::string_view long_name, std::string* value, absl::Status* error) {
  std::string_view arg = argv[i];
  std::string_view name = arg;
  if (size_t eq = arg.find('='); arg.substr(0, 2) == "--" && eq != std::string_view::npos) {
    name = arg.substr(0, eq);
    if (name != long_name) return false;
    *value = std::string(arg.substr(eq + 1));
    return true;
  }
  if (name != long_name && (short_name.empty() || name != short_name)) return false;
  if (i + 1 >= argv.size()) {
    *error = Invalid(absl::StrCat("option ", name, " needs a value"));
    return true;
  }
  *value = argv[++i];
  return true;
}

absl::StatusOr<uint32_t> Number(std::string_view option, std::string_view text, uint32_t min,
                                uint32_t max) {
  uint32_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < min || v > max) {
    return Invalid(absl::StrFormat("%s expects a number from %d to %d, got '%s'", option, min,
                                   max, text));
  }
  return v;
}

uint64_t RealtimeNs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool Selected(const MapsOptions& options, std::string_view name) {
  if (options.only.empty()) return true;
  for (const std::string& n : options.only) {
    if (n == name) return true;
  }
  return false;
}

std::string TypeText(const TypeDescription& t, uint32_t size) {
  if (t.name.empty()) return absl::StrCat(size, " bytes");
  if (t.fields.empty()) return absl::StrCat(t.name);
  std::vector<std::string> fields;
  for (const TypeField& f : t.fields) fields.push_back(absl::StrCat(f.type, " ", f.name));
  return absl::StrCat(t.name, " {", absl::StrJoin(fields, "; "), "}");
}

// A ring record: printk records by their layout (abi.h), others as hex.
std::string RecordText(std::string_view map, absl::Span<const uint8_t> body) {
  if (map == CUPROBE_PRINTK_MAP_NAME && body.size() >= 32) {
    uint32_t format_id, nargs;
    uint64_t args[3];
    std::memcpy(&format_id, body.data(), 4);
    std::memcpy(&nargs, body.data() + 4, 4);
    std::memcpy(args, body.data() + 8, 24);
    return absl::StrFormat("@%s: format %d, args %d %d %d", map, format_id, args[0], args[1],
                           args[2]);
  }
  std::string hex;
  const size_t shown = std::min<size_t>(body.size(), 64);
  for (size_t i = 0; i < shown; ++i) absl::StrAppendFormat(&hex, "%02x", body[i]);
  return absl::StrFormat("@%s: %d bytes: %s%s", map, body.size(), hex,
                         shown < body.size() ? "..." : "");
}

}  // namespace

std::string_view MapsUsage() { return kUsage; }

absl::StatusOr<MapsOptions> ParseMapsArgs(const std::vector<std::string>& argv, size_t i) {
  MapsOptions o;
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      return o;
    }
    if (arg == "-w" || arg == "--watch") {
      o.watch = true;
      continue;
    }
    if (arg == "--events") {
      o.events = true;
      continue;
    }
    if (arg == "--list") {
      o.list = true;
      continue;
    }
    std::string value;
    absl::Status error;
    if (Option(argv, i, "-i", "--interval", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(o.interval_ms, Number("--interval", value, 10, 3600000));
    } else if (Option(argv, i, "-n", "--count", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_ASSIGN_OR_RETURN(o.count, Number("--count", value, 1, 1000000000));
    } else if (Option(argv, i, "", "--clear", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      o.clear.push_back(value);
    } else if (Option(argv, i, "", "--set", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      CUPROBE_RETURN_IF_ERROR(ParseMapAssignment(value).status());
      o.set.push_back(value);
    } else if (Option(argv, i, "", "--map", &value, &error)) {
      CUPROBE_RETURN_IF_ERROR(error);
      o.only.push_back(value);
    } else if (arg.size() > 1 && arg[0] == '-') {
      return Invalid(absl::StrCat("unknown option '", arg, "'"));
    } else if (!o.session.empty()) {
      return Invalid(
          absl::StrCat("maps takes one session, got '", o.session, "' and '", arg, "'"));
    } else {
      o.session = arg;
    }
  }
  if (o.session.empty()) return Invalid("maps needs a session: cuprobe maps SESSION");
  return o;
}

std::string FormatMapList(const MapReader& reader) {
  std::string out;
  for (const MapInfo& m : reader.maps()) {
    const MapSpec& s = m.spec;
    std::string extra;
    if (IsPerIdType(s.type)) extra = absl::StrFormat(", %d ids per key", m.geometry.id_slots);
    if (s.type == CUPROBE_MAP_HIST_LINEAR) {
      extra = absl::StrFormat(", min %d, step %d",
                              static_cast<int32_t>(static_cast<uint32_t>(s.map_extra)),
                              static_cast<uint32_t>(s.map_extra >> 32));
    }
    if (s.type == CUPROBE_MAP_RINGBUF) {
      absl::StrAppendFormat(&out, "@%s: RINGBUF of %d bytes\n", s.name, s.max_entries);
      continue;
    }
    absl::StrAppendFormat(&out, "@%s: %s, key %s, value %s, %d entries%s\n", s.name,
                          MapTypeName(s.type), TypeText(s.key_type, s.key_size),
                          TypeText(s.value_type, s.value_size), s.max_entries, extra);
  }
  if (out.empty()) out = "(no maps)\n";
  return out;
}

absl::StatusOr<std::string> FormatSessionMaps(MapReader& reader, const MapsOptions& options) {
  std::string out;
  for (const std::string& name : options.only) CUPROBE_RETURN_IF_ERROR(reader.Find(name).status());
  for (size_t i = 0; i < reader.maps().size(); ++i) {
    const MapInfo& info = reader.maps()[i];
    if (!Selected(options, info.spec.name)) continue;
    if (info.spec.type == CUPROBE_MAP_RINGBUF) {
      CUPROBE_ASSIGN_OR_RETURN(MapRingStats stats, reader.RingStats(info.spec.name));
      out += FormatRingStats(info.spec.name, stats) + "\n";
      continue;
    }
    // A map that cannot be read says why in its place; the others print.
    absl::StatusOr<MapSnapshot> snapshot = reader.Snapshot(i);
    if (!snapshot.ok()) {
      absl::StrAppendFormat(&out, "@%s: (not readable: %s)\n\n", info.spec.name,
                            snapshot.status().message());
      continue;
    }
    out += FormatMap(*snapshot);
  }
  return out;
}

absl::StatusOr<MapAssignment> ParseMapAssignment(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Invalid(absl::StrCat("--set '", text, "': ", why, " (expected NAME[INDEX]=VALUE)"));
  };
  const size_t open = text.find('[');
  const size_t close = text.find("]=");
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return bad("no [INDEX]=");
  }
  MapAssignment a;
  a.map = std::string(text.substr(0, open));
  if (a.map.empty()) return bad("no map name");
  if (!absl::SimpleAtoi(text.substr(open + 1, close - open - 1), &a.index)) {
    return bad("the index is not a non-negative integer");
  }
  a.value = std::string(text.substr(close + 2));
  if (a.value.empty()) return bad("no value");
  return a;
}

absl::StatusOr<std::vector<uint8_t>> EncodeMapValue(std::string_view value, uint32_t size) {
  std::vector<uint8_t> bytes(size);
  if (absl::ConsumePrefix(&value, "hex:")) {
    if (value.size() != 2 * size) {
      return Invalid(absl::StrFormat("hex:%s has %d digits; the map's %d-byte values need %d",
                                     value, value.size(), size, 2 * size));
    }
    for (uint32_t i = 0; i < size; ++i) {
      int byte = 0;
      for (int d = 0; d < 2; ++d) {
        const char c = value[2 * i + d];
        const int v = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
        if (v < 0) return Invalid(absl::StrFormat("hex:%s: '%c' is not a hex digit", value, c));
        byte = byte * 16 + v;
      }
      bytes[i] = static_cast<uint8_t>(byte);
    }
    return bytes;
  }
  if (size != 1 && size != 2 && size != 4 && size != 8) {
    return Invalid(absl::StrFormat(
        "the map's values are %d bytes: give them as hex:BYTES (%d hex digits)", size, 2 * size));
  }
  uint64_t bits = 0;
  int64_t negative = 0;
  if (absl::StartsWith(value, "-") && absl::SimpleAtoi(value, &negative)) {
    const int64_t min = size == 8 ? INT64_MIN : -(int64_t{1} << (8 * size - 1));
    if (negative < min) return Invalid(absl::StrFormat("%s does not fit %d bytes", value, size));
    bits = static_cast<uint64_t>(negative);
  } else if (absl::StartsWithIgnoreCase(value, "0x") ? !absl::SimpleHexAtoi(value, &bits)
                                                    : !absl::SimpleAtoi(value, &bits)) {
    return Invalid(absl::StrFormat("'%s' is not an integer (decimal, or hex after 0x)", value));
  } else if (size < 8 && bits >> (8 * size) != 0) {
    return Invalid(absl::StrFormat("%s does not fit %d bytes", value, size));
  }
  for (uint32_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(bits >> (8 * i));
  return bytes;
}

absl::Status RunMaps(const MapsOptions& options) {
  const bool writable = options.events || !options.clear.empty() || !options.set.empty();
  CUPROBE_ASSIGN_OR_RETURN(std::string session,
                           FindTargetSession(options.session, SessionPurpose::kMaps));
  CUPROBE_ASSIGN_OR_RETURN(MapReader reader, MapReader::Open(session, writable));
  for (const std::string& text : options.set) {
    CUPROBE_ASSIGN_OR_RETURN(MapAssignment a, ParseMapAssignment(text));
    CUPROBE_ASSIGN_OR_RETURN(size_t i, reader.Find(a.map));
    CUPROBE_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                             EncodeMapValue(a.value, reader.maps()[i].spec.value_size));
    CUPROBE_RETURN_IF_ERROR(reader.Write(a.map, a.index, bytes));
    std::fprintf(stderr, "cuprobe: @%s[%u] = %s (applied by the hook)\n", a.map.c_str(), a.index,
                 a.value.c_str());
  }
  for (const std::string& name : options.clear) {
    CUPROBE_RETURN_IF_ERROR(reader.Clear(name));
    std::fprintf(stderr, "cuprobe: asked the hook to clear @%s at its next publish\n",
                 name.c_str());
  }
  if (options.list) {
    std::fputs(FormatMapList(reader).c_str(), stdout);
    return absl::OkStatus();
  }
  if (reader.maps().empty()) {
    std::printf("session %s has no maps (it runs without probes)\n",
                reader.session().name().c_str());
    return absl::OkStatus();
  }
  for (uint32_t printed = 0;;) {
    const uint32_t state = reader.session().session_state();
    const uint64_t published = reader.publish_count();
    const uint64_t last = reader.session().maps().last_publish_ns();
    std::string when = "never published yet";
    if (published > 0) {
      const uint64_t now = RealtimeNs();
      when = absl::StrFormat("published %d times, last %d ms ago", published,
                             now > last ? (now - last) / 1000000 : 0);
    }
    std::printf("%s: hook %s, maps %s\n", reader.session().name().c_str(),
                std::string(SessionStateName(static_cast<SessionState>(state))).c_str(),
                when.c_str());
    CUPROBE_ASSIGN_OR_RETURN(std::string text, FormatSessionMaps(reader, options));
    std::fputs(text.c_str(), stdout);
    if (options.events) {
      for (const MapInfo& info : reader.maps()) {
        if (info.spec.type != CUPROBE_MAP_RINGBUF || !Selected(options, info.spec.name)) continue;
        const std::string& name = info.spec.name;
        CUPROBE_RETURN_IF_ERROR(reader
                                    .ReadRing(name,
                                              [&](absl::Span<const uint8_t> body) {
                                                std::puts(RecordText(name, body).c_str());
                                              })
                                    .status());
      }
    }
    std::fflush(stdout);
    ++printed;
    const bool stopped = state == static_cast<uint32_t>(SessionState::kHookStopped) ||
                         state == static_cast<uint32_t>(SessionState::kHookDisabled);
    if (!options.watch || stopped || (options.count != 0 && printed >= options.count)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(options.interval_ms));
  }
  return absl::OkStatus();
}

}  // namespace cuprobe
