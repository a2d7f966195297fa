// Late attach against the fake seam: the image registry fed with module-load
// callbacks as CUPTI delivers them, the launch redirector with a scripted
// instrumenter, and the whole attach / detach protocol over real session
// segments with the real BundleInstrumenter (it rewrites vec_add's PTX and
// compiles it with ptxas). The driver side (cuModuleLoadData, the twin
// really running) is covered by the GPU test Run.LateAttachInstrumentsARunningProgram.
#include "cupti_hook/late_attach.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuprobe/abi.h"
#include "cupti_hook/testing/fake_output.h"
#include "cupti_hook/testing/fake_seam.h"
#include "cupti_hook/tracer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "probe/bundle.h"
#include "probe/trace_records.h"
#include "ptx_rewriter/image.h"
#include "tests/test_paths.h"
#include "tests/test_process.h"

namespace cuprobe {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;

constexpr char kVecAdd[] = "_Z7vec_addPKfS0_Pfi";
constexpr char kScale[] = "_Z5scalePffi";

class OneResultInstrumenter : public ImageInstrumenter {
 public:
  absl::StatusOr<std::optional<InstrumentedImage>> result;
  std::vector<std::string> images;  // the bytes each call saw (PTX text)
  absl::StatusOr<std::optional<InstrumentedImage>> Instrument(const ImageSource& source,
                                                              uint32_t sm) override {
    images.emplace_back(static_cast<const char*>(source.live));
    return result;
  }
};

class TwoMaps : public MapTableProvider {
 public:
  absl::StatusOr<std::vector<uint64_t>> MapTable() override {
    return std::vector<uint64_t>{0xA000, 0xB000};
  }
};

// Loads `image` through cuModuleLoadData as `module` (ENTER, then EXIT).
void LoadModule(ImageRegistry& registry, const void* image, CUmodule module) {
  uint64_t slot = 0;
  CUmodule out = nullptr;
  cuModuleLoadData_params p = {};
  p.module = &out;
  p.image = image;
  CUresult result = CUDA_SUCCESS;
  CUpti_CallbackData data = {};
  data.functionParams = &p;
  data.functionReturnValue = &result;
  data.correlationData = &slot;
  data.callbackSite = CUPTI_API_ENTER;
  registry.OnModuleApi(CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData, &data);
  out = module;
  data.callbackSite = CUPTI_API_EXIT;
  registry.OnModuleApi(CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData, &data);
  EXPECT_EQ(slot, 0u);
}

// A cuLaunchKernel ENTER of `f` in `context`: the function it launches after.
template <typename Redirect>
CUfunction Launch(Redirect&& redirect, CUfunction f, CUcontext context, bool* swapped = nullptr) {
  cuLaunchKernel_params p = {};
  p.f = f;
  CUpti_CallbackData data = {};
  data.functionParams = &p;
  data.context = context;
  data.callbackSite = CUPTI_API_ENTER;
  bool s = redirect(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data);
  if (swapped != nullptr) *swapped = s;
  return p.f;
}

struct RedirectRig {
  FakeSeam seam;
  ImageRegistry registry;
  OneResultInstrumenter instrumenter;
  TwoMaps maps;
  std::unique_ptr<LaunchRedirector> redirector;
  const CUmodule app_module = reinterpret_cast<CUmodule>(0x500);
  const CUfunction vec_add = reinterpret_cast<CUfunction>(0x501);
  const CUfunction scale = reinterpret_cast<CUfunction>(0x502);
  const CUcontext context = reinterpret_cast<CUcontext>(0x9);
  // A heap buffer: not in a loaded ELF object, so the registry copies it.
  std::string ptx = ".version 9.0\n.target sm_90\n.address_size 64\n";
  RedirectRig() {
    InstrumentedImage image;
    image.cubin = {0x7f, 'E', 'L', 'F'};
    image.kernels = {{kVecAdd, 0}};
    image.map_table_entries = 2;
    instrumenter.result = std::optional<InstrumentedImage>(image);
    seam.owners[vec_add] = {app_module, false, kVecAdd};
    seam.owners[scale] = {app_module, false, kScale};
    seam.module_functions = {kVecAdd, kScale};
    const auto twin = reinterpret_cast<CUmodule>(FakeSeam::kFirstLoadedModule);
    seam.globals[{twin, CUPROBE_MAP_TABLE_SYMBOL}] = {64, 16};
    LoadModule(registry, ptx.c_str(), app_module);
    redirector = std::make_unique<LaunchRedirector>(seam, registry, instrumenter, maps,
                                                    ModuleGlobals{});
  }
  CUfunction Run(CUfunction f, CUcontext c, bool* swapped = nullptr) {
    return Launch([&](CUpti_CallbackId cbid, const CUpti_CallbackData* d) {
      return redirector->Redirect(cbid, d);
    }, f, c, swapped);
  }
  int Calls(const std::string& name) const {
    int n = 0;
    for (const std::string& c : seam.calls()) n += c == name;
    return n;
  }
};

TEST(ImageRegistry, CopiesBuffersAndForgetsUnloadedModules) {
  ImageRegistry registry;
  std::string ptx = ".version 9.0\n.target sm_90\n.address_size 64\n";
  const auto module = reinterpret_cast<CUmodule>(0x77);
  LoadModule(registry, ptx.c_str(), module);
  std::shared_ptr<const ImageSource> kept = registry.Find(module);
  ASSERT_NE(kept, nullptr);
  EXPECT_NE(kept->live, ptx.c_str()) << "a heap buffer is copied";
  EXPECT_STREQ(static_cast<const char*>(kept->live), ptx.c_str());
  EXPECT_EQ(registry.copied_bytes(), ptx.size());
  ptx.assign(ptx.size(), 'x');  // the program reuses its buffer: the copy stays
  EXPECT_STREQ(static_cast<const char*>(kept->live), ".version 9.0\n.target sm_90\n.address_size 64\n");

  cuModuleUnload_params u = {};
  u.hmod = module;
  CUpti_CallbackData data = {};
  data.functionParams = &u;
  data.callbackSite = CUPTI_API_EXIT;
  registry.OnModuleApi(CUPTI_DRIVER_TRACE_CBID_cuModuleUnload, &data);
  EXPECT_EQ(registry.Find(module), nullptr);
  EXPECT_EQ(registry.copied_bytes(), 0u);
  EXPECT_NE(kept->live, nullptr) << "a holder keeps its image after the unload";
}

// The runtime's registered fatbin (a wrapper pointing at it) is kept by
// pointer, without a copy: it lives in the program's ELF object.
TEST(ImageRegistry, KeepsTheRuntimesFatbinsByPointer) {
  ImageRegistry registry;
  static const uint8_t kFatbin[16] = {0x50, 0xED, 0x55, 0xBA};
  static const FatbinWrapper kWrapper = {static_cast<int32_t>(kFatbinWrapperMagic), 1, kFatbin,
                                         nullptr};
  const auto library = reinterpret_cast<CUmodule>(0x78);
  LoadModule(registry, &kWrapper, library);
  ASSERT_NE(registry.Find(library), nullptr);
  EXPECT_EQ(registry.Find(library)->live, kFatbin);
  EXPECT_EQ(registry.copied_bytes(), 0u);
  // A reload at the same handle whose image is not kept drops the old one.
  LoadModule(registry, "not an image", library);
  EXPECT_EQ(registry.Find(library), nullptr);
}

TEST(LaunchRedirector, SwapsSelectedKernelsForTheirTwinAndCachesIt) {
  RedirectRig rig;
  const uintptr_t twin = FakeSeam::kFirstLoadedModule;
  bool swapped = false;
  EXPECT_EQ(rig.Run(rig.vec_add, rig.context, &swapped), reinterpret_cast<CUfunction>(twin + 1));
  EXPECT_TRUE(swapped);
  // The instrumenter saw the registry's copy of the original image.
  ASSERT_EQ(rig.instrumenter.images.size(), 1u);
  EXPECT_EQ(rig.instrumenter.images[0], rig.ptx);
  // The twin's map table holds the maps' addresses.
  uint64_t table[2];
  std::memcpy(table, rig.seam.device_memory.data() + 64, sizeof(table));
  EXPECT_EQ(table[0], 0xA000u);
  EXPECT_EQ(table[1], 0xB000u);
  // Later launches: the same twin, no new compile or load.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rig.Run(rig.vec_add, rig.context), reinterpret_cast<CUfunction>(twin + 1));
  }
  EXPECT_EQ(rig.instrumenter.images.size(), 1u);
  EXPECT_EQ(rig.Calls("LoadModuleData"), 1);
  // A kernel of the same module that no probe selects runs as it was.
  EXPECT_EQ(rig.Run(rig.scale, rig.context, &swapped), rig.scale);
  EXPECT_FALSE(swapped);
  EXPECT_EQ(rig.Calls("LoadModuleData"), 1);
  RedirectStats stats = rig.redirector->stats();
  EXPECT_EQ(stats.launches_redirected, 4u);
  EXPECT_EQ(stats.kernels_redirected, 1u);
  EXPECT_EQ(stats.kernels_left_alone, 1u);
  // The program's attribute settings reach the twin.
  EXPECT_THAT(rig.seam.calls(),
              Contains(absl::StrCat("SetFunctionAttribute(",
                                    static_cast<int>(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES),
                                    ",", 48 << 10, ")")));
}

