#include "cupti_hook/module_patcher.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuprobe/abi.h"
#include "support/log.h"
#include "support/status_macros.h"

namespace cuprobe {

// One instrumented load, from ENTER (image swapped) to unload.
struct ModulePatcher::Pending {
  ImageSource source;
  InstrumentedImage image;
  std::string file;  // the replacement file of a file-based load
  bool is_library = false;
  // A library is loaded into every context that uses it, with fresh
  // globals: its site counters are registered again there (FillInstrumentedModule
  // consumes image.site_counters).
  std::vector<SiteCounter> site_counters;
  // The contexts a library was filled in (or found unable to take the
  // maps), so that none is filled twice.
  std::vector<CUcontext> filled;
  [[nodiscard]] bool FilledIn(CUcontext context) const {
    return std::find(filled.begin(), filled.end(), context) != filled.end();
  }
  ~Pending() {
    if (!file.empty()) ::unlink(file.c_str());
  }
};

namespace {

// What Produced compares: the bytes' hash, with their size.
uint64_t ImageHash(absl::Span<const uint8_t> image) {
  return absl::HashOf(std::string_view(reinterpret_cast<const char*>(image.data()), image.size()),
                      image.size());
}

// Writes `bytes` to a new file (mode 0600) in `dir`.
absl::StatusOr<std::string> WriteReplacementFile(const std::string& dir, uint64_t serial,
                                                 absl::Span<const uint8_t> bytes) {
  std::string path = absl::StrCat(dir, "/cuprobe-", ::getpid(), "-", serial, ".cubin");
  int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(path.c_str());
      return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", std::strerror(e)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return path;
}

std::string KernelList(const std::vector<std::pair<std::string, uint32_t>>& kernels) {
  constexpr size_t kShown = 8;
  std::vector<std::string> names;
  for (size_t i = 0; i < kernels.size() && i < kShown; ++i) names.push_back(kernels[i].first);
  std::string list = absl::StrJoin(names, ", ");
  if (kernels.size() > kShown) absl::StrAppend(&list, " and ", kernels.size() - kShown, " more");
  return list;
}

}  // namespace

// Where the image parameter of each load API is; nullptr for unloads.
const void** LiveImageParam(CUpti_CallbackId cbid, void* params) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData:
      return &static_cast<cuLibraryLoadData_params*>(params)->code;
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData:
      return &static_cast<cuModuleLoadData_params*>(params)->image;
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx:
      return &static_cast<cuModuleLoadDataEx_params*>(params)->image;
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary:
      return &static_cast<cuModuleLoadFatBinary_params*>(params)->fatCubin;
    default:
      return nullptr;
  }
}

const char** FileParam(CUpti_CallbackId cbid, void* params) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile:
      return &static_cast<cuLibraryLoadFromFile_params*>(params)->fileName;
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoad:
      return &static_cast<cuModuleLoad_params*>(params)->fname;
    default:
      return nullptr;
  }
}

bool IsLibraryLoadApi(CUpti_CallbackId cbid) {
  return cbid == CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile;
}

