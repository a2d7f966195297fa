# The maps of probes: layout, ring consumer, the segment's maps region,
# snapshots, the host runtime (MapSet) and the reader API. Included by
# maps/CMakeLists.txt.
#
# map_core has no Boost and no driver: the hook, the CLI and the tests share it.
cuprobe_cc_library(
  NAME map_core
  SRCS map_ring.cc maps_region.cc map_snapshot.cc
  HDRS map_ring.h maps_region.h map_snapshot.h
  DEPS cuprobe::probe cuprobe::map_algorithms cuprobe::support absl::status absl::statusor absl::span
       absl::strings absl::str_format absl::function_ref absl::time
)

# The hook's runtime: maps in device memory behind the DeviceMemory seam.
cuprobe_cc_library(
  NAME map_set
  SRCS map_set.cc map_set_site_counters.cc map_set_mirror.cc device_memory.cc
  HDRS map_set.h device_memory.h
  DEPS cuprobe::map_core cuprobe::probe cuprobe::support absl::status absl::statusor
       absl::str_format
)

# Readers in other processes: the host API over a session, and bpftrace-style
# printing (the `cuprobe maps` command).
cuprobe_cc_library(
  NAME map_reader
  SRCS map_reader.cc map_print.cc
  HDRS map_reader.h map_print.h
  DEPS cuprobe::map_core cuprobe::segment cuprobe::probe cuprobe::support absl::status absl::statusor absl::strings
       absl::str_format absl::time
)

# DeviceMemory over the CUDA driver's table, which the seam hands in
# (nothing here loads or links libcuda).
cuprobe_cc_library(
  NAME cuda_device_memory
  SRCS cuda_device_memory.cc
  HDRS cuda_device_memory.h
  DEPS cuprobe::map_set cuprobe::support
)

# For the GPU tests and benchmarks of the maps: driver context, nvJitLink
# linking with the helper library, timed launches.
cuprobe_cc_library(
  NAME maps_gpu_harness
  SRCS testing/gpu_harness.cc
  HDRS testing/gpu_harness.h
  DEPS cuprobe::cuda_device_memory cuprobe::helpers_ptx cuprobe::support CUDA::nvJitLink
)
