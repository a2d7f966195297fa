// The patch backend's runtime (cupti_hook/kernel_patcher.h) and the hook
// with --backend patch (cupti_hook/hook_patch.cc), against the fake seams:
// which modules get patched, what each kernel's block holds, and that every
// failure leaves the program's kernels unprobed with one line, never more.
#include "cupti_hook/kernel_patcher.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cupti_hook/hook.h"
#include "cupti_hook/testing/fake_output.h"
#include "cupti_hook/testing/fake_sanitizer_seam.h"
#include "cupti_hook/testing/fake_seam.h"
#include "cuprobe/abi.h"
#include "probe/bundle.h"
#include "probe/trace_records.h"
#include "ptx_rewriter/patch_adapters.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"
#include "tests/unit/fake_cuda_driver.h"

namespace cuprobe {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

const auto kContext = reinterpret_cast<CUcontext>(0xC1);
const auto kModule = reinterpret_cast<CUmodule>(0x3000);
const auto kFunction = reinterpret_cast<CUfunction>(0x4000);

class Maps : public MapTableProvider {
 public:
  absl::Status usable, claim;
  int claims = 0;
  absl::StatusOr<std::vector<uint64_t>> MapTable() override {
    return std::vector<uint64_t>{0xA000, 0xB000};
  }
  absl::StatusOr<TableAndDescriptors> MapTableAndDescriptors() override {
    return TableAndDescriptors{{0xA000, 0xB000}, std::vector<uint8_t>(256, 0x5A)};
  }
  absl::Status UsableInCurrentContext() override { return usable; }
  absl::Status Claim() override {
    ++claims;
    return claim;
  }
  absl::Status add_counters;
  std::vector<std::vector<SiteCounter>> counters;  // what AdoptSiteCounters got
  std::vector<uint64_t> bases;
  absl::Status AdoptSiteCounters(std::vector<SiteCounter> c, uint64_t base) override {
    if (!add_counters.ok()) return add_counters;
    counters.push_back(std::move(c));
    bases.push_back(base);
    return absl::OkStatus();
  }
};

// mem_trace as the build compiled it (samples/mem_trace): a memory program
// that summarizes to adds of (kernel, kind) -> 1 and size.
ProbeBundle MemTrace() {
  std::ifstream f(testing::BuildDir() + "/probes/mem_trace.cpb", std::ios::binary);
  std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  absl::StatusOr<ProbeBundle> b = ReadBundle(bytes);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : ProbeBundle{};
}

ProbeBundle TwoPrograms() {
  ProbeBundle b;
  b.programs.push_back({.name = "a", .attach = AttachKind::kEntry, .kernel_glob = "*scale*",
                        .ptx_function = "pa"});
  b.programs.push_back({.name = "b", .attach = AttachKind::kExit, .kernel_glob = "*",
                        .ptx_function = "pb"});
  b.maps.resize(2);
  return b;
}

KernelPatcher::Launch At(CUfunction function, const char* name) {
  return {.context = kContext, .module = kModule, .function = function, .name = name,
          .launch = reinterpret_cast<sanitizer::LaunchHandle>(0x5000),
          .stream = reinterpret_cast<sanitizer::StreamHandle>(0x6000)};
}

std::vector<uint8_t> FixtureCubin() {
  std::ifstream f(testing::BuildDir() + "/tests/ptx_rewriter/fixtures/kernels_sm90.cubin",
                  std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class KernelPatcherTest : public ::testing::Test {
 protected:
  KernelPatcherTest() {
    seam_.driver = fake_.driver();
    seam_.device_memory.resize(8 << 20);  // the fake's allocation i is at 1 MiB x i
  }
  KernelPatcher::PatchBuilder Builder() {
    return [this](uint32_t sm) -> absl::StatusOr<PatchModule> {
      ++builds_;
      sms_.push_back(sm);
      if (!build_status_.ok()) return build_status_;
      PatchModule m;
      m.cubin = {0x7f, 'E', 'L', 'F'};
      m.callbacks = {{1, "__cuprobe_patch_block_enter"},
                     {2, "__cuprobe_patch_block_exit"},
                     {14, "__cuprobe_patch_async_copy"}};
      m.map_slots = 2;
      return m;
    };
  }
  KernelPatcher Make(bool async_copies = false, bool site_counters = true) {
    return KernelPatcher(seam_, san_, bundle_, maps_, Builder(),
                         [this](std::string_view name, uint32_t id) {
                           told_.emplace_back(std::string(name), id);
                         },
                         {.async_copies = async_copies, .site_counters = site_counters});
  }
  // The kernel block at device address `at`.
  cuprobe_patch_kernel BlockAt(uintptr_t at) {
    cuprobe_patch_kernel k;
    std::memcpy(&k, seam_.device_memory.data() + at, sizeof(k));
    return k;
  }

  testing::FakeCudaDriver fake_;
  FakeSeam seam_;
  FakeSanitizerSeam san_;
  Maps maps_;
  ProbeBundle bundle_ = TwoPrograms();
  absl::Status build_status_;
  int builds_ = 0;
  std::vector<uint32_t> sms_;
  std::vector<std::pair<std::string, uint32_t>> told_;
};

TEST_F(KernelPatcherTest, PatchesAModuleWithASelectedKernelOncePerModule) {
  KernelPatcher patcher = Make();
  std::vector<uint8_t> cubin = FixtureCubin();
  ASSERT_FALSE(cubin.empty());
  patcher.OnModuleLoaded(kContext, kModule, cubin);
  patcher.OnModuleLoaded(kContext, kModule, cubin);  // the same module again: nothing more
  EXPECT_EQ(builds_, 1);
  EXPECT_THAT(sms_, ElementsAre(90u));
  EXPECT_THAT(san_.patches_added, ElementsAre(kContext));
  EXPECT_THAT(san_.patched, ElementsAre(Pair(kModule, "__cuprobe_patch_block_enter"),
                                        Pair(kModule, "__cuprobe_patch_block_exit")));
  EXPECT_THAT(san_.modules_patched, ElementsAre(kModule));
  EXPECT_EQ(patcher.stats().modules_patched, 1u);
  // A second module in the same context: the patch module is not added again.
  const auto other = reinterpret_cast<CUmodule>(0x3100);
  patcher.OnModuleLoaded(kContext, other, cubin);
  EXPECT_EQ(san_.patches_added.size(), 1u);
  EXPECT_THAT(san_.modules_patched, ElementsAre(kModule, other));
  // Unloaded, then a new module at the same address: patched again.
  patcher.OnModuleUnloading(kModule);
  patcher.OnModuleLoaded(kContext, kModule, cubin);
  EXPECT_EQ(san_.modules_patched.size(), 3u);
}

// A machine mixing GPU generations: each device's modules get the patch
// module built for its SM, each built once.
TEST_F(KernelPatcherTest, EachDevicesModulesGetTheirSmsPatchModule) {
  KernelPatcher patcher = Make();
  const auto other_context = reinterpret_cast<CUcontext>(0xC2);
  patcher.OnModuleLoaded(kContext, kModule, {});
  seam_.device_sm = 80u;
  patcher.OnModuleLoaded(other_context, reinterpret_cast<CUmodule>(0x3100), {});
  patcher.OnModuleLoaded(other_context, reinterpret_cast<CUmodule>(0x3200), {});
  EXPECT_THAT(sms_, ElementsAre(90u, 80u));
  EXPECT_THAT(san_.patches_added, ElementsAre(kContext, other_context));
  EXPECT_EQ(patcher.stats().modules_patched, 3u);
  // A device whose SM cannot be told: its modules run unpatched.
  seam_.device_sm = absl::UnavailableError("no device");
  patcher.OnModuleLoaded(other_context, reinterpret_cast<CUmodule>(0x3300), {});
  EXPECT_EQ(patcher.stats().modules_failed, 1u);
}

// --backend auto: a module the PTX backend rewrote is not patched, its
// kernels get no block; ids come from the PTX backend (and are told there).
TEST_F(KernelPatcherTest, UnderAutoRewrittenModulesAreLeftToThePtxBackend) {
  const std::vector<uint8_t> cubin = FixtureCubin();
  ASSERT_FALSE(cubin.empty());
  std::vector<std::string> asked;
  KernelPatcher::Options options;
  options.rewritten = [&](absl::Span<const uint8_t> image) {
    return image.size() == cubin.size();  // "the fixture is a rewritten image"
  };
  options.kernel_id = [&](const std::string& mangled) {
    asked.push_back(mangled);
    return 40u + static_cast<uint32_t>(asked.size());
  };
  KernelPatcher patcher(seam_, san_, bundle_, maps_, Builder(),
                        [this](std::string_view name, uint32_t id) {
                          told_.emplace_back(std::string(name), id);
                        },
                        std::move(options));
  patcher.OnModuleLoaded(kContext, kModule, cubin);
  EXPECT_THAT(san_.modules_patched, IsEmpty());
  EXPECT_EQ(builds_, 0);
  EXPECT_EQ(patcher.stats().modules_rewritten, 1u);
  patcher.OnLaunchBegin(At(kFunction, "_ZN2ns5scaleIfEEvPT_S1_"));
  EXPECT_THAT(san_.callback_data, IsEmpty()) << "its kernels are the PTX backend's";
  // A module it did not rewrite (no image: chosen at launch) is patched;
  // its kernel's id is the PTX backend's.
  const auto other = reinterpret_cast<CUmodule>(0x3100);
  patcher.OnModuleLoaded(kContext, other, {});
  EXPECT_THAT(san_.modules_patched, ElementsAre(other));
  KernelPatcher::Launch l = At(reinterpret_cast<CUfunction>(0x4100), "plain_c");
  l.module = other;
  patcher.OnLaunchBegin(l);
  ASSERT_EQ(san_.callback_data.size(), 1u);
  EXPECT_THAT(asked, ElementsAre("plain_c"));
  const cuprobe_patch_kernel k =
      BlockAt(reinterpret_cast<uintptr_t>(san_.callback_data[l.function]));
  EXPECT_EQ(k.kernel_id, 41u);
  EXPECT_THAT(told_, IsEmpty()) << "the PTX backend tells its listener";
}

// cp.async copies are patched only when asked for (their cost).
TEST_F(KernelPatcherTest, AsyncCopiesArePatchedOnlyWhenAskedFor) {
  KernelPatcher with = Make(/*async_copies=*/true);
  with.OnModuleLoaded(kContext, kModule, {});
  EXPECT_THAT(san_.patched, Contains(Pair(kModule, "__cuprobe_patch_async_copy")));
  san_.patched.clear();
  KernelPatcher without = Make();
  without.OnModuleLoaded(kContext, reinterpret_cast<CUmodule>(0x3100), {});
  EXPECT_EQ(san_.patched.size(), 2u);
  EXPECT_THAT(san_.patched, ::testing::Not(Contains(Pair(::testing::_,
                                                          "__cuprobe_patch_async_copy"))));
}

TEST_F(KernelPatcherTest, LeavesAModuleNoProgramSelectsAlone) {
  bundle_.programs.resize(1);  // "*scale*" only
  bundle_.programs[0].kernel_glob = "nothing_here*";
  KernelPatcher patcher = Make();
  patcher.OnModuleLoaded(kContext, kModule, FixtureCubin());
  EXPECT_EQ(builds_, 0);
  EXPECT_THAT(san_.calls, IsEmpty());
}

TEST_F(KernelPatcherTest, AModuleThatCannotBePatchedRunsUnpatched) {
  san_.patch_status = absl::InternalError("sanitizerPatchModule failed");
  KernelPatcher patcher = Make();
  patcher.OnModuleLoaded(kContext, kModule, FixtureCubin());
  EXPECT_EQ(patcher.stats().modules_failed, 1u);
  EXPECT_EQ(patcher.stats().modules_patched, 0u);
  // A patch module that cannot be built: every module fails, built once.
  build_status_ = absl::InternalError("ptxas said no");
  KernelPatcher second = Make();
  second.OnModuleLoaded(kContext, kModule, {});
  second.OnModuleLoaded(kContext, reinterpret_cast<CUmodule>(0x3100), {});
  EXPECT_EQ(second.stats().modules_failed, 2u);
  EXPECT_EQ(builds_, 2);  // one for each patcher
}

// The block a selected kernel gets: the map block (descriptors, then the
// table), its id, the programs that select it.
TEST_F(KernelPatcherTest, ASelectedKernelGetsItsBlockAtItsFirstLaunch) {
  KernelPatcher patcher = Make();
  patcher.OnModuleLoaded(kContext, kModule, {});
  patcher.OnLaunchBegin(At(kFunction, "_ZN2ns5scaleIfEEvPT_S1_"));
  patcher.OnLaunchBegin(At(kFunction, "_ZN2ns5scaleIfEEvPT_S1_"));
  ASSERT_EQ(san_.callback_data.size(), 1u);
  EXPECT_EQ(std::count(san_.calls.begin(), san_.calls.end(), "SetCallbackData"), 1);
  // The kernel block: allocation 2, after the map block (allocation 1).
  const auto block = reinterpret_cast<uintptr_t>(san_.callback_data[kFunction]);
  ASSERT_EQ(block, 0x200000u);
  cuprobe_patch_kernel k;
  std::memcpy(&k, seam_.device_memory.data() + block, sizeof(k));
  EXPECT_EQ(k.map_block, 0x100000u);
  EXPECT_EQ(k.kernel_id, 0u);
  EXPECT_EQ(k.programs, 0b11u) << "both programs select ns::scale<float>";
  EXPECT_EQ(k.args.count, 0u);
  // The map block: 2 slots of descriptors (0x5A bytes here), then the table.
  const uint8_t* map_block = seam_.device_memory.data() + 0x100000;
  EXPECT_EQ(map_block[0], 0x5A);
  EXPECT_EQ(map_block[255], 0x5A);
  uint64_t table[2];
  std::memcpy(table, map_block + 256, sizeof(table));
  EXPECT_EQ(table[0], 0xA000u);
  EXPECT_EQ(table[1], 0xB000u);
  EXPECT_THAT(told_, ElementsAre(Pair("_ZN2ns5scaleIfEEvPT_S1_", 0u)));
  EXPECT_EQ(maps_.claims, 1);
  EXPECT_EQ(patcher.stats().kernels_probed, 1u);
  // A kernel only the "*" exit program selects: bit 1 alone, the next id.
  const auto plain = reinterpret_cast<CUfunction>(0x4100);
  patcher.OnLaunchBegin(At(plain, "plain_c"));
  EXPECT_EQ(san_.callback_data.size(), 2u);
  EXPECT_THAT(told_, Contains(Pair("plain_c", 1u)));
  EXPECT_EQ(fake_.state.allocs, 3);  // the map block, then one block per kernel
}

TEST_F(KernelPatcherTest, MapsThatCannotBeClaimedLeaveTheKernelUnprobed) {
  maps_.claim = absl::FailedPreconditionError("another process of the session holds the maps");
  KernelPatcher patcher = Make();
  patcher.OnLaunchBegin(At(kFunction, "plain_c"));
  EXPECT_THAT(san_.callback_data, IsEmpty());
  EXPECT_EQ(patcher.stats().kernels_probed, 0u);
}

TEST_F(KernelPatcherTest, AKernelNoProgramSelectsGetsNoBlock) {
  bundle_.programs.resize(1);  // "*scale*" only
  KernelPatcher patcher = Make();
  patcher.OnLaunchBegin(At(kFunction, "_Z7add_onePfi"));
  EXPECT_THAT(san_.callback_data, IsEmpty());
  EXPECT_EQ(fake_.state.allocs, 0);
}

TEST_F(KernelPatcherTest, ADestroyedContextIsForgotten) {
  KernelPatcher patcher = Make();
  patcher.OnLaunchBegin(At(kFunction, "plain_c"));
  patcher.OnContextDestroying(kContext);
  // A new context at the same address: a new map block and a new block.
  patcher.OnLaunchBegin(At(kFunction, "plain_c"));
  EXPECT_EQ(std::count(san_.calls.begin(), san_.calls.end(), "SetCallbackData"), 2);
  EXPECT_EQ(fake_.state.allocs, 4);
}

// A function handle of an unloaded module may come back for another kernel.
TEST_F(KernelPatcherTest, AnUnloadedModulesKernelsAreForgotten) {
  KernelPatcher patcher = Make();
  patcher.OnLaunchBegin(At(kFunction, "plain_c"));
  patcher.OnModuleUnloading(kModule);
  patcher.OnLaunchBegin(At(kFunction, "_ZN2ns5scaleIfEEvPT_S1_"));
  EXPECT_EQ(std::count(san_.calls.begin(), san_.calls.end(), "SetCallbackData"), 2);
  EXPECT_THAT(told_, ElementsAre(Pair("plain_c", 0u), Pair("_ZN2ns5scaleIfEEvPT_S1_", 1u)));
}

// A program that reads arguments: each launch gets a block of its own in
// the context's ring, with that launch's arguments, copied in its stream.
TEST_F(KernelPatcherTest, ArgumentsReachEachLaunchThroughItsOwnBlock) {
  bundle_.programs[1].reads_args = true;
  fake_.state.param_sizes = {8, 4, 2};  // a pointer, an int, a short
  KernelPatcher patcher = Make();
  ASSERT_TRUE(patcher.wants_arguments());
  uint64_t p0 = 0x123456789A;
  uint32_t p1 = 0xFFFFFFFF;
  uint16_t p2 = 7;
  void* params[] = {&p0, &p1, &p2};
  for (uint32_t launch = 0; launch < 2; ++launch) {
    p1 = launch;
    KernelPatcher::OnLaunchApi(params);
    patcher.OnLaunchBegin(At(kFunction, "plain_c"));
  }
  EXPECT_THAT(san_.callback_data, IsEmpty()) << "per launch, not per kernel";
  ASSERT_EQ(san_.copies.size(), 2u);
  ASSERT_EQ(san_.launch_data.size(), 1u);  // the same fake launch handle twice
  for (uint32_t launch = 0; launch < 2; ++launch) {
    SCOPED_TRACE(launch);
    cuprobe_patch_kernel k;
    ASSERT_EQ(san_.copies[launch].second.size(), sizeof(k));
    std::memcpy(&k, san_.copies[launch].second.data(), sizeof(k));
    EXPECT_EQ(k.map_block, 0x100000u);
    EXPECT_EQ(k.programs, 0b10u);
    EXPECT_EQ(k.args.count, 3u);
    EXPECT_EQ(k.args.value[0], p0);
    EXPECT_EQ(k.args.value[1], launch);
    EXPECT_EQ(k.args.value[2], 7u);
    // Consecutive blocks of the ring (allocation 2, after the map block).
    EXPECT_EQ(san_.copies[launch].first, 0x200000u + launch * sizeof(k));
  }
  // A launch whose arguments came through `extra`, or a launch with no
  // launch call of its own after one that failed (its EXIT cleared them):
  // count 0.
  KernelPatcher::OnLaunchApi(params);
  KernelPatcher::OnLaunchApi(nullptr);
  patcher.OnLaunchBegin(At(kFunction, "plain_c"));
  cuprobe_patch_kernel k;
  std::memcpy(&k, san_.copies.back().second.data(), sizeof(k));
  EXPECT_EQ(k.args.count, 0u);
}

// Memory programs that summarize: the kernel's block points at site
// counters registered with the maps, one per access class's adds.
TEST_F(KernelPatcherTest, SummarizedMemoryProgramsCountThroughSiteCounters) {
  bundle_ = MemTrace();
  ASSERT_EQ(bundle_.programs.size(), 1u);
  KernelPatcher patcher = Make();
  patcher.OnLaunchBegin(At(kFunction, "plain_c"));
  ASSERT_EQ(maps_.counters.size(), 1u);
  EXPECT_EQ(maps_.counters[0].size(), 3u * 8u);  // global: kind x size
  const cuprobe_patch_kernel k = BlockAt(reinterpret_cast<uintptr_t>(san_.callback_data[kFunction]));
  // Allocation 2 (after the map block), zeroed, before the kernel's block.
  EXPECT_EQ(k.site_counters, 0x200000u);
  EXPECT_THAT(maps_.bases, ElementsAre(0x200000u));
  EXPECT_EQ(fake_.state.allocs, 3);
  const uint8_t load4 = k.counter_of[*PatchAccessClass(sanitizer::kGlobalMemoryAccess,
                                                       CUPROBE_ACCESS_LOAD, 4)];
  ASSERT_LT(load4, maps_.counters[0].size());
  EXPECT_EQ(maps_.counters[0][load4].adds.back().delta, 4u);  // bytes
  EXPECT_EQ(k.counter_of[*PatchAccessClass(sanitizer::kSharedMemoryAccess, CUPROBE_ACCESS_LOAD,
                                           4)],
            CUPROBE_PATCH_NO_COUNTER);
  // Another kernel: counters of its own (its id is in the keys).
  patcher.OnLaunchBegin(At(reinterpret_cast<CUfunction>(0x4100), "other"));
  ASSERT_EQ(maps_.counters.size(), 2u);
  EXPECT_NE(maps_.counters[0], maps_.counters[1]);
}

TEST_F(KernelPatcherTest, WithoutSiteCountersMemoryProgramsAreCalled) {
  bundle_ = MemTrace();
  KernelPatcher off = Make(/*async_copies=*/false, /*site_counters=*/false);
  off.OnLaunchBegin(At(kFunction, "plain_c"));
  EXPECT_THAT(maps_.counters, IsEmpty());
  EXPECT_EQ(BlockAt(reinterpret_cast<uintptr_t>(san_.callback_data[kFunction])).site_counters, 0u);
  // Counters the maps cannot take: the programs are called, still probed.
  maps_.add_counters = absl::ResourceExhaustedError("no device memory");
  KernelPatcher failing = Make();
  const auto other = reinterpret_cast<CUfunction>(0x4100);
  const int frees = fake_.state.frees;
  failing.OnLaunchBegin(At(other, "plain_c"));
  ASSERT_EQ(san_.callback_data.count(other), 1u);
  EXPECT_EQ(BlockAt(reinterpret_cast<uintptr_t>(san_.callback_data[other])).site_counters, 0u);
  EXPECT_EQ(failing.stats().kernels_probed, 1u);
  EXPECT_EQ(fake_.state.frees, frees + 1) << "the counters' block is given back";
}

// With argument-reading programs too, every launch's block carries the
// kernel's counters.
TEST_F(KernelPatcherTest, LaunchBlocksCarryTheSiteCounters) {
  bundle_ = MemTrace();
  ProbeProgram args = TwoPrograms().programs[1];
  args.reads_args = true;
  bundle_.programs.push_back(args);
  KernelPatcher patcher = Make();
  for (int launch = 0; launch < 2; ++launch) patcher.OnLaunchBegin(At(kFunction, "plain_c"));
  ASSERT_EQ(maps_.counters.size(), 1u);
  ASSERT_EQ(san_.copies.size(), 2u);
  for (const auto& copy : san_.copies) {
    cuprobe_patch_kernel k;
    std::memcpy(&k, copy.second.data(), sizeof(k));
    EXPECT_EQ(k.site_counters, 0x200000u);
    EXPECT_EQ(k.programs, 0b11u);
  }
}

// Each stream has a ring of its own (a block is reused only by a later
// launch of the same stream), up to kArgRingStreams; the others share one.
TEST_F(KernelPatcherTest, EachStreamGetsItsOwnArgumentRing) {
  bundle_.programs[1].reads_args = true;
  seam_.device_memory.resize(size_t{KernelPatcher::kArgRingStreams + 4} << 20);  // 1 MiB a ring
  KernelPatcher patcher = Make();
  auto launch_in = [&](uintptr_t stream) {
    KernelPatcher::Launch l = At(kFunction, "plain_c");
    l.stream = reinterpret_cast<sanitizer::StreamHandle>(stream);
    KernelPatcher::OnLaunchApi(nullptr);
    patcher.OnLaunchBegin(l);
    return san_.copies.back().first;
  };
  const uint64_t a0 = launch_in(0x6000), b0 = launch_in(0x6100), a1 = launch_in(0x6000);
  EXPECT_EQ(a1, a0 + sizeof(cuprobe_patch_kernel));
  EXPECT_NE(b0 / 0x100000, a0 / 0x100000) << "another allocation";
  for (uint32_t s = 2; s < KernelPatcher::kArgRingStreams; ++s) launch_in(0x7000 + s);
  const int allocs = fake_.state.allocs;
  const uint64_t past0 = launch_in(0x9000), past1 = launch_in(0x9100);
  EXPECT_EQ(fake_.state.allocs, allocs + 1) << "one shared ring for the streams past the cap";
  EXPECT_EQ(past1, past0 + sizeof(cuprobe_patch_kernel));
}

// --- The hook with --backend patch -------------------------------------------------

class HookPatchTest : public ::testing::Test {
 protected:
  HookPatchTest() { config_.backend = Backend::kPatch; }
  // A hook on `san` and `cupti` (the fixture's seam_ by default).
  Hook Make(SanitizerSeam* san, FakeSeam* cupti = nullptr) {
    return Hook(cupti != nullptr ? *cupti : seam_, config_,
                [this](const HookConfig&) -> absl::StatusOr<TraceOutput*> { return &output_; },
                san);
  }
  FakeSeam seam_;
  FakeSanitizerSeam san_;
  std::vector<std::string> events_;
  FakeOutput output_{&events_};
  HookConfig config_;
};

TEST_F(HookPatchTest, SubscribesToTheSanitizerNotToCupti) {
  Hook hook = Make(&san_);
  ASSERT_EQ(hook.Start(), HookState::kReady);
  EXPECT_TRUE(san_.subscribed());
  EXPECT_FALSE(seam_.subscribed());
  EXPECT_THAT(seam_.calls(), IsEmpty()) << "no CUPTI call at all";
  EXPECT_THAT(san_.enabled, Contains(Pair(sanitizer::kDomainLaunch, sanitizer::kLaunchBegin)));
  hook.Stop();
  EXPECT_FALSE(san_.subscribed());
}

TEST_F(HookPatchTest, TracesLaunchesFromTheSanitizersLaunchCallback) {
  Hook hook = Make(&san_);
  ASSERT_EQ(hook.Start(), HookState::kReady);
  sanitizer::LaunchData launch = {};
  launch.function = kFunction;
  launch.functionName = "_Z7vec_addPKfS0_Pfi";
  launch.gridDim_x = 4096;
  launch.gridDim_y = launch.gridDim_z = 1;
  launch.blockDim_x = 256;
  launch.blockDim_y = launch.blockDim_z = 1;
  san_.Fire(sanitizer::kDomainLaunch, sanitizer::kLaunchBegin, &launch);
  san_.Fire(sanitizer::kDomainLaunch, sanitizer::kLaunchBegin, &launch);
  EXPECT_EQ(hook.tracer()->stats().launches, 2u);
  // Both records carry the kernel's name id, published once.
  auto launches = output_.OfType(RecordType::kLaunch);
  ASSERT_EQ(launches.size(), 2u);
  LaunchRecord first, second;
  std::memcpy(&first, launches[0].bytes.data(), sizeof(first));
  std::memcpy(&second, launches[1].bytes.data(), sizeof(second));
  EXPECT_NE(first.name_id, 0u);
  EXPECT_EQ(first.name_id, second.name_id);
  EXPECT_EQ(first.grid[0], 4096u);
  EXPECT_EQ(first.block[0], 256u);
  int named = 0;
  for (const auto& w : output_.OfType(RecordType::kName)) {
    named += std::string(w.bytes.begin(), w.bytes.end()).find("_Z7vec_addPKfS0_Pfi") !=
             std::string::npos;
  }
  EXPECT_EQ(named, 1);
  hook.Stop();
}

TEST_F(HookPatchTest, WithoutTheSanitizerTheHookStepsAsideWithOneReason) {
  san_.subscribe_status = absl::UnavailableError("libsanitizer-public.so not found");
  Hook hook = Make(&san_);
  EXPECT_EQ(hook.Start(), HookState::kDisabled);
  EXPECT_THAT(hook.lifecycle().reason(), ::testing::HasSubstr("libsanitizer-public.so not found"));
  Hook none = Make(nullptr);
  EXPECT_EQ(none.Start(), HookState::kDisabled);
  san_.subscribe_status = absl::AlreadyExistsError("sanitizerSubscribe failed");
  Hook taken = Make(&san_);
  EXPECT_EQ(taken.Start(), HookState::kDisabled);
  EXPECT_THAT(taken.lifecycle().reason(), ::testing::HasSubstr("another tool"));
}

// --backend auto with probes: the Sanitizer, with the PTX backend's module
// loads on its driver-API callbacks; without the Sanitizer, CUPTI as
// --backend ptx (one line says so); without probes, CUPTI.
TEST_F(HookPatchTest, AutoRunsOnTheSanitizerWithModuleLoadsOrFallsBackToCupti) {
  config_.backend = Backend::kAuto;
  output_.bundle = WriteBundle(MemTrace());
  ASSERT_FALSE(output_.bundle.empty());
  Hook hook = Make(&san_);
  ASSERT_EQ(hook.Start(), HookState::kReady);
  EXPECT_TRUE(san_.subscribed());
  EXPECT_FALSE(seam_.subscribed());
  EXPECT_THAT(san_.enabled, Contains(Pair(sanitizer::kDomainDriverApi,
                                          CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData)));
  EXPECT_THAT(san_.enabled, Contains(Pair(sanitizer::kDomainDriverApi,
                                          CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData)));
  EXPECT_THAT(san_.enabled, Contains(Pair(sanitizer::kDomainResource,
                                          sanitizer::kResourceModuleLoaded)));
  EXPECT_NE(hook.patcher(), nullptr) << "the PTX backend's module patcher";
  hook.Stop();

  FakeSanitizerSeam unavailable;
  unavailable.subscribe_status = absl::UnavailableError("libsanitizer-public.so not found");
  FakeSeam cupti;
  Hook fallback = Make(&unavailable, &cupti);
  ASSERT_EQ(fallback.Start(), HookState::kReady);
  EXPECT_TRUE(cupti.subscribed()) << "--backend ptx";
  fallback.Stop();

  // Subscribed, but its callbacks refused: let go, and on as ptx.
  FakeSanitizerSeam refusing;
  refusing.enable_status = absl::InternalError("sanitizerEnableCallback failed");
  FakeSeam cupti2;
  Hook refused = Make(&refusing, &cupti2);
  ASSERT_EQ(refused.Start(), HookState::kReady);
  EXPECT_FALSE(refusing.subscribed());
  EXPECT_TRUE(cupti2.subscribed());
  EXPECT_NE(refused.patcher(), nullptr) << "the PTX backend's, on CUPTI";
  refused.Stop();

  output_.bundle.clear();
  FakeSanitizerSeam unused;
  FakeSeam traced;
  Hook no_probes = Make(&unused, &traced);
  ASSERT_EQ(no_probes.Start(), HookState::kReady);
  EXPECT_FALSE(unused.subscribed());
  EXPECT_TRUE(traced.subscribed());
  no_probes.Stop();
}

}  // namespace
}  // namespace cuprobe
