// ModulePatcher against the fake seam: module-load callbacks built by hand as
// CUPTI delivers them (ENTER, then EXIT with the driver's result), with a
// scripted instrumenter and map table. The real driver path is covered by
// the GPU tests of `cuprobe run`.
#include "cupti_hook/module_patcher.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <fstream>
#include <optional>
#include <sstream>

#include "cupti_hook/testing/fake_seam.h"
#include "cuprobe/abi.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/log.h"

namespace cuprobe {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class ScriptedInstrumenter : public ImageInstrumenter {
 public:
  absl::StatusOr<std::optional<InstrumentedImage>> result = std::optional<InstrumentedImage>();
  std::vector<ImageSource> seen;
  std::vector<uint32_t> sms;
  absl::StatusOr<std::optional<InstrumentedImage>> Instrument(const ImageSource& source,
                                                              uint32_t sm) override {
    seen.push_back(source);
    sms.push_back(sm);
    return result;
  }
};

class FixedMaps : public MapTableProvider {
 public:
  absl::StatusOr<std::vector<uint64_t>> table = std::vector<uint64_t>{0x1000, 0x2000};
  int calls = 0;
  // The seam's current context (Rig sets it), recorded at each table and
  // site-counter registration.
  const CUcontext* current = nullptr;
  std::vector<CUcontext> table_contexts;
  std::vector<CUcontext> site_contexts;
  void Seen(std::vector<CUcontext>& where) { where.push_back(current ? *current : nullptr); }
  absl::StatusOr<std::vector<uint64_t>> MapTable() override {
    ++calls;
    Seen(table_contexts);
    return table;
  }
  absl::StatusOr<std::vector<uint8_t>> descriptors = absl::UnimplementedError("none");
  absl::StatusOr<TableAndDescriptors> MapTableAndDescriptors() override {
    ++calls;
    Seen(table_contexts);
    if (!table.ok()) return table.status();
    if (!descriptors.ok()) return descriptors.status();
    return TableAndDescriptors{*table, *descriptors};
  }
  absl::Status usable;
  absl::Status UsableInCurrentContext() override { return usable; }
  absl::Status claim;
  int claims = 0;
  absl::Status Claim() override {
    ++claims;
    return claim;
  }
  absl::StatusOr<uint64_t> site_base = uint64_t{0xC0FFEE00};
  std::vector<SiteCounter> site_counters;
  absl::StatusOr<uint64_t> AddSiteCounters(std::vector<SiteCounter> counters) override {
    Seen(site_contexts);
    site_counters = std::move(counters);
    return site_base;
  }
};

InstrumentedImage SomeImage(uint32_t entries = 2) {
  InstrumentedImage image;
  image.cubin = {0x7f, 'E', 'L', 'F', 1, 2, 3, 4};
  image.kernels = {{"_Z7vec_addPKfS0_Pfi", 1}, {"_Z5scalePffi", 2}};
  image.map_table_entries = entries;
  return image;
}

// Captures the hook's log lines.
class LogCapture {
 public:
  LogCapture() {
    EXPECT_EQ(::pipe(fds_), 0);
    SetLogFd(fds_[1]);
  }
  ~LogCapture() {
    SetLogFd(2);
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  std::string Read() {
    SetLogFd(2);
    ::close(fds_[1]);
    fds_[1] = ::open("/dev/null", O_WRONLY);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds_[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  int fds_[2] = {-1, -1};
};

const auto kRigContext = reinterpret_cast<CUcontext>(0x1C0);

struct Rig {
  FakeSeam seam;
  ScriptedInstrumenter instrumenter;
  FixedMaps maps;
  std::string dir;
  std::unique_ptr<ModulePatcher> patcher;
  Rig() {
    char tmpl[] = "/tmp/cuprobe-patcher-XXXXXX";
    dir = ::mkdtemp(tmpl);
    patcher = std::make_unique<ModulePatcher>(seam, instrumenter, maps, dir);
    maps.current = &seam.current_context;
    seam.current_context = kRigContext;  // the program's context, current
  }
  // ENTER with `params`, then EXIT with `result` after `driver` ran (the
  // test's stand-in for the driver: it sees the parameters as swapped).
  template <typename Params, typename Driver>
  void Call(CUpti_CallbackId cbid, Params* params, CUresult result, Driver driver) {
    uint64_t slot = 0;
    CUpti_CallbackData data = {};
    data.functionParams = params;
    data.functionReturnValue = &result;
    data.correlationData = &slot;
    data.callbackSite = CUPTI_API_ENTER;
    patcher->OnModuleApi(cbid, &data);
    driver();
    data.callbackSite = CUPTI_API_EXIT;
    patcher->OnModuleApi(cbid, &data);
    EXPECT_EQ(slot, 0u) << "EXIT consumed the pending state";
  }
  // cuModuleLoadDataEx of a stand-in image that the driver loads as `mod`.
  void LoadDataEx(CUmodule mod) {
    int image = 0;
    CUmodule out = nullptr;
    cuModuleLoadDataEx_params p = {};
    p.module = &out;
    p.image = &image;
    Call(CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx, &p, CUDA_SUCCESS, [&] { out = mod; });
  }
  // cuLibraryLoadData of a stand-in image that the driver loads as `lib`;
  // `during` runs between ENTER and EXIT.
  void LoadLibrary(CUlibrary lib, const std::function<void()>& during = [] {}) {
    int image = 0;
    CUlibrary out = nullptr;
    cuLibraryLoadData_params p = {};
    p.library = &out;
    p.code = &image;
    Call(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &p, CUDA_SUCCESS, [&] {
      out = lib;
      during();
    });
  }
};

// Maps that live in another context (or whose context was destroyed): the
// module loads as it was, without asking the instrumenter, with one message.
TEST(ModulePatcher, MapsOfAnotherContextLeaveTheModuleAlone) {
  Rig rig;
  rig.maps.usable = absl::FailedPreconditionError("the probes' maps live in another CUDA context");
  rig.instrumenter.result = std::optional<InstrumentedImage>(SomeImage());
  int image = 0;
  CUlibrary out = nullptr;
  cuLibraryLoadData_params p = {};
  p.library = &out;
  p.code = &image;
  rig.Call(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &p, CUDA_SUCCESS, [&] {
    EXPECT_EQ(p.code, &image) << "the original image loads";
    out = reinterpret_cast<CUlibrary>(0x10);
  });
  EXPECT_TRUE(rig.instrumenter.seen.empty());
  EXPECT_EQ(rig.maps.calls, 0);
  EXPECT_EQ(rig.patcher->stats().modules_instrumented, 0u);
}

// Another process of the session holds the maps: a module with kernels to
// instrument loads as it was (asked only once there is something to give
// it), with one message for all of them.
TEST(ModulePatcher, MapsHeldByAnotherProcessLeaveTheModuleAlone) {
  Rig rig;
  rig.maps.claim = absl::FailedPreconditionError("the probes' maps are held by pid 77");
  rig.instrumenter.result = std::optional<InstrumentedImage>(SomeImage());
  for (int i = 0; i < 2; ++i) {
    int image = 0;
    CUlibrary out = nullptr;
    cuLibraryLoadData_params p = {};
    p.library = &out;
    p.code = &image;
    rig.Call(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &p, CUDA_SUCCESS, [&] {
      EXPECT_EQ(p.code, &image) << "the original image loads";
      out = reinterpret_cast<CUlibrary>(0x10 + i);
    });
  }
  EXPECT_EQ(rig.maps.claims, 2);
  EXPECT_EQ(rig.maps.calls, 0) << "no map table for modules left alone";
  EXPECT_EQ(rig.patcher->stats().modules_instrumented, 0u);
  EXPECT_EQ(rig.patcher->stats().modules_failed, 0u) << "not a failure: another process has them";
}

TEST(ModulePatcher, NoMatchingProbeLeavesTheImageAlone) {
  Rig rig;
  int image = 0;
  CUlibrary lib = reinterpret_cast<CUlibrary>(0x10);
  CUlibrary out = nullptr;
  cuLibraryLoadData_params p = {};
  p.library = &out;
  p.code = &image;
  rig.Call(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &p, CUDA_SUCCESS, [&] {
    EXPECT_EQ(p.code, &image);
    out = lib;
  });
  ASSERT_EQ(rig.instrumenter.seen.size(), 1u);
  EXPECT_EQ(rig.instrumenter.seen[0].live, &image);
  EXPECT_THAT(rig.instrumenter.sms, ElementsAre(90u));
  EXPECT_EQ(rig.maps.calls, 0);
  EXPECT_EQ(rig.patcher->stats().loads_seen, 1u);
  EXPECT_EQ(rig.patcher->stats().modules_instrumented, 0u);
}

TEST(ModulePatcher, MatchSwapsTheImageAndFillsTheMapTable) {
  Rig rig;
  rig.instrumenter.result = std::optional<InstrumentedImage>(SomeImage());
  int image = 0;
  CUlibrary lib = reinterpret_cast<CUlibrary>(0x10);
  rig.seam.globals[{lib, CUPROBE_MAP_TABLE_SYMBOL}] = DeviceGlobal{64, 16};
  CUlibrary out = nullptr;
  cuLibraryLoadData_params p = {};
  p.library = &out;
  p.code = &image;
  rig.Call(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &p, CUDA_SUCCESS, [&] {
    ASSERT_NE(p.code, &image) << "the driver is handed the instrumented cubin";
    EXPECT_EQ(std::memcmp(p.code, "\x7f" "ELF", 4), 0);
    out = lib;
  });
  uint64_t table[2];
  std::memcpy(table, rig.seam.device_memory.data() + 64, sizeof(table));
  EXPECT_EQ(table[0], 0x1000u);
  EXPECT_EQ(table[1], 0x2000u);
  EXPECT_THAT(rig.seam.calls(), Contains("LibraryGlobal(__cuprobe_map_table)"));
  EXPECT_EQ(rig.patcher->stats().modules_instrumented, 1u);
  EXPECT_EQ(rig.patcher->stats().kernels_instrumented, 2u);
  // The table was written in RELAXED capture mode, and the mode restored.
  std::vector<std::string> calls = rig.seam.calls();
  auto relaxed = std::find(calls.begin(), calls.end(), "ExchangeCaptureMode(2)");
  auto restored = std::find(calls.begin(), calls.end(), "ExchangeCaptureMode(0)");
  ASSERT_NE(relaxed, calls.end());
  ASSERT_NE(restored, calls.end());
  EXPECT_LT(relaxed - calls.begin(), restored - calls.begin());
  EXPECT_EQ(rig.seam.capture_mode, 0);
}

// A library spans contexts: in a context created later (the runtime's
// libraries after cudaDeviceReset) its globals start zeroed, so its map
// table and site counters are filled again there; not when the maps live
// in another context.
TEST(ModulePatcher, LibrariesAreFilledAgainInANewContext) {
  Rig rig;
  InstrumentedImage instrumented = SomeImage();
  instrumented.site_counters = {SiteCounter{{SiteAdd{1, false, {7, 0, 0, 0}, 4}}}};
  rig.instrumenter.result = std::optional<InstrumentedImage>(instrumented);
  int image = 0;
  CUlibrary lib = reinterpret_cast<CUlibrary>(0x10);
  rig.seam.globals[{lib, CUPROBE_MAP_TABLE_SYMBOL}] = DeviceGlobal{64, 16};
  rig.seam.globals[{lib, CUPROBE_SITE_COUNTS_SYMBOL}] = DeviceGlobal{128, 8};
  CUlibrary out = nullptr;
  cuLibraryLoadData_params p = {};
  p.library = &out;
  p.code = &image;
  rig.Call(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &p, CUDA_SUCCESS, [&] { out = lib; });
  ASSERT_EQ(rig.maps.calls, 1);
  ASSERT_EQ(rig.maps.site_counters.size(), 1u);
  // The new context's copy of the globals is zero.
  std::memset(rig.seam.device_memory.data() + 64, 0, 24 + 64);
  rig.maps.site_counters.clear();
  rig.maps.table = std::vector<uint64_t>{0x3000, 0x4000};
  const auto b = reinterpret_cast<CUcontext>(0xB0);
  rig.seam.current_context = b;
  rig.patcher->OnContextCreated(b);
  EXPECT_EQ(rig.maps.calls, 2);
  uint64_t table[2];
  std::memcpy(table, rig.seam.device_memory.data() + 64, sizeof(table));
  EXPECT_EQ(table[0], 0x3000u);
  EXPECT_EQ(table[1], 0x4000u);
  ASSERT_EQ(rig.maps.site_counters.size(), 1u) << "registered again, for the new maps";
  uint64_t site = 0;
  std::memcpy(&site, rig.seam.device_memory.data() + 128, 8);
  EXPECT_EQ(site, 0xC0FFEE00u);
  EXPECT_EQ(rig.seam.capture_mode, 0);
  // Maps in another context: nothing is written.
  rig.maps.usable = absl::FailedPreconditionError("the probes' maps live in another CUDA context");
  const auto c = reinterpret_cast<CUcontext>(0xC0);
  rig.seam.current_context = c;
  rig.patcher->OnContextCreated(c);
  EXPECT_EQ(rig.maps.calls, 2);
}

// A library loaded while several contexts live (two made with cuCtxCreate
// before the runtime's first launch): its copy in each other context is
// filled there too, once, with that context current, where the maps can be
// shared; a destroyed context is forgotten; the current one is not filled
// twice.
TEST(ModulePatcher, LibrariesAreFilledInEveryLiveContext) {
  Rig rig;
  InstrumentedImage instrumented = SomeImage();
  instrumented.site_counters = {SiteCounter{{SiteAdd{1, false, {7, 0, 0, 0}, 4}}}};
  rig.instrumenter.result = std::optional<InstrumentedImage>(instrumented);
  const auto a = reinterpret_cast<CUcontext>(0xA0);
  const auto b = reinterpret_cast<CUcontext>(0xB0);
  const auto c = reinterpret_cast<CUcontext>(0xC0);
  rig.patcher->OnContextCreated(a);
  rig.patcher->OnContextCreated(b);
  rig.patcher->OnContextCreated(c);
  rig.patcher->OnContextDestroying(c);
  rig.seam.current_context = a;
  CUlibrary lib = reinterpret_cast<CUlibrary>(0x10);
  rig.seam.globals[{lib, CUPROBE_MAP_TABLE_SYMBOL}] = DeviceGlobal{64, 16};
  rig.seam.globals[{lib, CUPROBE_SITE_COUNTS_SYMBOL}] = DeviceGlobal{128, 8};
  rig.LoadLibrary(lib);
  EXPECT_THAT(rig.seam.contexts_entered, ElementsAre(b));
  EXPECT_EQ(rig.seam.current_context, a) << "the previous context is current again";
  EXPECT_THAT(rig.maps.table_contexts, ElementsAre(a, b)) << "one table for a, one for b";
  EXPECT_THAT(rig.maps.site_contexts, ElementsAre(a, b)) << "site counters once per context";
  ASSERT_EQ(rig.maps.site_counters.size(), 1u);
  // A context created after the load is filled by OnContextCreated, once.
  const auto d = reinterpret_cast<CUcontext>(0xD0);
  rig.seam.current_context = d;
  rig.patcher->OnContextCreated(d);
  EXPECT_THAT(rig.maps.table_contexts, ElementsAre(a, b, d));
  EXPECT_THAT(rig.maps.site_contexts, ElementsAre(a, b, d));
  // Maps that cannot be shared: the other context's copy stays zeroed.
  Rig unshared;
  unshared.instrumenter.result = std::optional<InstrumentedImage>(SomeImage());
  unshared.patcher->OnContextCreated(a);
  unshared.patcher->OnContextCreated(b);
  unshared.seam.current_context = a;
  unshared.seam.globals[{lib, CUPROBE_MAP_TABLE_SYMBOL}] = DeviceGlobal{64, 16};
  LogCapture log;
  unshared.LoadLibrary(lib, [&] {
    // Usable in a (checked at ENTER), not in b.
    unshared.maps.usable = absl::FailedPreconditionError("ring buffers");
  });
  EXPECT_THAT(unshared.seam.contexts_entered, ElementsAre(b));
  EXPECT_THAT(unshared.maps.table_contexts, ElementsAre(a)) << "a only";
  EXPECT_THAT(log.Read(), HasSubstr("not instrumented in another context: ring buffers"));
}

// The orders in which a library and its first context can come (issue: a
// program whose first CUDA call is a launch lost its probes). A library
// needs no context: with none current at its load it is instrumented all
// the same and filled in each context once one is there.
InstrumentedImage ImageWithSiteCounters() {
  InstrumentedImage image = SomeImage();
  image.site_counters = {SiteCounter{{SiteAdd{1, false, {7, 0, 0, 0}, 4}}}};
  return image;
}

void AddLibraryGlobals(Rig& rig, CUlibrary lib) {
  rig.seam.globals[{lib, CUPROBE_MAP_TABLE_SYMBOL}] = DeviceGlobal{64, 16};
  rig.seam.globals[{lib, CUPROBE_SITE_COUNTS_SYMBOL}] = DeviceGlobal{128, 8};
}

uint64_t TableEntry(Rig& rig, int i) {
  uint64_t v = 0;
  std::memcpy(&v, rig.seam.device_memory.data() + 64 + 8 * i, 8);
  return v;
}

// cuLibraryLoadData before any context exists (the runtime's launch-first
// program; a driver-API program before cuCtxCreate): the image is swapped,
// nothing is filled yet; the context's creation fills it, once.
TEST(ModulePatcher, LibraryLoadedBeforeAnyContextIsFilledAtTheFirstContext) {
  Rig rig;
  rig.instrumenter.result = std::optional<InstrumentedImage>(ImageWithSiteCounters());
  rig.maps.usable = absl::FailedPreconditionError("no CUDA context is current");
  rig.seam.current_context = nullptr;
  const CUlibrary lib = reinterpret_cast<CUlibrary>(0x10);
  AddLibraryGlobals(rig, lib);
  LogCapture log;
  int image = 0;
  CUlibrary out = nullptr;
  cuLibraryLoadData_params p = {};
  p.library = &out;
  p.code = &image;
  rig.Call(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &p, CUDA_SUCCESS, [&] {
    EXPECT_NE(p.code, &image) << "instrumented although no context is current";
    out = lib;
  });
  EXPECT_EQ(rig.patcher->stats().modules_instrumented, 1u);
  EXPECT_EQ(rig.maps.calls, 0) << "no map table without a context";
  EXPECT_TRUE(rig.maps.site_contexts.empty());
  EXPECT_TRUE(rig.patcher->pending_fill());
  const std::string lines = log.Read();
  EXPECT_THAT(lines, Not(HasSubstr("cannot")));
  EXPECT_THAT(lines, Not(HasSubstr("not instrumented")));
  // The context comes (the hook makes it current for this).
  const auto a = reinterpret_cast<CUcontext>(0xA0);
  rig.maps.usable = absl::OkStatus();
  rig.seam.current_context = a;
  rig.patcher->OnContextCreated(a);
  EXPECT_THAT(rig.maps.table_contexts, ElementsAre(a));
  EXPECT_THAT(rig.maps.site_contexts, ElementsAre(a));
  EXPECT_EQ(TableEntry(rig, 0), 0x1000u);
  EXPECT_EQ(TableEntry(rig, 1), 0x2000u);
  EXPECT_FALSE(rig.patcher->pending_fill());
  rig.patcher->OnLaunch(a);
  EXPECT_THAT(rig.maps.table_contexts, ElementsAre(a)) << "filled once";
  EXPECT_EQ(rig.seam.capture_mode, 0);
}

// CUDA_MODULE_LOADING=EAGER: the driver puts the library into a new
// context after the creation callbacks, so its globals are not found
// there yet: the fill waits for the context's first launch, with no
// warning, instead of leaving the probes without their maps.
TEST(ModulePatcher, ALibraryNotYetInANewContextIsFilledAtItsFirstLaunch) {
  Rig rig;
  rig.instrumenter.result = std::optional<InstrumentedImage>(ImageWithSiteCounters());
  rig.maps.usable = absl::FailedPreconditionError("no CUDA context is current");
  rig.seam.current_context = nullptr;
  const CUlibrary lib = reinterpret_cast<CUlibrary>(0x10);
  LogCapture log;
  rig.LoadLibrary(lib);
  const auto a = reinterpret_cast<CUcontext>(0xA0);
  rig.maps.usable = absl::OkStatus();
  rig.seam.current_context = a;
  rig.patcher->OnContextCreated(a);  // its globals are not found yet
  EXPECT_TRUE(rig.maps.table_contexts.empty());
  EXPECT_TRUE(rig.patcher->pending_fill());
  EXPECT_THAT(log.Read(), Not(HasSubstr("cannot reach their maps")));
  AddLibraryGlobals(rig, lib);  // the driver loaded it
  rig.patcher->OnLaunch(a);
  EXPECT_THAT(rig.maps.table_contexts, ElementsAre(a));
  EXPECT_THAT(rig.maps.site_contexts, ElementsAre(a));
  EXPECT_EQ(TableEntry(rig, 1), 0x2000u);
  EXPECT_FALSE(rig.patcher->pending_fill());
}

// Not found even at the first launch: the library runs with an empty
// table, said once, and nothing is retried at later launches.
TEST(ModulePatcher, ALibraryNeverFoundInTheContextIsGivenUpAtTheFirstLaunch) {
  Rig rig;
  rig.instrumenter.result = std::optional<InstrumentedImage>(ImageWithSiteCounters());
  rig.seam.current_context = nullptr;
  const CUlibrary lib = reinterpret_cast<CUlibrary>(0x10);
  LogCapture log;
  rig.LoadLibrary(lib);
  const auto a = reinterpret_cast<CUcontext>(0xA0);
  rig.seam.current_context = a;
  rig.patcher->OnContextCreated(a);
  rig.patcher->OnLaunch(a);
  EXPECT_THAT(log.Read(), HasSubstr("probes cannot reach their maps"));
  EXPECT_FALSE(rig.patcher->pending_fill());
  const size_t calls = rig.seam.calls().size();
  rig.patcher->OnLaunch(a);
  EXPECT_EQ(rig.seam.calls().size(), calls) << "not retried";
}

// The context exists (made on the main thread) but the library is loaded
// on a thread where none is current: it is filled in the live context at
// once, with that context current, and the thread is left without one.
TEST(ModulePatcher, LibraryLoadedOnAThreadWithoutAContextIsFilledInTheLiveOnes) {
  Rig rig;
  rig.instrumenter.result = std::optional<InstrumentedImage>(ImageWithSiteCounters());
  const auto a = reinterpret_cast<CUcontext>(0xA0);
  rig.seam.current_context = a;
  rig.patcher->OnContextCreated(a);
  rig.seam.current_context = nullptr;
  const CUlibrary lib = reinterpret_cast<CUlibrary>(0x10);
  AddLibraryGlobals(rig, lib);
  rig.LoadLibrary(lib);
  EXPECT_THAT(rig.seam.contexts_entered, ElementsAre(a));
  EXPECT_EQ(rig.seam.current_context, nullptr);
  EXPECT_THAT(rig.maps.table_contexts, ElementsAre(a));
  EXPECT_THAT(rig.maps.site_contexts, ElementsAre(a));
  EXPECT_FALSE(rig.patcher->pending_fill());
  // Its launches there find nothing to do.
  rig.seam.current_context = a;
  rig.patcher->OnLaunch(a);
  EXPECT_THAT(rig.maps.table_contexts, ElementsAre(a));
}

// Neither the load nor the context's creation could get into the context
// (cuCtxSetCurrent refused; CUPTI's callback came on a thread where it is
// not current): the first launch in it fills the library, before the
// kernel runs.
TEST(ModulePatcher, TheFirstLaunchInAContextFillsWhatItsCreationCouldNot) {
  Rig rig;
  rig.instrumenter.result = std::optional<InstrumentedImage>(ImageWithSiteCounters());
  const auto a = reinterpret_cast<CUcontext>(0xA0);
  rig.seam.current_context = nullptr;
  rig.patcher->OnContextCreated(a);  // not current: nothing to do yet
  rig.seam.in_context_status = absl::InvalidArgumentError("cuCtxSetCurrent: refused");
  const CUlibrary lib = reinterpret_cast<CUlibrary>(0x10);
  AddLibraryGlobals(rig, lib);
  rig.LoadLibrary(lib);
  EXPECT_EQ(rig.maps.calls, 0);
  EXPECT_TRUE(rig.patcher->pending_fill());
  rig.seam.current_context = a;
  rig.patcher->OnLaunch(a);
  EXPECT_THAT(rig.maps.table_contexts, ElementsAre(a));
  EXPECT_THAT(rig.maps.site_contexts, ElementsAre(a));
  EXPECT_EQ(TableEntry(rig, 1), 0x2000u);
  EXPECT_FALSE(rig.patcher->pending_fill());
  // The context goes, and one made later at the same address starts
  // unfilled: its creation fills it again.
  rig.patcher->OnContextDestroying(a);
  rig.seam.in_context_status = absl::OkStatus();
  rig.patcher->OnContextCreated(a);
  EXPECT_THAT(rig.maps.table_contexts, ElementsAre(a, a));
  // Unloaded: nothing is pending any more, even in a context never filled.
  const auto b = reinterpret_cast<CUcontext>(0xB0);
  rig.seam.current_context = nullptr;
  rig.patcher->OnContextCreated(b);
  EXPECT_TRUE(rig.patcher->pending_fill());
  cuLibraryUnload_params unload = {};
  unload.library = lib;
  rig.Call(CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload, &unload, CUDA_SUCCESS, [] {});
  EXPECT_FALSE(rig.patcher->pending_fill());
}

// A module (cuModuleLoadData) belongs to the current context: with none,
// the maps' check at ENTER still decides, as before.
TEST(ModulePatcher, AModuleStillNeedsItsContextsMaps) {
  Rig rig;
  rig.instrumenter.result = std::optional<InstrumentedImage>(SomeImage());
  rig.maps.usable = absl::FailedPreconditionError("no CUDA context is current");
  rig.seam.current_context = nullptr;
  rig.LoadDataEx(reinterpret_cast<CUmodule>(0x20));
  EXPECT_TRUE(rig.instrumenter.seen.empty());
  EXPECT_EQ(rig.patcher->stats().modules_instrumented, 0u);
}

TEST(ModulePatcher, ModuleGlobalsAreWrittenWhenTheModuleHasThem) {
  Rig rig;
  rig.instrumenter.result = std::optional<InstrumentedImage>(SomeImage());
  uint64_t pid_tgid = (uint64_t{4242} << 32) | 4242;
  std::vector<uint8_t> value(8);
  std::memcpy(value.data(), &pid_tgid, 8);
  rig.patcher->AddModuleGlobal(CUPROBE_PID_TGID_SYMBOL, value);
  rig.patcher->AddModuleGlobal("__absent", value);
  CUlibrary lib = reinterpret_cast<CUlibrary>(0x10);
  rig.seam.globals[{lib, CUPROBE_MAP_TABLE_SYMBOL}] = DeviceGlobal{64, 16};
  rig.seam.globals[{lib, CUPROBE_PID_TGID_SYMBOL}] = DeviceGlobal{256, 8};
  int image = 0;
  CUlibrary out = nullptr;
  cuLibraryLoadData_params p = {};
  p.library = &out;
  p.code = &image;
  rig.Call(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &p, CUDA_SUCCESS, [&] { out = lib; });
  uint64_t got = 0;
  std::memcpy(&got, rig.seam.device_memory.data() + 256, 8);
  EXPECT_EQ(got, pid_tgid);
  EXPECT_EQ(rig.patcher->stats().modules_instrumented, 1u);
}

TEST(ModulePatcher, SiteCountersGetTheirBlockAddressAfterTheMapTable) {
  for (bool fails : {false, true}) {
    SCOPED_TRACE(fails);
    Rig rig;
    InstrumentedImage image = SomeImage();
    image.site_counters = {SiteCounter{{SiteAdd{1, false, {7, 0, 0, 0}, 4}}}};
    rig.instrumenter.result = std::optional<InstrumentedImage>(image);
    if (fails) rig.maps.site_base = absl::ResourceExhaustedError("out of device memory");
    CUlibrary lib = reinterpret_cast<CUlibrary>(0x10);
    rig.seam.globals[{lib, CUPROBE_MAP_TABLE_SYMBOL}] = DeviceGlobal{64, 16};
    rig.seam.globals[{lib, CUPROBE_SITE_COUNTS_SYMBOL}] = DeviceGlobal{128, 8};
    LogCapture log;
    int code = 0;
    CUlibrary out = nullptr;
    cuLibraryLoadData_params p = {};
    p.library = &out;
    p.code = &code;
    rig.Call(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &p, CUDA_SUCCESS, [&] { out = lib; });
    EXPECT_EQ(rig.maps.site_counters, image.site_counters);
    uint64_t got = 0;
    std::memcpy(&got, rig.seam.device_memory.data() + 128, 8);
    // On failure the address stays 0: the kernels skip their flush.
    EXPECT_EQ(got, fails ? 0u : 0xC0FFEE00u);
    EXPECT_EQ(rig.patcher->stats().modules_instrumented, 1u);
    const std::string lines = log.Read();
    if (fails) {
      EXPECT_THAT(lines, HasSubstr("the counts of 1 probe site counter(s) cannot be kept: out of "
                                   "device memory"));
    } else {
      EXPECT_THAT(lines, Not(HasSubstr("cannot be kept")));
    }
  }
}

TEST(ModulePatcher, ModuleLoadDataExUsesTheModuleGlobal) {
  Rig rig;
  rig.instrumenter.result = std::optional<InstrumentedImage>(SomeImage(1));
  rig.maps.table = std::vector<uint64_t>{0xabc};
  CUmodule mod = reinterpret_cast<CUmodule>(0x20);
  rig.seam.globals[{mod, CUPROBE_MAP_TABLE_SYMBOL}] = DeviceGlobal{128, 8};
  rig.LoadDataEx(mod);
  uint64_t entry = 0;
  std::memcpy(&entry, rig.seam.device_memory.data() + 128, 8);
  EXPECT_EQ(entry, 0xabcu);
  EXPECT_THAT(rig.seam.calls(), Contains("ModuleGlobal(__cuprobe_map_table)"));
}

// A module whose probes read the descriptors' constant copy gets the
// session's descriptors there, byte for byte, after its table.
TEST(ModulePatcher, FillsTheDescriptorsConstantCopy) {
  Rig rig;
  InstrumentedImage image = SomeImage(2);
  image.map_descs = true;
  rig.instrumenter.result = std::optional<InstrumentedImage>(image);
  std::vector<uint8_t> descs(2 * CUPROBE_MAP_DESCS_ENTRY_SIZE);
  for (size_t i = 0; i < descs.size(); ++i) descs[i] = static_cast<uint8_t>(i * 7 + 1);
  rig.maps.descriptors = descs;
  CUmodule mod = reinterpret_cast<CUmodule>(0x20);
  rig.seam.globals[{mod, CUPROBE_MAP_TABLE_SYMBOL}] = DeviceGlobal{64, 16};
  rig.seam.globals[{mod, CUPROBE_MAP_DESCS_SYMBOL}] = DeviceGlobal{256, 256};
  rig.LoadDataEx(mod);
  ASSERT_GE(rig.seam.device_memory.size(), 512u);
  EXPECT_EQ(std::vector<uint8_t>(rig.seam.device_memory.begin() + 256,
                                 rig.seam.device_memory.begin() + 512),
            descs);
  uint64_t entry = 0;
  std::memcpy(&entry, rig.seam.device_memory.data() + 64 + 8, 8);
  EXPECT_EQ(entry, 0x2000u);
}

// Descriptors that do not match the table (or cannot be had) leave both the
// copy and the table zero, which inline code and helpers refuse as a bad
// map, with one warning; a module without the copy is never asked for it.
TEST(ModulePatcher, DescriptorsOfTheWrongSizeAreNotCopied) {
  Rig rig;
  InstrumentedImage image = SomeImage(2);
  image.map_descs = true;
  rig.instrumenter.result = std::optional<InstrumentedImage>(image);
  rig.maps.descriptors = std::vector<uint8_t>(CUPROBE_MAP_DESCS_ENTRY_SIZE, 0xAB);  // one map's
  CUmodule mod = reinterpret_cast<CUmodule>(0x20);
  rig.seam.globals[{mod, CUPROBE_MAP_TABLE_SYMBOL}] = DeviceGlobal{64, 16};
  rig.seam.globals[{mod, CUPROBE_MAP_DESCS_SYMBOL}] = DeviceGlobal{256, 256};
  LogCapture log;
  rig.LoadDataEx(mod);
  for (size_t i = 64; i < std::min<size_t>(512, rig.seam.device_memory.size()); ++i) {
    ASSERT_EQ(rig.seam.device_memory[i], 0) << "byte " << i;
  }
  EXPECT_THAT(log.Read(), HasSubstr("the session's map descriptors are 128 bytes"));

  Rig plain;
  plain.instrumenter.result = std::optional<InstrumentedImage>(SomeImage(2));
  plain.seam.globals[{mod, CUPROBE_MAP_TABLE_SYMBOL}] = DeviceGlobal{64, 16};
  plain.LoadDataEx(mod);
  EXPECT_THAT(plain.seam.calls(), Not(Contains("ModuleGlobal(__cuprobe_map_descs)")));
}

TEST(ModulePatcher, InstrumenterErrorLoadsTheOriginalWithOneMessage) {
  Rig rig;
  rig.instrumenter.result = absl::InvalidArgumentError("ptxas: 3 errors in kernel k");
  LogCapture log;
  int image = 0;
  CUmodule out = nullptr;
  cuModuleLoadData_params p = {};
  p.module = &out;
  p.image = &image;
  rig.Call(CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData, &p, CUDA_SUCCESS, [&] {
    EXPECT_EQ(p.image, &image);
    out = reinterpret_cast<CUmodule>(0x30);
  });
  std::string text = log.Read();
  EXPECT_THAT(text, HasSubstr("not instrumented, loading it unchanged: ptxas: 3 errors in kernel k"));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
  EXPECT_EQ(rig.patcher->stats().modules_failed, 1u);
}

TEST(ModulePatcher, UnknownSmLoadsTheOriginal) {
  Rig rig;
  rig.seam.device_sm = absl::UnavailableError("no device");
  rig.instrumenter.result = std::optional<InstrumentedImage>(SomeImage());
  LogCapture log;
  int image = 0;
  CUmodule out = nullptr;
  cuModuleLoadFatBinary_params p = {};
  p.module = &out;
  p.fatCubin = &image;
  rig.Call(CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary, &p, CUDA_SUCCESS,
           [&] { EXPECT_EQ(p.fatCubin, &image); });
  EXPECT_TRUE(rig.instrumenter.seen.empty());
  EXPECT_THAT(log.Read(), HasSubstr("cannot tell the device's SM"));
}

TEST(ModulePatcher, FileLoadIsReplacedByAFileThatGoesAtUnload) {
  Rig rig;
  rig.instrumenter.result = std::optional<InstrumentedImage>(SomeImage(0));
  std::string original = rig.dir + "/app.cubin";
  CUmodule mod = reinterpret_cast<CUmodule>(0x40);
  CUmodule out = nullptr;
  cuModuleLoad_params p = {};
  p.module = &out;
  p.fname = original.c_str();
  std::string replacement;
  rig.Call(CUPTI_DRIVER_TRACE_CBID_cuModuleLoad, &p, CUDA_SUCCESS, [&] {
    replacement = p.fname;
    out = mod;
  });
  ASSERT_NE(replacement, original);
  EXPECT_EQ(rig.instrumenter.seen[0].path, original);
  struct stat st;
  ASSERT_EQ(::stat(replacement.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::ifstream in(replacement, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), std::string("\x7f" "ELF\x01\x02\x03\x04", 8));
  EXPECT_EQ(rig.maps.calls, 0) << "no map table to fill";

  cuModuleUnload_params u = {};
  u.hmod = mod;
  rig.Call(CUPTI_DRIVER_TRACE_CBID_cuModuleUnload, &u, CUDA_SUCCESS, [] {});
  EXPECT_NE(::stat(replacement.c_str(), &st), 0) << "removed with the module";
}

TEST(ModulePatcher, DriverRejectingTheImageIsReported) {
  Rig rig;
  rig.instrumenter.result = std::optional<InstrumentedImage>(SomeImage());
  LogCapture log;
  int image = 0;
  CUlibrary out = nullptr;
  cuLibraryLoadData_params p = {};
  p.library = &out;
  p.code = &image;
  rig.Call(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &p, CUDA_ERROR_INVALID_IMAGE, [] {});
  EXPECT_THAT(log.Read(), HasSubstr("the driver rejected the instrumented"));
  EXPECT_EQ(rig.patcher->stats().modules_failed, 1u);
  EXPECT_EQ(rig.patcher->stats().modules_instrumented, 0u);
  EXPECT_EQ(rig.maps.calls, 0);
}

TEST(ModulePatcher, MapTableSizeMismatchIsAWarningNotAFailure) {
  Rig rig;
  rig.instrumenter.result = std::optional<InstrumentedImage>(SomeImage(3));
  CUlibrary lib = reinterpret_cast<CUlibrary>(0x10);
  rig.seam.globals[{lib, CUPROBE_MAP_TABLE_SYMBOL}] = DeviceGlobal{64, 24};
  LogCapture log;
  int image = 0;
  CUlibrary out = nullptr;
  cuLibraryLoadData_params p = {};
  p.library = &out;
  p.code = &image;
  rig.Call(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &p, CUDA_SUCCESS, [&] { out = lib; });
  EXPECT_THAT(log.Read(), HasSubstr("probes cannot reach their maps: the module's map table has "
                                    "3 entries, the session has 2 maps"));
  EXPECT_EQ(rig.patcher->stats().modules_instrumented, 1u);
}

TEST(ModulePatcher, SassOnlyKernelsAreNamedOnce) {
  Rig rig;
  InstrumentedImage image = SomeImage();
  image.not_instrumented = {"_Z4gemmv", "_Z4convv"};
  rig.instrumenter.result = std::optional<InstrumentedImage>(image);
  CUlibrary lib = reinterpret_cast<CUlibrary>(0x10);
  rig.seam.globals[{lib, CUPROBE_MAP_TABLE_SYMBOL}] = DeviceGlobal{64, 16};
  LogCapture log;
  int code = 0;
  CUlibrary out = nullptr;
  cuLibraryLoadData_params p = {};
  p.library = &out;
  p.code = &code;
  rig.Call(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &p, CUDA_SUCCESS, [&] { out = lib; });
  std::string text = log.Read();
  EXPECT_THAT(text, HasSubstr("2 kernel(s) selected by probes ship SASS only and are traced "
                              "but not instrumented (`cuprobe run --backend auto` probes "
                              "them): _Z4gemmv, _Z4convv"));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
}

// --backend auto: modules without instrumented kernels go to the patch
// backend (nothing to say); SASS-only kernels of a module rewritten for its
// other kernels run unprobed, and one line says so.
TEST(ModulePatcher, UnderAutoOnlyKernelsLeftOutOfARewrittenModuleAreNamed) {
  for (bool rewritten : {false, true}) {
    SCOPED_TRACE(rewritten);
    Rig rig;
    rig.patcher->SetPatchBackendPresent();
    InstrumentedImage image = SomeImage();
    if (!rewritten) image.kernels.clear();
    image.not_instrumented = {"_Z4gemmv"};
    rig.instrumenter.result = std::optional<InstrumentedImage>(image);
    CUlibrary lib = reinterpret_cast<CUlibrary>(0x10);
    rig.seam.globals[{lib, CUPROBE_MAP_TABLE_SYMBOL}] = DeviceGlobal{64, 16};
    LogCapture log;
    rig.LoadLibrary(lib);
    const std::string text = log.Read();
    EXPECT_THAT(text, Not(HasSubstr("probes them")));
    if (rewritten) {
      EXPECT_THAT(text, HasSubstr("1 kernel(s) selected by probes ship SASS only in a module "
                                  "rewritten for its other kernels, and run unprobed: _Z4gemmv"));
    } else {
      EXPECT_THAT(text, Not(HasSubstr("_Z4gemmv")));
    }
  }
}

}  // namespace
}  // namespace cuprobe
