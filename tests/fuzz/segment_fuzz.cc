// File: tests/fuzz/segment_fuzz.cc
//
// Fuzz target of the session segment as the hook and a reader meet it
// (maps/segment.h): the input becomes the bytes of a POSIX shared-memory
// object, which is opened read-only and writable as the hook would
// (Session::Open validates the header, ring, maps region and bundle), and
// everything that reads bytes another process wrote is run: the hook's
// reason, the attach request, the bundle, the ring drain and the maps
// region's listing. Errors are the expected outcome; any crash, hang or
// out-of-bounds access is a bug.
//
//   (build-fuzz as in maps_region_fuzz.cc)
//   ninja -C build-fuzz segment_fuzz
//   build-fuzz/bin/segment_fuzz -runs=1000000 /tmp/seg tests/corpus/segment
//
// Normal builds link this file with corpus_main.cc (ctest
// segment_fuzz_corpus) and replay tests/corpus/segment.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "maps/segment.h"
#include "probe/bundle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string name = absl::StrCat("cuprobe-fuzz-", ::getpid());
  const std::string path = "/" + name;
  int fd = ::shm_open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0600);
  if (fd < 0) return 0;
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  for (bool writable : {false, true}) {
    absl::StatusOr<cuprobe::Session> s = cuprobe::Session::Open(name, writable);
    if (!s.ok()) continue;
    (void)s->HookReason();
    (void)s->session_state();
    (void)s->ReadAttachRequest();
    absl::Span<const uint8_t> bundle = s->bundle_bytes();
    if (!bundle.empty()) {
      std::vector<uint8_t> copy(bundle.begin(), bundle.end());
      (void)cuprobe::ReadBundle(copy);
    }
    for (size_t i = 0; i < s->maps().size(); ++i) (void)s->maps().map(i);
    if (writable) {
      (void)s->ring().Drain([](uint16_t, absl::Span<const uint8_t> body) {
        volatile uint8_t sink = 0;
        for (uint8_t b : body) sink = sink ^ b;
      });
    }
  }
  ::shm_unlink(path.c_str());
  return 0;
}
