#!/usr/bin/env bash
# The main job: builds cuprobe (installing what it needs), then traces and
# probes the bundled sample samples/vec_add.
#  - With a GPU: `cuprobe trace` (kernel summary, Perfetto timeline), then
#    `cuprobe run` with the threadhist probe (per-thread exit counts of
#    vec_add, read live from the GPU).
#  - Without a GPU it says so and runs the offline pipeline on the same
#    sample and probe: `cuprobe inspect` (fatbin entries, PTX, kernels),
#    `cuprobe compile` (verify, lower to PTX, bundle) and `cuprobe instrument`
#    (rewrite vec_add with the probe, link the helper library, compile a
#    cubin for sm_90 with nvJitLink, and report the extra registers).
#
#   scripts/demo.sh            # results in ./demo-output/
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CUPROBE_BUILD_DIR:-$root/build}"
out="${CUPROBE_DEMO_DIR:-$PWD/demo-output}"

if [[ ! -x "$build/bin/cuprobe" || ! -x "$build/samples/vec_add" ||
      ! -f "$build/lib/libcuprobe_hook.so" ]]; then
  "$root/scripts/install-deps.sh"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j "$(nproc)" --target cuprobe cuprobe_hook vec_add
fi
mkdir -p "$out"
cuprobe="$build/bin/cuprobe"
sample="$build/samples/vec_add"
probe="$root/samples/threadhist/threadhist.bpf.c"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "demo: GPU found: $(nvidia-smi -L | head -1)"
  echo "demo: cuprobe trace -o $out/vec_add --format table,json,csv,chrome -- vec_add 1048576 100"
  "$cuprobe" trace -o "$out/vec_add" --format table,json,csv,chrome -- "$sample" 1048576 100
  echo "demo: open $out/vec_add.trace.json in https://ui.perfetto.dev"
  echo "demo: cuprobe run -p threadhist.bpf.c -- vec_add 1048576 10"
  "$cuprobe" run -p "$probe" -o "$out/threadhist" -- "$sample" 1048576 10
else
  echo "demo: no GPU on this machine (nvidia-smi finds none): running the offline pipeline"
  echo "demo: cuprobe inspect $sample"
  "$cuprobe" inspect "$sample"
  echo "demo: cuprobe compile $probe"
  "$cuprobe" compile --emit-ptx "$probe" -o "$out/threadhist.cpb"
  echo "demo: cuprobe instrument --probe threadhist.cpb --exit vec_add --stats"
  CUPROBE_HELPER_PTX="${CUPROBE_HELPER_PTX:-$build/generated/cuprobe_helpers.ptx}" \
    "$cuprobe" instrument --probe "$out/threadhist.cpb" --exit --stats "$sample" \
    -o "$out/vec_add.threadhist.cubin"
  echo "demo: $out/vec_add.threadhist.cubin is what the hook would load on an sm_90 GPU"
fi
