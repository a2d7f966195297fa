#!/usr/bin/env bash
# The main job: builds cuprobe (installing what it needs), then traces the
# bundled sample. On a machine with a GPU it runs `cuprobe trace` on
# samples/vec_add and writes a kernel summary and a Perfetto timeline. Without
# a GPU it says so and runs the offline pipeline on the same sample:
# `cuprobe inspect` (fatbin entries, PTX choice, kernel names) and extracts
# the PTX that instrumentation would rewrite.
#
#   scripts/demo.sh            # results in ./demo-output/
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CUPROBE_BUILD_DIR:-$root/build}"
out="${CUPROBE_DEMO_DIR:-$PWD/demo-output}"

if [[ ! -x "$build/bin/cuprobe" || ! -x "$build/samples/vec_add" ]]; then
  "$root/scripts/install-deps.sh"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j "$(nproc)" --target cuprobe cuprobe_hook vec_add
fi
mkdir -p "$out"
cuprobe="$build/bin/cuprobe"
sample="$build/samples/vec_add"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "demo: GPU found: $(nvidia-smi -L | head -1)"
  echo "demo: cuprobe trace -o $out/vec_add --format table,json,csv,chrome -- vec_add 1048576 100"
  "$cuprobe" trace -o "$out/vec_add" --format table,json,csv,chrome -- "$sample" 1048576 100
  echo "demo: open $out/vec_add.trace.json in https://ui.perfetto.dev"
else
  echo "demo: no GPU on this machine (nvidia-smi finds none): running the offline pipeline"
  echo "demo: cuprobe inspect $sample"
  "$cuprobe" inspect "$sample"
  "$cuprobe" inspect --extract-ptx "$out/vec_add.sm_90.ptx" "$sample" | tail -1
  echo "demo: the PTX above is what instrumentation rewrites; head of it:"
  sed -n '1,12p' "$out/vec_add.sm_90.ptx"
fi
