# The maps of probes: layout, ring consumer, the segment's maps region,
# snapshots, the host runtime (MapSet) and the reader API. Included by
# maps/CMakeLists.txt.
#
# map_core has no Boost and no driver: the hook, the CLI and the tests share it.
cuprobe_cc_library(
  NAME map_core
  SRCS map_layout.cc map_ring.cc
  HDRS map_layout.h map_ring.h
  DEPS cuprobe::map_algorithms absl::status absl::statusor absl::span absl::strings
       absl::str_format absl::function_ref
)
