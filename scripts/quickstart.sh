#!/usr/bin/env bash
# The main job: set up, then run experiments/quickstart.toml -- simulated FIFO broadcast groups
# swept over message loss and crash/recover fractions, then seed 000 replicated objects, each run
# a Spark task on local[*] -- and analyse it: prints the checks and metrics summary and the path
# of the HTML report; tables and traces go under runs/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/gossamer experiment experiments/quickstart.toml --out runs/quickstart "$@"
