// File: ptx_rewriter/compile_cache.cc
#include "ptx_rewriter/compile_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ptx_rewriter/content_hash.h"
#include "support/log.h"

namespace cuprobe {
namespace {

// Entry layout: magic line, key line, u64 size, u64 checksum lo, u64 hi, value.
constexpr char kMagic[] = "cuprobe-cache 1\n";
constexpr size_t kMagicSize = sizeof(kMagic) - 1;

bool ValidKey(std::string_view key) {
  if (key.size() < 8 || key.size() > 128) return false;
  for (char c : key) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// mkdir -p with mode 0700 for what it creates.
bool MakeDirs(const std::string& path, std::string* error) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      *error = absl::StrCat("cannot create ", partial, ": ", std::strerror(errno));
      return false;
    }
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = absl::StrCat(path, " is not a directory");
    return false;
  }
  return true;
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

CompileCache::CompileCache(std::string dir)
    : dir_(std::move(dir)), state_(std::make_shared<State>()) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

std::string CompileCache::PathFor(std::string_view key) const {
  return absl::StrCat(dir_, "/", key.substr(0, 2), "/", key, ".cubin-cache");
}

void CompileCache::Disable(std::string_view why) const {
  state_->disabled.store(true);
  if (!state_->warned.exchange(true)) {
    CUPROBE_LOG(kWarning, "compile cache %s disabled for this process: %s", dir_, why);
  }
}

bool CompileCache::Trusted() const {
  if (state_->trusted.load()) return true;
  struct stat st {};
  std::string why;
  if (lstat(dir_.c_str(), &st) != 0) {
    if (errno == ENOENT) return true;  // Store makes it, 0700
    why = std::strerror(errno);
  } else if (!S_ISDIR(st.st_mode)) {
    why = S_ISLNK(st.st_mode) ? "it is a symbolic link" : "it is not a directory";
  } else if (st.st_uid != geteuid()) {
    why = absl::StrCat("it belongs to uid ", st.st_uid, ", not to this user (uid ", geteuid(), ")");
  } else if ((st.st_mode & 022) != 0) {
    why = absl::StrFormat("other users can write it (mode %o)", st.st_mode & 07777);
  }
  if (!why.empty()) {
    Disable(absl::StrCat(why, "; a cache others can write could hand this program its code"));
    return false;
  }
  state_->trusted.store(true);
  return true;
}

std::optional<std::string> CompileCache::Lookup(std::string_view key) const {
  if (!enabled() || !ValidKey(key) || !Trusted()) return std::nullopt;
  const std::string path = PathFor(key);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::string data;
  if (fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size < (int64_t{1} << 34)) {
    data.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < data.size()) {
      const ssize_t r = read(fd, data.data() + got, data.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    data.resize(got);
  }
  close(fd);
  // Validate: magic, key, size, checksum.
  const size_t header = kMagicSize + key.size() + 1 + 24;
  auto corrupt = [&] {
    unlink(path.c_str());  // a later Store rewrites it
    return std::nullopt;
  };
  if (data.size() < header || data.compare(0, kMagicSize, kMagic) != 0 ||
      data.compare(kMagicSize, key.size(), key) != 0 || data[kMagicSize + key.size()] != '\n') {
    return corrupt();
  }
  uint64_t size = 0;
  Hash128 sum;
  std::memcpy(&size, data.data() + header - 24, 8);
  std::memcpy(&sum.lo, data.data() + header - 16, 8);
  std::memcpy(&sum.hi, data.data() + header - 8, 8);
  if (size != data.size() - header) return corrupt();
  if (!(HashBytes(std::string_view(data).substr(header)) == sum)) return corrupt();
  data.erase(0, header);
  return data;
}

bool CompileCache::Store(std::string_view key, std::string_view value) const {
  if (!enabled() || !ValidKey(key) || !Trusted()) return false;
  const std::string path = PathFor(key);
  const std::string subdir = path.substr(0, path.rfind('/'));
  std::string error;
  if (!MakeDirs(subdir, &error)) {
    Disable(error);
    return false;
  }
  std::string tmp = absl::StrCat(subdir, "/.tmp-", key, "-XXXXXX");
  const int fd = mkstemp(tmp.data());  // mode 0600
  if (fd < 0) {
    Disable(absl::StrCat("cannot create a file in ", subdir, ": ", std::strerror(errno)));
    return false;
  }
  std::string header = absl::StrCat(kMagic, key, "\n");
  const uint64_t size = value.size();
  const Hash128 sum = HashBytes(value);
  header.append(reinterpret_cast<const char*>(&size), 8);
  header.append(reinterpret_cast<const char*>(&sum.lo), 8);
  header.append(reinterpret_cast<const char*>(&sum.hi), 8);
  const bool written = WriteAll(fd, header.data(), header.size()) &&
                       WriteAll(fd, value.data(), value.size());
  const int saved = errno;
  const bool closed = close(fd) == 0;
  if (!written || !closed) {
    unlink(tmp.c_str());
    Disable(absl::StrCat("cannot write ", tmp, ": ", std::strerror(written ? errno : saved)));
    return false;
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    unlink(tmp.c_str());
    Disable(absl::StrCat("cannot rename into ", path, ": ", std::strerror(e)));
    return false;
  }
  return true;
}

}  // namespace cuprobe
