// File: probe/trace_records.h
//
// The records the hook publishes into the session segment's record ring, and
// that `cuprobe trace` (or the hook itself, in standalone mode) turns into a
// summary and a timeline. This is a wire protocol between processes built
// separately: fixed-width fields, no pointers, explicit padding, and
// static_asserts on size and offsets. Bump kTraceRecordsVersion on any change.
//
// A record in the ring is a RecordHeader followed by its body:
//
//   RecordHeader{size = sizeof(RecordHeader) + sizeof(KernelRecord), type = kKernel}
//   KernelRecord{...}
//
// Names travel once, as kName records (NameRecord + `length` bytes, no NUL);
// other records refer to them by name_id. Every timestamp is CUPTI's clock
// (cuptiGetTimestamp, nanoseconds), for launch and activity records alike.
#ifndef CUPROBE_PROBE_TRACE_RECORDS_H_
#define CUPROBE_PROBE_TRACE_RECORDS_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cuprobe {

inline constexpr uint32_t kTraceRecordsVersion = 2;  // 2: KernelRecord.grid_id

// Several processes may write into one session (a launcher's children: the
// ranks of torchrun, a shell pipeline). Correlation and name ids are
// therefore qualified by the writing process: the pid in the high 32 bits,
// the process's own id (CUPTI's correlation id, a name counter) in the low
// 32. Readers key on the whole id; reports show the low half.
[[nodiscard]] constexpr uint64_t ProcessQualifiedId(uint32_t pid, uint64_t local) {
  return (uint64_t{pid} << 32) | (local & 0xffffffffu);
}
[[nodiscard]] constexpr uint32_t IdProcess(uint64_t id) { return static_cast<uint32_t>(id >> 32); }
[[nodiscard]] constexpr uint32_t IdLocal(uint64_t id) { return static_cast<uint32_t>(id); }

enum class RecordType : uint16_t {
  kName = 1,     // NameRecord + bytes
  kLaunch = 2,   // LaunchRecord: one kernel launch API call on a CPU thread
  kKernel = 3,   // KernelRecord: one kernel execution on the GPU
  kMemcpy = 4,   // MemcpyRecord
  kMemset = 5,   // MemsetRecord
  kProcess = 6,  // ProcessRecord: once per attached process
  // ProbeKernelRecord: a kernel the hook instrumented and the id its probes
  // see (ctx->kernel_id). Added without a version bump: readers that predate
  // it count it as an unknown type and go on.
  kProbeKernel = 7,
  // CatalogKernelRecord: a kernel of a loaded module and the backend probes
  // would reach it through (`cuprobe list`). Added without a version bump,
  // as kProbeKernel.
  kCatalogKernel = 8,
};

// What API call a LaunchRecord describes: a driver call (launch callbacks,
// or driver API activity when the app calls the driver itself), or a runtime
// call (runtime API activity: CUPTI records the call the app made, not the
// driver call the runtime makes inside it).
enum class LaunchApi : uint16_t {
  kLaunchKernel = 1,
  kLaunchKernelEx = 2,
  kLaunchCooperativeKernel = 3,
  kGraphLaunch = 4,
  kCudaLaunchKernel = 5,  // cudaLaunchKernel, and <<<>>> (CUDA 13: __cudaLaunchKernel)
  kCudaLaunchKernelEx = 6,
  kCudaLaunchCooperativeKernel = 7,
  kCudaGraphLaunch = 8,
};

// A graph launch: its kernels share its correlation id, and it has no name.
inline constexpr bool IsGraphLaunch(uint16_t api) {
  return api == static_cast<uint16_t>(LaunchApi::kGraphLaunch) ||
         api == static_cast<uint16_t>(LaunchApi::kCudaGraphLaunch);
}

// A runtime call: LaunchRecord::result is its cudaError_t, not a CUresult.
inline constexpr bool IsRuntimeLaunch(uint16_t api) {
  return api >= static_cast<uint16_t>(LaunchApi::kCudaLaunchKernel) &&
         api <= static_cast<uint16_t>(LaunchApi::kCudaGraphLaunch);
}

struct RecordHeader {
  uint32_t size;  // header + body + trailing bytes, a multiple of 8
  uint16_t type;  // RecordType
  uint16_t flags;
};

struct NameRecord {
  uint64_t name_id;  // > 0, unique within the process
  uint32_t length;   // bytes that follow
  uint32_t reserved;
};

