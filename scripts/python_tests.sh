#!/usr/bin/env bash
# The Python package's tests (tests/python, pytest) in the project's environment
# (scripts/python_env.sh). LONGCTX_CLI names the longctx binary the answers are held to.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=$(bash "$root/scripts/python_env.sh" | tail -n 1)
# torch's CUDA libraries: the toolkit's and those LibTorch's cache holds (scripts/setup.sh).
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LONGCTX_CACHE:-$HOME/.cache/longctx}/libtorch-2.11.0-cu130/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cd "$root"
exec "$python" -m pytest -q -p no:cacheprovider tests/python "$@"
