#!/usr/bin/env bash
# Rewrites the recorded answers of tests/answers/ (the `answers` ctest label) from the current
# build: run it only when a change of figures is meant, and commit what it rewrites with the
# reason. Builds first (scripts/build.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(bash "$root/scripts/build.sh" | tail -n 1)
cd "$build"
LONGCTX_UPDATE_ANSWERS=1 ctest -L answers -j "${LONGCTX_JOBS:-2}" --output-on-failure
git -C "$root" status --short tests/answers
