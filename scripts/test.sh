#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (GPU tests skip, with their reason,
# when no GPU is visible); then the robustness checks (docs/robustness.md): the planner's
# unit tests under ASan+UBSan and a short fuzz run of each input path (LONGCTX_FUZZ_SECONDS
# per target, 20 by default). LONGCTX_SKIP_ROBUSTNESS=1 leaves those two out.
#
# Every test is held to 180 s (tests/CMakeLists.txt). The project's .venv is set up first,
# beside the build (scripts/python_env.sh: minutes on a fresh clone, most of it unpacking
# torch's wheel), so that the tests that use it find it made rather than making it inside
# their limit. The slowest tests are listed at the end (docs/performance.md, "Test suite").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Each step's wall time, printed as it ends (docs/performance.md, "Test suite", reads them).
step_start=$(date +%s)
step_done() {
  local now
  now=$(date +%s)
  echo "test.sh: $1 took $((now - step_start)) s" >&2
  step_start=$now
}
# A clean clone's builds, .venv and robustness builds take about 10 GB beside it (and the
# caches under ~/.cache/longctx about 8 GB more the first time): say so up front where the
# disk is shorter, since a full disk otherwise shows up as a linker's "No space left".
free_kb=$(df -Pk "$root" | awk 'NR == 2 { print $4 }')
if [ -n "$free_kb" ] && [ "$free_kb" -lt $((10 * 1024 * 1024)) ]; then
  echo "test.sh: warning: $((free_kb / 1024 / 1024)) GB free beside $root; a clean run needs about 10 GB" >&2
fi
# setup.sh first: it fetches the torch wheel the .venv installs (a no-op once cached).
bash "$root/scripts/setup.sh" >/dev/null
venv_log=$(mktemp)
bash "$root/scripts/python_env.sh" >"$venv_log" 2>&1 &
venv_pid=$!
build=$(bash "$root/scripts/build.sh" | tail -n 1)
if ! wait "$venv_pid"; then
  cat "$venv_log" >&2
  echo "scripts/python_env.sh failed: the python, stacks and gpukit tests need .venv" >&2
  exit 1
fi
rm -f "$venv_log"
step_done "the build and the .venv"
cd "$build"
status=0
ctest --output-on-failure -j 2 --timeout 180 || status=$?
step_done "ctest"
# The ten slowest tests of this run, from ctest's own record of it.
echo "slowest tests (s):"
sed -n 's/^"\(.*\)" time elapsed: \([0-9:]*\)$/\2 \1/p' Testing/Temporary/LastTest.log | sort -r | head -n 10 || true
[ "$status" = 0 ] || exit "$status"
# Say why GPU tests were skipped, where they were; and the GPU kit's test (docs/gpu-kit.md).
"$build/cli/longctx" --version | grep '^GPU:' || true
if [ -f "$build/tests/gpukit/skipped.txt" ]; then echo "gpukit: $(cat "$build/tests/gpukit/skipped.txt")"; fi

if [ "${LONGCTX_SKIP_ROBUSTNESS:-0}" != 1 ]; then
  bash "$root/scripts/sanitize.sh"
  step_done "the sanitizer build and tests"
  bash "$root/scripts/fuzz.sh" "${LONGCTX_FUZZ_SECONDS:-20}"
  step_done "the fuzz build and run"
fi
