// File: ptx_rewriter/fatbin.cc
#include "ptx_rewriter/fatbin.h"

#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ptx_rewriter/byte_view.h"
#include "ptx_rewriter/elf.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

using image_internal::AddOk;
using image_internal::Bytes;
using image_internal::FitsIn;
using image_internal::Hex;
using image_internal::LoadLe16;
using image_internal::LoadLe32;
using image_internal::LoadLe64;

// Where an error happened: "fatbin at offset 0x0: entry 1 at offset 0x21d0: ".
std::string EntryWhere(uint64_t container_offset, size_t index, uint64_t entry_offset) {
  return absl::StrCat("fatbin at offset ", Hex(container_offset), ": entry ", index,
                      " at offset ", Hex(entry_offset), ": ");
}

std::string EntryWhere(const ImageEntry& e) {
  if (e.container_index < 0) {
    return absl::StrCat(EntryKindName(e.kind), " image: ");
  }
  return absl::StrCat("entry ", e.index_in_container, " of container ", e.container_index,
                      " at offset ", Hex(e.offset), ": ");
}

// A string stored inside an entry header: [offset, offset + size) must lie in
// the header. Trailing NULs (the padding fatbinary adds) are dropped.
absl::StatusOr<std::string> HeaderString(Bytes header, uint64_t offset, uint64_t size,
                                         std::string_view what, const std::string& where) {
  if (offset < kFatbinEntryHeaderSize || !FitsIn(header.size(), offset, size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, what, " claims ", Hex(size), " bytes at +", Hex(offset),
        ", outside the header's extension (+0x40..+", Hex(header.size()), ")"));
  }
  std::string text(reinterpret_cast<const char*>(header.data() + offset), size);
  while (!text.empty() && text.back() == '\0') text.pop_back();
  return text;
}

// ParseEntry's steps.

// Where an entry header keeps its strings: offsets into the header.
struct HeaderStringRefs {
  uint32_t options_descriptor = 0;  // of (u32 offset, u32 size) of the options, or 0
  uint32_t name_offset = 0;
  uint32_t name_size = 0;
};

// Loads the fixed fields of the entry header at `pos` of `b` into `e`.
HeaderStringRefs LoadEntryHeader(Bytes b, uint64_t pos, ImageEntry* e) {
  HeaderStringRefs refs;
  e->kind = static_cast<EntryKind>(LoadLe16(b, pos));
  e->entry_format = LoadLe16(b, pos + 2);
  e->header_size = LoadLe32(b, pos + 4);
  e->payload_size = LoadLe64(b, pos + 8);
  e->compressed_size = LoadLe32(b, pos + 0x10);
  refs.options_descriptor = LoadLe32(b, pos + 0x14);
  e->version_minor = LoadLe16(b, pos + 0x18);
  e->version_major = LoadLe16(b, pos + 0x1a);
  e->sm_arch = LoadLe32(b, pos + 0x1c);
  refs.name_offset = LoadLe32(b, pos + 0x20);
  refs.name_size = LoadLe32(b, pos + 0x24);
  e->flags = LoadLe64(b, pos + 0x28);
  e->decompressed_size = LoadLe64(b, pos + 0x38);
  return refs;
}

// The header and the payload it claims must fit the `remaining` bytes of
// the container.
absl::Status CheckEntrySizes(const ImageEntry& e, uint64_t remaining, const std::string& where) {
  if (e.header_size < kFatbinEntryHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat(where, "header size ", Hex(e.header_size),
                                                   " is smaller than the minimum of ",
                                                   Hex(kFatbinEntryHeaderSize)));
  }
  if (e.header_size > remaining) {
    return absl::InvalidArgumentError(absl::StrCat(where, "header claims a header size of ",
                                                   Hex(e.header_size), " bytes but only ",
                                                   Hex(remaining), " remain in the container"));
  }
  const uint64_t after_header = remaining - e.header_size;
  if (e.payload_size > after_header) {
    return absl::InvalidArgumentError(absl::StrCat(where, "header claims a payload of ",
                                                   Hex(e.payload_size), " bytes but only ",
                                                   Hex(after_header),
                                                   " remain in the container"));
  }
  return absl::OkStatus();
}

