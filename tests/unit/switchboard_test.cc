// The hook's switchboard (cupti_hook/switchboard.h) and the CUPTI event
// source (cupti_hook/gpu_events.h): callbacks built by hand as CUPTI
// delivers them, dispatched to handlers and decoded into provider-neutral
// events. The GPU suite runs the same paths under real CUPTI.
#include "cupti_hook/switchboard.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cupti_hook/gpu_events.h"
#include "cupti_hook/tracer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuprobe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::vector<std::string>* g_log = nullptr;

void First(void* owner, CUpti_CallbackId cbid, const void*) {
  g_log->push_back(absl::StrCat("first ", cbid, " ", *static_cast<int*>(owner)));
}
void Second(void* owner, CUpti_CallbackId cbid, const void*) {
  g_log->push_back(absl::StrCat("second ", cbid, " ", *static_cast<int*>(owner)));
}

TEST(Switchboard, RunsEachKeysHandlersInTheOrderAdded) {
  std::vector<std::string> log;
  g_log = &log;
  Switchboard board;
  int a = 1, b = 2;
  ASSERT_TRUE(board.Add(CUPTI_CB_DOMAIN_DRIVER_API, 13, &First, &a).ok());
  ASSERT_TRUE(board.Add(CUPTI_CB_DOMAIN_DRIVER_API, 13, &Second, &b).ok());
  ASSERT_TRUE(board.Add(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED, &Second, &a)
                  .ok());
  board.Dispatch(CUPTI_CB_DOMAIN_DRIVER_API, 13, nullptr);
  board.Dispatch(CUPTI_CB_DOMAIN_DRIVER_API, 14, nullptr);  // no handler: nothing
  board.Dispatch(CUPTI_CB_DOMAIN_RUNTIME_API, 13, nullptr);
  board.Dispatch(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED, nullptr);
  board.Dispatch(CUPTI_CB_DOMAIN_INVALID, 13, nullptr);
  board.Dispatch(CUPTI_CB_DOMAIN_DRIVER_API, 1u << 30, nullptr);
  EXPECT_THAT(log, ElementsAre("first 13 1", "second 13 2",
                               absl::StrCat("second ", CUPTI_CBID_RESOURCE_CONTEXT_CREATED, " 1")));
  EXPECT_TRUE(board.Has(CUPTI_CB_DOMAIN_DRIVER_API, 13));
  EXPECT_FALSE(board.Has(CUPTI_CB_DOMAIN_DRIVER_API, 14));
  EXPECT_THAT(board.Keys(),
              ElementsAre(Pair(CUPTI_CB_DOMAIN_DRIVER_API, 13u),
                          Pair(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED)));
  g_log = nullptr;
}

TEST(Switchboard, RefusesKeysOutOfRangeAndTooManyHandlers) {
  Switchboard board;
  int a = 0;
  absl::Status s = board.Add(CUPTI_CB_DOMAIN_INVALID, 1, &First, &a);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(board.Add(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE, &First, &a).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(board.Add(CUPTI_CB_DOMAIN_DRIVER_API, 1, nullptr, &a).code(),
            absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < Switchboard::kMaxHandlers; ++i) {
    ASSERT_TRUE(board.Add(CUPTI_CB_DOMAIN_DRIVER_API, 1, &First, &a).ok());
  }
  s = board.Add(CUPTI_CB_DOMAIN_DRIVER_API, 1, &First, &a);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("callback id 1"));
}

