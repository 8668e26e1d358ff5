#!/usr/bin/env bash
# The whole test suite: set up if needed, lint (ruff), type-check (mypy), then pytest.
# pytest's exit code 5 (no tests collected) counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
.venv/bin/ruff check src tests benchmarks || { echo "ruff found problems" >&2; exit 1; }
.venv/bin/mypy || { echo "mypy found problems" >&2; exit 1; }
.venv/bin/python -m pytest "$@"
code=$?
if [ "$code" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure of the suite" >&2
  exit 1
fi
exit "$code"
