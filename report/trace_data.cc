// File: report/trace_data.cc
#include "report/trace_data.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/str_format.h"

namespace cuprobe {
namespace {

// A launch from API activity takes its kernel's name and shape.
void FillShape(LaunchRecord& l, const KernelRecord& k) {
  l.name_id = k.name_id;
  std::memcpy(l.grid, k.grid, sizeof(l.grid));
  std::memcpy(l.block, k.block, sizeof(l.block));
  l.shared_mem_bytes = k.dynamic_shared_bytes;
}

// The ring holds records at 8-byte boundaries, but a span handed to us may
// come from anywhere (a file, a test buffer): copy, never cast.
template <typename T>
T LoadRecord(absl::Span<const uint8_t> body) {
  static_assert(std::is_trivially_copyable_v<T>);
  T record;
  std::memcpy(&record, body.data(), sizeof(T));
  return record;
}

absl::Status ShortBody(uint16_t type, size_t have, size_t need) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s (type %d) body is %d bytes, shorter than the %d-byte record",
                      RecordTypeName(type), type, have, need));
}

absl::Status DecodeNameRecord(absl::Span<const uint8_t> body, RecordConsumer& consumer,
                              TraceCounters& counters) {
  constexpr uint16_t kType = static_cast<uint16_t>(RecordType::kName);
  if (body.size() < sizeof(NameRecord)) {
    ++counters.invalid;
    return ShortBody(kType, body.size(), sizeof(NameRecord));
  }
  const auto record = LoadRecord<NameRecord>(body);
  const size_t available = body.size() - sizeof(NameRecord);
  if (record.length > available) {
    ++counters.invalid;
    return absl::InvalidArgumentError(absl::StrFormat(
        "NameRecord (type %d) for name_id %d declares %d name bytes, but the %d-byte body "
        "holds only %d after its %d-byte header",
        kType, record.name_id, record.length, body.size(), available, sizeof(NameRecord)));
  }
  if (record.name_id == 0) {
    ++counters.invalid;
    return absl::InvalidArgumentError(absl::StrFormat(
        "NameRecord (type %d) has name_id 0; ids start at 1 (0 means 'no name')", kType));
  }
  const auto* bytes = reinterpret_cast<const char*>(body.data() + sizeof(NameRecord));
  consumer.AddName(record.name_id, std::string_view(bytes, record.length));
  return absl::OkStatus();
}

}  // namespace

std::string_view RecordTypeName(uint16_t type) {
  switch (static_cast<RecordType>(type)) {
    case RecordType::kName:
      return "NameRecord";
    case RecordType::kLaunch:
      return "LaunchRecord";
    case RecordType::kKernel:
      return "KernelRecord";
    case RecordType::kMemcpy:
      return "MemcpyRecord";
    case RecordType::kMemset:
      return "MemsetRecord";
    case RecordType::kProcess:
      return "ProcessRecord";
    case RecordType::kProbeKernel:
      return "ProbeKernelRecord";
    case RecordType::kCatalogKernel:
      return "CatalogKernelRecord";
  }
  return "unknown record";
}

absl::Status DecodeRecord(uint16_t type, absl::Span<const uint8_t> body,
                          RecordConsumer& consumer, TraceCounters& counters) {
  size_t need = 0;
  switch (static_cast<RecordType>(type)) {
    case RecordType::kName:
      return DecodeNameRecord(body, consumer, counters);
    case RecordType::kLaunch:
      need = sizeof(LaunchRecord);
      break;
    case RecordType::kKernel:
      need = sizeof(KernelRecord);
      break;
    case RecordType::kMemcpy:
      need = sizeof(MemcpyRecord);
      break;
    case RecordType::kMemset:
      need = sizeof(MemsetRecord);
      break;
    case RecordType::kProcess:
      need = sizeof(ProcessRecord);
      break;
    case RecordType::kProbeKernel:
      need = sizeof(ProbeKernelRecord);
      break;
    case RecordType::kCatalogKernel:
      need = sizeof(CatalogKernelRecord);
      break;
    default:
      ++counters.unknown_type;
      return absl::OkStatus();
  }
  if (body.size() < need) {
    ++counters.invalid;
    return ShortBody(type, body.size(), need);
  }
  switch (static_cast<RecordType>(type)) {
    case RecordType::kLaunch:
      consumer.AddLaunch(LoadRecord<LaunchRecord>(body));
      break;
    case RecordType::kKernel:
      consumer.AddKernel(LoadRecord<KernelRecord>(body));
      break;
    case RecordType::kMemcpy:
      consumer.AddMemcpy(LoadRecord<MemcpyRecord>(body));
      break;
    case RecordType::kMemset:
      consumer.AddMemset(LoadRecord<MemsetRecord>(body));
      break;
    case RecordType::kProcess:
      consumer.AddProcess(LoadRecord<ProcessRecord>(body));
      break;
    case RecordType::kProbeKernel:
      consumer.AddProbeKernel(LoadRecord<ProbeKernelRecord>(body));
      break;
    case RecordType::kCatalogKernel:
      consumer.AddCatalogKernel(LoadRecord<CatalogKernelRecord>(body));
      break;
    case RecordType::kName:
      break;  // handled above
  }
  return absl::OkStatus();
}

