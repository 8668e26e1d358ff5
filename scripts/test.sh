#!/usr/bin/env bash
# The test suite, in one of two lanes; both set up if needed, lint (ruff) and type-check (mypy).
#   scripts/test.sh          the full lane (what .ci/run calls): every test. Two pytest runs: all
#                            but the Spark tests on every core (pytest-xdist), then the Spark
#                            tests on two workers, so two JVMs
#   scripts/test.sh --fast   the fast lane: unit and simulator tests on every core, none marked
#                            slow, spark, browser, processes or bench (tests/conftest.py: --lane)
# Other arguments go to pytest (each run). A lane in which pytest collects no test at all
# (exit code 5) fails.
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
  .venv/bin/python -m pytest -n auto --lane fast "$@"
  codes=($?)
else
  # (xdist's --dist loadgroup would keep the Spark tests on one worker, but it does not group
  # under pytest 9.2: pytest-dev/pytest-xdist#1386)
  .venv/bin/python -m pytest -n auto --lane rest --durations=15 "$@"
  rest=$?
  # two workers, each its own JVM: since the analysis's plans stopped growing, a JVM no longer
  # keeps both cores busy planning, and two of them finish the lane in 14 min instead of
  # 19-20 (peak 15 GB used of 24; BENCHMARKS.md, Lineage cuts)
  echo "-- the Spark tests, on two workers (a JVM each) --"
  .venv/bin/python -m pytest -n 2 --lane spark --durations=15 "$@"
  codes=("$rest" $?)
fi

code=0
ran=0
for one in "${codes[@]}"; do
  if [ "$one" -ne 5 ]; then
    ran=1
    [ "$one" -ne 0 ] && [ "$code" -eq 0 ] && code=$one
  fi
done
if [ "$ran" -eq 0 ]; then
  echo "pytest collected no tests: that is a failure of the suite" >&2
  exit 1
fi
exit "$code"
