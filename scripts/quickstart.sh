#!/usr/bin/env bash
# The main job: set up, then simulate a 50-node reliable FIFO broadcast group under 20% loss,
# duplication and reordering with 20% of nodes crashing and recovering; writes its Parquet
# trace under runs/quickstart/ and prints a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/gossamer sim --nodes 50 --messages 500 --seed 1 \
  --loss 0.2 --duplicate 0.2 --reorder 0.2 --crash 0.2 --recover-after 2 \
  --out runs/quickstart "$@"
