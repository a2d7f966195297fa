// File: support/kept_forever.h
//
// Objects the tool leaks on purpose: the hook's long-lived state (CUPTI may
// call back after teardown) and maps a kernel may still write. Under
// LeakSanitizer they, and what they reach, are not reported.
//
//   static Tracer* tracer = KeptForever(new Tracer(...));
#ifndef CUPROBE_SUPPORT_KEPT_FOREVER_H_
#define CUPROBE_SUPPORT_KEPT_FOREVER_H_

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace cuprobe {

template <typename T>
T* KeptForever(T* object) {
#if defined(__SANITIZE_ADDRESS__)
  __lsan_ignore_object(object);
#endif
  return object;
}

}  // namespace cuprobe

#endif  // CUPROBE_SUPPORT_KEPT_FOREVER_H_
