// File: cupti_hook/kernel_patcher.cc
#include "cupti_hook/kernel_patcher.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "maps/map_set.h"
#include "probe/kernel_glob.h"
#include "ptx_rewriter/patch_adapters.h"
#include "ptx_rewriter/elf.h"
#include "support/cuda_driver.h"
#include "support/log.h"
#include "support/status_macros.h"

namespace cuprobe {
namespace {

static_assert(sizeof(cuprobe_patch_kernel) == CUPROBE_PATCH_KERNEL_SIZE);

// The kernelParams of the launch call this thread is in (OnLaunchApi).
thread_local void* const* t_kernel_params = nullptr;

bool ReadsArguments(const ProbeBundle& bundle) {
  for (const ProbeProgram& p : bundle.programs) {
    if (p.reads_args) return true;
  }
  return false;
}

// Whether a cubin has a kernel that `mask_of` selects; true when its
// kernels cannot be named (the launch decides then).
template <typename MaskOf>
bool AnyKernelSelected(absl::Span<const uint8_t> cubin, const MaskOf& mask_of) {
  if (cubin.empty()) return true;
  absl::StatusOr<CubinInfo> info = ReadCubin(cubin);
  if (!info.ok()) return true;
  for (const std::string& name : info->KernelNames()) {
    if (mask_of(name) != 0) return true;
  }
  return false;
}

}  // namespace

KernelPatcher::KernelPatcher(CuptiSeam& seam, SanitizerSeam& sanitizer,
                             const ProbeBundle& bundle, MapTableProvider& maps,
                             PatchBuilder build, KernelListener on_kernel, Options options)
    : seam_(seam),
      sanitizer_(sanitizer),
      bundle_(bundle),
      maps_(maps),
      build_(std::move(build)),
      on_kernel_(std::move(on_kernel)),
      wants_args_(ReadsArguments(bundle)),
      options_(options) {}

void KernelPatcher::OnLaunchApi(void* const* kernel_params) { t_kernel_params = kernel_params; }

const CudaDriver* KernelPatcher::DriverOrNull() {
  absl::StatusOr<const CudaDriver*> driver = seam_.Driver();
  return driver.ok() ? *driver : nullptr;
}

uint32_t KernelPatcher::MaskOf(std::string_view mangled) const {
  return ProgramMask(bundle_, mangled, KernelBaseName(mangled));
}

void KernelPatcher::WarnOnce(std::atomic<bool>& flag, const std::string& what,
                             const absl::Status& why) {
  if (flag.exchange(true)) return;
  CUPROBE_LOG(kWarning, "%s: %s", what, why.message());
}

absl::StatusOr<const PatchModule*> KernelPatcher::PatchesLocked(bool* unbuildable) {
  absl::StatusOr<uint32_t> sm = seam_.CurrentDeviceSm();
  if (!sm.ok()) {
    *unbuildable = true;
    return sm.status();
  }
  auto it = patches_.find(*sm);
  if (it == patches_.end()) {
    it = patches_.emplace(*sm, build_(*sm)).first;
    if (it->second.ok()) {
      CUPROBE_LOG(kInfo, "patch backend: patch module for sm_%d built (%d callback(s)%s)", *sm,
                  it->second->callbacks.size(), it->second->cache_hit ? ", cached" : "");
    }
  }
  if (!it->second.ok()) {
    *unbuildable = true;
    return it->second.status();
  }
  return &*it->second;
}

absl::Status KernelPatcher::PatchModuleLocked(CUcontext context, CUmodule module,
                                              bool* unbuildable) {
  CUPROBE_ASSIGN_OR_RETURN(const PatchModule* patches, PatchesLocked(unbuildable));
  ContextState& state = contexts_[context];
  if (!state.patches_added) {
    CUPROBE_RETURN_IF_ERROR(sanitizer_.AddPatches(patches->cubin.data(), context));
    state.patches_added = true;
  }
  for (const PatchCallback& cb : patches->callbacks) {
    if (cb.instruction == sanitizer::kMemcpyAsync && !options_.async_copies) continue;
    CUPROBE_RETURN_IF_ERROR(sanitizer_.PatchInstructions(
        static_cast<sanitizer::Instruction>(cb.instruction), module, cb.function.c_str()));
  }
  return sanitizer_.PatchModule(module);
}

void KernelPatcher::OnModuleLoaded(CUcontext context, CUmodule module,
                                   absl::Span<const uint8_t> cubin) {
  modules_seen_.fetch_add(1, std::memory_order_relaxed);
  if (module == nullptr) return;
  if (!AnyKernelSelected(cubin, [this](std::string_view n) { return MaskOf(n); })) return;
  if (options_.rewritten && !cubin.empty() && options_.rewritten(cubin)) {
    if (modules_rewritten_.fetch_add(1, std::memory_order_relaxed) == 0) {
      CUPROBE_LOG(kInfo, "auto backend: modules rewritten from their PTX are not patched");
    }
    absl::MutexLock lock(&mu_);
    rewritten_modules_.insert(module);
    return;
  }
  absl::MutexLock lock(&setup_mu_);
  if (!patched_modules_.insert(module).second) return;
  absl::Status s;
  bool unbuildable = false;
  {
    // The module's device decides the SM of the patch module it gets.
    ScopedCurrentContext in(DriverOrNull(), context);
    s = in.ok() ? PatchModuleLocked(context, module, &unbuildable) : in.status();
  }
  if (s.ok()) {
    modules_patched_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  modules_failed_.fetch_add(1, std::memory_order_relaxed);
  if (unbuildable) {
    // No patch module: every module fails the same way; say it once.
    WarnOnce(build_warned_, "patch backend: no probes run (the patch module cannot be built)",
             s);
    return;
  }
  CUPROBE_LOG(kWarning, "patch backend: cannot patch a module (%s); its kernels run unprobed",
              s.message());
}

absl::StatusOr<CUdeviceptr> KernelPatcher::UploadLocked(absl::Span<const uint8_t> bytes) {
  CUPROBE_ASSIGN_OR_RETURN(const CudaDriver* driver, seam_.Driver());
  absl::StatusOr<int> previous_mode =
      seam_.ExchangeCaptureMode(static_cast<int>(CU_STREAM_CAPTURE_MODE_RELAXED));
  CUdeviceptr ptr = 0;
  absl::Status s = driver->Check(driver->MemAlloc(&ptr, bytes.size()), "cuMemAlloc");
  if (s.ok()) s = seam_.MemcpyHtoD(ptr, bytes.data(), bytes.size());
  if (!s.ok() && ptr != 0) (void)driver->MemFree(ptr);
  if (previous_mode.ok()) (void)seam_.ExchangeCaptureMode(*previous_mode);
  if (!s.ok()) return s;
  return ptr;
}

absl::StatusOr<CUdeviceptr> KernelPatcher::MapBlockLocked(ContextState& state) {
  if (state.map_block != 0) return state.map_block;
  const size_t slots = PatchMapSlots(bundle_);
  std::vector<uint8_t> block(slots * (CUPROBE_MAP_DESCS_ENTRY_SIZE + sizeof(uint64_t)), 0);
  if (!bundle_.maps.empty()) {
    CUPROBE_RETURN_IF_ERROR(maps_.UsableInCurrentContext());
    CUPROBE_RETURN_IF_ERROR(maps_.Claim());
    CUPROBE_ASSIGN_OR_RETURN(MapTableProvider::TableAndDescriptors maps,
                             maps_.MapTableAndDescriptors());
    if (maps.table.size() > slots ||
        maps.descriptors.size() > slots * CUPROBE_MAP_DESCS_ENTRY_SIZE) {
      return absl::InternalError("the maps outgrow the patch module's map slots");
    }
    std::memcpy(block.data(), maps.descriptors.data(), maps.descriptors.size());
    std::memcpy(block.data() + slots * CUPROBE_MAP_DESCS_ENTRY_SIZE, maps.table.data(),
                maps.table.size() * sizeof(uint64_t));
  }
  CUPROBE_ASSIGN_OR_RETURN(state.map_block, UploadLocked(block));
  return state.map_block;
}

uint32_t KernelPatcher::IdOfLocked(const std::string& mangled) {
  if (options_.kernel_id) return options_.kernel_id(mangled);
  auto [it, inserted] = ids_.try_emplace(mangled, static_cast<uint32_t>(ids_.size()));
  if (inserted && on_kernel_) on_kernel_(mangled, it->second);
  return it->second;
}

cuprobe_patch_kernel KernelPatcher::BlockOf(CUdeviceptr map_block, const KernelState& kernel) {
  cuprobe_patch_kernel k = {};
  k.map_block = map_block;
  k.kernel_id = kernel.id;
  k.programs = kernel.programs;
  k.site_counters = kernel.site_counters;
  std::memcpy(k.counter_of, kernel.counter_of.data(), sizeof(k.counter_of));
  return k;
}

void KernelPatcher::SetUpCountersLocked(KernelState& kernel, std::string_view name) {
  if (!options_.site_counters) return;
  std::optional<PatchKernelCounters> counters =
      PatchSiteCounters(bundle_, kernel.programs, kernel.id);
  if (!counters.has_value()) return;
  // The block is made here, in the launch's context, and handed to the
  // maps without waiting on their lock (AdoptSiteCounters).
  const std::vector<uint8_t> zeros(MapSet::SiteCounterBytes(counters->counters.size()), 0);
  absl::StatusOr<CUdeviceptr> base = UploadLocked(zeros);
  absl::Status s = base.status();
  if (s.ok()) s = maps_.AdoptSiteCounters(std::move(counters->counters), *base);
  if (!s.ok()) {
    if (base.ok()) {
      if (const CudaDriver* driver = DriverOrNull(); driver != nullptr) (void)driver->MemFree(*base);
    }
    WarnOnce(counters_warned_,
             "patch backend: memory probes run at every access (no site counters)", s);
    return;
  }
  kernel.site_counters = *base;
  kernel.counter_of = counters->counter_of;
  CUPROBE_LOG(kInfo, "patch backend: %s counts its memory accesses in site counters", name);
}

absl::Status KernelPatcher::GiveBlockLocked(CUcontext context, CUfunction function,
                                            const KernelState& kernel) {
  ContextState& state = contexts_[context];
  CUPROBE_ASSIGN_OR_RETURN(CUdeviceptr map_block, MapBlockLocked(state));
  const cuprobe_patch_kernel k = BlockOf(map_block, kernel);
  std::vector<uint8_t> bytes(sizeof(k));
  std::memcpy(bytes.data(), &k, sizeof(k));
  CUPROBE_ASSIGN_OR_RETURN(CUdeviceptr block, UploadLocked(bytes));
  return sanitizer_.SetCallbackData(function, reinterpret_cast<const void*>(block));
}

std::vector<uint32_t> KernelPatcher::ParamSizes(CUfunction function) {
  std::vector<uint32_t> sizes;
  absl::StatusOr<const CudaDriver*> driver = seam_.Driver();
  if (!driver.ok() || !(*driver)->param_info_status.ok()) return sizes;
  for (size_t i = 0; i < CUPROBE_MAX_ARGS; ++i) {
    size_t offset = 0, size = 0;
    if ((*driver)->FuncGetParamInfo(function, i, &offset, &size) != CUDA_SUCCESS) break;
    sizes.push_back(static_cast<uint32_t>(size));
  }
  return sizes;
}

absl::StatusOr<KernelPatcher::ArgRing*> KernelPatcher::RingLocked(ContextState& state,
                                                                 sanitizer::StreamHandle stream) {
  ArgRing* ring = &state.shared;
  if (auto it = state.rings.find(stream); it != state.rings.end()) {
    ring = &it->second;
  } else if (state.rings.size() < kArgRingStreams) {
    ring = &state.rings[stream];
  }
  if (ring->device == 0) {
    std::vector<uint8_t> zeros(size_t{kArgBlocks} * sizeof(cuprobe_patch_kernel), 0);
    CUPROBE_ASSIGN_OR_RETURN(ring->device, UploadLocked(zeros));
    ring->host.resize(kArgBlocks);
  }
  return ring;
}

absl::Status KernelPatcher::GiveLaunchBlockLocked(const Launch& launch, const KernelState& kernel,
                                                  void* const* params) {
  ContextState& state = contexts_[launch.context];
  CUPROBE_ASSIGN_OR_RETURN(CUdeviceptr map_block, MapBlockLocked(state));
  CUPROBE_ASSIGN_OR_RETURN(ArgRing* ring, RingLocked(state, launch.stream));
  const uint32_t slot = ring->next;
  ring->next = (ring->next + 1) % kArgBlocks;
  cuprobe_patch_kernel& k = ring->host[slot];
  k = BlockOf(map_block, kernel);
  if (params != nullptr) {
    k.args.count = static_cast<cuprobe_u32>(kernel.param_sizes.size());
    for (size_t i = 0; i < kernel.param_sizes.size(); ++i) {
      // Zero-extended, or a larger argument's first 8 bytes (abi.h).
      std::memcpy(&k.args.value[i], params[i], std::min<uint32_t>(kernel.param_sizes[i], 8));
    }
  }
  const CUdeviceptr block = ring->device + CUdeviceptr{slot} * sizeof(cuprobe_patch_kernel);
  CUPROBE_RETURN_IF_ERROR(sanitizer_.CopyToDeviceAsync(reinterpret_cast<void*>(block), &k,
                                                       sizeof(k), launch.stream));
  return sanitizer_.SetLaunchCallbackData(launch.launch, launch.function, launch.stream,
                                          reinterpret_cast<const void*>(block));
}

void KernelPatcher::OnLaunchBegin(const Launch& launch) {
  void* const* params = t_kernel_params;
  t_kernel_params = nullptr;
  if (launch.function == nullptr || launch.name == nullptr) return;
  KernelState kernel;
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = launched_.try_emplace({launch.context, launch.function});
    if (inserted) {
      it->second.module = launch.module;
      it->second.programs = rewritten_modules_.contains(launch.module) ? 0 : MaskOf(launch.name);
      if (it->second.programs != 0) it->second.id = IdOfLocked(launch.name);
    }
    if (it->second.programs == 0 || (!inserted && !wants_args_)) return;  // the common case
    kernel = it->second;
    first = inserted;
  }
  // The slow part: driver and Sanitizer calls, without mu_. What it writes
  // belongs to the launch's context.
  absl::MutexLock setup(&setup_mu_);
  ScopedCurrentContext in(DriverOrNull(), launch.context);
  if (first) {
    // What later launches reuse: site counters (once the context's maps
    // exist) and the parameter sizes. Every later launch that needs them
    // (an argument-reading bundle's) passes setup_mu_ and sees them.
    if (in.ok() && MapBlockLocked(contexts_[launch.context]).ok()) SetUpCountersLocked(kernel, launch.name);
    if (wants_args_) kernel.param_sizes = ParamSizes(launch.function);
    absl::MutexLock lock(&mu_);
    auto it = launched_.find({launch.context, launch.function});
    if (it != launched_.end()) {
      it->second.site_counters = kernel.site_counters;
      it->second.counter_of = kernel.counter_of;
      it->second.param_sizes = kernel.param_sizes;
      it->second.set_up = true;
    }
  } else if (wants_args_) {
    {
      absl::MutexLock lock(&mu_);
      auto it = launched_.find({launch.context, launch.function});
      if (it != launched_.end()) kernel = it->second;
    }
    // Ahead of the first launch's setup (setup_mu_ is not first come,
    // first served): this launch's own sizes, and its programs called.
    if (!kernel.set_up) kernel.param_sizes = ParamSizes(launch.function);
  }
  if (first && !wants_args_) {
    absl::Status s = in.ok() ? GiveBlockLocked(launch.context, launch.function, kernel)
                             : in.status();
    if (!s.ok()) {
      {
        absl::MutexLock lock(&mu_);
        auto it = launched_.find({launch.context, launch.function});
        if (it != launched_.end()) it->second.programs = 0;
      }
      WarnOnce(block_warned_, absl::StrCat("patch backend: kernel ", launch.name,
                                           " runs unprobed"), s);
      return;
    }
  }
  if (first) kernels_probed_.fetch_add(1, std::memory_order_relaxed);
  if (!wants_args_) return;
  absl::Status s = in.ok() ? GiveLaunchBlockLocked(launch, kernel, params) : in.status();
  if (!s.ok()) {
    WarnOnce(args_warned_, absl::StrCat("patch backend: a launch of ", launch.name,
                                        " runs unprobed"), s);
  }
}

void KernelPatcher::OnContextDestroying(CUcontext context) {
  absl::MutexLock setup(&setup_mu_);
  contexts_.erase(context);
  absl::MutexLock lock(&mu_);
  absl::erase_if(launched_, [context](const auto& e) { return e.first.first == context; });
}

void KernelPatcher::OnModuleUnloading(CUmodule module) {
  absl::MutexLock setup(&setup_mu_);
  patched_modules_.erase(module);
  absl::MutexLock lock(&mu_);
  rewritten_modules_.erase(module);
  absl::erase_if(launched_, [module](const auto& e) { return e.second.module == module; });
}

KernelPatcherStats KernelPatcher::stats() const {
  return {modules_seen_.load(), modules_patched_.load(), modules_failed_.load(),
          kernels_probed_.load(), modules_rewritten_.load()};
}

}  // namespace cuprobe
