#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (GPU tests skip, with their reason,
# when no GPU is visible); then the robustness checks (docs/robustness.md): the planner's
# unit tests under ASan+UBSan and a short fuzz run of each input path (LONGCTX_FUZZ_SECONDS
# per target, 20 by default). LONGCTX_SKIP_ROBUSTNESS=1 leaves those two out.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(bash "$root/scripts/build.sh" | tail -n 1)
cd "$build"
ctest --output-on-failure -j 2 --timeout 600
# Say why GPU tests were skipped, where they were; and the GPU kit's test (docs/gpu-kit.md).
"$build/cli/longctx" --version | grep '^GPU:' || true
if [ -f "$build/tests/gpukit/skipped.txt" ]; then echo "gpukit: $(cat "$build/tests/gpukit/skipped.txt")"; fi

if [ "${LONGCTX_SKIP_ROBUSTNESS:-0}" != 1 ]; then
  bash "$root/scripts/sanitize.sh"
  bash "$root/scripts/fuzz.sh" "${LONGCTX_FUZZ_SECONDS:-20}"
fi
