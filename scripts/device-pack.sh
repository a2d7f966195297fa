#!/usr/bin/env bash
# Packs what the GPU machine runs (scripts/device-test.sh) from a build
# folder into a lean copy: stripped binaries, the hook, the samples, the GPU
# test binaries and the PTX files they read, keeping the build's layout so
# CUPROBE_BUILD_DIR can point at it. The device tool carries at most 64 MiB.
#
#   scripts/device-pack.sh [BUILD_DIR] [OUT_DIR]    (defaults: build, .device/build)
#   run(command="CUPROBE_BUILD_DIR=$PWD/.device/build scripts/device-test.sh", carry=[".device"])
#
# The pack also goes into OUT_DIR.tar.xz (about a quarter of its size): with
# the statically linked CLI it can pass 64 MiB, so carry the archive instead:
#   run(command="tar -C .device -xJf .device/build.tar.xz && CUPROBE_BUILD_DIR=$PWD/.device/build scripts/device-test.sh",
#       carry=[".device/build.tar.xz"])
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
out="${2:-$root/.device/build}"
rm -rf "$out"
mkdir -p "$out"
copy() {  # relative path in the build folder; strips ELF executables
  local rel=$1
  [[ -e "$build/$rel" ]] || { echo "device-pack: missing $build/$rel" >&2; return 1; }
  mkdir -p "$out/$(dirname "$rel")"
  cp "$build/$rel" "$out/$rel"
  if file -b "$out/$rel" | grep -q '^ELF'; then strip --strip-unneeded "$out/$rel" 2>/dev/null || true; fi
}
copy bin/cuprobe
copy lib/libcuprobe_hook.so
for f in "$build"/samples/*; do [[ -f "$f" && -x "$f" ]] && copy "samples/$(basename "$f")"; done
for t in injection_test trace_test resilience_test run_test maps_gpu_test real_seam_test \
         hook_library_test instrument_gpu_test samples_test lifecycle_test multiprocess_test \
         patch_test; do
  [[ -x "$build/tests/$t" ]] && copy "tests/$t"
done
for b in launch_loop probe_workload maps_bench rewrite_bench hook_bench; do [[ -x "$build/bench/$b" ]] && copy "bench/$b"; done
copy generated/cuprobe_helpers.ptx
copy tests/maps/gpu/map_kernels.ptx
copy tests/gpu/instrument_kernels.ptx
copy tests/ptx_rewriter/fixtures/test_helpers.ptx
for p in "$build"/probes/*.cpb; do copy "probes/$(basename "$p")"; done
# Sample probes as eBPF objects (run_test passes several -p; no clang there).
for p in "$build"/tests/compiler/corpus/bpf_object/*.o; do
  [[ -f "$p" ]] && copy "tests/compiler/corpus/bpf_object/$(basename "$p")"
done
du -sh "$out" | sed 's/^/device-pack: /'
tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -T0 -6 > "$out.tar.xz"
du -sh "$out.tar.xz" | sed 's/^/device-pack: /'