TEST(LaunchRedirector, LeavesCapturesAndLaunchesTheTwinCannotTakeAlone) {
  RedirectRig rig;
  const auto twin = reinterpret_cast<CUfunction>(FakeSeam::kFirstLoadedModule + 1);
  // A stream being captured into a graph.
  const auto stream = reinterpret_cast<CUstream>(0x77);
  rig.seam.capturing_streams.insert(stream);
  cuLaunchKernel_params p = {};
  p.f = rig.vec_add;
  p.hStream = stream;
  p.blockDimX = p.blockDimY = p.blockDimZ = 1;
  CUpti_CallbackData data = {};
  data.functionParams = &p;
  data.context = rig.context;
  data.callbackSite = CUPTI_API_ENTER;
  EXPECT_FALSE(rig.redirector->Redirect(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data));
  EXPECT_EQ(p.f, rig.vec_add);
  // The same launch outside the capture is redirected.
  p.hStream = nullptr;
  EXPECT_TRUE(rig.redirector->Redirect(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data));
  EXPECT_EQ(p.f, twin);
  // More threads per block than the twin takes (its registers), or more
  // dynamic shared memory than it allows: the original runs.
  rig.seam.attributes[{twin, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK}] = 512;
  RedirectRig big;
  big.seam.attributes[{twin, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK}] = 512;
  p.f = big.vec_add;
  p.blockDimX = 1024;
  EXPECT_FALSE(big.redirector->Redirect(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data));
  p.f = big.vec_add;
  p.blockDimX = 256;
  p.sharedMemBytes = 64 << 10;
  EXPECT_FALSE(big.redirector->Redirect(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data));
  p.sharedMemBytes = 0;
  EXPECT_TRUE(big.redirector->Redirect(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data));
}

