// File: ptx_rewriter/compile_cache.h
//
// A content-addressed on-disk cache of compiled cubins. The key is a hash of
// every input of the compile (compile.h builds it: module PTX, bundle, helper
// library, options, cuprobe's rewriter version, nvJitLink's version and
// build); the value is opaque bytes. A hit costs one open + read, well under
// 2 ms for any module.
//
//   CompileCache cache(CurrentRewriterSettings().cache_dir);  // ptx_rewriter/settings.h
//   if (std::optional<std::string> hit = cache.Lookup(key)) return Decode(*hit);
//   ... compile ...
//   cache.Store(key, Encode(result));
//
// Where: $CUPROBE_CACHE_DIR, else $XDG_CACHE_HOME/cuprobe, else
// ~/.cache/cuprobe; CUPROBE_CACHE_DIR=off disables it. Directories are
// created 0700, files 0600. Writers are safe against each other and against
// readers: each writes a temporary file in the target directory and
// rename()s it into place, so a reader sees a whole entry or none. Entries
// carry their key, size and a checksum; a torn or corrupt one is a miss (and
// is removed). The cache never fails its caller: a full disk, a read-only or
// foreign-owned directory turns it off for the rest of the process with one
// warning line.
#ifndef CUPROBE_PTX_REWRITER_COMPILE_CACHE_H_
#define CUPROBE_PTX_REWRITER_COMPILE_CACHE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace cuprobe {

class CompileCache {
 public:
  // A cache in `dir`; an empty dir is a disabled cache.
  explicit CompileCache(std::string dir);
  [[nodiscard]] static CompileCache Disabled() { return CompileCache(""); }

  [[nodiscard]] bool enabled() const { return !dir_.empty() && !state_->disabled.load(); }
  [[nodiscard]] const std::string& dir() const { return dir_; }

  // A directory that exists must be a directory (not a link), owned by the
  // effective user and writable by nobody else; otherwise the cache turns
  // itself off with one message (a cache another user can write could hand
  // the instrumented program code of their choosing).
  //
  // The bytes stored under `key` (hex digits), or nullopt.
  [[nodiscard]] std::optional<std::string> Lookup(std::string_view key) const;
  // Stores `value` under `key`. Returns false (and disables the cache after
  // saying why, once) when the entry could not be written.
  bool Store(std::string_view key, std::string_view value) const;

  // The file an entry lives in (for tests and `cuprobe instrument --stats`).
  [[nodiscard]] std::string PathFor(std::string_view key) const;

 private:
  struct State {
    std::atomic<bool> disabled{false};
    std::atomic<bool> warned{false};
    std::atomic<bool> trusted{false};  // Trusted() found the directory private
  };
  void Disable(std::string_view why) const;
  // Whether the directory, if it exists, is this user's own and private.
  bool Trusted() const;

  std::string dir_;
  std::shared_ptr<State> state_;
};

}  // namespace cuprobe

#endif  // CUPROBE_PTX_REWRITER_COMPILE_CACHE_H_
