#!/usr/bin/env bash
# The Python package's tests (tests/python, pytest) in the project's environment
# (scripts/python_env.sh). LONGCTX_CLI names the longctx binary the answers are held to.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=$(bash "$root/scripts/python_env.sh" | tail -n 1)
# torch's CUDA libraries: the toolkit's and those LibTorch's prefix holds (setup.sh prints it),
# as in python_env.sh, whose environment this process does not inherit.
torch_prefix=$(bash "$root/scripts/setup.sh" | tail -n 1)
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$torch_prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cd "$root"
# Arguments name the test folders (default tests/python; the `stacks` label passes tests/stacks).
[ $# -gt 0 ] || set -- tests/python
exec "$python" -m pytest -q -p no:cacheprovider "$@"
