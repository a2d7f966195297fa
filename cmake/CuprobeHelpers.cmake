# Small helpers that keep every folder's CMakeLists.txt short (after abseil's
# absl_cc_library). A library NAME in folder F becomes target cuprobe_NAME and
# alias cuprobe::NAME; headers are included as "F/file.h" from the source root.
include_guard(GLOBAL)
include(GoogleTest)

set(CUPROBE_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
if(CUPROBE_WERROR)
  list(APPEND CUPROBE_WARNINGS -Werror)
endif()

if(CUPROBE_SANITIZE)
  string(REPLACE ";" "," _cuprobe_san "${CUPROBE_SANITIZE}")
  # Every report is fatal: a test that trips a sanitizer fails.
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${_cuprobe_san}>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${_cuprobe_san})
  # GCC's -Wmaybe-uninitialized has false positives under the sanitizers'
  # instrumentation (e.g. inside libstdc++'s <regex> at -O2); the Release
  # build keeps the warning.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    list(APPEND CUPROBE_WARNINGS -Wno-maybe-uninitialized)
  endif()
endif()

function(_cuprobe_common target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${CUPROBE_WARNINGS}>)
  target_include_directories(${target} PUBLIC
      $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
      $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
      $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>)
endfunction()

# cuprobe_cc_library(NAME n SRCS ... [HDRS ...] [DEPS ...] [PRIVATE_DEPS ...])
function(cuprobe_cc_library)
  cmake_parse_arguments(A "" "NAME" "SRCS;HDRS;DEPS;PRIVATE_DEPS" ${ARGN})
  set(t cuprobe_${A_NAME})
  if(A_SRCS)
    add_library(${t} STATIC ${A_SRCS} ${A_HDRS})
    _cuprobe_common(${t})
    target_link_libraries(${t} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
  else()
    add_library(${t} INTERFACE ${A_HDRS})
    target_include_directories(${t} INTERFACE
        $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
        $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)
    target_link_libraries(${t} INTERFACE ${A_DEPS})
  endif()
  add_library(cuprobe::${A_NAME} ALIAS ${t})
endfunction()

# cuprobe_cc_binary(NAME n SRCS ... [DEPS ...] [OUTPUT_NAME o])
function(cuprobe_cc_binary)
  cmake_parse_arguments(A "" "NAME;OUTPUT_NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  _cuprobe_common(${A_NAME})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  if(A_OUTPUT_NAME)
    set_target_properties(${A_NAME} PROPERTIES OUTPUT_NAME ${A_OUTPUT_NAME})
  endif()
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
endfunction()

# A test's own sources (with the header-only code they include; the code its
# libraries bring keeps the build type's level) compile at
# CUPROBE_TEST_OPTIMIZATION (one flag) in a Release or RelWithDebInfo build:
# on a GoogleTest file, -O1 takes about a third less time than -O3, and
# under the sanitizers -O0 half as long as -O1 (scripts/sanitize.sh uses
# -O0); CI builds every test twice on 2 cores. The test precompiled header
# gets the same level (GCC refuses a header built at another -O that changes
# its predefined macros).
set(CUPROBE_TEST_OPTIMIZATION "-O1" CACHE STRING
    "Optimization of the tests' own sources in a Release or RelWithDebInfo build (empty: the build type's)")
function(_cuprobe_test_optimization t)
  if(CUPROBE_TEST_OPTIMIZATION)
    target_compile_options(${t} PRIVATE
        "$<$<CONFIG:Release,RelWithDebInfo>:${CUPROBE_TEST_OPTIMIZATION}>")
  endif()
endfunction()

# cuprobe_cc_test(NAME n SRCS ... [DEPS ...] [LABELS unit|gpu ...] [TIMEOUT s])
# Each gtest case becomes one ctest test. GTEST_SKIP() shows as "skipped".
function(cuprobe_cc_test)
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT A_LABELS)
    set(A_LABELS unit)
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 120)
  endif()
  set(t ${A_NAME})
  add_executable(${t} ${A_SRCS})
  _cuprobe_common(${t})
  target_link_libraries(${t} PRIVATE ${A_DEPS} GTest::gmock GTest::gtest_main)
  set_target_properties(${t} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  _cuprobe_test_optimization(${t})
  if(TARGET cuprobe_test_pch)
    target_precompile_headers(${t} REUSE_FROM cuprobe_test_pch)
    target_compile_definitions(${t} PRIVATE ${CUPROBE_TEST_PCH_DEFINITIONS})
  endif()
  target_compile_definitions(${t} PRIVATE
      CUPROBE_BINARY_DIR="${PROJECT_BINARY_DIR}"
      CUPROBE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  gtest_discover_tests(${t}
      DISCOVERY_TIMEOUT 60
      PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT}
                 SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()
