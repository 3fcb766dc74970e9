#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job on its defaults.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(bash "$root/scripts/build.sh" | tail -n 1)
"$build/cli/longctx" --version
echo
"$build/cli/longctx" models