TEST(LaunchRedirector, UnloadedOwnerAndDestroyedContextAreForgotten) {
  RedirectRig rig;
  const auto first = reinterpret_cast<CUfunction>(FakeSeam::kFirstLoadedModule + 1);
  EXPECT_EQ(rig.Run(rig.vec_add, rig.context), first);
  // The program unloads the module; a new one reuses the handles.
  rig.redirector->ForgetOwner(rig.app_module);
  EXPECT_EQ(rig.Run(rig.vec_add, rig.context),
            reinterpret_cast<CUfunction>(FakeSeam::kFirstLoadedModule + 0x1000 + 1))
      << "a new twin from the new image";
  EXPECT_EQ(rig.Calls("LoadModuleData"), 2);
  rig.redirector->ForgetContext(rig.context);
  EXPECT_EQ(rig.Run(rig.vec_add, rig.context),
            reinterpret_cast<CUfunction>(FakeSeam::kFirstLoadedModule + 0x2000 + 1));
  // Unloading after a drain: the forgotten twin of the unloaded owner and the
  // live one; the destroyed context's twin went with its context.
  EXPECT_TRUE(rig.redirector->Drain(std::chrono::milliseconds(10)));
  rig.redirector->UnloadTwins();
  EXPECT_THAT(rig.seam.unloaded_modules,
              ::testing::UnorderedElementsAre(
                  reinterpret_cast<CUmodule>(FakeSeam::kFirstLoadedModule),
                  reinterpret_cast<CUmodule>(FakeSeam::kFirstLoadedModule + 0x2000)));
}

