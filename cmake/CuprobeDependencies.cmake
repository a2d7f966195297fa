# Finds every dependency at configure time. A missing one stops configuration
# with the Debian package that provides it; scripts/install-deps.sh installs all.
include_guard(GLOBAL)

function(cuprobe_require found what package)
  if(NOT ${found})
    message(FATAL_ERROR
        "cuprobe: ${what} not found. Install the Debian package '${package}' "
        "(or run scripts/install-deps.sh, which installs every dependency).")
  endif()
endfunction()

# --- CUDA Toolkit 13: CUPTI, the driver API headers/stub, nvJitLink, nvcc, ptxas.
if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(CUDAToolkit 13)
cuprobe_require(CUDAToolkit_FOUND "CUDA Toolkit 13 (nvcc, CUPTI, nvJitLink)"
                "the NVIDIA CUDA 13 toolkit in /usr/local/cuda")
# CMake < 3.26 has no CUDA::nvJitLink target.
if(NOT TARGET CUDA::nvJitLink)
  find_library(CUPROBE_NVJITLINK_LIB nvJitLink HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(CUPROBE_NVJITLINK_LIB)
    add_library(CUDA::nvJitLink SHARED IMPORTED)
    set_target_properties(CUDA::nvJitLink PROPERTIES
        IMPORTED_LOCATION ${CUPROBE_NVJITLINK_LIB}
        INTERFACE_INCLUDE_DIRECTORIES ${CUDAToolkit_INCLUDE_DIRS})
  endif()
endif()
foreach(t CUDA::cupti CUDA::cuda_driver CUDA::nvJitLink)
  if(NOT TARGET ${t})
    message(FATAL_ERROR "cuprobe: the CUDA Toolkit at ${CUDAToolkit_LIBRARY_DIR} lacks ${t}")
  endif()
endforeach()
find_program(CUPROBE_PTXAS ptxas HINTS ${CUDAToolkit_BIN_DIR} REQUIRED)
find_program(CUPROBE_NVCC nvcc HINTS ${CUDAToolkit_BIN_DIR} REQUIRED)
get_target_property(_cupti_lib CUDA::cupti IMPORTED_LOCATION)
get_filename_component(CUPROBE_CUPTI_LIBDIR "${_cupti_lib}" DIRECTORY)

# --- LLVM 19 with the NVPTX and BPF targets (the probe compiler), and clang-19.
# (LLVM's version file accepts exact major.minor only, so check the major here.)
find_package(LLVM CONFIG QUIET NO_DEFAULT_PATH
             PATHS /usr/lib/llvm-19/lib/cmake/llvm /usr/lib/llvm-19/cmake)
if(LLVM_FOUND AND NOT LLVM_VERSION_MAJOR EQUAL 19)
  set(LLVM_FOUND FALSE)
endif()
cuprobe_require(LLVM_FOUND "LLVM 19" "llvm-19-dev")
foreach(target NVPTX BPF)
  if(NOT target IN_LIST LLVM_TARGETS_TO_BUILD)
    message(FATAL_ERROR "cuprobe: LLVM ${LLVM_PACKAGE_VERSION} at ${LLVM_DIR} was built "
                        "without the ${target} target; install Debian's llvm-19-dev")
  endif()
endforeach()
find_program(CUPROBE_CLANG NAMES clang-19 HINTS /usr/lib/llvm-19/bin)
cuprobe_require(CUPROBE_CLANG "clang-19 (compiles eBPF probes)" "clang-19")

# --- Boost.Interprocess (header-only).
find_package(Boost 1.74 QUIET)
cuprobe_require(Boost_FOUND "Boost headers (Interprocess)" "libboost-dev")
if(NOT EXISTS "${Boost_INCLUDE_DIRS}/boost/interprocess/shared_memory_object.hpp")
  message(FATAL_ERROR "cuprobe: Boost at ${Boost_INCLUDE_DIRS} has no Interprocess headers; "
                      "install Debian's libboost-dev")
endif()

# --- zstd and lz4 (compressed fatbin entries).
find_path(CUPROBE_ZSTD_INCLUDE zstd.h)
find_library(CUPROBE_ZSTD_LIB NAMES libzstd.a zstd)
cuprobe_require(CUPROBE_ZSTD_LIB "zstd" "libzstd-dev")
find_path(CUPROBE_LZ4_INCLUDE lz4.h)
find_library(CUPROBE_LZ4_LIB NAMES liblz4.a lz4)
cuprobe_require(CUPROBE_LZ4_LIB "lz4" "liblz4-dev")
add_library(cuprobe_ext_zstd INTERFACE)
target_include_directories(cuprobe_ext_zstd SYSTEM INTERFACE ${CUPROBE_ZSTD_INCLUDE})
target_link_libraries(cuprobe_ext_zstd INTERFACE ${CUPROBE_ZSTD_LIB})
add_library(cuprobe_ext_lz4 INTERFACE)
target_include_directories(cuprobe_ext_lz4 SYSTEM INTERFACE ${CUPROBE_LZ4_INCLUDE})
target_link_libraries(cuprobe_ext_lz4 INTERFACE ${CUPROBE_LZ4_LIB})

# --- abseil, static and position-independent.
# Debian's libabsl-dev archives are built without -fPIC (local-exec TLS in
# cordz), so they cannot be linked into libcuprobe_hook.so. We build the same
# release from Debian's source package instead; install-deps.sh fetches it
# with `apt-get source abseil` into .deps/.
set(CUPROBE_ABSL_SOURCE_DIR "${PROJECT_SOURCE_DIR}/.deps/abseil-cpp" CACHE PATH
    "abseil source tree (Debian source package 'abseil')")
if(NOT EXISTS "${CUPROBE_ABSL_SOURCE_DIR}/CMakeLists.txt")
  message(FATAL_ERROR
      "cuprobe: abseil sources not found at ${CUPROBE_ABSL_SOURCE_DIR}. Run "
      "scripts/install-deps.sh: it fetches Debian's source package 'abseil' "
      "(the release behind libabsl-dev) with apt-get source.")
endif()
set(ABSL_PROPAGATE_CXX_STD ON)
set(ABSL_ENABLE_INSTALL OFF)
set(BUILD_TESTING_SAVED ${BUILD_TESTING})
set(BUILD_TESTING OFF)
set(CMAKE_CXX_VISIBILITY_PRESET_SAVED ${CMAKE_CXX_VISIBILITY_PRESET})
add_subdirectory(${CUPROBE_ABSL_SOURCE_DIR} ${PROJECT_BINARY_DIR}/_deps/abseil EXCLUDE_FROM_ALL SYSTEM)
set(BUILD_TESTING ${BUILD_TESTING_SAVED})

# --- GoogleTest/GoogleMock and Google Benchmark.
if(CUPROBE_BUILD_TESTS)
  find_package(GTest QUIET)
  cuprobe_require(GTest_FOUND "GoogleTest/GoogleMock" "libgtest-dev libgmock-dev")
endif()
find_package(benchmark QUIET)
cuprobe_require(benchmark_FOUND "Google Benchmark" "libbenchmark-dev")

# --- Threads, dl.
find_package(Threads REQUIRED)
