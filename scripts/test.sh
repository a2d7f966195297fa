#!/usr/bin/env bash
# The test command: installs dependencies, checks the folders' dependency
# graph (scripts/check-layers.sh), configures, builds (Release, all cores)
# and runs the whole ctest suite, then the CPU test binaries (and the
# CLI they start) under ASan and UBSan (scripts/sanitize.sh). GPU
# tests skip (reported as skipped) on a machine without a GPU. CI (.ci/run)
# calls exactly this script, with CUPROBE_GPU_TESTS=OFF (it has no GPU:
# the GPU tests are not built there).
#
#   scripts/test.sh                  # everything
#   CUPROBE_BUILD_DIR=/tmp/b scripts/test.sh
#   CUPROBE_SKIP_SANITIZE=1 scripts/test.sh    # without the sanitizer pass
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${CUPROBE_BUILD_DIR:-$root/build}"
jobs="$(nproc)"

"$root/scripts/install-deps.sh"
"$root/scripts/check-layers.sh"
echo "test: configuring $build"
# CUPROBE_GPU_TESTS=OFF (CI, which has no GPU) leaves the GPU tests unbuilt.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCUPROBE_WERROR=ON \
      "-DCUPROBE_BUILD_GPU_TESTS=${CUPROBE_GPU_TESTS:-ON}" >/dev/null
echo "test: building with $jobs jobs"
cmake --build "$build" -j "$jobs"
echo "test: built in ${SECONDS}s; running ctest"
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 600
echo "test: ctest done at ${SECONDS}s"
if [[ "${CUPROBE_SKIP_SANITIZE:-0}" != 1 ]]; then
  CUPROBE_SANITIZE_DIR="${CUPROBE_SANITIZE_DIR:-$build/sanitize}" "$root/scripts/sanitize.sh"
fi