// The object name and the ptxas options, from the header's extension.
absl::Status ReadEntryStrings(Bytes header, const HeaderStringRefs& refs,
                              const std::string& where, ImageEntry* e) {
  if (refs.name_size != 0) {
    CUPROBE_ASSIGN_OR_RETURN(e->object_name, HeaderString(header, refs.name_offset,
                                                          refs.name_size, "object name", where));
  }
  if (refs.options_descriptor == 0) return absl::OkStatus();
  if (refs.options_descriptor < kFatbinEntryHeaderSize ||
      !FitsIn(header.size(), refs.options_descriptor, 8)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "options descriptor at +", Hex(refs.options_descriptor),
        " lies outside the header's extension (+0x40..+", Hex(header.size()), ")"));
  }
  const uint32_t options_offset = LoadLe32(header, refs.options_descriptor);
  const uint32_t options_size = LoadLe32(header, refs.options_descriptor + 4);
  if (options_size != 0) {
    CUPROBE_ASSIGN_OR_RETURN(
        e->options, HeaderString(header, options_offset, options_size, "options", where));
  }
  return absl::OkStatus();
}

// The compression the flags name (at most one), and the stored bytes of
// `payload`: all of it, or the compressed size's first bytes.
absl::Status ReadCompression(Bytes payload, const std::string& where, ImageEntry* e) {
  const bool zstd = (e->flags & kEntryFlagZstd) != 0;
  const bool lz4 = (e->flags & kEntryFlagLz4) != 0;
  const bool legacy = (e->flags & kEntryFlagCompressedLegacy) != 0;
  if (int(zstd) + int(lz4) + int(legacy) > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "flags ", Hex(e->flags), " name more than one compression scheme"));
  }
  e->compression = zstd ? Compression::kZstd
                   : lz4 ? Compression::kLz4
                   : legacy ? Compression::kLegacy
                            : Compression::kNone;
  if (e->compression == Compression::kNone || e->compression == Compression::kLegacy) {
    e->stored = payload;
    return absl::OkStatus();
  }
  if (e->compressed_size == 0 || e->compressed_size > e->payload_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, CompressionName(e->compression), " entry claims a compressed size of ",
        Hex(e->compressed_size), " bytes in a payload of ", Hex(e->payload_size)));
  }
  if (e->decompressed_size == 0 || e->decompressed_size > kMaxDecompressedBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, CompressionName(e->compression), " entry claims a decompressed size of ",
        Hex(e->decompressed_size), " bytes (allowed: 1..", Hex(kMaxDecompressedBytes), ")"));
  }
  e->stored = payload.first(e->compressed_size);
  return absl::OkStatus();
}