void TraceData::AddProbeKernel(const ProbeKernelRecord& record) {
  ++counters_.accepted;
  probe_kernels_.push_back(record);
}

std::string_view TraceData::ProbeKernelName(uint32_t kernel_id) const {
  // Latest wins: a module loaded again keeps its kernels' ids.
  for (auto it = probe_kernels_.rbegin(); it != probe_kernels_.rend(); ++it) {
    if (it->kernel_id == kernel_id) return Name(it->name_id);
  }
  return "";
}

void TraceData::AddName(uint64_t name_id, std::string_view name) {
  names_.insert_or_assign(name_id, std::string(name));
  ++counters_.accepted;
}

void TraceData::AddProcess(const ProcessRecord& record) {
  processes_.push_back(record);
  ++counters_.accepted;
}

void TraceData::AddLaunch(const LaunchRecord& record) {
  ++counters_.accepted;
  if (record.stream == kUnknownStream) {
    // One call may leave two activity records with one correlation id: the
    // runtime call the app made and the driver call the runtime made inside
    // it. One launch stays, timed as the runtime call (what the app called).
    auto [it, first] = activity_launches_.try_emplace(record.correlation_id, launches_.size());
    if (!first) {
      ++counters_.merged_launches;
      LaunchRecord& kept = launches_[it->second];
      if (IsRuntimeLaunch(record.api) && !IsRuntimeLaunch(kept.api)) {
        kept.api_start_ns = record.api_start_ns;
        kept.api_end_ns = record.api_end_ns;
        kept.api = record.api;
        kept.result = record.result;
      }
      return;
    }
  }
  launches_.push_back(record);
  // A failed call launched nothing: no kernel will claim it.
  if (record.stream != kUnknownStream || IsGraphLaunch(record.api) || record.result != 0) return;
  if (!joining_) {
    joining_ = true;
    for (size_t i = 0; i < kernels_.size(); ++i) IndexKernel(i);
  }
  auto it = kernels_unclaimed_.find(record.correlation_id);
  if (it == kernels_unclaimed_.end()) {
    launches_waiting_.emplace(record.correlation_id, launches_.size() - 1);
    return;
  }
  FillShape(launches_.back(), kernels_[it->second]);
  kernels_unclaimed_.erase(it);
}

void TraceData::AddKernel(const KernelRecord& record) {
  kernels_.push_back(record);
  ++counters_.accepted;
  if (joining_) IndexKernel(kernels_.size() - 1);
}

void TraceData::IndexKernel(size_t index) {
  const KernelRecord& k = kernels_[index];
  auto it = launches_waiting_.find(k.correlation_id);
  if (it == launches_waiting_.end()) {
    kernels_unclaimed_.emplace(k.correlation_id, index);  // the first one stays
    return;
  }
  FillShape(launches_[it->second], k);
  launches_waiting_.erase(it);
}

void TraceData::AddMemcpy(const MemcpyRecord& record) {
  memcpys_.push_back(record);
  ++counters_.accepted;
}

void TraceData::AddMemset(const MemsetRecord& record) {
  memsets_.push_back(record);
  ++counters_.accepted;
}

std::string_view TraceData::Name(uint64_t name_id) const {
  auto it = names_.find(name_id);
  if (it == names_.end()) return kUnknownName;
  return it->second;
}

}  // namespace cuprobe