TEST(LaunchRedirector, DrainWaitsForTheLastLaunchOfEachStream) {
  RedirectRig rig;
  const auto s1 = reinterpret_cast<CUstream>(0x31), s2 = reinterpret_cast<CUstream>(0x32);
  rig.redirector->AfterRedirectedLaunch(rig.context, s1);
  rig.redirector->AfterRedirectedLaunch(rig.context, s1);  // replaces the first event
  rig.redirector->AfterRedirectedLaunch(rig.context, s2);
  EXPECT_EQ(rig.seam.events_destroyed, 1);
  rig.seam.events_done = false;  // a kernel that does not end
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(rig.redirector->Drain(std::chrono::milliseconds(50)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
  rig.seam.events_done = true;
  EXPECT_TRUE(rig.redirector->Drain(std::chrono::milliseconds(50)));
  EXPECT_EQ(rig.seam.events_destroyed, 3);
}

TEST(LaunchRedirector, EachContextGetsItsOwnTwin) {
  RedirectRig rig;
  const auto other = reinterpret_cast<CUcontext>(0x10);
  EXPECT_EQ(rig.Run(rig.vec_add, rig.context),
            reinterpret_cast<CUfunction>(FakeSeam::kFirstLoadedModule + 1));
  EXPECT_EQ(rig.Run(rig.vec_add, other),
            reinterpret_cast<CUfunction>(FakeSeam::kFirstLoadedModule + 0x1000 + 1));
  EXPECT_EQ(rig.Calls("LoadModuleData"), 2);
}

TEST(LaunchRedirector, LeavesAloneWhatItCannotInstrument) {
  RedirectRig rig;
  // A handle the driver cannot place.
  const auto stranger = reinterpret_cast<CUfunction>(0x999);
  EXPECT_EQ(rig.Run(stranger, rig.context), stranger);
  // A module loaded before its image could be kept.
  const auto old = reinterpret_cast<CUfunction>(0x601);
  rig.seam.owners[old] = {reinterpret_cast<void*>(0x600), false, kVecAdd};
  EXPECT_EQ(rig.Run(old, rig.context), old);
  // No probe selects anything: nothing loaded.
  rig.instrumenter.result = std::optional<InstrumentedImage>();
  const auto other = reinterpret_cast<CUcontext>(0x11);
  EXPECT_EQ(rig.Run(rig.vec_add, other), rig.vec_add);
  // The driver refuses the twin: the original runs, and keeps running.
  RedirectRig refused;
  refused.seam.load_module_status = absl::InvalidArgumentError("CUDA_ERROR_INVALID_IMAGE");
  EXPECT_EQ(refused.Run(refused.vec_add, refused.context), refused.vec_add);
  EXPECT_EQ(refused.Run(refused.vec_add, refused.context), refused.vec_add);
  EXPECT_EQ(refused.Calls("LoadModuleData"), 1);
  EXPECT_EQ(rig.Calls("LoadModuleData"), 0);
  // Graph launches carry no function to swap.
  cuGraphLaunch_params g = {};
  CUpti_CallbackData data = {};
  data.functionParams = &g;
  data.callbackSite = CUPTI_API_ENTER;
  EXPECT_FALSE(rig.redirector->Redirect(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, &data));
}

// The attach protocol over real segments: the program's session receives
// the request; the attacher's session carries the bundle and gets the
// hook's answers.
// `cuprobe list -- cmd`: the observer sees each kept image once, after the
// load, and nothing of a load whose image was not kept.
TEST(ImageRegistry, ObserverSeesEachKeptLoad) {
  ImageRegistry registry;
  std::vector<std::string> seen;
  registry.SetLoadObserver([&](const ImageSource& source) {
    seen.emplace_back(static_cast<const char*>(source.live));
  });
  const std::string ptx = ".version 9.0\n.target sm_90\n.address_size 64\n";
  LoadModule(registry, ptx.c_str(), reinterpret_cast<CUmodule>(0x79));
  LoadModule(registry, "not an image", reinterpret_cast<CUmodule>(0x7a));
  EXPECT_THAT(seen, ElementsAre(ptx));
  EXPECT_EQ(registry.Sources().size(), 1u);
}

// What a session's record ring holds of names, instrumented kernels and
// list entries.
struct RingContents {
  std::map<uint64_t, std::string> names;
  std::vector<ProbeKernelRecord> probe_kernels;
  std::vector<CatalogKernelRecord> catalog;
};

RingContents DrainRing(Session& s) {
  RingContents out;
  s.ring().Drain([&](uint16_t type, absl::Span<const uint8_t> body) {
    if (type == static_cast<uint16_t>(RecordType::kName)) {
      NameRecord n;
      std::memcpy(&n, body.data(), sizeof(n));
      out.names[n.name_id] =
          std::string(reinterpret_cast<const char*>(body.data()) + sizeof(n), n.length);
    } else if (type == static_cast<uint16_t>(RecordType::kProbeKernel)) {
      out.probe_kernels.emplace_back();
      std::memcpy(&out.probe_kernels.back(), body.data(), sizeof(ProbeKernelRecord));
    } else if (type == static_cast<uint16_t>(RecordType::kCatalogKernel)) {
      out.catalog.emplace_back();
      std::memcpy(&out.catalog.back(), body.data(), sizeof(CatalogKernelRecord));
    }
  });
  return out;
}

class LateAttachProtocol : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Session> program = Session::Create({.ring_capacity = 4096});
    ASSERT_TRUE(program.ok()) << program.status();
    program_ = std::make_unique<Session>(*std::move(program));
    tracer_ = std::make_unique<Tracer>(seam_, output_, 4242);
    attach_ = std::make_unique<LateAttach>(seam_, registry_, *program_, *tracer_, 4242);
  }
  void TearDown() override {
    if (program_ != nullptr) (void)program_->Remove();
    for (Session& s : probes_) (void)s.Remove();
  }
  // A probe session as `cuprobe attach` makes it, with the threadhist bundle.
  Session& MakeProbeSession() {
    std::string bytes = testing::ReadWholeFile(testing::BuildDir() + "/probes/threadhist.cpb");
    EXPECT_FALSE(bytes.empty());
    std::vector<uint8_t> bundle(bytes.begin(), bytes.end());
    absl::StatusOr<ProbeBundle> parsed = ReadBundle(bundle);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    SessionOptions o;
    o.ring_capacity = 4096;
    o.maps = parsed->maps;
    o.bundle = bundle;
    absl::StatusOr<Session> s = Session::Create(o);
    EXPECT_TRUE(s.ok()) << s.status();
    probes_.push_back(*std::move(s));
    return probes_.back();
  }
  // vec_add's fatbin, loaded as the program would (cuModuleLoadData).
  void LoadVecAdd(CUmodule module) {
    std::string host = testing::ReadWholeFile(testing::SamplePath("vec_add"));
    host_.assign(host.begin(), host.end());
    absl::StatusOr<std::vector<HostFatbin>> fatbins = FindFatbinsInHostElf(host_);
    ASSERT_TRUE(fatbins.ok() && !fatbins->empty()) << fatbins.status();
    LoadModule(registry_, host_.data() + (*fatbins)[0].offset, module);
  }
  bool Launch(CUfunction f) {
    cuLaunchKernel_params p = {};
    p.f = f;
    CUpti_CallbackData data = {};
    data.functionParams = &p;
    data.context = context_;
    data.callbackSite = CUPTI_API_ENTER;
    attach_->OnLaunch(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data);
    const bool swapped = p.f != f;
    data.callbackSite = CUPTI_API_EXIT;
    attach_->OnLaunch(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &data);
    return swapped;
  }

  FakeSeam seam_;
  FakeOutput output_{nullptr};
  ImageRegistry registry_;
  std::unique_ptr<Session> program_;
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<LateAttach> attach_;
  std::vector<Session> probes_;
  std::vector<uint8_t> host_;
  const CUcontext context_ = reinterpret_cast<CUcontext>(0x9);
};