absl::Status ParseEntry(Bytes container, uint64_t container_offset, uint64_t pos,
                        uint64_t end, size_t index, ImageEntry* e, uint64_t* next) {
  const uint64_t entry_offset = container_offset + pos;
  const std::string where = EntryWhere(container_offset, index, entry_offset);
  const uint64_t remaining = end - pos;
  if (remaining < kFatbinEntryHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "truncated entry header: ", Hex(kFatbinEntryHeaderSize),
        " bytes needed but only ", Hex(remaining), " remain in the container"));
  }
  const Bytes b = container;
  const HeaderStringRefs refs = LoadEntryHeader(b, pos, e);
  e->offset = entry_offset;
  e->index_in_container = static_cast<int>(index);
  CUPROBE_RETURN_IF_ERROR(CheckEntrySizes(*e, remaining, where));
  CUPROBE_RETURN_IF_ERROR(ReadEntryStrings(b.subspan(pos, e->header_size), refs, where, e));
  CUPROBE_RETURN_IF_ERROR(
      ReadCompression(b.subspan(pos + e->header_size, e->payload_size), where, e));
  *next = pos + e->header_size + e->payload_size;  // <= end: checked above
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> DecompressZstd(const ImageEntry& e) {
  const std::string where = EntryWhere(e);
  const uint64_t declared = e.decompressed_size;
  const unsigned long long frame_size = ZSTD_getFrameContentSize(e.stored.data(), e.stored.size());
  if (frame_size == ZSTD_CONTENTSIZE_ERROR) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "payload is not a zstd frame (flags ", Hex(e.flags), ")"));
  }
  if (frame_size != ZSTD_CONTENTSIZE_UNKNOWN && frame_size != declared) {
    // nvcc writes one frame with its content size; a mismatch is a lie in one
    // of the two headers. (A multi-frame stream is caught below.)
    const size_t first_frame = ZSTD_findFrameCompressedSize(e.stored.data(), e.stored.size());
    if (ZSTD_isError(first_frame) || first_frame == e.stored.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "header claims a decompressed size of ", Hex(declared),
          " bytes but the zstd frame holds ", Hex(frame_size)));
    }
  }

  std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> dctx(ZSTD_createDCtx(), &ZSTD_freeDCtx);
  if (dctx == nullptr) return absl::ResourceExhaustedError("ZSTD_createDCtx failed");
  // Grow the output as data arrives instead of trusting the header with one
  // allocation; one byte more than declared detects a stream that is longer.
  const uint64_t limit = declared + 1;
  std::vector<uint8_t> out(std::min<uint64_t>(limit, std::max<uint64_t>(64 * 1024,
                                                                         4 * e.stored.size())));
  ZSTD_inBuffer in{e.stored.data(), e.stored.size(), 0};
  ZSTD_outBuffer ob{out.data(), out.size(), 0};
  size_t last_ret = 1;
  while (true) {
    const size_t in_before = in.pos;
    const size_t out_before = ob.pos;
    last_ret = ZSTD_decompressStream(dctx.get(), &ob, &in);
    if (ZSTD_isError(last_ret)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "zstd stream does not decode after ", Hex(ob.pos), " bytes: ",
          ZSTD_getErrorName(last_ret)));
    }
    if (ob.pos > declared) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "zstd stream decodes to more than the ", Hex(declared),
          " bytes the header claims"));
    }
    if (last_ret == 0 && in.pos == in.size) break;  // every frame complete
    if (ob.pos == ob.size) {
      const uint64_t grown = std::min<uint64_t>(limit, uint64_t{out.size()} * 2);
      out.resize(grown);
      ob.dst = out.data();
      ob.size = out.size();
      continue;
    }
    if (in.pos == in.size || (in.pos == in_before && ob.pos == out_before)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "zstd stream is truncated: ", Hex(e.stored.size()),
          " compressed bytes end inside a frame after ", Hex(ob.pos), " bytes of output"));
    }
  }
  if (ob.pos != declared) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "header claims a decompressed size of ", Hex(declared),
        " bytes but the zstd stream holds ", Hex(ob.pos)));
  }
  out.resize(ob.pos);
  return out;
}

absl::StatusOr<std::vector<uint8_t>> DecompressLz4(const ImageEntry& e) {
  const std::string where = EntryWhere(e);
  const uint64_t declared = e.decompressed_size;
  // A raw LZ4 block expands at most ~255x (one length byte per 255 output
  // bytes); a larger claim is a lie, and must not become an allocation.
  uint64_t max_out = 0;
  if (e.stored.size() > INT_MAX || declared > INT_MAX ||
      !AddOk(uint64_t{e.stored.size()} * 255, 255, &max_out) || declared > max_out) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "header claims a decompressed size of ", Hex(declared), " bytes from ",
        Hex(e.stored.size()), " bytes of LZ4, which no LZ4 block can expand to"));
  }
  std::vector<uint8_t> out(declared);
  const int n = LZ4_decompress_safe(reinterpret_cast<const char*>(e.stored.data()),
                                    reinterpret_cast<char*>(out.data()),
                                    static_cast<int>(e.stored.size()), static_cast<int>(declared));
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "LZ4 block does not decode into the ", Hex(declared),
        " bytes the header claims (malformed or longer stream, LZ4 error ", n, ")"));
  }
  if (static_cast<uint64_t>(n) != declared) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "header claims a decompressed size of ", Hex(declared),
        " bytes but the LZ4 block holds ", Hex(n)));
  }
  return out;
}

}  // namespace

std::string EntryKindName(EntryKind kind) {
  switch (kind) {
    case EntryKind::kPtx: return "PTX";
    case EntryKind::kElf: return "ELF";
  }
  return absl::StrCat("kind ", Hex(static_cast<uint16_t>(kind)));
}

std::string_view CompressionName(Compression compression) {
  switch (compression) {
    case Compression::kNone: return "uncompressed";
    case Compression::kZstd: return "zstd";
    case Compression::kLz4: return "lz4";
    case Compression::kLegacy: return "legacy-compressed";
  }
  return "?";
}

