// File: tests/gpu/probe_expectations.h
//
// What the GPU tests' probes must give on the vec_add sample, whichever
// backend ran them (run_test: PTX, patch_test: the Compute Sanitizer).
//
//   ExpectVecAddArgsSeen(maps, ReadWholeFile(prefix + ".events"), 65536, 7);
#ifndef CUPROBE_TESTS_GPU_PROBE_EXPECTATIONS_H_
#define CUPROBE_TESTS_GPU_PROBE_EXPECTATIONS_H_

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gpu/map_lines.h"
#include "tests/test_process.h"

namespace cuprobe::testing {

// tests/gpu/probes/vec_add_args.bpf.c on `vec_add N LAUNCHES`: its fourth
// argument counted per value, and one printk line per launch.
inline void ExpectVecAddArgsSeen(const std::string& maps, const std::string& events, int n,
                                 int launches) {
  EXPECT_THAT(maps, ::testing::HasSubstr(absl::StrCat("@n_seen[", n, "]: ", launches))) << maps;
  int lines = 0;
  for (absl::string_view l : absl::StrSplit(events, '\n', absl::SkipEmpty())) {
    EXPECT_EQ(l, absl::StrCat("vec_add launched with n=", n));
    ++lines;
  }
  EXPECT_EQ(lines, launches) << events;
}

// samples/kernel_trace on `vec_add N ITERATIONS` with --events json: one
// block_events record per block of every launch (vec_add ITERATIONS times,
// scale once; 256 threads a block), its fields naming the bytes it holds.
inline void ExpectOneEventPerVecAddBlock(const std::string& maps, const std::string& events_path,
                                         int n, int iterations) {
  const int blocks = n / 256;
  std::map<std::string, uint32_t> ids = KernelIds(maps);
  ASSERT_TRUE(ids.count("vec_add") && ids.count("scale")) << maps;
  // Events per (kernel id, block), with python (JSON lines).
  ProcessResult r = RunProcess(
      {"python3", "-c",
       "import json,sys,collections,struct\n"
       "c=collections.Counter()\n"
       "sms=set()\n"
       "for l in open(sys.argv[1]):\n"
       "  e=json.loads(l)\n"
       "  if e.get('map')!='block_events': continue\n"
       "  # struct block_start {u64 timestamp_ns; u32 kernel_id, sm_id, block_x, y, z, reserved;}\n"
       "  ts,k,sm,bx,by,bz,_=struct.unpack('<QIIIIII',bytes.fromhex(e['hex']))\n"
       "  # the probe's __type(value, struct block_start) names the same bytes\n"
       "  f=e['fields']\n"
       "  if (f['timestamp_ns'],f['kernel_id'],f['sm_id'],f['block_x'])!=(ts,k,sm,bx): print('FIELDS',l)\n"
       "  c[(k,bx)]+=1\n"
       "  sms.add(sm)\n"
       "per=collections.Counter()\n"
       "for (k,b),v in c.items(): per[(k,v)]+=1\n"
       "for (k,v),blocks in sorted(per.items()): print(k,v,blocks)\n"
       "print('sms',len(sms))\n",
       events_path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // vec_add: every block seen exactly `iterations` times; scale: once.
  EXPECT_THAT(r.out, ::testing::HasSubstr(
                         absl::StrCat(ids["vec_add"], " ", iterations, " ", blocks, "\n")))
      << r.out;
  EXPECT_THAT(r.out, ::testing::HasSubstr(absl::StrCat(ids["scale"], " 1 ", blocks, "\n")))
      << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3) << r.out;
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("FIELDS"))) << r.out;
  EXPECT_THAT(maps, ::testing::HasSubstr("0 dropped")) << maps;
}

}  // namespace cuprobe::testing

#endif  // CUPROBE_TESTS_GPU_PROBE_EXPECTATIONS_H_
