#include "cupti_hook/probe_runtime.h"

#include "absl/time/clock.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "support/log.h"
#include "support/status_macros.h"

namespace cuprobe {
BundleInstrumenter::BundleInstrumenter(ProbeBundle bundle, std::string_view helper_ptx,
                                       CompileCache cache, PtxSourceFinder find_ptx,
                                       KernelListener on_kernel)
    : bundle_(std::move(bundle)),
      cache_(std::move(cache)),
      pipeline_{&bundle_, helper_ptx, &cache_, std::move(find_ptx)},
      on_kernel_(std::move(on_kernel)) {}

uint32_t BundleInstrumenter::IdOf(const std::string& mangled) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = ids_.try_emplace(mangled, next_id_);
  if (inserted) ++next_id_;
  return it->second;
}

uint32_t BundleInstrumenter::KernelId(const std::string& mangled) {
  const uint32_t id = IdOf(mangled);
  bool first;
  {
    absl::MutexLock lock(&mu_);
    first = reported_.insert(id).second;
  }
  if (first && on_kernel_) on_kernel_(mangled, id);
  return id;
}

uint32_t BundleInstrumenter::FirstUnnamedId() {
  absl::MutexLock lock(&mu_);
  return next_id_ + 0x10000;  // kernels the name scan missed
}

absl::StatusOr<std::optional<InstrumentedImage>> BundleInstrumenter::Instrument(
    const ImageSource& source, uint32_t sm) {
  absl::StatusOr<std::optional<InstrumentedImage>> out =
      InstrumentImage(source, sm, pipeline_, *this);
  if (!out.ok() || !out->has_value() || !on_kernel_) return out;
  for (const auto& [name, id] : (*out)->kernels) {
    bool first;
    {
      absl::MutexLock lock(&mu_);
      first = reported_.insert(id).second;
    }
    if (first) on_kernel_(name, id);
  }
  return out;
}

const CudaDriver* SeamDriver(CuptiSeam& seam) {
  absl::StatusOr<const CudaDriver*> driver = seam.Driver();
  return driver.ok() ? *driver : nullptr;
}

DeviceMaps::DeviceMaps(std::vector<MapSpec> specs, Session* session,
                       std::function<void(CUcontext, CUstream)> on_stream,
                       const CudaDriver* driver, RingData ring_data)
    : specs_(std::move(specs)),
      session_(session),
      region_(session != nullptr ? &session->maps() : nullptr),
      on_stream_(std::move(on_stream)),
      given_driver_(driver),
      ring_data_(ring_data) {}

absl::StatusOr<const CudaDriver*> DeviceMaps::Driver() const {
  if (given_driver_ != nullptr) return given_driver_;
  return absl::UnavailableError("the CUDA driver cannot be loaded");
}

DeviceMaps::~DeviceMaps() = default;

absl::Status DeviceMaps::CreateLocked(CUcontext expected, bool* no_context) {
  *no_context = false;
  CUPROBE_ASSIGN_OR_RETURN(driver_, Driver());
  CUcontext context = nullptr;
  CUPROBE_RETURN_IF_ERROR(driver_->Check(driver_->CtxGetCurrent(&context), "cuCtxGetCurrent"));
  if (context == nullptr || (expected != nullptr && context != expected)) {
    *no_context = true;
    return absl::FailedPreconditionError(context == nullptr
                                             ? "no CUDA context is current"
                                             : "the new CUDA context cannot be made current");
  }
  CUPROBE_ASSIGN_OR_RETURN(memory_, CudaDeviceMemory::Create(driver_));
  MapsRegion* region = region_ != nullptr && region_->size() > 0 ? region_ : nullptr;
  absl::StatusOr<MapSet> maps = MapSet::Create(specs_, memory_.get(), region, ring_data_);
  if (!maps.ok()) {
    memory_.reset();
    return maps.status();
  }
  maps_ = *std::move(maps);
  context_ = context;
  seeded_ = false;
  if (on_stream_) on_stream_(context, memory_->stream());
  CUPROBE_LOG(kInfo, "allocated %d map(s) in device memory", maps_->size());
  return absl::OkStatus();
}