TEST_F(LateAttachProtocol, AttachRedirectsAndDetachWaitsAndAnswers) {
  const auto module = reinterpret_cast<CUmodule>(0x500);
  const auto vec_add = reinterpret_cast<CUfunction>(0x501);
  seam_.owners[vec_add] = {module, false, kVecAdd};
  seam_.module_functions = {kVecAdd};
  LoadVecAdd(module);

  attach_->Poll(1);
  EXPECT_FALSE(attach_->attached()) << "no request yet";
  EXPECT_FALSE(Launch(vec_add));

  Session& probes = MakeProbeSession();
  ASSERT_TRUE(program_->RequestAttach(probes.name()).ok());
  attach_->Poll(2);
  ASSERT_TRUE(attach_->attached());
  EXPECT_EQ(probes.session_state(), static_cast<uint32_t>(SessionState::kHookReady));
  EXPECT_EQ(probes.header().hook_pid.load(), 4242u);

  // The real rewriter instruments vec_add from the kept image (ptxas on this
  // machine); the fake driver loads the twin.
  EXPECT_TRUE(Launch(vec_add));
  EXPECT_TRUE(Launch(vec_add));
  ASSERT_EQ(seam_.loaded_images.size(), 1u);
  EXPECT_EQ(seam_.loaded_images[0], "\x7f" "ELF") << "a cubin";
  ASSERT_TRUE(attach_->stats().has_value());
  EXPECT_EQ(attach_->stats()->launches_redirected, 2u);

  EXPECT_EQ(seam_.recorded_events.size(), 2u) << "each redirected launch marks its stream";
  // The attacher learns the instrumented kernel's name, for its prints.
  RingContents ring = DrainRing(probes);
  ASSERT_EQ(ring.probe_kernels.size(), 1u);
  EXPECT_EQ(ring.probe_kernels[0].pid, 4242u);
  EXPECT_EQ(ring.names.at(ring.probe_kernels[0].name_id), kVecAdd);

  ASSERT_TRUE(program_->RequestDetach().ok());
  attach_->Poll(3);
  EXPECT_FALSE(attach_->attached());
  EXPECT_THAT(seam_.calls(), Contains("EventDone")) << "kernels waited for before the free";
  EXPECT_EQ(seam_.events_destroyed, 2);
  EXPECT_THAT(seam_.unloaded_modules,
              ElementsAre(reinterpret_cast<CUmodule>(FakeSeam::kFirstLoadedModule)));
  EXPECT_EQ(probes.session_state(), static_cast<uint32_t>(SessionState::kHookStopped));
  EXPECT_FALSE(Launch(vec_add)) << "after the detach the original kernel runs";
}

