// File: ptx_rewriter/content_hash.h
//
// A fast 128-bit content hash for the compile cache's keys (compile_cache.h).
// It is not cryptographic: the cache directory belongs to the user (0700),
// so the threat is an accidental collision (about 2^-64 for 2^32 entries),
// not an adversary. What matters is speed -- a cache hit must cost well under
// 2 ms even for a multi-megabyte module, so the key is computed at several
// GB/s: four independent 64-bit multiply-rotate lanes (the structure of
// xxHash64), folded to 128 bits with a strong final mix.
//
//   CacheKeyBuilder key;
//   key.Add("module", module_ptx);
//   key.Add("sm", absl::StrCat(sm));
//   std::string hex = key.Hex();   // 32 hex digits
#ifndef CUPROBE_PTX_REWRITER_CONTENT_HASH_H_
#define CUPROBE_PTX_REWRITER_CONTENT_HASH_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace cuprobe {

struct Hash128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const Hash128& a, const Hash128& b) { return a.lo == b.lo && a.hi == b.hi; }
};

[[nodiscard]] Hash128 HashBytes(std::string_view data, uint64_t seed = 0);
[[nodiscard]] std::string HashHex(const Hash128& h);

// Hashes a sequence of named inputs unambiguously (each is framed by its
// name and length, so ("ab","c") and ("a","bc") differ).
class CacheKeyBuilder {
 public:
  void Add(std::string_view name, std::string_view data);
  void Add(std::string_view name, uint64_t value);
  [[nodiscard]] Hash128 Digest() const;
  [[nodiscard]] std::string Hex() const { return HashHex(Digest()); }

 private:
  std::string frames_;
};

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_CONTENT_HASH_H_