absl::Status DeviceMaps::ClaimLocked() {
  if (claimed_) return absl::OkStatus();
  if (!claim_failed_.ok()) return claim_failed_;
  if (session_ != nullptr && !specs_.empty()) {
    absl::Status s = session_->ClaimMaps(static_cast<uint32_t>(::getpid()));
    if (!s.ok()) {
      claim_failed_ = s;  // for good: this process stays uninstrumented
      return s;
    }
  }
  claimed_ = true;
  return absl::OkStatus();
}

absl::Status DeviceMaps::SeedLocked() {
  if (!maps_.has_value() || !claimed_ || seeded_) return absl::OkStatus();
  // Another process of the session, or this one before a cudaDeviceReset,
  // may have counted already: go on from its last snapshot.
  ScopedCurrentContext scope(driver_, context_);
  absl::StatusOr<size_t> seeded_maps = maps_->SeedFromRegion();
  if (!seeded_maps.ok()) {
    // Unseeded maps must never be published over the snapshot they failed
    // to continue: give them up, for good.
    if (session_ != nullptr) session_->ReleaseMaps(static_cast<uint32_t>(::getpid()));
    claimed_ = false;
    claim_failed_ = absl::Status(
        seeded_maps.status().code(),
        absl::StrCat("cannot continue the maps from their last snapshot: ",
                     seeded_maps.status().message()));
    return claim_failed_;
  }
  const size_t seeded = *seeded_maps;
  seeded_ = true;
  if (seeded > 0) {
    CUPROBE_LOG(kInfo, "%d map(s) continue from their last published snapshot", seeded);
  }
  return absl::OkStatus();
}

absl::Status DeviceMaps::PublishAndFreeLocked(uint64_t now_ns, bool give_back) {
  ScopedCurrentContext scope(driver_, context_);
  absl::Status status;
  TakeAdoptedCountersLocked();
  // Maps never claimed and seeded were never used.
  if (claimed_ && seeded_) status = maps_->Publish(now_ns);
  status.Update(maps_->Release());
  maps_.reset();
  memory_.reset();  // destroys the copy stream, in its context
  context_ = nullptr;
  users_.clear();
  seeded_ = false;
  if (give_back && claimed_ && session_ != nullptr) {
    session_->ReleaseMaps(static_cast<uint32_t>(::getpid()));
  }
  claimed_ = false;
  return status;
}

absl::StatusOr<std::vector<uint64_t>> DeviceMaps::MapTable() {
  absl::MutexLock lock(&mu_);
  return MapTableLocked();
}

absl::StatusOr<std::vector<uint64_t>> DeviceMaps::MapTableLocked() {
  if (released_) return absl::FailedPreconditionError("the maps were released (exiting)");
  if (!maps_.has_value()) {
    if (!failed_.ok()) return failed_;
    bool no_context = false;
    absl::Status s = CreateLocked(/*expected=*/nullptr, &no_context);
    if (!s.ok()) {
      s = absl::Status(s.code(), absl::StrCat("cannot create the probes' maps: ", s.message()));
      // Without a context nothing has failed yet: the first context that
      // uses the maps makes them.
      if (!no_context) failed_ = s;
      return s;
    }
  }
  CUPROBE_RETURN_IF_ERROR(ClaimLocked());
  CUPROBE_RETURN_IF_ERROR(SeedLocked());
  return maps_->table();
}

absl::StatusOr<MapTableProvider::TableAndDescriptors> DeviceMaps::MapTableAndDescriptors() {
  absl::MutexLock lock(&mu_);
  CUPROBE_ASSIGN_OR_RETURN(std::vector<uint64_t> table, MapTableLocked());
  return TableAndDescriptors{std::move(table), maps_->descriptors()};
}

