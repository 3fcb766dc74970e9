#!/usr/bin/env bash
# The report tests (tests/report, pytest): Debian's Chromium (scripts/setup.sh installs it)
# driven through Selenium, from an environment of their own that needs nothing of the
# project's Python package or torch: pytest and Selenium from PyPI, created once in VENV (a
# folder of the build) and reused while it imports both.
#   run.sh VENV [PYTEST ARGUMENTS]      (LONGCTX_CLI names the longctx binary)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv="$1"
shift
SELENIUM_VERSION=4.51.0

if ! "$venv/bin/python" -c "import pytest, selenium" 2>/dev/null; then
  printf '[report] creating %s with pytest and selenium %s\n' "$venv" "$SELENIUM_VERSION" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip --disable-pip-version-check -q install "pytest>=7" "selenium==$SELENIUM_VERSION" >&2
fi
cd "$root"
[ $# -gt 0 ] || set -- tests/report
# -rs: a skipped test says why (Chromium could not start) in the summary.
exec "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$@"
