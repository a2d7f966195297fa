// compile_bench: the end-to-end time of `cuprobe compile` on a probe of about
// 200 eBPF instructions (bench/compile_bench.bpf.c), clang included, and its
// stages. Target: <= 200 ms. CPU only.
//
//   build/bench/compile_bench [runs]     (default 15 runs; prints min/median)
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "loader/compiler/compiler.h"

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 15;
  const std::string probe = std::string(CUPROBE_SOURCE_DIR) + "/bench/compile_bench.bpf.c";
  cuprobe::ProbeCompileOptions options;
  std::vector<double> total, clang, verify, lower, codegen, cpu;
  // CPU time (this process + clang) as well as wall time: on a loaded
  // machine the wall time of clang's start-up says more about the load.
  auto cpu_ms = [] {
    double ms = 0;
    for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
      rusage u{};
      getrusage(who, &u);
      ms += (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
            (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
    }
    return ms;
  };
  uint64_t insns = 0;
  for (int i = 0; i < runs + 1; ++i) {
    const double cpu_before = cpu_ms();
    absl::StatusOr<cuprobe::CompileResult> r = cuprobe::CompileFile(probe, options);
    const double cpu_run = cpu_ms() - cpu_before;
    if (!r.ok()) {
      std::fprintf(stderr, "compile_bench: %s\n", std::string(r.status().message()).c_str());
      return 1;
    }
    if (i == 0) continue;  // warm-up: page cache, LLVM's one-time initialisation
    const cuprobe::CompileTimings& t = r->timings;
    insns = r->object_insns;
    cpu.push_back(cpu_run);
    clang.push_back(t.clang_ms);
    verify.push_back(t.verify_ms);
    lower.push_back(t.lower_ms);
    codegen.push_back(t.codegen_ms);
    total.push_back(t.clang_ms + t.read_ms + t.verify_ms + t.lower_ms + t.codegen_ms);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto min = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  std::printf("compile_bench: %llu eBPF instructions, %d runs\n",
              static_cast<unsigned long long>(insns), runs);
  std::printf("  end to end   median %7.1f ms   min %7.1f ms   (target <= 200 ms)\n",
              median(total), min(total));
  std::printf("  CPU time     median %7.1f ms   (this process + clang, user + sys)\n",
              median(cpu));
  std::printf("  clang        median %7.1f ms\n", median(clang));
  std::printf("  verify       median %7.2f ms\n", median(verify));
  std::printf("  lower to IR  median %7.2f ms\n", median(lower));
  std::printf("  O2 + PTX     median %7.1f ms\n", median(codegen));
  return median(total) <= 200.0 ? 0 : 2;
}
