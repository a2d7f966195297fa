#!/usr/bin/env bash
# Every CPU test binary of the suite but hook_library_test (see below): the
# parsers, the maps and segment, the hook's logic, the probe compiler, the
# PTX rewriter, and the CLI run as a child process. Built with
# AddressSanitizer and UndefinedBehaviorSanitizer (CUPROBE_SANITIZE) and run
# in a second build folder; any report fails. The fuzz targets replay their
# committed seed corpora. scripts/test.sh runs this after the main suite (CI
# too);
# CUPROBE_SKIP_SANITIZE=1 skips it there.
#
#   scripts/sanitize.sh                       # build/sanitize
#   CUPROBE_SANITIZE_DIR=/tmp/asan scripts/sanitize.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CUPROBE_SANITIZE_DIR:-$root/build/sanitize}"
jobs="$(nproc)"
# maps_command_test and samples_offline_test run the sanitized cuprobe CLI
# (and hook) as a child process: `children` below.
tests=(init_state_test hook_test watcher_test module_patcher_test segment_test record_ring_test
       maps_region_test map_algorithms_test map_set_test ptx_parser_test ptx_rewriter_passes_test
       trace_report_test support_test compiler_test late_attach_test ptx_rewriter_compile_test
       args_test helpers_ptx_test ptx_rewriter_image_test ptx_rewriter_corpus_test
       ptx_rewriter_instrument_command_test source_policy_test maps_command_test
       samples_offline_test real_seam_test cuda_device_memory_test device_maps_test
       switchboard_test ptx_rewriter_image_pipeline_test hook_library_test kernel_patcher_test
       ptx_rewriter_patch_module_test standalone_output_test)
# hook_library_test checks the sanitized hook: it still exports
# InitializeInjection alone and needs no libstdc++, abseil or libcuda (the
# sanitizers' runtimes are among its NEEDED entries, which the test allows),
# and a child loads it and calls InitializeInjection without a GPU.
children=(cuprobe cuprobe_hook)
fuzz=(image_fuzz_corpus ptx_fuzz_corpus bpf_object_fuzz_corpus bundle_fuzz_corpus
      maps_region_fuzz_corpus segment_fuzz_corpus ring_pump_fuzz_corpus trace_records_fuzz_corpus
      oneliner_fuzz_corpus)

echo "sanitize: configuring $build (address;undefined)"
# -O1 with line tables only: ASan's recommended level, symbolized stacks, and
# far less to compile and link than -O2 -g (CI has 2 cores and 30 minutes).
# The tests' own sources at -O0 (the libraries they test stay at -O1): half the
# compile time of -O1 under the sanitizers.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUPROBE_WERROR=ON \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
      "-DCUPROBE_SANITIZE=address;undefined" -DCUPROBE_TEST_OPTIMIZATION=-O0 >/dev/null
echo "sanitize: building ${#tests[@]} test binaries, ${#fuzz[@]} corpus replays and the CLI"
cmake --build "$build" -j "$jobs" --target "${tests[@]}" "${fuzz[@]}" "${children[@]}"
echo "sanitize: built in ${SECONDS}s"

export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# The binaries run $jobs (the machine's cores) at a time, the longest first
# (they take from a few milliseconds to a minute; run one after another they
# took 3.5 of CI's 30 minutes). Each writes its own log; a failure prints its
# report lines.
run() {  # name, command...
  local name=$1; shift
  local log="$build/$name.log"
  if "$@" > "$log" 2>&1; then
    echo "sanitize: ok   $name $(grep -E '^\[  PASSED  \]' "$log" | head -1)"
  else
    echo "sanitize: FAIL $name (log: $log)"
    grep -E "ERROR: AddressSanitizer|runtime error|^\[  FAILED  \]|SUMMARY|No such" "$log" | head -20 || true
    touch "$build/$name.failed"
  fi
}
longest_first=(ptx_rewriter_instrument_command_test ptx_rewriter_corpus_test compiler_test
               samples_offline_test late_attach_test maps_command_test)
ordered=("${longest_first[@]}")
for t in "${tests[@]}"; do
  [[ " ${longest_first[*]} " == *" $t "* ]] || ordered+=("$t")
done
corpus="$root/tests/corpus"
# Background jobs of a script ignore SIGINT: stop them ourselves on Ctrl-C.
trap 'kill $(jobs -p) 2>/dev/null; exit 130' INT TERM
rm -f "$build"/*.failed
for t in "${ordered[@]}" "${fuzz[@]}"; do
  while (( $(jobs -rp | wc -l) >= jobs )); do wait -n || true; done
  case $t in
    image_fuzz_corpus) args=("$corpus/image") ;;
    ptx_fuzz_corpus) args=("$corpus/ptx" "$root/tests/ptx_rewriter/golden") ;;
    bpf_object_fuzz_corpus) args=("$corpus/bpf_object") ;;
    bundle_fuzz_corpus) args=("$corpus/bundle") ;;
    maps_region_fuzz_corpus) args=("$build/tests/fuzz/maps_region_seeds") ;;
    segment_fuzz_corpus) args=("$corpus/segment") ;;
    ring_pump_fuzz_corpus) args=("$corpus/ring_pump") ;;
    trace_records_fuzz_corpus) args=("$corpus/trace_records") ;;
    oneliner_fuzz_corpus) args=("$root/tests/gpu/oneliners") ;;
    *) run "$t" "$build/tests/$t" --gtest_brief=1 &
       continue ;;
  esac
  run "$t" "$build/bin/$t" "${args[@]}" &
done
wait
fails=$(find "$build" -maxdepth 1 -name '*.failed' | wc -l)
if [[ $fails -ne 0 ]]; then
  echo "sanitize: $fails failed"
  exit 1
fi
echo "sanitize: all clean (${SECONDS}s)"
