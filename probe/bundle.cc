// The .cpb byte format (format version 1), little-endian throughout:
//
//   header (32 bytes)
//     u32 magic "CPB\x01" (0x01425043)   u32 format_version
//     u32 abi_version                     u32 header_size (32)
//     u64 total_size (header included)    u64 checksum: FNV-1a 64 of the body
//   body: chunks, each
//     u32 tag    u32 flags (0)    u64 payload_size    payload    pad to 8
//
// Chunks: META (once), PROG (per program, in order), MAP (per map, in table
// order), PTX (once), HELP (helper symbols), PRTF (printk formats, in id
// order), SUMM (optional, per program that has summary code: u32 program
// index, the instructions as bytes, u32 count and (u32 insn, u32 map) pairs
// of its map references), ONEL (optional: the one-liner the bundle was
// compiled from). Unknown tags are skipped, so a newer writer's optional chunks do
// not break an older reader; a new *required* meaning bumps the version.
// Payload fields are u32 / u64 or strings (u32 length + bytes); every read is
// bounds-checked against the chunk, every chunk against the file.
#include "probe/bundle.h"


#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

constexpr uint32_t kMagic = 0x01425043;  // "CPB\x01"
constexpr uint32_t kHeaderSize = 32;
constexpr uint32_t kTagMeta = 0x4154454d;  // "META"
constexpr uint32_t kTagProg = 0x474f5250;  // "PROG"
constexpr uint32_t kTagMap = 0x2050414d;   // "MAP "
constexpr uint32_t kTagPtx = 0x20585450;   // "PTX "
constexpr uint32_t kTagHelpers = 0x504c4548;  // "HELP"
constexpr uint32_t kTagPrintk = 0x46545250;   // "PRTF"
constexpr uint32_t kTagSummary = 0x4d4d5553;  // "SUMM"
constexpr uint32_t kTagOneliner = 0x4c454e4f;  // "ONEL"
constexpr uint64_t kMaxSummaryInsns = 1u << 16;
// Sanity bounds: far above anything a probe produces, low enough that a
// lying count cannot make the reader allocate without limit.
constexpr uint64_t kMaxItems = 1u << 16;
constexpr uint64_t kMaxBundleSize = 1ull << 30;

uint64_t Fnv1a(absl::Span<const uint8_t> bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string TagName(uint32_t tag) {
  std::string s(4, ' ');
  std::memcpy(s.data(), &tag, 4);
  for (char& c : s) {
    if (c < 32 || c > 126) c = '?';
  }
  return s;
}

class Writer {
 public:
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    Raw(s.data(), s.size());
  }
  void Bytes(const std::vector<uint8_t>& b) {
    U32(static_cast<uint32_t>(b.size()));
    Raw(b.data(), b.size());
  }
  void Raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  std::vector<uint8_t> out;
};

void Chunk(Writer& w, uint32_t tag, const Writer& payload) {
  w.U32(tag);
  w.U32(0);
  w.U64(payload.out.size());
  w.Raw(payload.out.data(), payload.out.size());
  while (w.out.size() % 8 != 0) w.out.push_back(0);
}

void WriteType(Writer& w, const TypeDescription& t) {
  w.Str(t.name);
  w.U32(t.size);
  w.U32(static_cast<uint32_t>(t.fields.size()));
  for (const TypeField& f : t.fields) {
    w.Str(f.name);
    w.Str(f.type);
    w.U32(f.offset);
    w.U32(f.size);
  }
}

class Reader {
 public:
  Reader(absl::Span<const uint8_t> bytes, uint64_t base, std::string what)
      : bytes_(bytes), base_(base), what_(std::move(what)) {}

