#!/usr/bin/env bash
# Prepares bpftime's GPU examples for a run under cuprobe on the GPU machine
# (issue 38: their probes, unchanged, on their READMEs' workloads). On the
# build machine (clang-19, nvcc): compiles every example's *.bpf.c with
# `cuprobe compile` into a bundle, builds every example's single-file *.cu
# workload with nvcc for sm_90 with its PTX (what the PTX backend rewrites),
# and writes run.sh, which runs each workload (they launch once a second
# until stopped: CUPROBE_BPFTIME_SECONDS, default 5) under `cuprobe run` with
# each of its example's bundles and keeps the final maps and events. bpftime's
# sources are GPL: they are read from a checkout, never copied into this
# repository.
#
#   scripts/bpftime-examples.sh BPFTIME_CHECKOUT [OUT_DIR]   (default .device/bpftime)
#   # then, on the GPU machine, with OUT_DIR carried:
#   CUPROBE_BUILD_DIR=$PWD/.device/build .device/bpftime/run.sh
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="${1:?usage: scripts/bpftime-examples.sh BPFTIME_CHECKOUT [OUT_DIR]}"
out="${2:-$root/.device/bpftime}"
cuprobe="${CUPROBE_BUILD_DIR:-$root/build}/bin/cuprobe"
[[ -d "$src/example/gpu" ]] || { echo "bpftime-examples: no example/gpu in $src" >&2; exit 2; }
[[ -x "$cuprobe" ]] || { echo "bpftime-examples: build cuprobe first ($cuprobe)" >&2; exit 2; }
nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
mkdir -p "$out"
run="$out/run.sh"
cat > "$run" <<'RUN'
#!/usr/bin/env bash
# Written by scripts/bpftime-examples.sh: each bpftime example's workload
# under `cuprobe run` with its bundles; results in <example>/<bundle>.*.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cuprobe="${CUPROBE_BUILD_DIR:?set CUPROBE_BUILD_DIR to the carried build}/bin/cuprobe"
# bpftime's workloads launch once a second until stopped: each runs this long.
seconds="${CUPROBE_BPFTIME_SECONDS:-5}"
RUN
compiled=0 built=0 failed=0
for dir in "$src"/example/gpu/*/; do
  name="$(basename "$dir")"
  bundles=() workloads=()
  for probe in "$dir"*.bpf.c; do
    [[ -e "$probe" ]] || continue
    mkdir -p "$out/$name"
    cpb="$out/$name/$(basename "$probe" .bpf.c).cpb"
    if "$cuprobe" compile "$probe" -o "$cpb" > "$cpb.log" 2>&1; then
      bundles+=("$(basename "$cpb")"); ((compiled++))
    else
      echo "bpftime-examples: $name/$(basename "$probe"): compile failed (see $cpb.log)" >&2
      ((failed++))
    fi
  done
  for cu in "$dir"*.cu; do
    [[ -e "$cu" ]] || continue
    exe="$out/$name/$(basename "$cu" .cu)"
    if "$nvcc" -O2 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
         "$cu" -o "$exe" > "$exe.log" 2>&1; then
      workloads+=("$(basename "$exe")"); ((built++))
    else
      echo "bpftime-examples: $name/$(basename "$cu"): nvcc failed (see $exe.log)" >&2
    fi
  done
  for w in "${workloads[@]}"; do
    for b in "${bundles[@]}"; do
      cat >> "$run" <<RUN
echo "=== $name: $w with $b"
(cd "\$here/$name" && timeout 120 "\$cuprobe" run -p "$b" --quiet --events lines \\
   -o "${b%.cpb}.$w" --format json -- timeout -s INT "\$seconds" ./$w \\
   > "${b%.cpb}.$w.out" 2> "${b%.cpb}.$w.err")
echo "exit \$?"; cat "\$here/$name/${b%.cpb}.$w.maps.txt" 2>/dev/null | head -40
head -5 "\$here/$name/${b%.cpb}.$w.events" 2>/dev/null
RUN
    done
  done
done
chmod +x "$run"
echo "bpftime-examples: $compiled bundle(s), $built workload(s), $failed compile failure(s) -> $out"
echo "bpftime-examples: on the GPU machine: CUPROBE_BUILD_DIR=\$PWD/.device/build $run"
[[ $failed -eq 0 ]]
