// File: ptx_rewriter/byte_view.h
//
// Bounds-checked little-endian loads and overflow-safe range arithmetic for
// the image readers (fatbin.cc, elf.cc, image.cc). Every reader first proves a
// range with FitsIn() and turns a failure into a message that names the
// offset; the loads below re-check anyway and yield 0 outside the buffer, so
// a mistake in a reader is a wrong value, never an over-read.
//
//   if (!FitsIn(bytes.size(), off, 16)) return TruncatedError(...);
//   uint32_t magic = LoadLe32(bytes, off);
//
// Internal to ptx_rewriter; not part of the public image API.
#ifndef CUPROBE_PTX_REWRITER_BYTE_VIEW_H_
#define CUPROBE_PTX_REWRITER_BYTE_VIEW_H_

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_format.h"
#include "absl/types/span.h"

namespace cuprobe::image_internal {

using Bytes = absl::Span<const uint8_t>;

// True when [off, off + len) lies inside a buffer of `size` bytes. Never
// overflows: it compares against what remains instead of adding.
[[nodiscard]] constexpr bool FitsIn(uint64_t size, uint64_t off, uint64_t len) {
  return off <= size && len <= size - off;
}

// a + b, or false when the sum does not fit in 64 bits.
[[nodiscard]] inline bool AddOk(uint64_t a, uint64_t b, uint64_t* sum) {
  return !__builtin_add_overflow(a, b, sum);
}

// a * b, or false when the product does not fit in 64 bits.
[[nodiscard]] inline bool MulOk(uint64_t a, uint64_t b, uint64_t* product) {
  return !__builtin_mul_overflow(a, b, product);
}

template <typename T>
[[nodiscard]] inline T LoadLe(Bytes bytes, uint64_t off) {
  if (!FitsIn(bytes.size(), off, sizeof(T))) {
    assert(false && "image reader loaded outside a range it had not checked");
    return 0;
  }
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    value |= static_cast<T>(static_cast<T>(bytes[off + i]) << (8 * i));
  }
  return value;
}

[[nodiscard]] inline uint8_t Load8(Bytes b, uint64_t off) { return LoadLe<uint8_t>(b, off); }
[[nodiscard]] inline uint16_t LoadLe16(Bytes b, uint64_t off) { return LoadLe<uint16_t>(b, off); }
[[nodiscard]] inline uint32_t LoadLe32(Bytes b, uint64_t off) { return LoadLe<uint32_t>(b, off); }
[[nodiscard]] inline uint64_t LoadLe64(Bytes b, uint64_t off) { return LoadLe<uint64_t>(b, off); }

// "0x1f" (the form every offset and size takes in the readers' messages).
[[nodiscard]] inline std::string Hex(uint64_t value) { return absl::StrFormat("0x%x", value); }

// Up to `max_bytes` bytes at the start of `bytes` as "7f 45 4c 46".
[[nodiscard]] inline std::string HexPrefix(Bytes bytes, size_t max_bytes = 8) {
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < max_bytes; ++i) {
    if (i != 0) out += ' ';
    absl::StrAppendFormat(&out, "%02x", bytes[i]);
  }
  return out;
}

[[nodiscard]] inline std::string_view AsText(Bytes bytes) {
  return std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

}  // namespace cuprobe::image_internal

#endif  // CUPROBE_PTX_REWRITER_BYTE_VIEW_H_
