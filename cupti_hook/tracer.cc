#include "cupti_hook/tracer.h"

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "cupti_hook/cupti_launch.h"
#include "cupti_hook/init_state.h"

namespace cuprobe {
namespace {

uint32_t Clamp32(int64_t v) { return v < 0 ? 0u : static_cast<uint32_t>(v); }

// Each thread's ThreadState in the tracer it last called, keyed by the
// tracer's serial number, not its address, so that a later tracer at a
// reused address cannot see a freed one.
struct ThreadCache {
  uint64_t tracer_serial = 0;
  void* state = nullptr;
};
thread_local ThreadCache tls_tracer_thread;
std::atomic<uint64_t> g_tracer_serials{0};

}  // namespace

bool Tracer::IsLaunchCallback(CUpti_CallbackId cbid) {
  return std::find(kLaunchCallbacks.begin(), kLaunchCallbacks.end(), cbid) !=
         kLaunchCallbacks.end();
}

Tracer::Tracer(CuptiSeam& seam, RecordSink& sink, uint32_t pid, TracerDiag diag)
    : seam_(seam),
      sink_(sink),
      pid_(pid),
      diag_(diag),
      serial_(g_tracer_serials.fetch_add(1) + 1) {
  overflow_.shared = true;
}

Tracer::~Tracer() {
  ThreadState* t = threads_.load(std::memory_order_acquire);
  while (t != nullptr) {
    ThreadState* next = t->next;
    delete t;
    t = next;
  }
}

Tracer::ThreadState& Tracer::ThisThread() {
  ThreadCache& cache = tls_tracer_thread;
  if (cache.tracer_serial == serial_) return *static_cast<ThreadState*>(cache.state);
  return AttachThread();
}

// A thread's first call into this tracer (or its first since it called
// another one): find the slot its thread id already has, else push a new one.
Tracer::ThreadState& Tracer::AttachThread() {
  const uint64_t tid = CurrentThreadId();
  ThreadState* head = threads_.load(std::memory_order_acquire);
  ThreadState* mine = nullptr;
  for (ThreadState* t = head; t != nullptr; t = t->next) {
    if (t->tid == tid) {
      mine = t;
      break;
    }
  }
  // The count saturates at the cap: it is only added to below it.
  if (mine == nullptr && (thread_slots_.load(std::memory_order_relaxed) >= kMaxThreadSlots ||
                          thread_slots_.fetch_add(1, std::memory_order_relaxed) >= kMaxThreadSlots)) {
    mine = &overflow_;
  } else if (mine == nullptr) {
    mine = new ThreadState;
    mine->tid = tid;
    mine->next = head;
    while (!threads_.compare_exchange_weak(mine->next, mine, std::memory_order_release,
                                           std::memory_order_acquire)) {
    }
  }
  tls_tracer_thread = {serial_, mine};
  return *mine;
}

uint64_t Tracer::SumOverThreads(std::atomic<uint64_t> ThreadState::*counter) const {
  uint64_t sum = (overflow_.*counter).load(std::memory_order_relaxed);
  for (ThreadState* t = threads_.load(std::memory_order_acquire); t != nullptr; t = t->next) {
    sum += (t->*counter).load(std::memory_order_relaxed);
  }
  return sum;
}

// A writer raises its own count, then (after a full fence) reads whether the
// gate is open; CloseSink closes the gate, then (after a full fence) reads
// every writer's count. Both fences are seq_cst, so they are ordered: if the
// writer's comes first, the closer sees its raised count (or its release
// store on leaving) and waits for it; if the closer's comes first, the
// writer sees the gate closed and leaves. A thread whose slot CloseSink's
// walk did not see pushed it after the walk began: its fence then follows
// the closer's, and it sees the gate closed. (The list's head is read after
// the closer's fence; a push it missed comes later in the head's
// modification order, so the pusher's fence cannot precede the closer's.)
// A slot has one live owner at a time (thread ids are unique among live
// threads), which is what lets the count be a plain load and store.
bool Tracer::EnterSink(ThreadState& me) {
  if (me.shared) return gate_.Enter();
  // A count, not a flag, should a write ever nest in another on one thread.
  const uint32_t depth = me.inside.load(std::memory_order_relaxed);
  me.inside.store(depth + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (gate_.open()) return true;
  me.inside.store(depth, std::memory_order_release);
  return false;
}

void Tracer::ExitSink(ThreadState& me) {
  if (me.shared) {
    gate_.Exit();
  } else {
    me.inside.store(me.inside.load(std::memory_order_relaxed) - 1, std::memory_order_release);
  }
}

bool Tracer::Emit(RecordType type, const void* body, uint32_t size, const void* extra,
                  uint32_t extra_size) {
  return EmitAs(ThisThread(), type, body, size, extra, extra_size);
}

bool Tracer::EmitAs(ThreadState& me, RecordType type, const void* body, uint32_t size,
                    const void* extra, uint32_t extra_size) {
  if (!EnterSink(me)) return false;
  bool written;
  {
    // Left even should the write throw: a count left raised would make
    // every later CloseSink time out.
    absl::Cleanup exit = [&] { ExitSink(me); };
    written = sink_.Write(static_cast<uint16_t>(type), body, size, extra, extra_size);
  }
  if (written) {
    Add(me, me.written);
  } else {
    dropped_.fetch_add(1, std::memory_order_relaxed);
  }
  return written;
}

bool Tracer::CloseSink() {
  // One deadline for both waits. First the gate closes and its counted users
  // (overflow_'s threads, WhileSinkOpen) leave; then, after the fence that
  // pairs with EnterSink's, every thread's own count goes to zero.
  const auto timeout = std::chrono::milliseconds(2000);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (!gate_.CloseAndWait(timeout)) return false;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (ThreadState* t = threads_.load(std::memory_order_acquire); t != nullptr; t = t->next) {
    while (t->inside.load(std::memory_order_acquire) != 0) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
  }
  return true;
}

uint64_t Tracer::InternName(std::string_view name) {
  uint64_t id;
  {
    absl::MutexLock lock(&names_mu_);
    auto it = ids_by_name_.find(name);
    if (it != ids_by_name_.end()) return it->second;
    id = ProcessQualifiedId(pid_, next_name_id_++);
    ids_by_name_.emplace(std::string(name), id);
  }
  // First sight: publish the name once. A dropped name record leaves readers
  // with "<unknown>" for this id, which they report.
  NameRecord rec = {};
  rec.name_id = id;
  rec.length = static_cast<uint32_t>(std::min<size_t>(name.size(), 1u << 16));
  Emit(RecordType::kName, &rec, sizeof(rec), name.data(), rec.length);
  return id;
}

uint64_t Tracer::NameForHandle(ThreadState& me, const void* handle, std::string_view known) {
  if (handle == nullptr) return 0;
  if (!me.shared && me.last_handle == handle) return me.last_name_id;
  {
    absl::MutexLock lock(&names_mu_);
    auto it = ids_by_handle_.find(handle);
    if (it != ids_by_handle_.end()) {
      if (!me.shared) {
        me.last_handle = handle;
        me.last_name_id = it->second;
      }
      return it->second;
    }
  }
  // Miss: the name given, or ask the driver with no lock held (the call may
  // re-enter CUPTI). The handle may be a CUfunction or a CUkernel cast to
  // one; try both.
  absl::StatusOr<std::string> name = std::string(known);
  if (known.empty()) {
    name = seam_.FunctionName(static_cast<CUfunction>(const_cast<void*>(handle)));
    if (!name.ok()) name = seam_.KernelName(static_cast<CUkernel>(const_cast<void*>(handle)));
  }
  uint64_t id = 0;
  if (name.ok()) {
    id = InternName(*name);
  } else {
    name_failures_.fetch_add(1, std::memory_order_relaxed);
  }
  absl::MutexLock lock(&names_mu_);
  auto [it, inserted] = ids_by_handle_.emplace(handle, id);
  if (!me.shared) {
    me.last_handle = handle;
    me.last_name_id = it->second;
  }
  return it->second;
}

void Tracer::Begin(std::string_view program, uint64_t now_ns) {
  ProcessRecord rec = {};
  rec.pid = pid_;
  rec.start_ns = now_ns != 0 ? now_ns : seam_.Timestamp();
  rec.name_id = InternName(program);
  Emit(RecordType::kProcess, &rec, sizeof(rec));
}

void Tracer::OnLaunchApiCountOnly(CUpti_CallbackId, const CUpti_CallbackData* data) {
  if (data == nullptr || data->callbackSite != CUPTI_API_EXIT) return;
  ThreadState& me = ThisThread();
  Add(me, me.launches);
}

void Tracer::OnLaunchApiUntimed(CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  if (data == nullptr || data->callbackSite != CUPTI_API_EXIT) return;
  RecordLaunch(cbid, data);
}

void Tracer::OnLaunchApi(CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  if (data == nullptr) return;
  if (data->callbackSite == CUPTI_API_ENTER) {
    if (data->correlationData != nullptr) *data->correlationData = seam_.Timestamp();
    return;
  }
  RecordLaunch(cbid, data);
}

void Tracer::RecordLaunch(CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  // Decided once, here: ENTER always stores its time, so a range that opens
  // on another thread between the two leaves no start time unset.
  if (!Captured(data->correlationId)) return;
  uint64_t end = seam_.Timestamp();
  ThreadState& me = ThisThread();
  Add(me, me.launches);
  LaunchShape shape;
  if (!ReadShape(cbid, data->functionParams, &shape)) return;
  LaunchRecord rec = {};
  rec.correlation_id = ProcessQualifiedId(pid_, data->correlationId);
  rec.name_id = shape.api == LaunchApi::kGraphLaunch ? 0 : NameForHandle(me, shape.handle);
  rec.api_start_ns = data->correlationData != nullptr ? *data->correlationData : end;
  rec.api_end_ns = end;
  rec.stream = shape.stream;
  rec.pid = pid_;
  rec.tid = static_cast<uint32_t>(me.shared ? CurrentThreadId() : me.tid);
  std::memcpy(rec.grid, shape.grid, sizeof(rec.grid));
  std::memcpy(rec.block, shape.block, sizeof(rec.block));
  rec.shared_mem_bytes = shape.shared;
  rec.api = static_cast<uint16_t>(shape.api);
  if (data->functionReturnValue != nullptr) {
    rec.result = static_cast<uint16_t>(*static_cast<const CUresult*>(data->functionReturnValue));
  }
  EmitAs(me, RecordType::kLaunch, &rec, sizeof(rec));
}

void Tracer::OnLaunchSeen(const SeenLaunch& launch) {
  ThreadState& me = ThisThread();
  Add(me, me.launches);
  if (diag_.no_launch_records) return;
  LaunchRecord rec = {};
  rec.correlation_id = ProcessQualifiedId(pid_, static_cast<uint32_t>(launch.serial));
  const char* name = launch.name != nullptr ? launch.name : "<unnamed>";
  rec.name_id = launch.function != nullptr ? NameForHandle(me, launch.function, name)
                                           : InternName(name);
  rec.api_start_ns = launch.time_ns;
  rec.api_end_ns = launch.time_ns;
  rec.stream = launch.stream;
  rec.pid = pid_;
  rec.tid = static_cast<uint32_t>(me.shared ? CurrentThreadId() : me.tid);
  std::memcpy(rec.grid, launch.grid, sizeof(rec.grid));
  std::memcpy(rec.block, launch.block, sizeof(rec.block));
  rec.api = static_cast<uint16_t>(LaunchApi::kLaunchKernel);
  EmitAs(me, RecordType::kLaunch, &rec, sizeof(rec));
}

void Tracer::HandleActivity(const CUpti_Activity* record) {
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      if (diag_.no_kernel_records) break;
      auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      if (Ignored(k->streamId) || !Captured(k->correlationId)) break;
      KernelRecord rec = {};
      rec.correlation_id = ProcessQualifiedId(pid_, k->correlationId);
      rec.name_id = InternName(k->name != nullptr ? k->name : "<unnamed>");
      rec.start_ns = k->start;
      rec.end_ns = k->end;
      rec.graph_node_id = k->graphNodeId;
      rec.device = k->deviceId;
      rec.context = k->contextId;
      rec.stream_id = k->streamId;
      rec.grid[0] = Clamp32(k->gridX);
      rec.grid[1] = Clamp32(k->gridY);
      rec.grid[2] = Clamp32(k->gridZ);
      rec.block[0] = Clamp32(k->blockX);
      rec.block[1] = Clamp32(k->blockY);
      rec.block[2] = Clamp32(k->blockZ);
      rec.dynamic_shared_bytes = Clamp32(k->dynamicSharedMemory);
      rec.static_shared_bytes = Clamp32(k->staticSharedMemory);
      rec.registers_per_thread = k->registersPerThread;
      rec.graph_id = k->graphId;
      rec.grid_id = static_cast<uint64_t>(k->gridId);
      Emit(RecordType::kKernel, &rec, sizeof(rec));
      break;
    }
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
      // A launch call from driver or runtime API activity (Hook: launch
      // times from activity): times, thread and result; the kernel record of
      // the same correlation id supplies the rest when the trace is read.
      auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      LaunchApi api;
      if (!(record->kind == CUPTI_ACTIVITY_KIND_DRIVER ? LaunchApiOf(a->cbid, &api)
                                                       : RuntimeLaunchApiOf(a->cbid, &api))) {
        break;
      }
      if (!Captured(a->correlationId)) break;
      ThreadState& me = ThisThread();
      Add(me, me.launches);
      if (diag_.no_launch_records) break;
      LaunchRecord rec = {};
      rec.correlation_id = ProcessQualifiedId(pid_, a->correlationId);
      rec.api_start_ns = a->start;
      rec.api_end_ns = a->end;
      rec.stream = kUnknownStream;
      rec.pid = pid_;
      rec.tid = a->threadId;
      rec.api = static_cast<uint16_t>(api);
      rec.result = static_cast<uint16_t>(a->returnValue);
      EmitAs(me, RecordType::kLaunch, &rec, sizeof(rec));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      if (Ignored(m->streamId) || !Captured(m->correlationId)) break;
      MemcpyRecord rec = {};
      rec.correlation_id = ProcessQualifiedId(pid_, m->correlationId);
      rec.start_ns = m->start;
      rec.end_ns = m->end;
      rec.bytes = m->bytes;
      rec.device = m->deviceId;
      rec.context = m->contextId;
      rec.stream_id = m->streamId;
      rec.copy_kind = m->copyKind;
      rec.src_kind = m->srcKind;
      rec.dst_kind = m->dstKind;
      rec.flags = m->flags;
      Emit(RecordType::kMemcpy, &rec, sizeof(rec));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      if (Ignored(m->streamId) || !Captured(m->correlationId)) break;
      MemsetRecord rec = {};
      rec.correlation_id = ProcessQualifiedId(pid_, m->correlationId);
      rec.start_ns = m->start;
      rec.end_ns = m->end;
      rec.bytes = m->bytes;
      rec.device = m->deviceId;
      rec.context = m->contextId;
      rec.stream_id = m->streamId;
      rec.value = m->value;
      Emit(RecordType::kMemset, &rec, sizeof(rec));
      break;
    }
    default:
      break;
  }
}