TEST_F(LateAttachProtocol, KernelsThatDoNotFinishKeepTheirMaps) {
  const auto module = reinterpret_cast<CUmodule>(0x500);
  const auto vec_add = reinterpret_cast<CUfunction>(0x501);
  seam_.owners[vec_add] = {module, false, kVecAdd};
  seam_.module_functions = {kVecAdd};
  LoadVecAdd(module);
  Session& probes = MakeProbeSession();
  ASSERT_TRUE(program_->RequestAttach(probes.name()).ok());
  attach_->Poll(1);
  ASSERT_TRUE(Launch(vec_add));
  seam_.events_done = false;  // a persistent kernel
  ASSERT_TRUE(program_->RequestDetach().ok());
  attach_->Poll(2);
  EXPECT_FALSE(attach_->attached());
  EXPECT_TRUE(seam_.unloaded_modules.empty()) << "a kernel may still run in the twin";
  EXPECT_EQ(probes.session_state(), static_cast<uint32_t>(SessionState::kHookStopped));
}

TEST_F(LateAttachProtocol, ARequestNamingTheProgramsOwnSessionIsIgnored) {
  ASSERT_TRUE(program_->RequestAttach(program_->name()).ok());
  attach_->Poll(1);
  EXPECT_FALSE(attach_->attached());
  EXPECT_NE(program_->session_state(), static_cast<uint32_t>(SessionState::kHookDisabled));
}

TEST_F(LateAttachProtocol, BadRequestsAttachNothing) {
  // A name that is not a session.
  ASSERT_TRUE(program_->RequestAttach("cuprobe-no-such-session").ok());
  attach_->Poll(1);
  EXPECT_FALSE(attach_->attached());
  // A name without its terminating NUL.
  std::memset(program_->header().attach_name, 'B', kAttachNameSize);
  program_->header().attach_request.fetch_add(1);
  EXPECT_EQ(program_->ReadAttachRequest().status().code(), absl::StatusCode::kDataLoss);
  attach_->Poll(2);
  EXPECT_FALSE(attach_->attached());
  // A session whose bundle is garbage: refused, and told so.
  SessionOptions o;
  o.ring_capacity = 4096;
  o.bundle = std::vector<uint8_t>(64, 0xEE);
  absl::StatusOr<Session> bad = Session::Create(o);
  ASSERT_TRUE(bad.ok()) << bad.status();
  probes_.push_back(*std::move(bad));
  ASSERT_TRUE(program_->RequestDetach().ok());
  ASSERT_TRUE(program_->RequestAttach(probes_.back().name()).ok());
  attach_->Poll(3);
  EXPECT_FALSE(attach_->attached());
  EXPECT_EQ(probes_.back().session_state(), static_cast<uint32_t>(SessionState::kHookDisabled));
  EXPECT_THAT(probes_.back().HookReason(), ::testing::HasSubstr("probe bundle is not usable"));
}

