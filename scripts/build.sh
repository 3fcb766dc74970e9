#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds into build/.
# LONGCTX_BUILD_DIR overrides the build folder; extra arguments go to CMake's configure step.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${LONGCTX_BUILD_DIR:-$root/build}"
torch_prefix=$(bash "$root/scripts/setup.sh" | tail -n 1)

# shellcheck source=scripts/ccache_env.sh
. "$root/scripts/ccache_env.sh"
export PATH="/usr/local/cuda/bin:$PATH"

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_PREFIX_PATH="$torch_prefix" "$@" >&2
fi
# Two jobs: each LibTorch translation unit takes over 1 GiB of memory to compile.
cmake --build "$build" -j "${LONGCTX_JOBS:-2}" >&2
echo "$build"
