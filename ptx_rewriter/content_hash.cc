// File: ptx_rewriter/content_hash.cc
#include "ptx_rewriter/content_hash.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace cuprobe {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ull;

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (x86-64, AArch64)
}
inline uint64_t Round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = Rotl(acc, 31);
  return acc * kP1;
}
// SplitMix64's finalizer: every input bit reaches every output bit.
inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Hash128 HashBytes(std::string_view data, uint64_t seed) {
  const char* p = data.data();
  const size_t n = data.size();
  const char* const end = p + n;
  uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
  if (n >= 32) {
    const char* const limit = end - 32;
    do {
      v1 = Round(v1, Load64(p));
      v2 = Round(v2, Load64(p + 8));
      v3 = Round(v3, Load64(p + 16));
      v4 = Round(v4, Load64(p + 24));
      p += 32;
    } while (p <= limit);
  }
  uint64_t a = Rotl(v1, 1) + Rotl(v2, 7) + Rotl(v3, 12) + Rotl(v4, 18) + n;
  uint64_t b = (v1 ^ Rotl(v3, 29)) + (v2 ^ Rotl(v4, 41)) + n * kP5 + seed;
  while (p + 8 <= end) {
    const uint64_t k = Load64(p);
    a = Rotl(a ^ Round(0, k), 27) * kP1 + kP4;
    b = (Rotl(b + k * kP3, 33) * kP2) ^ a;
    p += 8;
  }
  while (p < end) {
    const uint64_t k = static_cast<uint8_t>(*p++);
    a = Rotl(a ^ (k * kP5), 11) * kP1;
    b = Rotl(b + k * kP4, 17) * kP3;
  }
  Hash128 h;
  h.lo = Mix(a ^ Rotl(b, 32));
  h.hi = Mix(b + h.lo * kP3);
  return h;
}

std::string HashHex(const Hash128& h) { return absl::StrFormat("%016x%016x", h.hi, h.lo); }

void CacheKeyBuilder::Add(std::string_view name, std::string_view data) {
  const Hash128 h = HashBytes(data);
  const uint64_t size = data.size();
  frames_.append(name);
  frames_.push_back('\0');
  frames_.append(reinterpret_cast<const char*>(&size), 8);
  frames_.append(reinterpret_cast<const char*>(&h.lo), 8);
  frames_.append(reinterpret_cast<const char*>(&h.hi), 8);
}

void CacheKeyBuilder::Add(std::string_view name, uint64_t value) {
  Add(name, std::string_view(reinterpret_cast<const char*>(&value), 8));
}

Hash128 CacheKeyBuilder::Digest() const { return HashBytes(frames_, 0x6375707262ull); }

}  // namespace cuprobe