absl::StatusOr<uint64_t> DeviceMaps::AddSiteCounters(std::vector<SiteCounter> counters) {
  absl::MutexLock lock(&mu_);
  if (!maps_.has_value()) return absl::FailedPreconditionError("the maps do not exist");
  CUPROBE_RETURN_IF_ERROR(EnsureStreamLocked());
  ScopedCurrentContext scope(driver_, context_);
  return maps_->AddSiteCounters(std::move(counters));
}

absl::Status DeviceMaps::AdoptSiteCounters(std::vector<SiteCounter> counters, uint64_t base) {
  absl::MutexLock lock(&adopted_mu_);
  adopted_.push_back(Adopted{std::move(counters), base});
  return absl::OkStatus();
}

void DeviceMaps::TakeAdoptedCountersLocked() {
  std::vector<Adopted> adopted;
  {
    absl::MutexLock lock(&adopted_mu_);
    adopted.swap(adopted_);
  }
  if (!maps_.has_value()) return;
  for (Adopted& a : adopted) {
    absl::Status s = maps_->AdoptSiteCounters(std::move(a.counters), a.base);
    if (!s.ok()) CUPROBE_LOG(kWarning, "a kernel's site counters go unread: %s", s.message());
  }
}

absl::Status DeviceMaps::UsableInCurrentContext() {
  absl::MutexLock lock(&mu_);
  if (!maps_.has_value()) return absl::OkStatus();
  CUcontext current = nullptr;
  if (driver_->CtxGetCurrent(&current) != CUDA_SUCCESS || current == nullptr) {
    return absl::FailedPreconditionError("no CUDA context is current");
  }
  if (current == context_) return absl::OkStatus();
  if (std::find(users_.begin(), users_.end(), current) != users_.end()) return absl::OkStatus();
  if (!memory_->context_independent()) {
    return absl::FailedPreconditionError(
        "the probes' maps live in another CUDA context, in memory that is not shared with this "
        "one (the device has no virtual memory management)");
  }
  if (maps_->has_rings() && ring_data_ == RingData::kHost) {
    return absl::FailedPreconditionError(
        "the probes' maps live in another CUDA context, and their ring buffers (host memory "
        "registered in that context, CUPROBE_RING_DATA=host) cannot be shared with this one; "
        "probes without ring buffers or printk reach every context");
  }
  if (!live_contexts_.contains(current)) {
    // Not seen created (the maps were made after it), or being destroyed.
    return absl::FailedPreconditionError(
        "the probes' maps live in another CUDA context, and this one was not seen created or "
        "is being destroyed");
  }
  CUdevice device = 0;
  if (driver_->CtxGetDevice(&device) != CUDA_SUCCESS || device != memory_->device()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the probes' maps are on device ", memory_->device(),
        " and this context is on another (one device per process is instrumented)"));
  }
  users_.push_back(current);
  CUPROBE_LOG(kInfo, "another CUDA context shares the probes' maps (%d context(s) now)",
              users_.size() + 1);
  return absl::OkStatus();
}

absl::Status DeviceMaps::Claim() {
  absl::MutexLock lock(&mu_);
  // Seeding copies to the device: it waits for MapTable, which the module
  // patcher calls where stream capture is relaxed.
  return ClaimLocked();
}

