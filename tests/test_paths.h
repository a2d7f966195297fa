// File: tests/test_paths.h
//
// Where tests find built artifacts. The build folder may travel to another
// machine (the GPU machine) at another path: CUPROBE_BUILD_DIR overrides the
// path compiled in.
#ifndef CUPROBE_TESTS_TEST_PATHS_H_
#define CUPROBE_TESTS_TEST_PATHS_H_

#include <cstdlib>
#include <string>

namespace cuprobe::testing {

inline std::string BuildDir() {
  const char* env = std::getenv("CUPROBE_BUILD_DIR");
  if (env != nullptr && *env != '\0') return env;
  return CUPROBE_BINARY_DIR;
}

inline std::string SourceDir() {
  const char* env = std::getenv("CUPROBE_SOURCE_DIR");
  if (env != nullptr && *env != '\0') return env;
  return CUPROBE_SOURCE_DIR;
}

inline std::string HookPath() { return BuildDir() + "/lib/libcuprobe_hook.so"; }
inline std::string SamplePath(const std::string& name) { return BuildDir() + "/samples/" + name; }

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_TEST_PATHS_H_