void Tracer::OnActivityBuffer(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                              size_t valid_size) {
  activity_buffers_.fetch_add(1, std::memory_order_relaxed);
  CUpti_Activity* record = nullptr;
  while (true) {
    absl::StatusOr<CUpti_Activity*> next = seam_.ActivityNextRecord(buffer, valid_size, record);
    if (!next.ok()) break;
    record = *next;
    activity_records_.fetch_add(1, std::memory_order_relaxed);
    HandleActivity(record);
  }
  absl::StatusOr<size_t> dropped = seam_.ActivityDroppedRecords(context, stream_id);
  if (dropped.ok() && *dropped > 0) {
    activity_dropped_.fetch_add(*dropped, std::memory_order_relaxed);
  }
}

void Tracer::OnKernelInstrumented(std::string_view name, uint32_t kernel_id) {
  ProbeKernelRecord rec = {};
  rec.kernel_id = kernel_id;
  rec.pid = pid_;
  rec.name_id = InternName(name);
  Emit(RecordType::kProbeKernel, &rec, sizeof(rec));
}

void Tracer::OnKernelCataloged(std::string_view name, uint16_t backend) {
  CatalogKernelRecord rec = {};
  rec.name_id = InternName(name);
  rec.pid = pid_;
  rec.backend = backend;
  Emit(RecordType::kCatalogKernel, &rec, sizeof(rec));
}

void Tracer::IgnoreStream(uint32_t stream_id) {
  if (stream_id == 0 || Ignored(stream_id)) return;
  int slot = ignored_count_.fetch_add(1, std::memory_order_acq_rel);
  if (slot < kMaxIgnoredStreams) ignored_streams_[slot].store(stream_id, std::memory_order_release);
}

bool Tracer::Ignored(uint32_t stream_id) const {
  int n = std::min(ignored_count_.load(std::memory_order_acquire), kMaxIgnoredStreams);
  for (int i = 0; i < n; ++i) {
    if (ignored_streams_[i].load(std::memory_order_acquire) == stream_id) return true;
  }
  return false;
}

TracerStats Tracer::stats() const {
  TracerStats s;
  s.launches = SumOverThreads(&ThreadState::launches);
  s.records_written = SumOverThreads(&ThreadState::written);
  s.records_dropped = dropped_.load();
  s.activity_buffers = activity_buffers_.load();
  s.activity_records = activity_records_.load();
  s.activity_dropped = activity_dropped_.load();
  s.name_failures = name_failures_.load();
  s.capture_ranges = capture_ == nullptr ? 0 : static_cast<uint64_t>(capture_->count());
  return s;
}

}  // namespace cuprobe
