# The session segment (maps/segment_layout.h, maps/segment.h) and its record
# ring (maps/record_ring.h). Included by maps/CMakeLists.txt.
#
# record_ring has no Boost: the hook's standalone mode uses a heap ring.
cuprobe_cc_library(
  NAME record_ring
  SRCS record_ring.cc
  HDRS record_ring.h segment_layout.h
  DEPS cuprobe::probe absl::status absl::statusor absl::span absl::function_ref
       absl::str_format
)

# Boost.Interprocess is header-only and stays private: segment.h forward-
# declares the one Boost type it holds.
cuprobe_cc_library(
  NAME segment
  SRCS segment.cc
  HDRS segment.h
  DEPS cuprobe::record_ring cuprobe::map_core cuprobe::probe cuprobe::support absl::status absl::statusor
       absl::strings
       absl::str_format
)
target_include_directories(cuprobe_segment SYSTEM PRIVATE ${Boost_INCLUDE_DIRS})
# (shm_open/shm_unlink are in libc since glibc 2.34: no librt needed.)
