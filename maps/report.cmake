# The trace report: TraceData (records -> tables), nsys-style summaries as
# text/CSV/JSON, and the Chrome/Perfetto timeline. Also linked into
# libcuprobe_hook.so (standalone mode): no exceptions, no iostreams, no static
# state with destructors.
cuprobe_cc_library(
  NAME trace_report
  SRCS trace_data.cc trace_report.cc trace_chrome.cc
  HDRS trace_data.h trace_report.h trace_chrome.h
  DEPS cuprobe::trace_records cuprobe::support
       absl::status absl::strings absl::str_format absl::flat_hash_map absl::span
)
