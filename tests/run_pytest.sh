#!/usr/bin/env bash
# pytest in the project's .venv for the python and stacks labels (tests/CMakeLists.txt), with
# torch's libraries on the loader's path. The .venv is made or brought up to date once per
# ctest run by the python_venv fixture (scripts/python_env.sh; scripts/test.sh runs it before
# ctest), not by every test: each test here is one pytest process over its cases.
#   run_pytest.sh PYTEST_ARGUMENTS...
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python="$root/.venv/bin/python"
if [ ! -x "$python" ]; then
  echo "no $root/.venv: run scripts/python_env.sh (scripts/test.sh does) or ctest with its fixture" >&2
  exit 1
fi
# shellcheck source=scripts/torch_libraries.sh
. "$root/scripts/torch_libraries.sh"
cd "$root"
exec "$python" -m pytest -q -p no:cacheprovider "$@"