struct ProbeKernelRecord {
  uint32_t kernel_id;  // what probes of this kernel see as ctx->kernel_id
  uint32_t pid;
  uint64_t name_id;    // the kernel's mangled name (NameRecord)
};

// CatalogKernelRecord::backend: as ptx_rewriter/image_pipeline.h's
// KernelBackend.
inline constexpr uint16_t kCatalogBackendPtx = 1;    // rewritten from its PTX
inline constexpr uint16_t kCatalogBackendPatch = 2;  // SASS only: patched

struct CatalogKernelRecord {
  uint64_t name_id;  // the kernel's mangled name (NameRecord)
  uint32_t pid;
  uint16_t backend;  // kCatalogBackend*
  uint16_t reserved;
};

struct ProcessRecord {
  uint32_t pid;
  uint32_t reserved;
  uint64_t start_ns;   // CUPTI clock at hook init
  uint64_t name_id;    // the program's name (NameRecord)
};

struct LaunchRecord {
  uint64_t correlation_id;  // CUPTI's correlation id: joins KernelRecord
  uint64_t name_id;         // kernel name (0 for graph launches, or unknown)
  uint64_t api_start_ns;
  uint64_t api_end_ns;
  uint64_t stream;          // CUstream handle value, as an id; kUnknownStream below
  uint32_t pid;
  uint32_t tid;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_mem_bytes;
  uint16_t api;             // LaunchApi
  uint16_t result;          // CUresult of the call (truncated); cudaError_t if IsRuntimeLaunch
};

// LaunchRecord::stream of a launch recorded from CUPTI's driver or runtime
// API activity (CUPROBE_LAUNCH_TIMES=activity): the activity carries the
// call's times, thread and result but not its parameters, so the record's
// name, grid, block and shared memory are zero until the kernel record of
// the same correlation id fills them (TraceData does).
inline constexpr uint64_t kUnknownStream = ~uint64_t{0};

struct KernelRecord {
  uint64_t correlation_id;
  uint64_t name_id;
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t graph_node_id;  // 0 unless launched from a graph
  uint32_t device;
  uint32_t context;
  uint32_t stream_id;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t dynamic_shared_bytes;
  uint32_t static_shared_bytes;
  uint32_t registers_per_thread;
  uint32_t graph_id;
  uint32_t reserved;
  // The launch's grid id (CUPTI's gridId; %gridid on the GPU, which probes
  // read with cuprobe_grid_id()): joins a probe's events to this kernel.
  uint64_t grid_id;
};

struct MemcpyRecord {
  uint64_t correlation_id;
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t bytes;
  uint32_t device;
  uint32_t context;
  uint32_t stream_id;
  uint8_t copy_kind;  // CUpti_ActivityMemcpyKind
  uint8_t src_kind;   // CUpti_ActivityMemoryKind
  uint8_t dst_kind;
  uint8_t flags;
};

struct MemsetRecord {
  uint64_t correlation_id;
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t bytes;
  uint32_t device;
  uint32_t context;
  uint32_t stream_id;
  uint32_t value;
};

static_assert(sizeof(RecordHeader) == 8);
static_assert(sizeof(NameRecord) == 16);
static_assert(sizeof(ProcessRecord) == 24);
static_assert(sizeof(ProbeKernelRecord) == 16);
static_assert(sizeof(CatalogKernelRecord) == 16);
static_assert(sizeof(LaunchRecord) == 80);
static_assert(offsetof(LaunchRecord, grid) == 48);
static_assert(offsetof(LaunchRecord, api) == 76);
static_assert(sizeof(KernelRecord) == 104);
static_assert(offsetof(KernelRecord, device) == 40);
static_assert(offsetof(KernelRecord, reserved) == 92);
static_assert(offsetof(KernelRecord, grid_id) == 96);
static_assert(sizeof(MemcpyRecord) == 48);
static_assert(sizeof(MemsetRecord) == 48);
static_assert(std::is_standard_layout_v<LaunchRecord> && std::is_trivially_copyable_v<LaunchRecord>);
static_assert(std::is_standard_layout_v<KernelRecord> && std::is_trivially_copyable_v<KernelRecord>);
static_assert(std::is_trivially_copyable_v<MemcpyRecord> && std::is_trivially_copyable_v<MemsetRecord>);

}  // namespace cuprobe

#endif  // CUPROBE_PROBE_TRACE_RECORDS_H_
