#!/usr/bin/env bash
# Installs what longctx needs and nothing else; a second run finishes in seconds.
#
#  - Debian packages: compiler tools, Boost.Graph, fmt, CLI11, nlohmann-json, GoogleTest,
#    Google Benchmark, ccache; clang and its runtime (libFuzzer) for scripts/fuzz.sh;
#    Chromium and its WebDriver for the headless-browser test of `explain --html`.
#  - LibTorch 2.11.0 (CUDA 13.0 build, NCCL 2.28.9: the versions in /usr/local/cuda) taken from the torch wheel on PyPI, unpacked into
#    ~/.cache/longctx/libtorch-<version> so every clone on this machine shares one copy.
#    The CUDA Toolkit, cuDNN and NCCL come from /usr/local/cuda; the three runtime
#    libraries libtorch_cuda needs that the toolkit does not ship (cuFile, cuSPARSELt,
#    NVSHMEM) come from their own PyPI wheels into the same cache.
#
# Prints the LibTorch prefix on its last line: the build passes it to CMake.
set -euo pipefail

TORCH_VERSION=2.11.0
TORCH_TAG=cu130
CACHE_ROOT="${LONGCTX_CACHE:-$HOME/.cache/longctx}"
PREFIX="$CACHE_ROOT/libtorch-$TORCH_VERSION-$TORCH_TAG"
WHEELS="$CACHE_ROOT/wheels"
EXTRA_WHEELS=("nvidia-cufile==1.15.1.6" "nvidia-cusparselt-cu13==0.8.0" "nvidia-nvshmem-cu13==3.4.5")
DEBIAN_PACKAGES=(cmake ninja-build g++ ccache libboost-graph-dev libfmt-dev libcli11-dev
                 nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev libgloo-dev unzip python3-pip
                 clang libclang-rt-dev zlib1g-dev chromium chromium-driver)

log() { printf '[setup] %s\n' "$*" >&2; }

install_debian_packages() {
  local missing=()
  for p in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  # python3-pip is only a fallback: any pip on PATH will do.
  if command -v pip3 >/dev/null || command -v pip >/dev/null; then
    missing=("${missing[@]/python3-pip}")
  fi
  local wanted=()
  for p in "${missing[@]}"; do [ -n "$p" ] && wanted+=("$p"); done
  [ ${#wanted[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${wanted[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${wanted[@]}" >&2
}

pip_download() {
  local pip
  pip=$(command -v pip3 || command -v pip)
  "$pip" download --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -q -d "$WHEELS" "$@" >&2
}

install_libtorch() {
  [ -f "$PREFIX/.complete" ] && return 0
  [ -d /usr/local/cuda ] || { log "no CUDA Toolkit under /usr/local/cuda: install it first"; exit 1; }
  log "fetching LibTorch $TORCH_VERSION+$TORCH_TAG into $PREFIX (about 1 GiB, once per machine)"
  mkdir -p "$WHEELS"
  ls "$WHEELS"/torch-"$TORCH_VERSION"-*.whl >/dev/null 2>&1 || pip_download "torch==$TORCH_VERSION"
  for w in "${EXTRA_WHEELS[@]}"; do pip_download "$w"; done
  local staging="$PREFIX.partial"
  rm -rf "$staging" && mkdir -p "$staging/unpack"
  unzip -q -o "$WHEELS"/torch-"$TORCH_VERSION"-*.whl 'torch/lib/*' 'torch/include/*' \
    'torch/share/*' 'torch/version.py' -d "$staging/unpack"
  mv "$staging/unpack/torch/lib" "$staging/unpack/torch/include" "$staging/unpack/torch/share" \
     "$staging/unpack/torch/version.py" "$staging/"
  for w in "$WHEELS"/nvidia_cufile-*.whl "$WHEELS"/nvidia_cusparselt_cu13-*.whl \
           "$WHEELS"/nvidia_nvshmem_cu13-*.whl; do
    unzip -q -o "$w" 'nvidia/*/lib/*.so*' 'nvidia/*/*/lib/*.so*' -d "$staging/unpack" 2>/dev/null || true
  done
  find "$staging/unpack/nvidia" -name '*.so*' -exec mv {} "$staging/lib/" \;
  rm -rf "$staging/unpack"
  touch "$staging/.complete"
  rm -rf "$PREFIX" && mv "$staging" "$PREFIX"
  # Keep only the wheels of this version: the cache must not grow without bound.
  find "$WHEELS" -name 'torch-*.whl' ! -name "torch-$TORCH_VERSION-*" -delete
}

install_debian_packages
install_libtorch
echo "$PREFIX"
