#!/usr/bin/env bash
# The test suite, in one of two lanes; both set up if needed, lint (ruff), type-check (mypy),
# then run pytest on as many workers as there are cores (pytest-xdist).
#   scripts/test.sh          the full lane: every test (what .ci/run calls)
#   scripts/test.sh --fast   the fast lane: unit and simulator tests only, not the ones marked
#                            slow, spark, browser, processes or bench (see pyproject.toml)
# Other arguments go to pytest. pytest's exit code 5 (no tests collected) counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
lane=full
if [ "${1:-}" = "--fast" ]; then
  lane=fast
  shift
fi
scripts/setup.sh || exit 1
.venv/bin/ruff check src tests benchmarks || { echo "ruff found problems" >&2; exit 1; }
.venv/bin/mypy || { echo "mypy found problems" >&2; exit 1; }
if [ "$lane" = fast ]; then
  .venv/bin/python -m pytest -n auto \
    -m "not slow and not spark and not browser and not processes and not bench" "$@"
else
  # loadgroup: the Spark tests share one worker, so one JVM (tests/conftest.py groups them)
  .venv/bin/python -m pytest -n auto --dist loadgroup "$@"
fi
code=$?
if [ "$code" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure of the suite" >&2
  exit 1
fi
exit "$code"
