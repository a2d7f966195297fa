// File: loader/maps_command.cc
#include "loader/maps_command.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cuprobe/abi.h"
#include "maps/map_layout.h"
#include "maps/map_print.h"
#include "maps/map_reader.h"
#include "maps/segment_layout.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

constexpr char kUsage[] = R"(cuprobe maps: print the probes' maps of a session

USAGE
  cuprobe maps [options] SESSION

  SESSION is the session segment's name (cuprobe-<uid>-<pid>-<hex>, as in
  /dev/shm; `cuprobe run --keep` and CUPROBE_SESSION show it). Prints every
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
  -h, --help              this text

EXAMPLES
  cuprobe maps cuprobe-1000-4242-0123456789abcdef
  cuprobe maps --watch --interval 500 --map lat cuprobe-1000-4242-0123456789abcdef
  cuprobe maps --clear counts cuprobe-1000-4242-0123456789abcdef
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
    CUPROBE_ASSIGN_OR_RETURN(MapSnapshot snapshot, reader.Snapshot(i));
    out += FormatMap(snapshot);
  }
  return out;
}

absl::Status RunMaps(const MapsOptions& options) {
  const bool writable = options.events || !options.clear.empty();
  CUPROBE_ASSIGN_OR_RETURN(MapReader reader, MapReader::Open(options.session, writable));
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
