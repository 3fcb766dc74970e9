#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds into build/.
# LONGCTX_BUILD_DIR overrides the build folder; extra arguments go to CMake's configure step.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${LONGCTX_BUILD_DIR:-$root/build}"
torch_prefix=$(bash "$root/scripts/setup.sh" | tail -n 1)

# One compiler cache per machine, shared by every clone; precompiled headers need these
# sloppiness settings to be cacheable.
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/longctx/ccache}"
# Paths relative to the clone, and no working directory in the hash: every clone on the
# machine (CI's fresh one too) hits the same cache entries.
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
export PATH="/usr/local/cuda/bin:$PATH"

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_PREFIX_PATH="$torch_prefix" "$@" >&2
fi
# Two jobs: each LibTorch translation unit takes over 1 GiB of memory to compile.
cmake --build "$build" -j "${LONGCTX_JOBS:-2}" >&2
echo "$build"