class RecordingSink : public GpuEventSink {
 public:
  void OnContextCreated(CUcontext c) override { log.push_back(absl::StrCat("created ", Id(c))); }
  void OnContextDestroying(CUcontext c) override {
    log.push_back(absl::StrCat("destroying ", Id(c)));
  }
  void OnModuleLoaded(const ModuleEvent& m) override {
    log.push_back(absl::StrCat("loaded ", Id(m.handle), m.is_library ? " library" : " module"));
  }
  void OnModuleUnloaded(const ModuleEvent& m) override {
    log.push_back(absl::StrCat("unloaded ", Id(m.handle), m.is_library ? " library" : " module"));
  }
  void OnLaunch(const LaunchEvent& l) override {
    log.push_back(absl::StrCat(l.site == CallSite::kBegin ? "begin " : "end ", Id(l.context), " ",
                               Id(l.function), " ", Id(l.stream)));
  }
  void OnSynchronize(CUcontext c, CUstream s) override {
    log.push_back(absl::StrCat("sync ", Id(c), " ", Id(s)));
  }
  static uintptr_t Id(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  std::vector<std::string> log;
};

TEST(CuptiEventSource, DecodesCuptisCallbacksIntoEvents) {
  Switchboard board;
  RecordingSink sink;
  ASSERT_TRUE(AddCuptiEventSource(board, sink, {.contexts = true, .modules = true,
                                                .launches = true, .synchronize = true})
                  .ok());
  auto context = reinterpret_cast<CUcontext>(0xC0);
  CUpti_ResourceData r = {};
  r.context = context;
  board.Dispatch(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED, &r);

  // A library load: ENTER says nothing; EXIT with success names the handle.
  CUresult result = CUDA_SUCCESS;
  CUlibrary library = reinterpret_cast<CUlibrary>(0x11);
  cuLibraryLoadData_params load = {};
  load.library = &library;
  CUpti_CallbackData data = {};
  data.functionParams = &load;
  data.functionReturnValue = &result;
  data.callbackSite = CUPTI_API_ENTER;
  board.Dispatch(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &data);
  data.callbackSite = CUPTI_API_EXIT;
  board.Dispatch(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &data);
  result = CUDA_ERROR_INVALID_IMAGE;  // a failed load: no event
  board.Dispatch(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, &data);
  result = CUDA_SUCCESS;
  cuModuleUnload_params unload = {};
  unload.hmod = reinterpret_cast<CUmodule>(0x22);
  data.functionParams = &unload;
  board.Dispatch(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuModuleUnload, &data);

  // A launch, ENTER and EXIT; a graph launch has no function.
  cuLaunchKernelEx_params ex = {};
  CUlaunchConfig config = {};
  config.hStream = reinterpret_cast<CUstream>(0x5);
  ex.config = &config;
  ex.f = reinterpret_cast<CUfunction>(0xF);
  data.functionParams = &ex;
  data.context = context;
  data.callbackSite = CUPTI_API_ENTER;
  board.Dispatch(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, &data);
  data.callbackSite = CUPTI_API_EXIT;
  board.Dispatch(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, &data);
  cuGraphLaunch_params graph = {};
  graph.hStream = reinterpret_cast<CUstream>(0x6);
  data.functionParams = &graph;
  data.callbackSite = CUPTI_API_ENTER;
  board.Dispatch(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, &data);

  CUpti_SynchronizeData sync = {};
  sync.context = context;
  sync.stream = reinterpret_cast<CUstream>(0x5);
  board.Dispatch(CUPTI_CB_DOMAIN_SYNCHRONIZE, CUPTI_CBID_SYNCHRONIZE_STREAM_SYNCHRONIZED, &sync);
  board.Dispatch(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, &r);

  EXPECT_THAT(sink.log, ElementsAre("created 192", "loaded 17 library", "unloaded 34 module",
                                    "begin 192 15 5", "end 192 15 5", "begin 192 0 6",
                                    "sync 192 5", "destroying 192"));
}

TEST(CuptiEventSource, AddsOnlyTheEventsASinkWants) {
  Switchboard board;
  RecordingSink sink;
  ASSERT_TRUE(AddCuptiEventSource(board, sink, {.contexts = true}).ok());
  EXPECT_TRUE(board.Has(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED));
  EXPECT_FALSE(board.Has(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel));
  EXPECT_FALSE(board.Has(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData));
  EXPECT_EQ(board.Keys().size(), 2u);
}

}  // namespace
}  // namespace cuprobe
