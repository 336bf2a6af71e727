#!/usr/bin/env bash
# The demo behind `make run`: a shuffled loader over a synthetic dataset of
# 2 million samples (64 bytes and a label each, with a little CPU work per
# sample), 3 epochs on 2 workers, with a progress bar and a throughput summary.
set -euo pipefail
ferry=${1:-build/ferry}
echo "== ferry $("$ferry" version | cut -d' ' -f2): loading a synthetic dataset (2,000,000 samples x 3 epochs)"
"$ferry" bench synthetic:2000000,bytes=64,cost=20 --batch 256 --workers 2 --shuffle --epochs 3 --digest
