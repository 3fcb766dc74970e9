#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job on its defaults: the longest
# context Llama-3.1-8B trains at on one node of 8 H100-80GB GPUs with 2 TiB of host memory,
# the plan that reaches it, and what each technique buys.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(bash "$root/scripts/build.sh" | tail -n 1)
"$build/cli/longctx" --version
echo
"$build/cli/longctx" max-context