absl::StatusOr<uint64_t> FatbinContainerSize(absl::Span<const uint8_t> header) {
  if (header.size() < kFatbinHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fatbin: truncated container header: ", kFatbinHeaderSize, " bytes needed, ",
        header.size(), " present"));
  }
  const uint32_t magic = LoadLe32(header, 0);
  if (magic != kFatbinMagic) {
    return absl::InvalidArgumentError(absl::StrCat("fatbin: magic is ", Hex(magic),
                                                   ", expected ", Hex(kFatbinMagic)));
  }
  const uint16_t header_size = LoadLe16(header, 6);
  const uint64_t entries_size = LoadLe64(header, 8);
  uint64_t total = 0;
  if (header_size < kFatbinHeaderSize || !AddOk(header_size, entries_size, &total) ||
      total > kMaxImageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fatbin: header claims a header size of ", Hex(header_size), " and ", Hex(entries_size),
        " bytes of entries (limit ", Hex(kMaxImageBytes), ")"));
  }
  return total;
}

absl::Status ParseFatbinChain(absl::Span<const uint8_t> bytes,
                              std::vector<FatbinContainer>* containers,
                              std::vector<ImageEntry>* entries) {
  const Bytes b = bytes;
  uint64_t off = 0;
  bool first = true;
  while (off < b.size()) {
    // Zero padding may separate containers (and end a section).
    if (!first && b[off] == 0) {
      const uint8_t* p = b.data() + off;
      const uint8_t* nonzero =
          std::find_if(p, b.data() + b.size(), [](uint8_t c) { return c != 0; });
      off += nonzero - p;
      if (off == b.size()) break;
    }
    const std::string where = absl::StrCat("fatbin at offset ", Hex(off), ": ");
    const uint64_t remaining = b.size() - off;
    if (remaining < kFatbinHeaderSize) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "truncated container header: ", Hex(kFatbinHeaderSize),
          " bytes needed but only ", Hex(remaining), " remain"));
    }
    const uint32_t magic = LoadLe32(b, off);
    if (magic != kFatbinMagic) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "magic is ", Hex(magic), ", expected ", Hex(kFatbinMagic),
          first ? "" : absl::StrCat(" (after container ", containers->size() - 1, ")")));
    }
    FatbinContainer c;
    c.offset = off;
    c.version = LoadLe16(b, off + 4);
    c.header_size = LoadLe16(b, off + 6);
    const uint64_t entries_size = LoadLe64(b, off + 8);
    if (c.version != 1) {
      return absl::UnimplementedError(
          absl::StrCat(where, "container version ", c.version, " is not supported (only 1)"));
    }
    if (c.header_size < kFatbinHeaderSize || c.header_size > remaining) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "header size ", Hex(c.header_size), " is outside ", Hex(kFatbinHeaderSize),
          "..", Hex(remaining), " (the bytes that remain)"));
    }
    if (entries_size > remaining - c.header_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "header claims ", Hex(entries_size), " bytes of entries but only ",
          Hex(remaining - c.header_size), " remain"));
    }
    c.size = c.header_size + entries_size;
    c.first_entry = entries->size();
    const Bytes container = b.subspan(off, c.size);
    uint64_t pos = c.header_size;
    while (pos < c.size) {
      ImageEntry e;
      e.container_index = static_cast<int>(containers->size());
      uint64_t next = 0;
      CUPROBE_RETURN_IF_ERROR(
          ParseEntry(container, off, pos, c.size, entries->size() - c.first_entry, &e, &next));
      entries->push_back(std::move(e));
      pos = next;
    }
    c.entry_count = entries->size() - c.first_entry;
    containers->push_back(c);
    off += c.size;
    first = false;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> ExtractPayload(const ImageEntry& entry) {
  switch (entry.compression) {
    case Compression::kNone:
      return std::vector<uint8_t>(entry.stored.begin(), entry.stored.end());
    case Compression::kZstd:
      return DecompressZstd(entry);
    case Compression::kLz4:
      return DecompressLz4(entry);
    case Compression::kLegacy:
      break;
  }
  return absl::UnimplementedError(absl::StrCat(
      EntryWhere(entry), "flags ", Hex(entry.flags),
      " name the legacy fatbin compression (0x1000), which is not supported"));
}

absl::StatusOr<std::string> ExtractPtx(const ImageEntry& entry) {
  if (!entry.is_ptx()) {
    return absl::InvalidArgumentError(
        absl::StrCat(EntryWhere(entry), "is ", EntryKindName(entry.kind), ", not PTX"));
  }
  CUPROBE_ASSIGN_OR_RETURN(std::vector<uint8_t> payload, ExtractPayload(entry));
  const auto nul = std::find(payload.begin(), payload.end(), uint8_t{0});
  return std::string(payload.begin(), nul);
}

}  // namespace cuprobe