void DeviceMaps::OnContextDestroying(CUcontext context) {
  absl::MutexLock lock(&mu_);
  live_contexts_.erase(context);
  if (!maps_.has_value()) return;
  if (context != context_) {
    users_.erase(std::remove(users_.begin(), users_.end(), context), users_.end());
    return;
  }
  if (!users_.empty()) {
    // The maps outlive their context (UsableInCurrentContext admits users
    // only then); only the copy stream dies with it.
    const CUcontext next = users_.back();
    users_.pop_back();
    if (claimed_ && seeded_) {
      ScopedCurrentContext scope(driver_, context_);
      TakeAdoptedCountersLocked();
      absl::Status published = maps_->Publish(absl::GetCurrentTimeNanos());
      if (!published.ok()) {
        CUPROBE_LOG(kWarning, "the probes' maps at context teardown: %s", published.message());
      }
    }
    const CUcontext previous = std::exchange(context_, next);
    absl::Status moved;
    {
      ScopedCurrentContext scope(driver_, next);
      moved = memory_->MoveStream(previous, next);
    }
    if (!moved.ok()) {
      // Publish makes the stream again (EnsureStreamLocked).
      CUPROBE_LOG(kWarning, "moving the probes' maps to another context: %s", moved.message());
      return;
    }
    if (on_stream_) on_stream_(next, memory_->stream());
    CUPROBE_LOG(kInfo,
                "the probes' context is being destroyed: the maps go on in another context "
                "that shares them");
    return;
  }
  const bool was_claimed = claimed_;
  // The context's kernels are over: the next context (or process) may go on.
  absl::Status s = PublishAndFreeLocked(absl::GetCurrentTimeNanos(), /*give_back=*/true);
  if (!s.ok()) CUPROBE_LOG(kWarning, "the probes' maps at context teardown: %s", s.message());
  if (was_claimed) {
    CUPROBE_LOG(kInfo,
                "the probes' context is being destroyed: maps published and freed; the next "
                "module load makes them again from this snapshot");
  }
}

void DeviceMaps::Prepare(CUcontext context) {
  if (context == nullptr) return;
  absl::MutexLock lock(&mu_);
  live_contexts_.insert(context);
  if (specs_.empty() || maps_.has_value() || released_ || !failed_.ok()) return;
  absl::StatusOr<const CudaDriver*> driver = Driver();
  if (!driver.ok()) return;
  ScopedCurrentContext scope(*driver, context);
  bool no_context = false;
  absl::Status s = CreateLocked(context, &no_context);
  // A context that cannot be made current here gets the maps at its first
  // module load or library fill instead.
  if (!s.ok() && !no_context) {
    failed_ = absl::Status(s.code(), absl::StrCat("cannot create the probes' maps: ", s.message()));
  }
}

absl::Status DeviceMaps::Publish(uint64_t now_ns) {
  absl::MutexLock lock(&mu_);
  if (!maps_.has_value() || !claimed_ || !seeded_) return absl::OkStatus();
  CUPROBE_RETURN_IF_ERROR(EnsureStreamLocked());
  ScopedCurrentContext scope(driver_, context_);
  TakeAdoptedCountersLocked();
  return maps_->Publish(now_ns);
}

absl::Status DeviceMaps::PumpRings() {
  absl::MutexLock lock(&mu_);
  if (ring_data_ == RingData::kHost || !maps_.has_value() || !maps_->has_rings() ||
      !claimed_ || !seeded_) {
    return absl::OkStatus();
  }
  CUPROBE_RETURN_IF_ERROR(EnsureStreamLocked());
  ScopedCurrentContext scope(driver_, context_);
  return maps_->PumpRings().status();
}

bool DeviceMaps::mirrors_rings() const {
  if (ring_data_ == RingData::kHost) return false;
  return std::any_of(specs_.begin(), specs_.end(),
                     [](const MapSpec& m) { return m.type == CUPROBE_MAP_RINGBUF; });
}

absl::Status DeviceMaps::EnsureStreamLocked() {
  if (memory_->stream() != nullptr) return absl::OkStatus();
  {
    ScopedCurrentContext scope(driver_, context_);
    CUPROBE_RETURN_IF_ERROR(memory_->MoveStream(nullptr, context_));
  }
  if (on_stream_) on_stream_(context_, memory_->stream());
  return absl::OkStatus();
}

absl::Status DeviceMaps::Release(uint64_t now_ns) {
  absl::MutexLock lock(&mu_);
  released_ = true;
  if (!maps_.has_value()) return absl::OkStatus();
  // Exiting: kernels may still run until the process is gone, so the claim
  // stays until then (the next process takes over from a dead holder).
  return PublishAndFreeLocked(now_ns, /*give_back=*/false);
}

}  // namespace cuprobe
