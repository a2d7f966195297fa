#!/usr/bin/env bash
# Installs everything cuprobe needs to build and test on Debian 12, quietly and
# idempotently. Re-running it when all is present does nothing and says so.
#
#   scripts/install-deps.sh            # packages + abseil sources + CUDA check
#
# Debian's libabsl-dev archives are not position-independent, so they cannot go
# into the injected library; we build the same abseil release from Debian's
# source package, fetched here with `apt-get source abseil` into .deps/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cuda="${CUDA_HOME:-/usr/local/cuda}"

packages=(
  cmake ninja-build g++ pkg-config patch xz-utils
  llvm-19-dev clang-19 libclang-rt-19-dev
  libboost-dev libzstd-dev liblz4-dev libbpf-dev libelf-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3
)

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

src_list=/etc/apt/sources.list.d/cuprobe-deb-src.sources
need_src=0
[[ -f "$root/.deps/abseil-cpp/CMakeLists.txt" ]] || need_src=1

if (( need_src )) && ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "install-deps: adding Debian's source index ($src_list) for abseil's source package"
  $sudo tee "$src_list" >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi

if (( ${#missing[@]} )) || (( need_src )); then
  echo "install-deps: apt-get update"
  $sudo apt-get update -qq
fi
if (( ${#missing[@]} )); then
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if (( need_src )); then
  echo "install-deps: fetching abseil sources (apt-get source abseil)"
  work="$root/.deps/src"
  rm -rf "$work" "$root/.deps/abseil-cpp"
  mkdir -p "$work"
  (cd "$work" && apt-get source --download-only -qq abseil 2>&1 | grep -v 'unsandboxed' || true)
  orig=$(ls "$work"/abseil_*.orig.tar.gz 2>/dev/null | head -1)
  deb=$(ls "$work"/abseil_*.debian.tar.xz 2>/dev/null | head -1)
  [[ -n "$orig" && -n "$deb" ]] || { echo "install-deps: apt-get source abseil fetched nothing" >&2; exit 1; }
  mkdir -p "$work/x"
  tar -xzf "$orig" -C "$work/x"
  tree=$(ls -d "$work"/x/*/ | head -1)
  tar -xJf "$deb" -C "$tree"
  # Debian's own patches (security fixes, its inline namespace).
  while read -r p; do
    [[ -z "$p" || "$p" == \#* ]] && continue
    patch -s -p1 -d "$tree" < "$tree/debian/patches/$p"
  done < "$tree/debian/patches/series"
  # Our copy is private to cuprobe (static, hidden): use the C++17 standard
  # types and a namespace of our own instead of Debian's ABI-stable settings.
  sed -i -E -e 's/^#define ABSL_OPTION_USE_STD_(ANY|OPTIONAL|STRING_VIEW|VARIANT) 0/#define ABSL_OPTION_USE_STD_\1 2/' \
            -e 's/^#define ABSL_OPTION_INLINE_NAMESPACE_NAME .*/#define ABSL_OPTION_INLINE_NAMESPACE_NAME cuprobe_lts/' \
            "$tree/absl/base/options.h"
  mv "$tree" "$root/.deps/abseil-cpp"
  rm -rf "$work"
fi

# The CUDA 13 toolkit is not a Debian package; check it is where we expect.
cuda_missing=()
[[ -x "$cuda/bin/nvcc" ]] || cuda_missing+=("$cuda/bin/nvcc")
[[ -x "$cuda/bin/ptxas" ]] || cuda_missing+=("$cuda/bin/ptxas")
[[ -f "$cuda/include/cupti.h" || -f "$cuda/extras/CUPTI/include/cupti.h" ]] || cuda_missing+=("CUPTI headers (cupti.h)")
compgen -G "$cuda/lib64/libcupti.so*" >/dev/null || compgen -G "$cuda/extras/CUPTI/lib64/libcupti.so*" >/dev/null \
  || cuda_missing+=("libcupti.so")
compgen -G "$cuda/lib64/libnvJitLink.so*" >/dev/null || cuda_missing+=("libnvJitLink.so")
if (( ${#cuda_missing[@]} )); then
  echo "install-deps: the CUDA 13 toolkit at $cuda is incomplete; missing: ${cuda_missing[*]}" >&2
  echo "install-deps: install the NVIDIA CUDA 13 toolkit (set CUDA_HOME if it lives elsewhere)" >&2
  exit 1
fi
if (( ${#missing[@]} == 0 )) && (( need_src == 0 )); then
  echo "install-deps: all dependencies present"
fi
