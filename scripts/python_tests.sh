#!/usr/bin/env bash
# The Python package's tests (tests/python, pytest) in the project's environment
# (scripts/python_env.sh). LONGCTX_CLI names the longctx binary the answers are held to.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=$(bash "$root/scripts/python_env.sh" | tail -n 1)
# The tests import torch: its CUDA libraries on the path (python_env.sh ran as a child, whose
# environment this process does not inherit).
# shellcheck source=scripts/torch_libraries.sh
. "$root/scripts/torch_libraries.sh"
cd "$root"
# Arguments name the test folders (default tests/python; the `stacks` label passes tests/stacks).
[ $# -gt 0 ] || set -- tests/python
exec "$python" -m pytest -q -p no:cacheprovider "$@"