// The loaded handle (CUlibrary or CUmodule) after a successful load.
void* LoadedHandle(CUpti_CallbackId cbid, void* params) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData: {
      CUlibrary* out = static_cast<cuLibraryLoadData_params*>(params)->library;
      return out != nullptr ? static_cast<void*>(*out) : nullptr;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile: {
      CUlibrary* out = static_cast<cuLibraryLoadFromFile_params*>(params)->library;
      return out != nullptr ? static_cast<void*>(*out) : nullptr;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoad: {
      CUmodule* out = static_cast<cuModuleLoad_params*>(params)->module;
      return out != nullptr ? static_cast<void*>(*out) : nullptr;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData: {
      CUmodule* out = static_cast<cuModuleLoadData_params*>(params)->module;
      return out != nullptr ? static_cast<void*>(*out) : nullptr;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx: {
      CUmodule* out = static_cast<cuModuleLoadDataEx_params*>(params)->module;
      return out != nullptr ? static_cast<void*>(*out) : nullptr;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary: {
      CUmodule* out = static_cast<cuModuleLoadFatBinary_params*>(params)->module;
      return out != nullptr ? static_cast<void*>(*out) : nullptr;
    }
    default:
      return nullptr;
  }
}

ModulePatcher::~ModulePatcher() = default;

bool ModulePatcher::IsModuleCallback(CUpti_CallbackId cbid) {
  return std::find(kCallbacks.begin(), kCallbacks.end(), cbid) != kCallbacks.end();
}

ModulePatcher::ModulePatcher(CuptiSeam& seam, ImageInstrumenter& instrumenter,
                             MapTableProvider& maps, std::string file_dir)
    : seam_(seam), instrumenter_(instrumenter), maps_(maps), file_dir_(std::move(file_dir)) {}

bool ModulePatcher::Produced(absl::Span<const uint8_t> image) const {
  absl::MutexLock lock(&produced_mu_);
  return !produced_.empty() && produced_.contains(ImageHash(image));
}

void ModulePatcher::OnModuleApi(CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  if (data == nullptr || data->functionParams == nullptr) return;
  if (data->callbackSite == CUPTI_API_ENTER) {
    OnEnter(cbid, data);
  } else {
    OnExit(cbid, data);
  }
}

void ModulePatcher::OnEnter(CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  if (data->correlationData != nullptr) *data->correlationData = 0;
  // CUPTI hands the parameters as const, but they are the driver's own copy
  // of the arguments: changing the image pointer here makes the driver load
  // what it points to (DESIGN.md, measured on the H200).
  void* params = const_cast<void*>(data->functionParams);
  const void** live = LiveImageParam(cbid, params);
  const char** file = FileParam(cbid, params);
  if (live == nullptr && file == nullptr) return;  // an unload: see OnExit
  loads_seen_.fetch_add(1, std::memory_order_relaxed);
  if (data->correlationData == nullptr) return;  // nowhere to pass state to EXIT

  ImageSource source;
  if (live != nullptr) {
    if (*live == nullptr) return;
    source.live = *live;
  } else {
    if (*file == nullptr) return;
    source.path = *file;
  }
  absl::StatusOr<uint32_t> sm = seam_.CurrentDeviceSm();
  if (!sm.ok()) {
    CUPROBE_LOG(kWarning, "%s not instrumented: cannot tell the device's SM (%s)",
                source.Describe(), sm.status().message());
    return;
  }
  // A library needs no context (the CUDA 13 runtime loads a program's code
  // before making one current when its first call is a launch): with none
  // current, whether the maps can be given to a context is asked in each
  // context it is filled in.
  absl::StatusOr<CUcontext> current = seam_.CurrentContext();
  const bool no_context = current.ok() && *current == nullptr;
  if (!(no_context && IsLibraryLoadApi(cbid))) {
    if (absl::Status usable = maps_.UsableInCurrentContext(); !usable.ok()) {
      if (!context_warned_.exchange(true)) {
        CUPROBE_LOG(kWarning, "%s not instrumented: %s; later modules of this kind are not "
                    "reported", source.Describe(), usable.message());
      }
      return;
    }
  }
  absl::StatusOr<std::optional<InstrumentedImage>> result = instrumenter_.Instrument(source, *sm);
  if (!result.ok()) {
    modules_failed_.fetch_add(1, std::memory_order_relaxed);
    CUPROBE_LOG(kWarning, "%s not instrumented, loading it unchanged: %s", source.Describe(),
                result.status().message());
    return;
  }
  if (!result->has_value()) return;  // no probe selects its kernels
  auto pending = std::make_unique<Pending>();
  pending->source = std::move(source);
  pending->image = std::move(**result);
  if (!pending->image.not_instrumented.empty() && !patch_backend_) {
    CUPROBE_LOG(kWarning, "%s: %d kernel(s) selected by probes ship SASS only and are traced "
                "but not instrumented (`cuprobe run --backend auto` probes them): %s",
                pending->source.Describe(),
                pending->image.not_instrumented.size(),
                absl::StrJoin(pending->image.not_instrumented, ", "));
  } else if (!pending->image.not_instrumented.empty() && !pending->image.kernels.empty()) {
    // --backend auto: a module without instrumented kernels is patched; one
    // rewritten for its other kernels is not.
    CUPROBE_LOG(kWarning, "%s: %d kernel(s) selected by probes ship SASS only in a module "
                "rewritten for its other kernels, and run unprobed: %s",
                pending->source.Describe(), pending->image.not_instrumented.size(),
                absl::StrJoin(pending->image.not_instrumented, ", "));
  }
  if (pending->image.kernels.empty() || pending->image.cubin.empty()) return;
  if (absl::Status claimed = maps_.Claim(); !claimed.ok()) {
    if (!claim_warned_.exchange(true)) {
      CUPROBE_LOG(kWarning, "%s not instrumented: %s; this process's later modules are not "
                  "reported", pending->source.Describe(), claimed.message());
    }
    return;
  }
  {
    absl::MutexLock lock(&produced_mu_);
    produced_.insert(ImageHash(pending->image.cubin));
  }
  if (file != nullptr) {
    absl::StatusOr<std::string> path = WriteReplacementFile(
        file_dir_, file_serial_.fetch_add(1, std::memory_order_relaxed), pending->image.cubin);
    if (!path.ok()) {
      modules_failed_.fetch_add(1, std::memory_order_relaxed);
      CUPROBE_LOG(kWarning, "%s not instrumented, loading it unchanged: %s",
                  pending->source.Describe(), path.status().message());
      return;
    }
    pending->file = *std::move(path);
    *file = pending->file.c_str();
  } else {
    *live = pending->image.cubin.data();
  }
  // Handed to EXIT through CUPTI's per-call slot.
  *data->correlationData = reinterpret_cast<uint64_t>(pending.release());
}

void ModulePatcher::OnExit(CUpti_CallbackId cbid, const CUpti_CallbackData* data) {
  void* params = const_cast<void*>(data->functionParams);
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload ||
      cbid == CUPTI_DRIVER_TRACE_CBID_cuModuleUnload) {
    void* handle = cbid == CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload
                       ? static_cast<void*>(static_cast<cuLibraryUnload_params*>(params)->library)
                       : static_cast<void*>(static_cast<cuModuleUnload_params*>(params)->hmod);
    std::unique_ptr<Pending> gone;
    absl::MutexLock lock(&mu_);
    auto it = live_.find(handle);
    if (it != live_.end()) {
      gone = std::move(it->second);
      live_.erase(it);
      UpdatePendingFillLocked();
    }
    return;  // `gone` (its file too) is released after the lock
  }
  if (data->correlationData == nullptr || *data->correlationData == 0) return;
  std::unique_ptr<Pending> pending(reinterpret_cast<Pending*>(*data->correlationData));
  *data->correlationData = 0;
  CUresult result = data->functionReturnValue != nullptr
                        ? *static_cast<const CUresult*>(data->functionReturnValue)
                        : CUDA_ERROR_UNKNOWN;
  void* handle = LoadedHandle(cbid, params);
  if (result != CUDA_SUCCESS || handle == nullptr) {
    // The driver rejected the instrumented image: the program sees that
    // error. (The cubin was compiled for this exact SM and linked by
    // nvJitLink, so this is not expected; say so loudly.)
    modules_failed_.fetch_add(1, std::memory_order_relaxed);
    CUPROBE_LOG(kError, "the driver rejected the instrumented %s (CUresult %d)",
                pending->source.Describe(), static_cast<int>(result));
    return;
  }
  // The load may happen inside a stream capture (lazy loading at the first
  // launch of a captured kernel): our allocations and copies must not
  // invalidate the application's capture.
  absl::StatusOr<int> previous_mode =
      seam_.ExchangeCaptureMode(static_cast<int>(CU_STREAM_CAPTURE_MODE_RELAXED));
  pending->is_library = IsLibraryLoadApi(cbid);
  if (pending->is_library) {
    pending->site_counters = pending->image.site_counters;
  } else {
    // A module belongs to the context it was loaded in.
    FillInstrumentedModule(seam_, maps_, /*is_library=*/false, handle, pending->image,
                           module_globals_, pending->source.Describe());
  }
  modules_instrumented_.fetch_add(1, std::memory_order_relaxed);
  kernels_instrumented_.fetch_add(pending->image.kernels.size(), std::memory_order_relaxed);
  CUPROBE_LOG(kInfo, "instrumented %d kernel(s) of %s: %s", pending->image.kernels.size(),
              pending->source.Describe(), KernelList(pending->image.kernels));
  {
    absl::MutexLock lock(&mu_);
    Pending& kept = *pending;
    live_[handle] = std::move(pending);
    // Under the same hold as the insert: a context created before it is
    // filled here, one created after it by OnContextCreated.
    if (kept.is_library) {
      absl::StatusOr<CUcontext> current = seam_.CurrentContext();
      const CUcontext here = current.ok() ? *current : nullptr;
      if (here != nullptr) {
        // ENTER asked whether the maps may be given to this context.
        FillLibraryHereLocked(handle, kept, here, /*usable_checked=*/true);
      } else {
        CUPROBE_LOG(kInfo, "%s loaded while no CUDA context is current: its kernels get the "
                    "maps in each context that uses them", kept.source.Describe());
      }
      FillLibraryInOtherContextsLocked(handle, kept);
      UpdatePendingFillLocked();
    }
  }
  if (previous_mode.ok()) (void)seam_.ExchangeCaptureMode(*previous_mode);
}

void ModulePatcher::FillLibraryHereLocked(void* handle, Pending& pending, CUcontext context,
                                          bool usable_checked, bool last_chance) {
  if (pending.FilledIn(context)) return;
  if (!last_chance && pending.image.map_table_entries > 0) {
    // Not in the context yet (under CUDA_MODULE_LOADING=EAGER the driver
    // loads a library into a new context after the creation callbacks):
    // left unfilled, so that the context's first launch fills it.
    absl::StatusOr<DeviceGlobal> table =
        seam_.LibraryGlobal(static_cast<CUlibrary>(handle), CUPROBE_MAP_TABLE_SYMBOL);
    if (table.status().code() == absl::StatusCode::kNotFound) {
      CUPROBE_LOG(kDebug, "%s: not in this context yet; filled at its first launch",
                  pending.source.Describe());
      return;
    }
  }
  pending.filled.push_back(context);
  // Maps that cannot be shared with this context: its copy of the library
  // keeps a zeroed table (its probes do nothing).
  absl::Status usable = usable_checked ? absl::OkStatus() : maps_.UsableInCurrentContext();
  if (!usable.ok()) {
    if (!context_warned_.exchange(true)) {
      CUPROBE_LOG(kWarning, "%s not instrumented in another context: %s; later modules of "
                  "this kind are not reported", pending.source.Describe(), usable.message());
    }
    return;
  }
  pending.image.site_counters = pending.site_counters;
  FillInstrumentedModule(seam_, maps_, /*is_library=*/true, handle, pending.image,
                         module_globals_, pending.source.Describe());
  if (pending.filled.size() > 1) {
    CUPROBE_LOG(kInfo, "%s: its instrumented kernels reach the maps in another context too",
                pending.source.Describe());
  }
}

void ModulePatcher::FillLibraryInOtherContextsLocked(void* handle, Pending& pending) {
  absl::StatusOr<CUcontext> current = seam_.CurrentContext();
  const CUcontext here = current.ok() ? *current : nullptr;
  for (CUcontext context : contexts_) {
    if (context == here || pending.FilledIn(context)) continue;
    absl::Status entered =
        seam_.InContext(context, [&] { FillLibraryHereLocked(handle, pending, context); });
    if (!entered.ok()) {
      // Not marked filled: the first launch in that context fills it.
      CUPROBE_LOG(kDebug, "%s: cannot fill it in another context yet: %s",
                  pending.source.Describe(), entered.message());
    }
  }
}

void ModulePatcher::UpdatePendingFillLocked() {
  bool pending = false;
  for (const auto& [handle, p] : live_) {
    if (!p->is_library) continue;
    if (p->filled.empty()) pending = true;
    for (CUcontext context : contexts_) pending = pending || !p->FilledIn(context);
    if (pending) break;
  }
  pending_fill_.store(pending, std::memory_order_relaxed);
}

void ModulePatcher::OnContextDestroying(CUcontext context) {
  absl::MutexLock lock(&mu_);
  contexts_.erase(std::remove(contexts_.begin(), contexts_.end(), context), contexts_.end());
  // A context made later may get the same handle: it starts unfilled.
  for (auto& [handle, pending] : live_) {
    std::vector<CUcontext>& filled = pending->filled;
    filled.erase(std::remove(filled.begin(), filled.end(), context), filled.end());
  }
  UpdatePendingFillLocked();
}

void ModulePatcher::OnContextCreated(CUcontext context) {
  absl::MutexLock lock(&mu_);
  if (context != nullptr && std::find(contexts_.begin(), contexts_.end(), context) ==
                                contexts_.end()) {
    contexts_.push_back(context);
  }
  FillLibrariesHereLocked(context);
}

void ModulePatcher::OnLaunch(CUcontext context) {
  absl::MutexLock lock(&mu_);
  FillLibrariesHereLocked(context, /*last_chance=*/true);
}

void ModulePatcher::FillLibrariesHereLocked(CUcontext context, bool last_chance) {
  // Only with `context` current (the hook makes a new context current for
  // this; should that have failed, the context's first launch fills it).
  absl::StatusOr<CUcontext> current = seam_.CurrentContext();
  const CUcontext here = current.ok() ? *current : nullptr;
  if (here != nullptr && (context == nullptr || here == context)) {
    bool any = false;
    for (const auto& [handle, pending] : live_) {
      any = any || (pending->is_library && !pending->FilledIn(here));
    }
    if (any) {
      absl::StatusOr<int> previous_mode =
          seam_.ExchangeCaptureMode(static_cast<int>(CU_STREAM_CAPTURE_MODE_RELAXED));
      for (auto& [handle, pending] : live_) {
        if (pending->is_library) {
          FillLibraryHereLocked(handle, *pending, here, /*usable_checked=*/false, last_chance);
        }
      }
      if (previous_mode.ok()) (void)seam_.ExchangeCaptureMode(*previous_mode);
    }
  }
  UpdatePendingFillLocked();
}

namespace {

absl::StatusOr<DeviceGlobal> ModuleGlobalOf(CuptiSeam& seam, bool is_library, void* handle,
                                            const char* symbol) {
  return is_library ? seam.LibraryGlobal(static_cast<CUlibrary>(handle), symbol)
                    : seam.ModuleGlobal(static_cast<CUmodule>(handle), symbol);
}

// The table (and, for probes that read it, the descriptors' constant copy,
// written first: the table is written only once the copy is, so inline map
// code never finds a filled table beside an empty copy).
absl::Status FillMapTable(CuptiSeam& seam, MapTableProvider& maps, bool is_library, void* handle,
                          uint32_t entries, bool descs) {
  std::vector<uint64_t> table;
  std::vector<uint8_t> copies;
  if (descs) {
    absl::StatusOr<MapTableProvider::TableAndDescriptors> both = maps.MapTableAndDescriptors();
    if (!both.ok()) return both.status();
    table = std::move(both->table);
    copies = std::move(both->descriptors);
  } else {
    absl::StatusOr<std::vector<uint64_t>> only = maps.MapTable();
    if (!only.ok()) return only.status();
    table = *std::move(only);
  }
  if (table.size() != entries) {
    return absl::InternalError(absl::StrCat("the module's map table has ", entries,
                                            " entries, the session has ", table.size(), " maps"));
  }
  absl::StatusOr<DeviceGlobal> global =
      ModuleGlobalOf(seam, is_library, handle, CUPROBE_MAP_TABLE_SYMBOL);
  if (!global.ok()) return global.status();
  const size_t bytes = table.size() * sizeof(uint64_t);
  if (global->bytes < bytes) {
    return absl::InternalError(absl::StrCat(CUPROBE_MAP_TABLE_SYMBOL, " is ", global->bytes,
                                            " bytes, expected ", bytes));
  }
  if (descs) {
    const size_t copy_bytes = size_t{entries} * CUPROBE_MAP_DESCS_ENTRY_SIZE;
    if (copies.size() != copy_bytes) {
      return absl::InternalError(absl::StrCat("the session's map descriptors are ",
                                              copies.size(), " bytes, the module's table needs ",
                                              copy_bytes));
    }
    absl::StatusOr<DeviceGlobal> constants =
        ModuleGlobalOf(seam, is_library, handle, CUPROBE_MAP_DESCS_SYMBOL);
    if (!constants.ok()) return constants.status();
    if (constants->bytes < copy_bytes) {
      return absl::InternalError(absl::StrCat(CUPROBE_MAP_DESCS_SYMBOL, " is ", constants->bytes,
                                              " bytes, expected ", copy_bytes));
    }
    CUPROBE_RETURN_IF_ERROR(seam.MemcpyHtoD(constants->address, copies.data(), copy_bytes));
  }
  return seam.MemcpyHtoD(global->address, table.data(), bytes);
}

absl::Status FillSiteCounts(CuptiSeam& seam, MapTableProvider& maps, bool is_library,
                            void* handle, std::vector<SiteCounter> counters) {
  absl::StatusOr<DeviceGlobal> global =
      ModuleGlobalOf(seam, is_library, handle, CUPROBE_SITE_COUNTS_SYMBOL);
  if (!global.ok()) return global.status();
  if (global->bytes < sizeof(uint64_t)) {
    return absl::InternalError(absl::StrCat(CUPROBE_SITE_COUNTS_SYMBOL, " is ", global->bytes,
                                            " bytes"));
  }
  absl::StatusOr<uint64_t> base = maps.AddSiteCounters(std::move(counters));
  if (!base.ok()) return base.status();
  const uint64_t address = *base;
  return seam.MemcpyHtoD(global->address, &address, sizeof(address));
}

}  // namespace

void FillInstrumentedModule(CuptiSeam& seam, MapTableProvider& maps, bool is_library,
                            void* handle, InstrumentedImage& image,
                            const std::vector<std::pair<std::string, std::vector<uint8_t>>>& globals,
                            const std::string& what) {
  if (image.map_table_entries > 0) {
    absl::Status s =
        FillMapTable(seam, maps, is_library, handle, image.map_table_entries, image.map_descs);
    if (!s.ok()) {
      // The kernels run with a zeroed table (and descriptor copy): helpers
      // see null maps and do nothing (the helper library checks), inline map
      // code refuses the zero copy, and a probe with global data returns at
      // once, so the program is unaffected.
      CUPROBE_LOG(kWarning, "%s: probes cannot reach their maps: %s", what, s.message());
    }
  }
  if (!image.site_counters.empty()) {
    const size_t n = image.site_counters.size();
    absl::Status s = FillSiteCounts(seam, maps, is_library, handle, std::move(image.site_counters));
    if (!s.ok()) {
      // The kernels see a null address and skip the flush: the counts of
      // these sites are lost, the program is unaffected.
      CUPROBE_LOG(kWarning, "%s: the counts of %d probe site counter(s) cannot be kept: %s", what,
                  n, s.message());
    }
  }
  for (const auto& [symbol, value] : globals) {
    absl::StatusOr<DeviceGlobal> g = ModuleGlobalOf(seam, is_library, handle, symbol.c_str());
    if (!g.ok() || g->bytes < value.size()) continue;  // the module does not use it
    absl::Status s = seam.MemcpyHtoD(g->address, value.data(), value.size());
    if (!s.ok()) CUPROBE_LOG(kWarning, "%s: cannot set %s: %s", what, symbol, s.message());
  }
}

void ModulePatcher::AddModuleGlobal(std::string symbol, std::vector<uint8_t> value) {
  module_globals_.emplace_back(std::move(symbol), std::move(value));
}

ModulePatcherStats ModulePatcher::stats() const {
  ModulePatcherStats s;
  s.loads_seen = loads_seen_.load();
  s.modules_instrumented = modules_instrumented_.load();
  s.kernels_instrumented = kernels_instrumented_.load();
  s.modules_failed = modules_failed_.load();
  return s;
}

}  // namespace cuprobe