  absl::Status Error(std::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat("bundle: ", what_, " at offset ",
                                                   base_ + pos_, ": ", msg));
  }
  absl::StatusOr<uint32_t> U32(std::string_view field) {
    uint32_t v = 0;
    CUPROBE_RETURN_IF_ERROR(Raw(&v, 4, field));
    return v;
  }
  absl::StatusOr<uint64_t> U64(std::string_view field) {
    uint64_t v = 0;
    CUPROBE_RETURN_IF_ERROR(Raw(&v, 8, field));
    return v;
  }
  absl::StatusOr<std::string> Str(std::string_view field) {
    CUPROBE_ASSIGN_OR_RETURN(uint32_t n, U32(field));
    if (n > bytes_.size() - pos_) {
      return Error(absl::StrCat(field, ": length ", n, " runs past the end (", bytes_.size() - pos_,
                                " bytes left)"));
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  absl::StatusOr<uint32_t> Count(std::string_view field, uint64_t min_item_size) {
    CUPROBE_ASSIGN_OR_RETURN(uint32_t n, U32(field));
    if (n > kMaxItems || uint64_t{n} * min_item_size > bytes_.size() - pos_) {
      return Error(absl::StrCat(field, ": count ", n, " does not fit in the chunk"));
    }
    return n;
  }
  bool AtEnd() const { return pos_ == bytes_.size(); }

 private:
  absl::Status Raw(void* out, size_t n, std::string_view field) {
    if (n > bytes_.size() - pos_) return Error(absl::StrCat(field, ": truncated"));
    std::memcpy(out, bytes_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

  absl::Span<const uint8_t> bytes_;
  uint64_t base_;
  std::string what_;
  size_t pos_ = 0;
};

absl::StatusOr<TypeDescription> ReadType(Reader& r) {
  TypeDescription t;
  CUPROBE_ASSIGN_OR_RETURN(t.name, r.Str("type name"));
  CUPROBE_ASSIGN_OR_RETURN(t.size, r.U32("type size"));
  CUPROBE_ASSIGN_OR_RETURN(uint32_t n, r.Count("field count", 16));
  t.fields.resize(n);
  for (TypeField& f : t.fields) {
    CUPROBE_ASSIGN_OR_RETURN(f.name, r.Str("field name"));
    CUPROBE_ASSIGN_OR_RETURN(f.type, r.Str("field type"));
    CUPROBE_ASSIGN_OR_RETURN(f.offset, r.U32("field offset"));
    CUPROBE_ASSIGN_OR_RETURN(f.size, r.U32("field size"));
    if (t.size != 0 && (uint64_t{f.offset} + f.size > t.size)) {
      return r.Error(absl::StrCat("field '", f.name, "' lies outside its type (", t.size,
                                  " bytes)"));
    }
  }
  return t;
}

bool KnownMapType(uint32_t t) {
  switch (t) {
    case CUPROBE_MAP_HASH: case CUPROBE_MAP_ARRAY: case CUPROBE_MAP_RINGBUF:
    case CUPROBE_MAP_PERTHREAD: case CUPROBE_MAP_PERWARP: case CUPROBE_MAP_PERSM:
    case CUPROBE_MAP_HIST_LOG2: case CUPROBE_MAP_HIST_LINEAR:
      return true;
    default:
      return false;
  }
}

bool IsPtxIdentifier(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::vector<uint8_t> WriteBundle(const ProbeBundle& bundle) {
  Writer body;
  {
    Writer m;
    m.Str(bundle.compiler_version);
    m.U64(bundle.source_hash);
    m.Str(bundle.source_name);
    m.U32(static_cast<uint32_t>(bundle.programs.size()));
    m.U32(static_cast<uint32_t>(bundle.maps.size()));
    Chunk(body, kTagMeta, m);
  }
  for (const ProbeProgram& p : bundle.programs) {
    Writer w;
    w.Str(p.name);
    w.Str(p.section);
    w.U32(static_cast<uint32_t>(p.attach));
    w.Str(p.kernel_glob);
    w.Str(p.ptx_function);
    w.U32(p.reads_args ? 1 : 0);
    w.U32(p.mem_spaces);
    Chunk(body, kTagProg, w);
  }
  for (size_t i = 0; i < bundle.programs.size(); ++i) {
    const ProbeProgram& p = bundle.programs[i];
    if (p.summary_code.empty()) continue;
    Writer w;
    w.U32(static_cast<uint32_t>(i));
    w.Bytes(p.summary_code);
    w.U32(static_cast<uint32_t>(p.summary_maps.size()));
    for (const auto& [insn, map] : p.summary_maps) {
      w.U32(insn);
      w.U32(map);
    }
    Chunk(body, kTagSummary, w);
  }
  for (const MapSpec& s : bundle.maps) {
    Writer w;
    w.Str(s.name);
    w.U32(s.type);
    w.U32(s.key_size);
    w.U32(s.value_size);
    w.U32(s.max_entries);
    w.U32(s.flags);
    w.U64(s.map_extra);
    WriteType(w, s.key_type);
    WriteType(w, s.value_type);
    w.Bytes(s.initial_value);
    Chunk(body, kTagMap, w);
  }
  {
    Writer w;
    w.Str(bundle.ptx);
    Chunk(body, kTagPtx, w);
  }
  {
    Writer w;
    w.U32(static_cast<uint32_t>(bundle.helpers.size()));
    for (const std::string& h : bundle.helpers) w.Str(h);
    Chunk(body, kTagHelpers, w);
  }
  {
    Writer w;
    w.U32(static_cast<uint32_t>(bundle.printk_formats.size()));
    for (const std::string& f : bundle.printk_formats) w.Str(f);
    Chunk(body, kTagPrintk, w);
  }
  if (!bundle.oneliner.empty()) {
    Writer w;
    w.Str(bundle.oneliner);
    Chunk(body, kTagOneliner, w);
  }
  Writer out;
  out.U32(kMagic);
  out.U32(bundle.format_version);
  out.U32(bundle.abi_version);
  out.U32(kHeaderSize);
  out.U64(kHeaderSize + body.out.size());
  out.U64(Fnv1a(body.out));
  out.Raw(body.out.data(), body.out.size());
  return out.out;
}

namespace {

// ReadBundle's steps.

absl::Status HeaderError(uint64_t offset, std::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("bundle: header at offset ", offset, ": ", msg));
}

// Checks the header of `bytes` (magic, versions, sizes, checksum) and
// returns the body it covers.
absl::StatusOr<absl::Span<const uint8_t>> CheckHeader(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < kHeaderSize) {
    return HeaderError(0, absl::StrCat("truncated (", bytes.size(), " bytes; a bundle has at "
                                       "least a ", kHeaderSize, "-byte header)"));
  }
  uint32_t h[4];
  uint64_t total, checksum;
  std::memcpy(h, bytes.data(), 16);
  std::memcpy(&total, bytes.data() + 16, 8);
  std::memcpy(&checksum, bytes.data() + 24, 8);
  if (h[0] != kMagic) {
    return HeaderError(0, "bad magic: not a cuprobe probe bundle (.cpb); make one with "
                          "`cuprobe compile probe.bpf.c -o probe.cpb`");
  }
  if (h[1] != kBundleFormatVersion) {
    return HeaderError(4, absl::StrCat("format version ", h[1], " is not supported (this "
                                       "cuprobe reads version ", kBundleFormatVersion,
                                       "); recompile the probe with this cuprobe"));
  }
  if (h[2] != CUPROBE_ABI_VERSION) {
    return HeaderError(8, absl::StrCat("probe ABI version ", h[2], " differs from this "
                                       "cuprobe's ", CUPROBE_ABI_VERSION, "; recompile the probe"));
  }
  if (h[3] != kHeaderSize) return HeaderError(12, absl::StrCat("header size ", h[3]));
  if (total > kMaxBundleSize || total != bytes.size()) {
    return HeaderError(16, absl::StrCat("total size ", total, " but ", bytes.size(),
                                        " bytes were given (truncated or padded)"));
  }
  const absl::Span<const uint8_t> body = bytes.subspan(kHeaderSize);
  if (Fnv1a(body) != checksum) return HeaderError(24, "checksum mismatch: the bundle is corrupt");
  return body;
}

// The bundle being read, and what its chunks announced or held so far.
struct BundleInProgress {
  ProbeBundle bundle;
  bool have_meta = false;
  bool have_ptx = false;
  uint32_t want_programs = 0;
  uint32_t want_maps = 0;
};

absl::Status ReadMeta(Reader& r, BundleInProgress& in) {
  if (in.have_meta) return r.Error("second META chunk");
  in.have_meta = true;
  ProbeBundle& b = in.bundle;
  CUPROBE_ASSIGN_OR_RETURN(b.compiler_version, r.Str("compiler version"));
  CUPROBE_ASSIGN_OR_RETURN(b.source_hash, r.U64("source hash"));
  CUPROBE_ASSIGN_OR_RETURN(b.source_name, r.Str("source name"));
  CUPROBE_ASSIGN_OR_RETURN(in.want_programs, r.U32("program count"));
  CUPROBE_ASSIGN_OR_RETURN(in.want_maps, r.U32("map count"));
  if (in.want_programs > kMaxItems || in.want_maps > kMaxItems) {
    return r.Error("program or map count out of range");
  }
  return absl::OkStatus();
}

absl::StatusOr<ProbeProgram> ReadProgram(Reader& r) {
  ProbeProgram p;
  CUPROBE_ASSIGN_OR_RETURN(p.name, r.Str("program name"));
  CUPROBE_ASSIGN_OR_RETURN(p.section, r.Str("section"));
  CUPROBE_ASSIGN_OR_RETURN(uint32_t attach, r.U32("attach kind"));
  if (attach < CUPROBE_ATTACH_ENTRY || attach > CUPROBE_ATTACH_MEM) {
    return r.Error(absl::StrCat("program '", p.name, "': unknown attach kind ", attach));
  }
  p.attach = static_cast<AttachKind>(attach);
  CUPROBE_ASSIGN_OR_RETURN(p.kernel_glob, r.Str("kernel glob"));
  CUPROBE_ASSIGN_OR_RETURN(p.ptx_function, r.Str("PTX function"));
  if (!IsPtxIdentifier(p.ptx_function)) {
    return r.Error(absl::StrCat("program '", p.name, "': PTX function name '", p.ptx_function,
                                "' is not an identifier"));
  }
  CUPROBE_ASSIGN_OR_RETURN(uint32_t reads_args, r.U32("reads_args"));
  if (reads_args > 1) return r.Error("reads_args is not 0 or 1");
  p.reads_args = reads_args == 1;
  CUPROBE_ASSIGN_OR_RETURN(p.mem_spaces, r.U32("memory spaces"));
  if (p.kernel_glob.empty()) return r.Error(absl::StrCat("program '", p.name, "': empty glob"));
  return p;
}

absl::StatusOr<MapSpec> ReadMap(Reader& r) {
  MapSpec s;
  CUPROBE_ASSIGN_OR_RETURN(s.name, r.Str("map name"));
  CUPROBE_ASSIGN_OR_RETURN(s.type, r.U32("map type"));
  if (!KnownMapType(s.type)) {
    return r.Error(absl::StrCat("map '", s.name, "': unknown map type ", s.type));
  }
  CUPROBE_ASSIGN_OR_RETURN(s.key_size, r.U32("key size"));
  CUPROBE_ASSIGN_OR_RETURN(s.value_size, r.U32("value size"));
  CUPROBE_ASSIGN_OR_RETURN(s.max_entries, r.U32("max entries"));
  CUPROBE_ASSIGN_OR_RETURN(s.flags, r.U32("flags"));
  CUPROBE_ASSIGN_OR_RETURN(s.map_extra, r.U64("map_extra"));
  CUPROBE_ASSIGN_OR_RETURN(s.key_type, ReadType(r));
  CUPROBE_ASSIGN_OR_RETURN(s.value_type, ReadType(r));
  CUPROBE_ASSIGN_OR_RETURN(std::string init, r.Str("initial value"));
  s.initial_value.assign(init.begin(), init.end());
  if (!s.initial_value.empty() && s.initial_value.size() != s.value_size) {
    return r.Error(absl::StrCat("map '", s.name, "': initial value of ", s.initial_value.size(),
                                " bytes for a value of ", s.value_size));
  }
  if (s.max_entries == 0) return r.Error(absl::StrCat("map '", s.name, "': max_entries 0"));
  if (s.type != CUPROBE_MAP_RINGBUF && (s.value_size == 0 || s.key_size == 0)) {
    return r.Error(absl::StrCat("map '", s.name, "': zero key or value size"));
  }
  return s;
}

// A SUMM chunk: the summary code of a program read before it, and its map
// references, each an ld_imm64 of the code naming an announced map.
absl::Status ReadSummary(Reader& r, BundleInProgress& in) {
  CUPROBE_ASSIGN_OR_RETURN(uint32_t index, r.U32("program index"));
  std::vector<ProbeProgram>& programs = in.bundle.programs;
  if (index >= programs.size()) {
    return r.Error(absl::StrCat("summary code for program ", index, " of ", programs.size(),
                                " read so far"));
  }
  ProbeProgram& p = programs[index];
  if (!p.summary_code.empty()) return r.Error("second summary of one program");
  CUPROBE_ASSIGN_OR_RETURN(std::string code, r.Str("summary code"));
  if (code.empty() || code.size() % 8 != 0 || code.size() / 8 > kMaxSummaryInsns) {
    return r.Error(absl::StrCat("summary code of ", code.size(),
                                " bytes is not a whole number of instructions"));
  }
  CUPROBE_ASSIGN_OR_RETURN(uint32_t refs, r.Count("map reference count", 8));
  for (uint32_t k = 0; k < refs; ++k) {
    CUPROBE_ASSIGN_OR_RETURN(uint32_t insn, r.U32("reference instruction"));
    CUPROBE_ASSIGN_OR_RETURN(uint32_t map, r.U32("reference map"));
    // An ld_imm64 (opcode 0x18) with room for its second half.
    if (uint64_t{insn} + 1 >= code.size() / 8 ||
        static_cast<uint8_t>(code[size_t{insn} * 8]) != 0x18) {
      return r.Error(absl::StrCat("map reference at instruction ", insn,
                                  " is not an ld_imm64 of the code"));
    }
    if (map >= in.want_maps) {
      return r.Error(absl::StrCat("map reference to map ", map, " of ", in.want_maps));
    }
    p.summary_maps.emplace_back(insn, map);
  }
  p.summary_code.assign(code.begin(), code.end());
  return absl::OkStatus();
}

// HELP and PRTF: a count, then the strings.
absl::Status ReadStrings(Reader& r, std::vector<std::string>& list) {
  CUPROBE_ASSIGN_OR_RETURN(uint32_t n, r.Count("count", 4));
  for (uint32_t i = 0; i < n; ++i) {
    CUPROBE_ASSIGN_OR_RETURN(std::string s, r.Str("entry"));
    list.push_back(std::move(s));
  }
  return absl::OkStatus();
}

// Reads the payload of one chunk, which must hold nothing more. Chunks of
// unknown tags are skipped: an optional chunk of a newer writer.
absl::Status ReadChunk(uint32_t tag, Reader& r, BundleInProgress& in) {
  ProbeBundle& b = in.bundle;
  switch (tag) {
    case kTagMeta:
      CUPROBE_RETURN_IF_ERROR(ReadMeta(r, in));
      break;
    case kTagProg: {
      CUPROBE_ASSIGN_OR_RETURN(ProbeProgram p, ReadProgram(r));
      b.programs.push_back(std::move(p));
      break;
    }
    case kTagMap: {
      CUPROBE_ASSIGN_OR_RETURN(MapSpec s, ReadMap(r));
      b.maps.push_back(std::move(s));
      break;
    }
    case kTagSummary:
      CUPROBE_RETURN_IF_ERROR(ReadSummary(r, in));
      break;
    case kTagPtx: {
      if (in.have_ptx) return r.Error("second PTX chunk");
      in.have_ptx = true;
      CUPROBE_ASSIGN_OR_RETURN(b.ptx, r.Str("PTX"));
      break;
    }
    case kTagHelpers:
      CUPROBE_RETURN_IF_ERROR(ReadStrings(r, b.helpers));
      break;
    case kTagPrintk:
      CUPROBE_RETURN_IF_ERROR(ReadStrings(r, b.printk_formats));
      break;
    case kTagOneliner: {
      CUPROBE_ASSIGN_OR_RETURN(b.oneliner, r.Str("one-liner"));
      break;
    }
    default:
      return absl::OkStatus();
  }
  if (!r.AtEnd()) return r.Error("unexpected bytes after the last field");
  return absl::OkStatus();
}

// Splits `body` into chunks (each bounds-checked against it) and reads
// them in order.
absl::Status ReadChunks(absl::Span<const uint8_t> body, BundleInProgress& in) {
  uint64_t pos = 0;
  while (pos < body.size()) {
    const uint64_t at = kHeaderSize + pos;
    if (body.size() - pos < 16) {
      return absl::InvalidArgumentError(absl::StrCat("bundle: chunk at offset ", at, ": truncated"));
    }
    uint32_t tag;
    uint64_t size;
    std::memcpy(&tag, body.data() + pos, 4);
    std::memcpy(&size, body.data() + pos + 8, 8);
    if (size > body.size() - pos - 16) {
      return absl::InvalidArgumentError(absl::StrCat("bundle: chunk '", TagName(tag),
                                                     "' at offset ", at, ": size ", size,
                                                     " runs past the end"));
    }
    Reader r(body.subspan(pos + 16, size), at + 16, absl::StrCat("chunk '", TagName(tag), "'"));
    pos += 16 + ((size + 7) & ~uint64_t{7});
    if (pos > body.size()) pos = body.size();
    CUPROBE_RETURN_IF_ERROR(ReadChunk(tag, r, in));
  }
  return absl::OkStatus();
}

// What holds for the bundle as a whole: META and PTX present, the announced
// counts met, every program's function in the PTX.
absl::Status CheckComplete(const BundleInProgress& in) {
  const ProbeBundle& b = in.bundle;
  if (!in.have_meta) return absl::InvalidArgumentError("bundle: no META chunk");
  if (!in.have_ptx) return absl::InvalidArgumentError("bundle: no PTX chunk");
  if (b.programs.size() != in.want_programs || b.maps.size() != in.want_maps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bundle: META announces ", in.want_programs, " programs and ", in.want_maps,
        " maps, found ", b.programs.size(), " and ", b.maps.size()));
  }
  for (const ProbeProgram& p : b.programs) {
    if (b.ptx.find(p.ptx_function) == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bundle: program '", p.name,
                                                     "': function ", p.ptx_function,
                                                     " is not in the PTX"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ProbeBundle> ReadBundle(absl::Span<const uint8_t> bytes) {
  CUPROBE_ASSIGN_OR_RETURN(const absl::Span<const uint8_t> body, CheckHeader(bytes));
  BundleInProgress in;
  // CheckHeader accepted only these versions.
  in.bundle.format_version = kBundleFormatVersion;
  in.bundle.abi_version = CUPROBE_ABI_VERSION;
  CUPROBE_RETURN_IF_ERROR(ReadChunks(body, in));
  CUPROBE_RETURN_IF_ERROR(CheckComplete(in));
  return std::move(in.bundle);
}

}  // namespace cuprobe
