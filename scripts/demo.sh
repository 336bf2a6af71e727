#!/usr/bin/env bash
# The demo behind `make run`: makes a small text dataset on disk (one sample per
# line), indexes it, shows its first lines, then trains-reads it: a shuffled
# loader over 3 epochs on 2 workers, with a progress bar and a throughput summary.
set -euo pipefail
ferry=${1:-build/ferry}
demo=${2:-build/demo}
mkdir -p "$demo"
text="$demo/sentences.txt"
if [ ! -s "$text" ]; then
  echo "== making a demo dataset: $text (300,000 lines)"
  /usr/bin/python3 - "$text" <<'PY'
import random, sys
random.seed(7)
words = ("the a loader feeds batches to an accelerator that waits for input while "
         "workers decode samples into pooled memory in a reproducible order").split()
with open(sys.argv[1], "w") as f:
    for i in range(300000):
        n = random.randint(4, 40)
        f.write("%d\t%s\n" % (i, " ".join(random.choice(words) for _ in range(n))))
PY
fi
echo "== ferry $("$ferry" version | cut -d' ' -f2): indexing"
"$ferry" index "$text"
echo "== the first lines"
"$ferry" head "lines:$text" -n 3
echo "== loading: shuffled, batch 256, 2 workers, 3 epochs"
"$ferry" bench "lines:$text,max=320" --batch 256 --workers 2 --shuffle --epochs 3 --digest
echo "== the same loader on CPU-heavy synthetic samples (1,000,000 x 3 epochs)"
"$ferry" bench synthetic:1000000,bytes=64,cost=20 --batch 256 --workers 2 --shuffle --epochs 3