// `cuprobe list PID`: a session without a bundle is a list request. The
// hook writes every kept image's kernels, with their backend, into its ring
// and says kHookStopped; nothing is attached.
TEST_F(LateAttachProtocol, AListRequestIsAnsweredWithEveryLoadedKernel) {
  LoadVecAdd(reinterpret_cast<CUmodule>(0x600));
  absl::StatusOr<Session> lister = Session::Create({.ring_capacity = 1 << 16});
  ASSERT_TRUE(lister.ok()) << lister.status();
  probes_.push_back(*std::move(lister));
  Session& l = probes_.back();
  ASSERT_TRUE(program_->RequestAttach(l.name()).ok());
  attach_->Poll(1);
  EXPECT_FALSE(attach_->attached());
  EXPECT_EQ(l.session_state(), static_cast<uint32_t>(SessionState::kHookStopped));
  EXPECT_EQ(l.header().hook_pid.load(), 4242u);

  RingContents ring = DrainRing(l);
  std::vector<std::pair<std::string, uint16_t>> kernels;
  for (const CatalogKernelRecord& r : ring.catalog) {
    EXPECT_EQ(r.pid, 4242u);
    kernels.emplace_back(ring.names.at(r.name_id), r.backend);
  }
  // vec_add is built for sm_90 with its PTX: both kernels are the PTX
  // backend's.
  EXPECT_THAT(kernels, ::testing::UnorderedElementsAre(
                           std::pair<std::string, uint16_t>(kVecAdd, kCatalogBackendPtx),
                           std::pair<std::string, uint16_t>(kScale, kCatalogBackendPtx)));
}

TEST_F(LateAttachProtocol, AnAttacherThatDiedIsDetached) {
  // The attacher's session is made by a child that exits at once.
  Session& probes = MakeProbeSession();
  std::string name = probes.name();
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  // Pretend the dead child created it.
  const_cast<SegmentHeader&>(probes.header()).creator_pid = static_cast<uint32_t>(child);
  ASSERT_TRUE(program_->RequestAttach(name).ok());
  attach_->Poll(1);
  ASSERT_TRUE(attach_->attached());
  attach_->Poll(2);
  EXPECT_FALSE(attach_->attached());
  EXPECT_EQ(probes.session_state(), static_cast<uint32_t>(SessionState::kHookStopped));
}

TEST(SessionAttachRequest, OneAttacherAtATimeAndDeadOnesAreTakenOver) {
  absl::StatusOr<Session> program = Session::Create({.ring_capacity = 4096});
  ASSERT_TRUE(program.ok());
  absl::StatusOr<Session::AttachRequest> r = program->ReadAttachRequest();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->serial, 0u);
  EXPECT_TRUE(r->name.empty());
  ASSERT_TRUE(program->RequestAttach("cuprobe-1-2-abc").ok());
  r = program->ReadAttachRequest();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->serial, 1u);
  EXPECT_EQ(r->name, "cuprobe-1-2-abc");
  EXPECT_EQ(r->owner, static_cast<uint32_t>(::getpid()));
  EXPECT_EQ(program->RequestAttach("bad name!").code(), absl::StatusCode::kInvalidArgument);
  // Another live process holds it.
  program->header().attach_owner.store(1);  // init: alive
  EXPECT_EQ(program->RequestAttach("cuprobe-1-2-abd").code(), absl::StatusCode::kAlreadyExists);
  // A dead one does not.
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  program->header().attach_owner.store(static_cast<uint32_t>(child));
  EXPECT_TRUE(program->RequestAttach("cuprobe-1-2-abd").ok());
  ASSERT_TRUE(program->RequestDetach().ok());
  r = program->ReadAttachRequest();
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->name.empty());
  EXPECT_EQ(program->header().attach_owner.load(), 0u);
  (void)program->Remove();
}

}  // namespace
}  // namespace cuprobe
