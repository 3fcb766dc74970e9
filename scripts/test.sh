#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (GPU tests skip, with their reason,
# when no GPU is visible).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(bash "$root/scripts/build.sh" | tail -n 1)
cd "$build"
ctest --output-on-failure -j 2 --timeout 600
# Say why GPU tests were skipped, where they were.
"$build/cli/longctx" --version | grep '^GPU:' || true
