// File: report/trace_chrome.h
//
// The timeline of a trace as Chrome trace-event JSON, which opens in Perfetto
// (ui.perfetto.dev) and chrome://tracing:
//
//   TraceData data = ...;                               // report/trace_data.h
//   CUPROBE_RETURN_IF_ERROR(WriteFile("trace.json", FormatChromeTrace(data)));
//
// Layout of the output:
//   {"traceEvents":[
//   {"name":"process_name","ph":"M","pid":4242,"tid":0,"args":{"name":"vec_app"}},
//   ...
//   {"name":"cuLaunchKernel","cat":"cuda_api","ph":"X","ts":0.000,"dur":4.500,"pid":4242,...},
//   {"name":"vec_add(float const*, ...)","cat":"kernel","ph":"X","ts":6.000,...,"pid":1000000000,"tid":7,...},
//   {"name":"launch","cat":"launch","ph":"s","id":1,"ts":0.000,"pid":4242,"tid":4242},
//   {"name":"launch","cat":"launch","ph":"f","bp":"e","id":1,"ts":6.000,"pid":1000000000,"tid":7}
//   ],"displayTimeUnit":"ns","otherData":{...}}
//
// - CPU: one process per app pid (named by its ProcessRecord, else "Process
//   N"), one thread per CPU tid; each launch API call is an "X" slice.
// - GPU: device D is process kChromeGpuPidBase + D named "GPU D" (real pids
//   stay below 2^22, so they never collide). When several processes wrote
//   into the session (their ids differ in IdProcess), each (process, device)
//   is its own group, kChromeGpuPidBase + 0, 1, ... in (pid, device) order,
//   named "GPU D (program, pid P)". Each stream is a thread whose
//   tid is the CUPTI stream id, named "Stream N", sorted by id. Kernels,
//   memcpys and memsets are "X" slices on their stream. Operations that
//   overlap on one stream (graph kernels run concurrently, yet CUPTI reports
//   them on the launch stream) would be dropped or garbled by the viewers:
//   those go to overflow tracks "Stream N (overlap K)", tid N + K *
//   kChromeLaneTidStride, listed right after the stream.
// - Flow arrows (cat "launch", ids 1, 2, ... in correlation order; args show
//   the correlation id's local half, IdLocal) go from each launch slice
//   ("s", at the call's start) to the start of its kernel ("f", bp "e"). When
//   several kernels share one correlation id (a cuGraphLaunch), the arrow goes
//   to the earliest; the others still carry the id in their args.
// - ts/dur are microseconds with three decimals (exact ns, no floating
//   point), measured from the earliest timestamp of any slice.
#ifndef CUPROBE_REPORT_TRACE_CHROME_H_
#define CUPROBE_REPORT_TRACE_CHROME_H_

#include <cstdint>
#include <string>

#include "report/trace_data.h"

namespace cuprobe {

inline constexpr uint32_t kChromeGpuPidBase = 1'000'000'000;
inline constexpr uint32_t kChromeLaneTidStride = 10'000'000;
inline constexpr uint32_t kChromeMaxLanes = 64;  // beyond: all in the last lane

[[nodiscard]] std::string FormatChromeTrace(const TraceData& data);

}  // namespace cuprobe

#endif  // CUPROBE_REPORT_TRACE_CHROME_H_
